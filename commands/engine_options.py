"""Options shared by the commands that run a scan plan on an engine (local or Spark)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer


class EngineChoice(enum.StrEnum):
    """--engine (pulsarctl_py.engines.select.pick takes the values; not imported here, so
    that --help does not load the engines)."""

    auto = "auto"
    local = "local"
    spark = "spark"


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
    "Executors read what the driver would: the bookie directories at the same (absolute) "
    "paths, or without --bookie-dir the running bookies, which they must reach over the "
    "network; their Python (PYSPARK_PYTHON) must have ledgerctl installed.",
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
    "$LEDGERCTL_SPARK_THRESHOLD, spark_threshold in ledgerctl.toml, else 200000, the "
    "measured crossover (see "
    "docs/performance.md); verify and seek --exact stay in this process unless one is set.",
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


def scan_reads(
    engine: EngineChoice,
    spark: bool,
    master: str | None,
    conf: list[str] | None,
    threshold: int | None,
    *,
    metadata_url: str | None,
    bookie_dirs: list[Path] | None,
    password: bytes | None,
    source: Any,
    entries: Callable[[int], int],
    label: str,
    progress: bool = True,
) -> Any:
    """The engine of a verify or seek --exact scan (a context manager giving EngineReads on
    Spark, None in-process): --engine, --spark, --spark-master, --spark-conf and
    --spark-threshold as export takes them; ``entries`` weighs the scan for auto. With
    ``progress``, Spark's tasks are shown on stderr (when it is a terminal); commands that
    show their own progress line turn it off (one live display at a time)."""
    from pulsarctl_py import render
    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.engines.reads import location_of
    from pulsarctl_py.engines.select import ScanReads
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    chosen = engine_name(engine, spark, master)
    url = None if source.metadata is None else str(resolve_metadata_url(metadata_url))
    location = location_of(url, resolve_bookie_dirs(bookie_dirs), password, source)
    return ScanReads(
        chosen,
        entries,
        location=location,
        master=master,
        conf=conf or [],
        threshold=threshold,
        console=render.stderr_console() if progress else None,
        label=label,
    )
