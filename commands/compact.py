"""`ledgerctl compact`: compute, check and write a topic's compaction without a broker."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands import options
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
@options.live_options
@options.compacted_write_flags
@options.tiered_options
def compact(
    topic: str = typer.Argument(
        ...,
        metavar="TOPIC",
        autocompletion=complete_topic,
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
        help="Write the compacted ledger (to the running bookies, or into the stopped "
        "bookie of --bookie-dir) and commit the __compaction cursor (compare-and-set). "
        "Without it nothing is written.",
    ),
    plan_file: Path = typer.Option(
        None,
        "--plan",
        metavar="FILE",
        help="Write the compacted ledger and save the plan that commits it to FILE (for "
        "review, `ledgerctl apply FILE`, `ledgerctl undo FILE`); with --apply, apply it too. "
        "Default with --apply: ./ledgerctl-plan-<time>.json.",
    ),
    delete_old: bool = typer.Option(
        False,
        "--delete-old",
        help="With --apply or --plan: the plan also deletes the metadata of the previous "
        "compacted ledger. Default: only list it.",
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
        "$LEDGERCTL_KEEP_ENTRY_METADATA, keep_entry_metadata in ledgerctl.toml, that setting "
        "of the broker configuration, else stripped (the broker's default).",
        show_default=False,
    ),
    keep_chunks: bool = typer.Option(
        False,
        "--keep-chunks",
        help="Keep every chunk of a key's latest chunked message, so that readers can "
        "reassemble it. Default: as the broker, only its last chunk, which readers drop "
        "(the report counts such messages in chunked_messages_cut).",
    ),
    export: Path = typer.Option(
        None,
        "--export",
        metavar="FILE",
        help="Write the compacted view as JSON lines (key, value as base64, properties, "
        "position, publish time), one per retained message; FILE.parquet writes Parquet. "
        "A device or FIFO (/dev/stdout) gets JSON lines. When the topic has a schema each "
        "row also has schema_version, schema_type and value_decoded (see --values), typed "
        "in Parquet as export types it.",
    ),
    values: options.ValuesChoice = typer.Option(
        options.ValuesChoice.auto,
        "--values",
        help="The --export rows' values: raw (the bytes only), decoded or both (the bytes and "
        "value_decoded, by the topic's schema version each message names; the topic must "
        "have a schema); auto is both when the topic has a schema, else raw.",
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
        "RocksDB on disk. The local engine also keeps the entries phase one read, up to an "
        "eighth of it and until the table spills, so that phase two does not read them "
        "again.",
    ),
    order: Order = typer.Option(
        None,
        "--order",
        help="publishing (PublishingOrderCompactor) or event-time (EventTimeOrderCompactor). "
        "Default: $LEDGERCTL_COMPACTION_ORDER, compaction_order in ledgerctl.toml, the "
        "compactor of the broker configuration's compactionServiceFactoryClassName "
        "(EventTimeCompactionServiceFactory: event-time), else publishing.",
        show_default=False,
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
        None,
        "--retain-null-key/--drop-null-key",
        help="Keep (or drop) messages without a key, as topicCompactionRetainNullKey=true "
        "(false) makes the broker do. Default: $LEDGERCTL_RETAIN_NULL_KEY, retain_null_key "
        "in ledgerctl.toml, that setting of the broker configuration, else dropped (Pulsar's "
        "default).",
        show_default=False,
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
    write: options.WriteFlags = options.WriteFlags(),
) -> None:
    """Compute a topic's compaction exactly as the broker's compactor does, check it, write it.

    Without --apply nothing is written: the report gives keys seen, kept, tombstoned,
    keyless dropped, not compactable (encrypted batches), markers, entries and bytes in and
    out, the new horizon and the compacted last message position. The broker settings
    that decide the result (topicCompactionRetainNullKey, compactionServiceFactoryClassName,
    exposingBrokerEntryMetadataToClientEnabled) come from --broker-conf unless a flag sets
    them (the report says where each came from); a broker that runs entry filters (its
    entryFilterNames, or with allowOverrideEntryFilters the topic's or namespace's) is
    refused: the filters are its plugins, which ledgerctl cannot run. Chunked messages are
    compacted as the broker compacts them: only the last chunk of a key's latest message
    stays, which readers drop (counted in chunked_messages_cut; --keep-chunks keeps every
    chunk). --apply writes the
    compacted ledger as the broker's compactor does (new ledger id, the broker's quorums
    from --broker-conf, CRC32 digest, empty password, Pulsar's custom metadata) to the
    running bookies, or with --bookie-dir into a stopped bookie's storage, as a plan
    (--plan FILE) that commits the __compaction cursor with compare-and-set on the
    version read before the compaction was computed; `ledgerctl undo FILE` puts the
    cursor back and deletes the ledger. It is refused while a live broker owns the
    topic's namespace bundle (--force-owned overrides); what the apply did is said on
    stderr, and with -o json is the report's "outcome" (the shape of `apply -o json`). A
    compare-and-set that fails exits 5. A topic with nothing new since the
    compaction horizon is not written again; a compaction that deletes every key writes
    an empty compacted ledger, as the broker does.
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

    fmt_out = render.resolve(render.OutputFormat(output.value), render.OutputFormat.TABLE)
    if deep and not status:
        raise typer.BadParameter("--deep goes with --status", param_hint="--deep")
    if status and (apply or export is not None):
        raise typer.BadParameter(
            "--status only reads: drop --apply/--export", param_hint="--status"
        )
    writes = apply or plan_file is not None
    if delete_old and not writes:
        raise typer.BadParameter(
            "--delete-old goes with --apply or --plan", param_hint="--delete-old"
        )
    if export is None and values is not options.ValuesChoice.auto:
        from pulsarctl_py.errors import LedgerctlError

        raise LedgerctlError("--values says what --export writes: give --export FILE too")
    if status and plan_file is not None:
        raise typer.BadParameter("--status only reads: drop --plan", param_hint="--status")
    dirs = [str(d) for d in bookie_dirs] if bookie_dirs else None
    from pulsarctl_py.compaction.settings import compactor_settings

    broker = compactor_settings(
        retain_null_key=retain_null_key,
        order=order.value if order is not None else None,
        keep_entry_metadata=keep_entry_metadata,
        check_filters=not status or deep,
    )
    err = render.stderr_console()
    for note in broker.notes:
        err.print(f"[yellow]warning:[/] {escape(note)}")
    if status:
        _status(topic, metadata_url, dirs, as_broker.value, deep, broker, fmt_out)
        return
    from pulsarctl_py.compaction.core import PIP_429_CLIENT_CRASH
    from pulsarctl_py.compaction.request import (
        CompactRequest,
        CompactWriteRequest,
        SparkChoice,
        compact_topic,
    )

    if fmt is Format.pip_429:  # before the work, and in the report (dry run or not)
        err.print(f"[yellow]warning:[/] {escape(PIP_429_CLIENT_CRASH)}")
    request = CompactRequest(
        topic,
        metadata_url,
        dirs,
        CompactionOptions(
            retain_null_key=broker.retain_null_key,
            order=broker.order,
            format=fmt.value,
            keep_chunks=keep_chunks,
            keep_entry_metadata=broker.keep_entry_metadata,
            accept_damage=accept_damage,
        ),
        broker,
        SparkChoice(
            engine_name(engine, spark, spark_master).value,
            spark_threshold,
            spark_master,
            spark_conf or [],
        ),
        parse_size(memory),
        full=full,
        generation=as_broker.value,
        progress=sys.stderr.isatty() if progress is None else progress,
        live=bookie.client(),
        export=export,
        force_export=force,
        values=values.value,
    )
    if writes:
        # the plan (a regular file: it is the only record of the ledger written) is
        # checked before the work
        request.write = CompactWriteRequest(
            _plan_output(plan_file),
            apply,
            delete_old,
            write.settings(),
            bookie.client(),
            force_owned=write.force_owned,
        )
    from pulsarctl_py.commands.plans import say
    from pulsarctl_py.engines.local import one_malloc_arena
    from pulsarctl_py.errors import LedgerctlError

    one_malloc_arena()  # before the read path's threads: --memory is the process's, mostly
    try:
        done = compact_topic(request, say=say)
    except LedgerctlError as exc:
        refused = getattr(exc, "outcome", None)
        if refused is not None and fmt_out is render.OutputFormat.JSON:
            render.write_json({"outcome": refused.to_json()})  # what was refused, and why
        raise
    report = done.report
    if done.written is not None:
        _print_written(done.written, report.topic)
    if fmt_out is render.OutputFormat.JSON:
        doc = report.to_json()
        if done.written is not None and done.written.outcome is not None:
            doc["outcome"] = done.written.outcome.to_json()  # what the apply did
        render.write_json(doc)
    else:
        _print_report(report)
    if export is not None:
        err.print(f"compacted view written to {escape(str(export))}")
    for text in report.gaps.errors():
        err.print(f"error: {text}", markup=False, highlight=False)
    for text in report.gaps.notes():
        err.print(f"note: {text}", markup=False, highlight=False)
    if report.stats.damaged_count:
        options.damage_note(report.stats.damaged, report.stats.damaged_count)
    if not report.ok:
        raise typer.Exit(1)


