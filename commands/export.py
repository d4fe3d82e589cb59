"""`ledgerctl export`: every message of a topic to one Parquet or JSON-lines file."""

from __future__ import annotations

from pathlib import Path

import typer

from pulsarctl_py.commands.engine_options import (
    ENGINE,
    SPARK,
    SPARK_CONF,
    SPARK_MASTER,
    SPARK_THRESHOLD,
    EngineChoice,
    engine_name,
)
from pulsarctl_py.commands.inspect import BrokerMetadata
from pulsarctl_py.commands.options import (
    BOOKIE,
    BOOKIE_DIRS,
    METADATA_URL,
    BookieFlags,
    bookie_flags,
)
from pulsarctl_py.render import OutputFormat


@bookie_flags
def export(
    topic: str = typer.Argument(..., metavar="TOPIC", help="The topic to export."),
    to: Path = typer.Option(
        ...,
        "--to",
        metavar="FILE",
        help="The file to write: FILE.parquet or FILE.jsonl (replaced whole when done).",
    ),
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    bookie: BookieFlags = BOOKIE,
    key: str = typer.Option(None, "--key", help="Only messages with this key."),
    since: str = typer.Option(
        None, "--since", metavar="TIME", help="Entries at or after TIME (ISO-8601 or epoch ms)."
    ),
    until: str = typer.Option(
        None, "--until", metavar="TIME", help="Entries before TIME (ISO-8601 or epoch ms)."
    ),
    broker_metadata: BrokerMetadata = typer.Option(
        BrokerMetadata.any,
        "--broker-metadata",
        help="Only entries with, or without, broker entry metadata.",
    ),
    columns: str = typer.Option(
        None,
        "--columns",
        metavar="A,B,...",
        help="Only these columns (default all). Without key, value, properties, event_time "
        "and null_value, payloads are not decompressed.",
    ),
    engine: EngineChoice = ENGINE,
    spark: bool = SPARK,
    spark_master: str = SPARK_MASTER,
    spark_conf: list[str] = SPARK_CONF,
    spark_threshold: int = SPARK_THRESHOLD,
    split_entries: int = typer.Option(
        None, "--split-entries", metavar="N", help="Entries per split (default 10000)."
    ),
    output: OutputFormat = typer.Option(
        OutputFormat.AUTO,
        "--output",
        "-o",
        help="How to report what was written: table (one line on stderr) or json on stdout; "
        "auto is table on a terminal and json when piped.",
    ),
) -> None:
    """Write every message of a topic, in topic order, to one Parquet or JSON-lines file.

    One row per message: topic, ledger_id, entry_id, batch_index, key, value (base64 in
    JSON lines), properties, publish_time, event_time, broker_timestamp, index,
    null_value, problems. An entry that cannot be read or decoded is one row with its
    problems. Runs in-process or on Spark (--engine). Exit status 1 when a row has an
    error.
    """
    from rich.markup import escape

    from pulsarctl_py import render
    from pulsarctl_py.commands.options import password
    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.engines.select import open_engine, pick
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.export import (
        COLUMN_NAMES,
        EXPORT_SPLIT_ENTRIES,
        RowFilters,
        absolute_url,
        check_columns,
        export_plan,
        output_format,
        topic_plan,
    )
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.spark.session import parse_conf
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url
    from pulsarctl_py.timeparse import parse_time_ms

    output_format(to)
    chosen = engine_name(engine, spark, spark_master)
    conf = parse_conf(spark_conf or [])
    cols = check_columns([c.strip() for c in columns.split(",")]) if columns else COLUMN_NAMES
    if split_entries is not None and split_entries < 1:
        raise LedgerctlError("--split-entries must be at least 1")
    filters = RowFilters(
        key=key,
        since=parse_time_ms(since) if since else None,
        until=parse_time_ms(until) if until else None,
        broker_metadata=None
        if broker_metadata is BrokerMetadata.any
        else broker_metadata is BrokerMetadata.with_,
    )
    url = absolute_url(resolve_metadata_url(metadata_url))
    dirs = resolve_bookie_dirs(bookie_dirs)
    err = render.stderr_console()
    with LedgerSource.open(
        url,
        dirs,
        password(None, None),
        need_metadata=True,
        need_bookie=True,
        live=bookie.client(),
    ) as source:
        plan = topic_plan(
            source,
            topic,
            metadata_url=url,
            bookie_dirs=[str(d) for d in dirs],
            split_entries=split_entries or EXPORT_SPLIT_ENTRIES,
        )
    name = pick(chosen.value, plan.entries, spark_threshold)
    runner = open_engine(
        name, master=spark_master, conf=conf, console=err, label=f"exporting {plan.topic}"
    )
    try:
        with render.progress(err, f"exporting {plan.topic}: splits") as advance:
            result = export_plan(
                plan, runner, to, columns=cols, filters=filters, progress=lambda _n: advance()
            )
    finally:
        runner.close()
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt in (OutputFormat.JSON, OutputFormat.JSONL):
        render.write_document(result.to_json(), fmt)
    else:
        colour = "red" if result.rows_with_errors else "green"
        err.print(
            f"[{colour}]{result.rows} rows[/] from {result.entries} entries of "
            f"{escape(result.topic)} written to {escape(str(result.to))} "
            f"({result.format}, engine {result.engine}, "
            f"{result.splits} splits); {result.rows_with_errors} rows with errors"
        )
    if result.rows_with_errors:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
