"""Options shared by the commands that run a scan plan on an engine (local or Spark)."""

from __future__ import annotations

import typer

from pulsarctl_py.engines.select import EngineChoice

ENGINE = typer.Option(
    EngineChoice.auto,
    "--engine",
    help="local: in this process; spark: on Apache Spark (a local session on every core, "
    "or --spark-master); auto: Spark when the topic holds at least --spark-threshold "
    "entries according to its metadata, and Java is installed.",
)
SPARK = typer.Option(False, "--spark", help="Same as --engine spark.")
SPARK_MASTER = typer.Option(
    None,
    "--spark-master",
    metavar="URL",
    help="Run on this Spark master (spark://host:7077, yarn, k8s://...; default local[*]). "
    "Executors must reach the bookie directories at the same paths.",
)
SPARK_CONF = typer.Option(
    None,
    "--spark-conf",
    metavar="KEY=VALUE",
    help="A Spark setting for the session (repeat for several).",
)
SPARK_THRESHOLD = typer.Option(
    None,
    "--spark-threshold",
    metavar="ENTRIES",
    help="With --engine auto, use Spark from this many entries on. Default: "
    "$LEDGERCTL_SPARK_THRESHOLD, else the measured crossover (docs/performance.md).",
)


def engine_name(engine: EngineChoice, spark: bool, master: str | None) -> EngineChoice:
    """--spark and --spark-master both mean Spark, unless --engine local says otherwise."""
    from pulsarctl_py.errors import LedgerctlError

    if spark:
        if engine is EngineChoice.local:
            raise LedgerctlError("--spark and --engine local contradict each other")
        return EngineChoice.spark
    if master is not None and engine is EngineChoice.local:
        raise LedgerctlError("--spark-master needs the Spark engine, not --engine local")
    return engine
