"""`ledgerctl compact`: compute, check and write a topic's compaction without a broker."""

from __future__ import annotations

import contextlib
import enum
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands import options
from pulsarctl_py.commands.engine_options import (
    ENGINE,
    SPARK,
    SPARK_CONF,
    SPARK_MASTER,
    SPARK_THRESHOLD,
    EngineChoice,
    engine_name,
)
from pulsarctl_py.limits import SIZE_PATTERN, SIZE_UNITS


class CompactOutput(enum.StrEnum):
    auto = "auto"
    table = "table"
    json = "json"


class Order(enum.StrEnum):
    publishing = "publishing"
    event_time = "event-time"


class Format(enum.StrEnum):
    classic = "classic"
    pip_429 = "pip-429"


class Generation(enum.StrEnum):
    pip_429 = "pip-429"
    pre_pip_429 = "pre-pip-429"
    pre_18877 = "pre-18877"


_SIZE, _UNITS = SIZE_PATTERN, SIZE_UNITS


def parse_size(text: str) -> int:
    """``512MiB``, ``1g``, ``64m``, ``1000000`` -> bytes."""
    from pulsarctl_py.errors import LedgerctlError

    found = _SIZE.match(text)
    if not found:
        raise LedgerctlError(f"--memory {text!r}: expected a size such as 512MiB, 2g or 100000")
    number, unit = found.groups()
    value = int(float(number) * _UNITS[unit.lower() if unit else None])
    if value < 1:
        raise LedgerctlError(f"--memory {text!r}: must be at least one byte")
    return value


