"""`ledgerctl export`: every message of a topic to one Parquet or JSON-lines file."""

from __future__ import annotations

from pathlib import Path

import typer

from pulsarctl_py.commands.completion import complete_topic
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
    PASSPHRASE_ENV,
    PASSPHRASE_FILE,
    VALUES,
    BookieFlags,
    ValuesChoice,
    bookie_flags,
    metadata_options,
    tiered_options,
)
from pulsarctl_py.render import OutputFormat


@bookie_flags
@metadata_options
@tiered_options
def export(
    topic: str = typer.Argument(
        ..., metavar="TOPIC", autocompletion=complete_topic, help="The topic to export."
    ),
    to: Path = typer.Option(
        ...,
        "--to",
        metavar="FILE",
        help="The file to write: FILE.parquet or FILE.jsonl (written whole when done; an "
        "earlier export is replaced). A device or FIFO (/dev/stdout) gets JSON lines.",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Overwrite an existing --to file that is not an earlier export (default: "
        "refuse). Devices, FIFOs and symbolic links are never replaced.",
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
    values: ValuesChoice = VALUES,
    private_key: Path = typer.Option(
        None,
        "--private-key",
        metavar="FILE",
        help="The consumer's private key (PEM) to decrypt end-to-end encrypted values; "
        "without it an encrypted message's row keeps what is stored in plain text (a "
        "single message's key, properties and event time) and its value is null, marked "
        "encrypted in problems.",
    ),
    passphrase_env: str = PASSPHRASE_ENV,
    passphrase_file: Path = PASSPHRASE_FILE,
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
    null_value, problems; when the topic has a schema also schema_version, schema_type
    and value_decoded (JSON in JSON lines; in Parquet a struct of the Avro or JSON
    schema's fields, merged into the latest version where Avro's resolution rules allow,
    the primitive's type, or else JSON text). Avro or JSON versions that cannot be
    merged: the rows of version N go to FILE.vN.parquet beside FILE.parquet, typed by
    that version, and FILE.parquet keeps the rows of no version; the summary lists the
    files. An entry that cannot be read or decoded is
    one row with its problems, and so is a run of entries the storage does not hold.
    Ledgers the storage holds none of, and entries stored past a closed ledger's last
    entry (skipped), are listed in the summary. Runs in-process or on Spark (--engine).
    Exit status 1 when a row has an error or the file is not the whole topic.
    """
    from rich.markup import escape

    from pulsarctl_py import outputs, render
    from pulsarctl_py.commands.options import MAX_KEY_FILE, private_key_passphrase
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.export import RowFilters, check_columns, output_format
    from pulsarctl_py.export_topic import ExportRequest, export_topic
    from pulsarctl_py.spark.session import parse_conf
    from pulsarctl_py.timeparse import check_time_range, parse_time_ms

    since_ms = parse_time_ms(since) if since else None
    until_ms = parse_time_ms(until) if until else None
    check_time_range(since_ms, until_ms)
    if not outputs.is_stream_path(to):
        output_format(to)  # a bad name fails before anything is created
    chosen = engine_name(engine, spark, spark_master)
    conf = parse_conf(spark_conf or [])
    asked = [c.strip() for c in columns.split(",")] if columns else None
    if asked is not None:
        check_columns(asked, values=values is not ValuesChoice.raw)
    if split_entries is not None and split_entries < 1:
        raise LedgerctlError("--split-entries must be at least 1")
    key_pem = passphrase = None
    if private_key is not None:
        from pulsarctl_py.decode import read_capped
        from pulsarctl_py.decoders.crypto import load_private_key

        key_pem = read_capped(private_key, MAX_KEY_FILE, "private key")
        passphrase = private_key_passphrase(passphrase_env, passphrase_file)
        load_private_key(key_pem, passphrase)  # a wrong key or passphrase: said before the run
    elif passphrase_env or passphrase_file:
        raise LedgerctlError("a private key passphrase needs --private-key")
    err = render.stderr_console()
    result = export_topic(
        ExportRequest(
            topic,
            to,
            RowFilters(
                key=key,
                since=since_ms,
                until=until_ms,
                broker_metadata=None
                if broker_metadata is BrokerMetadata.any
                else broker_metadata is BrokerMetadata.with_,
            ),
            force=force,
            metadata_url=metadata_url,
            bookie_dirs=bookie_dirs,
            live=bookie.client(),
            values=values.value,
            columns=asked,
            key_pem=key_pem,
            passphrase=passphrase,
            split_entries=split_entries,
            engine=chosen.value,
            spark_master=spark_master,
            spark_conf=conf,
            spark_threshold=spark_threshold,
        ),
        console=err,
    )
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt in (OutputFormat.JSON, OutputFormat.JSONL):
        render.write_document(result.to_json(), fmt)
    else:
        colour = "green" if result.ok else "red"
        err.print(
            f"[{colour}]{result.rows} rows[/] from {result.entries} entries of "
            f"{escape(result.topic)} written to {escape(result.to)} ({result.format}, engine "
            f"{result.engine}, {result.splits} splits); {result.rows_with_errors} rows with "
            "errors" + ("" if result.gaps.complete else "; incomplete")
        )
    if result.value_note:
        err.print(f"note: value_decoded: {result.value_note}", markup=False, highlight=False)
    if len(result.files) > 1 and fmt not in (OutputFormat.JSON, OutputFormat.JSONL):
        for f in result.files:
            which = (
                "rows of no schema version"
                if f["schema_version"] is None
                else f"schema version {f['schema_version']}"
            )
            err.print(f"  {f['path']}: {f['rows']} rows, {which}", markup=False, highlight=False)
    for text in result.gaps.errors():
        err.print(f"error: {text}", markup=False, highlight=False)
    for text in result.gaps.notes():
        err.print(f"note: {text}", markup=False, highlight=False)
    if not result.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