def _print_written(done: Any, topic: str) -> None:
    """What ``--apply``/``--plan`` wrote: the plan not applied yet, or the apply's outcome,
    and the leftover compacted ledgers the plan deletes."""
    from rich.markup import escape

    from pulsarctl_py import render
    from pulsarctl_py.commands.plans import print_outcome

    err = render.stderr_console()
    path, topic = escape(str(done.plan_path)), escape(topic)
    gone = ", ".join(map(str, done.leftovers))
    if done.outcome is None:
        if gone:
            err.print(
                f"the plan also deletes compacted ledger(s) {gone} of {topic}, which nothing "
                "references (left by runs that stopped before their plan was applied), if the "
                "topic's ledger list and __compaction cursor are unchanged when it is applied"
            )
        err.print(f"not applied: `ledgerctl apply {path}` commits it")
        return
    print_outcome(done.outcome)
    if gone:
        err.print(
            f"deleted compacted ledger(s) {gone} of {topic}: nothing references them (left "
            "by runs that stopped before their plan was applied), checked in the transaction "
            "that committed the cursor"
        )


def _plan_output(plan_file: Path | None) -> Any:
    """The --plan output, checked before any work: a regular file (default
    ./ledgerctl-plan-<time>.json), never over a plan that was applied and not undone."""
    from pulsarctl_py.commands.plans import PlanFlags

    return PlanFlags(plan_file=plan_file, apply=True).plan_output(file_only=True)


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
        "chunked_messages_cut",
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
    if not report.applied and report.plan_file is None:
        err.print("nothing written (dry run); --apply writes it")