@options.bookie_flags
@options.metadata_options
def compact(
    topic: str = typer.Argument(
        ...,
        metavar="TOPIC",
        help="The topic (or one partition of a partitioned topic): persistent://tenant/ns/t, "
        "tenant/ns/t or a short name.",
        show_default=False,
    ),
    metadata_url: str = options.METADATA_URL,
    bookie_dirs: list[Path] = options.BOOKIE_DIRS,
    bookie: options.BookieFlags = options.BOOKIE,
    apply: bool = typer.Option(
        False,
        "--apply",
        help="Write the compacted ledger into the bookie storage and commit the __compaction "
        "cursor (compare-and-set). Without it nothing is written.",
    ),
    delete_old: bool = typer.Option(
        False,
        "--delete-old",
        help="With --apply: delete the metadata of the previous compacted ledger (and of a "
        "cursor ledger the new cursor state replaces). Default: only list them.",
    ),
    status: bool = typer.Option(
        False,
        "--status",
        help="Report and check the existing compaction instead of computing a new one.",
    ),
    deep: bool = typer.Option(
        False,
        "--deep",
        help="With --status: also compare the compacted view with a fresh compaction of the "
        "topic up to the horizon.",
    ),
    as_broker: Generation = typer.Option(
        Generation.pre_pip_429,
        "--as-broker",
        help="Which broker generation's answer to GetLastMessageId to compute: pre-pip-429 "
        "(#18877: the released brokers, Pulsar 2.11 to 4.0.x), pip-429 (PIP-429's copy, not "
        "in a release up to 4.0.7) or pre-18877 (before 2.11).",
    ),
    keep_entry_metadata: bool = typer.Option(
        None,
        "--keep-entry-metadata/--strip-entry-metadata",
        help="Whether compacted entries keep each entry's broker entry metadata (0x0e02), as "
        "a broker with exposingBrokerEntryMetadataToClientEnabled=true writes them. Default: "
        "that setting of --broker-conf, else stripped (the broker's default).",
        show_default=False,
    ),
    export: Path = typer.Option(
        None,
        "--export",
        metavar="FILE",
        help="Write the compacted view as JSON lines (key, value as base64, properties, "
        "position, publish time), one per retained message; FILE.parquet writes Parquet. "
        "A device or FIFO (/dev/stdout) gets JSON lines.",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Overwrite an existing --export file that is not an earlier compacted view "
        "(default: refuse). Devices, FIFOs and symbolic links are never replaced.",
    ),
    memory: str = typer.Option(
        "512MiB",
        "--memory",
        metavar="SIZE",
        help="Memory for phase one's key table; past it the table spills to an embedded "
        "RocksDB on disk.",
    ),
    order: Order = typer.Option(
        Order.publishing,
        "--order",
        help="publishing (PublishingOrderCompactor, the default) or event-time "
        "(EventTimeOrderCompactor).",
    ),
    fmt: Format = typer.Option(
        Format.classic,
        "--format",
        help="classic: removed batch messages become compacted_out placeholders, as released "
        "brokers write; pip-429: field 31 lists the retained messages and only they are kept "
        "(the C++ and Python clients crash on it).",
    ),
    full: bool = typer.Option(
        False,
        "--full",
        help="Compact the whole topic, ignoring the existing compacted ledger (to rebuild a "
        "broken one). Default: incremental, like the broker.",
    ),
    retain_null_key: bool = typer.Option(
        False,
        "--retain-null-key",
        help="Keep messages without a key (topicCompactionRetainNullKey=true).",
    ),
    accept_damage: bool = options.ACCEPT_DAMAGE,
    engine: EngineChoice = ENGINE,
    spark: bool = SPARK,
    spark_master: str = SPARK_MASTER,
    spark_conf: list[str] = SPARK_CONF,
    spark_threshold: int = SPARK_THRESHOLD,
    progress: bool = typer.Option(
        None,
        "--progress/--no-progress",
        help="Progress lines on stderr. Default: on when stderr is a terminal.",
        show_default=False,
    ),
    output: CompactOutput = typer.Option(
        CompactOutput.auto,
        "--output",
        "-o",
        help="table for people, json for scripts; auto is table on a terminal, json when piped.",
    ),
) -> None:
    """Compute a topic's compaction exactly as the broker's compactor does, check it, write it.

    Without --apply nothing is written: the report gives keys seen, kept, tombstoned,
    keyless dropped, not compactable (encrypted batches), markers, entries and bytes in and
    out, the new horizon and the compacted last message position. --apply writes the
    compacted ledger (new ledger id, CRC32 digest, Pulsar's custom metadata) into the
    bookie's storage, refusing while the bookie holds its lock, then commits the
    __compaction cursor with compare-and-set; a failure leaves everything as it was.
    A damaged entry (a digest or checksum that does not match, metadata or a payload that
    does not decode) stops the run before anything is written, unless --accept-damage;
    a missing entry always does. Entries stored past a closed ledger's last entry are
    skipped, as the broker skips them, and listed. Exit status 1 when damage was gone on
    past or entries were skipped. --status checks the existing compaction (exit 1 on an
    error finding).
    """
    from rich.markup import escape

    from pulsarctl_py import render
    from pulsarctl_py.compaction import CompactionOptions
    from pulsarctl_py.errors import LedgerctlError

    fmt_out = render.resolve(render.OutputFormat(output.value), render.OutputFormat.TABLE)
    if deep and not status:
        raise typer.BadParameter("--deep goes with --status", param_hint="--deep")
    if status and (apply or export is not None):
        raise typer.BadParameter(
            "--status only reads: drop --apply/--export", param_hint="--status"
        )
    if delete_old and not apply:
        raise typer.BadParameter("--delete-old goes with --apply", param_hint="--delete-old")
    dirs = [str(d) for d in bookie_dirs] if bookie_dirs else None
    if apply and not _have_bookie_dir(dirs):
        raise LedgerctlError(
            "--apply writes the compacted ledger into a bookie directory: pass --bookie-dir "
            "(reading from running bookies works without one, writing does not)"
        )
    if keep_entry_metadata is None:
        keep_entry_metadata = _broker_exposes_entry_metadata()
    if status:
        _status(
            topic,
            metadata_url,
            dirs,
            as_broker.value,
            deep,
            retain_null_key,
            fmt_out,
            keep_entry_metadata,
        )
        return
    if progress is None:
        progress = sys.stderr.isatty()
    opts = CompactionOptions(
        retain_null_key=retain_null_key,
        order=order.value,
        format=fmt.value,
        keep_entry_metadata=keep_entry_metadata,
        accept_damage=accept_damage,
    )
    err = render.stderr_console()
    if apply and fmt is Format.pip_429:
        err.print(
            "[yellow]warning:[/] --format pip-429 writes field 31: the C++ and Python clients "
            "(pulsar-client 3.13 / C++ 4.2) crash on such batches; only Java clients that "
            "know field 31 read them"
        )
    from pulsarctl_py.compaction import compact as run_compact

    memory_bytes = parse_size(memory)
    with _view_output(export, force) as view:
        chosen = engine_name(engine, spark, spark_master)
        state: dict[str, Any] = {}
        report = run_compact(
            topic,
            metadata_url=metadata_url,
            bookie_dirs=dirs,
            options=opts,
            full=full,
            memory=memory_bytes,
            engine=chosen.value,
            pick_engine=lambda entries: _start_engine(
                chosen, entries, spark_threshold, spark_master, spark_conf
            ),
            export=view,
            spool=apply,
            progress=progress,
            generation=as_broker.value,
            on_state=lambda s: state.update(state=s),
            live=bookie.client(),
        )
    try:
        if report.stats.entries_in and report.keys == 0 and not retain_null_key:
            from pulsarctl_py.errors import DataError

            raise DataError(
                f"{report.topic} has no keyed messages: compaction would drop everything "
                "(pass --retain-null-key to keep keyless messages)"
            )
        if apply:
            _apply(report, state["state"], metadata_url, dirs, delete_old, err)
    finally:
        if report.spool is not None:
            report.spool.unlink(missing_ok=True)
    if fmt_out is render.OutputFormat.JSON:
        render.write_json(report.to_json())
    else:
        _print_report(report)
    if export is not None:
        err.print(f"compacted view written to {escape(str(export))}")
    for text in report.gaps.errors():
        err.print(f"error: {text}", markup=False, highlight=False)
    if report.stats.damaged_count:
        options.damage_note(report.stats.damaged, report.stats.damaged_count)
    if not report.ok:
        raise typer.Exit(1)