def _status(
    topic: str,
    metadata_url: str | None,
    dirs: list[str] | None,
    generation: str,
    deep: bool,
    broker: Any,
    fmt_out: Any,
) -> None:
    from pulsarctl_py import render
    from pulsarctl_py.compaction.request import status_of

    st = status_of(
        topic,
        metadata_url,
        dirs,
        generation=generation,
        deep=deep,
        broker=broker,
        admin_url=None,  # --admin-url: options.live_options puts it in precedence
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
    err.print(escape(_broker_line(st.broker)))
    if not st.checks:
        err.print("[green]ok[/]: no findings")


def _broker_line(view: dict[str, Any] | None) -> str:
    """compact --status's line about the broker's answers."""
    if not view or not view.get("asked"):
        return f"broker: not asked ({(view or {}).get('reason') or 'no broker'})"
    if not view.get("loaded"):
        return f"broker: {view.get('reason')}"
    comp = view.get("compaction") or {}
    line = f"broker {view['url']}: compaction {comp.get('status')}"
    if comp.get("lastError"):
        line += f" (lastError {comp['lastError']})"
    last = view.get("get_last_message_id") or {}
    if "error" in last:
        return line + f"; GetLastMessageId not asked: {last['error']}"
    got = last.get("read_compacted") or {}
    if got:
        line += f"; GetLastMessageId (read compacted) {got.get('answer')}"
        if got.get("errors"):
            line += f" after {len(got['errors'])} error answer(s), retried"
        if last.get("agrees") is not None:
            line += ", as predicted" if last["agrees"] else f", predicted {last.get('predicted')}"
    return line


def register(app: typer.Typer) -> None:
    app.command("compact")(compact)