@contextlib.contextmanager
def _view_output(export: Path | None, force: bool) -> Iterator[Any]:
    """The --export output, checked before the work: yields the text file the compaction
    writes its JSON lines to (None without --export). For FILE.parquet the lines go to a
    temporary file, turned into Parquet when the compaction is done."""
    if export is None:
        yield None
        return
    import tempfile

    from pulsarctl_py import outputs

    out = outputs.prepare(export, outputs.COMPACTED_VIEW, force=force)
    if not export.name.lower().endswith(".parquet"):
        with out.open_text() as fh:
            yield fh
        return
    from pulsarctl_py.export import compacted_view_to_parquet

    fd, name = tempfile.mkstemp(prefix="ledgerctl-compacted-view-", suffix=".jsonl")
    try:
        with open(fd, "w", encoding="utf-8") as fh:
            yield fh
        with out.open_binary() as parquet:
            compacted_view_to_parquet(name, parquet)
    finally:
        out.discard()  # after a commit: nothing left to drop
        Path(name).unlink(missing_ok=True)


def _broker_exposes_entry_metadata() -> bool:
    """The broker's exposingBrokerEntryMetadataToClientEnabled, from --broker-conf (or its
    environment and config file settings); false without one, the broker's default."""
    from pulsarctl_py.stores.metadata.url import resolve_broker_conf

    conf = resolve_broker_conf()
    return conf is not None and conf.expose_entry_metadata_to_client


def _start_engine(
    chosen: EngineChoice,
    entries: int,
    threshold: int | None,
    master: str | None,
    conf: list[str] | None,
) -> str:
    """The engine for a plan of ``entries`` entries (auto: Spark from the threshold on,
    as export picks it); a Spark session starts here."""
    from pulsarctl_py.engines.select import pick

    name = pick(chosen.value, entries, threshold)
    if name == "spark":
        from pulsarctl_py.spark.session import get_session, parse_conf

        get_session(master, parse_conf(conf or []))
    return name


def _have_bookie_dir(dirs: list[str] | None) -> bool:
    from pulsarctl_py.config import resolve_bookie_dirs

    return bool(resolve_bookie_dirs(dirs))


def _apply(
    report: Any,
    state: Any,
    metadata_url: str | None,
    dirs: list[str] | None,
    delete_old: bool,
    err: Any,
) -> None:
    from rich.markup import escape

    from pulsarctl_py.compaction.apply import apply_compaction
    from pulsarctl_py.compaction.run import read_spool
    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata import read_managed_ledger
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    if report.spool is None or report.stats.entries_out == 0:
        raise LedgerctlError("the compaction retained nothing: no compacted ledger to write")
    url = str(resolve_metadata_url(metadata_url))
    bookie = [str(d) for d in resolve_bookie_dirs(dirs)]
    with LedgerSource.open(url, bookie, need_metadata=True) as source:
        record = read_managed_ledger(source.metadata, report.topic)
    cursor = next((c for c in record.cursors if c.name == "__compaction"), None) if record else None
    version = None if cursor is None else cursor.stat.version
    err.print(
        f"plan: write compacted ledger (new id) with {report.stats.entries_out} entries, "
        f"commit __compaction at {report.to_json()['horizon']}"
        + (
            f", previous compacted ledger {report.previous_compacted_ledger} "
            + ("deleted" if delete_old else "listed for deletion")
            if report.previous_compacted_ledger is not None
            else ""
        )
    )
    result = apply_compaction(
        metadata_url=url,
        bookie_dirs=bookie,
        topic=report.topic,
        entries=read_spool(report.spool),
        horizon=report.horizon,
        compacted_to=report.compacted_to or report.horizon,
        cursor_version=version,
        previous=report.previous_compacted_ledger,
        previous_cursor_ledger=state.cursor_ledger
        if state.cursor_ledger is not None and state.cursor_ledger >= 0
        else None,
        data_ledgers=[lid for lid, _, _ in state.ledgers],
        partition=state.partition,
        delete_old=delete_old,
    )
    report.applied = True
    report.compacted_ledger = result.ledger_id
    report.to_delete = [lid for lid in result.to_delete if lid not in result.deleted]
    report.deleted = result.deleted
    err.print(
        f"applied: compacted ledger {result.ledger_id} ({result.entries} entries, "
        f"{result.index} index, {escape(result.entry_log.name)}); cursor "
        f"{escape(result.cursor_path)} committed"
    )


def _print_report(report: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    from pulsarctl_py import render

    j = report.to_json()
    table = Table(title=f"compaction of {report.topic}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    for name in (
        "engine",
        "order",
        "format",
        "full",
        "keys",
        "kept",
        "tombstoned",
        "keyless_dropped",
        "not_compactable",
        "markers",
        "entries_in",
        "entries_out",
        "bytes_in",
        "bytes_out",
        "horizon",
        "compacted_to",
        "last_message_position",
        "previous_compacted_ledger",
        "compacted_ledger",
        "applied",
        "chunks_kept",
        "spilled",
    ):
        table.add_row(name, "-" if j[name] is None else str(j[name]))
    render.stdout_console().print(table)
    err = render.stderr_console()
    last = report.last
    if last is not None:
        for f in last.findings:
            err.print(f"[red]{f['code']}[/]: {escape(f['message'])}")
    for note in j["notes"]:
        err.print(f"note: {escape(note)}")
    if report.to_delete:
        err.print(f"to delete: ledger(s) {', '.join(map(str, report.to_delete))} (--delete-old)")
    if not report.applied:
        err.print("nothing written (dry run); --apply writes it")


def _status(
    topic: str,
    metadata_url: str | None,
    dirs: list[str] | None,
    generation: str,
    deep: bool,
    retain_null_key: bool,
    fmt_out: Any,
    keep_entry_metadata: bool,
) -> None:
    from pulsarctl_py import render
    from pulsarctl_py.compaction.status import compaction_status
    from pulsarctl_py.ledgers import LedgerSource

    with LedgerSource.open(metadata_url, dirs, need_metadata=True) as source:
        st = compaction_status(
            source,
            topic,
            generation=generation,
            deep=deep,
            metadata_url=metadata_url,
            bookie_dirs=dirs,
            retain_null_key=retain_null_key,
            keep_entry_metadata=keep_entry_metadata,
        )
    if fmt_out is render.OutputFormat.JSON:
        render.write_json(st.to_json())
    else:
        print_status(st)
    if st.errors:
        raise typer.Exit(1)


def print_status(st: Any) -> None:
    from rich.markup import escape

    from pulsarctl_py import render

    j = st.to_json()
    j.pop("checks")  # said on stderr below
    created = j.pop("created_ms")
    # the table holds what the JSON holds, times and ages for people
    shown = {"topic": j.pop("topic"), "compacted_ledger": j.pop("compacted_ledger")}
    shown["created"] = render.iso_ms(created) if created is not None else None
    shown["age"] = render.human_duration(st.age_ms)
    shown |= j
    out = render.stdout_console()
    for table in render.document_tables(shown, f"compaction status of {st.topic}"):
        render.print_table(out, table)
    err = render.stderr_console()
    colours = {"error": "red", "warning": "yellow", "info": "cyan"}
    for c in st.checks:
        err.print(
            f"[{colours.get(c['severity'], 'white')}]{c['severity']}[/] {c['check']}: "
            f"{escape(c['message'])}"
        )
    if not st.checks:
        err.print("[green]ok[/]: no findings")


def register(app: typer.Typer) -> None:
    app.command("compact")(compact)
