"""`ledgerctl migrate ...`: rewrite ledgers into new ones, swapped in by a plan.

Without --plan or --apply a migration only reads and reports what it would write. With
--plan FILE it writes the new ledgers (to the running bookies, with the cluster's
settings; or with --bookie-dir into a stopped bookie, refused while the bookie holds its
lock) and saves the plan that swaps them in; --apply applies that plan too. The plan file
is saved before each step of the writing; `ledgerctl undo FILE` restores the metadata and
deletes the new ledgers, also after an interrupted run.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands import options
from pulsarctl_py.commands.completion import complete_topic
from pulsarctl_py.commands.options import ACCEPT_DAMAGE, damage_note
from pulsarctl_py.commands.plans import PlanFlags, plan_options

migrate_app = typer.Typer(
    help="Migrate topic data: new ledgers written, then swapped in by a plan (see repair).",
    no_args_is_help=True,
)


class CompactedFormat(enum.StrEnum):
    pip_429 = "pip-429"
    classic = "classic"


def _stores(flags: PlanFlags) -> tuple[str, list[str], PlanFlags]:
    """The metadata URL and bookie dirs the flags name (or the defaults), and the flags
    naming them: the migration writes there, and its plan must be made there too."""
    import dataclasses

    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    url = str(resolve_metadata_url(flags.metadata_url))
    dirs = [str(d) for d in resolve_bookie_dirs(flags.bookie_dirs or None)]
    return (
        url,
        dirs,
        dataclasses.replace(flags, metadata_url=url, bookie_dirs=list(map(Path, dirs))),
    )


def _show(doc: dict[str, Any], flags: PlanFlags, title: str) -> None:
    """What a dry run found: JSON (-o json, or piped), or tables of the same (-o table)."""
    from pulsarctl_py import render

    fmt = render.resolve(render.OutputFormat(flags.output.value), render.OutputFormat.TABLE)
    if fmt is render.OutputFormat.JSON:
        render.write_json(doc)
        return
    out = render.stdout_console()
    for table in render.document_tables(doc, title):
        render.print_table(out, table)


@migrate_app.command("compacted")
@options.bookie_flags
@plan_options
@options.compacted_write_flags
def compacted(
    topic: str = typer.Argument(
        ..., metavar="TOPIC", autocompletion=complete_topic, help="The topic."
    ),
    fmt: CompactedFormat = typer.Option(
        ...,
        "--format",
        help="pip-429: kept batch indexes in field 31 (compacted_batch_indexes; the Java "
        "client reads it, older clients do not); classic: compacted_out placeholders.",
    ),
    accept_damage: bool = ACCEPT_DAMAGE,
    flags: PlanFlags = PlanFlags(),
    bookie: options.BookieFlags = options.BOOKIE,
    write: options.WriteFlags = options.WriteFlags(),
) -> None:
    """Rewrite the topic's compacted ledger in the other batch format, with the
    compaction's own writer (the broker's quorums, CRC32, empty password, the compactor's
    custom metadata), and re-point the __compaction cursor to it in a plan (its horizon
    kept). Without
    --plan/--apply: reads only, and reports the batches it would rewrite. A damaged entry
    stops it before anything is written, unless --accept-damage (then it is copied as the
    compaction copies it, listed in the report and the plan, and the exit status is 1)."""
    from pulsarctl_py import render
    from pulsarctl_py.compaction.core import Stats
    from pulsarctl_py.compaction.ledger import write_compacted_ledger
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair import migrate

    url, dirs, flags = _stores(flags)
    out = flags.plan_output(file_only=True)
    client = bookie.client()
    stats = Stats()
    warnings: list[str] = []
    try:
        with LedgerSource.open(
            url, dirs, need_metadata=True, need_bookie=True, live=client
        ) as source:
            state = migrate.compacted_state(source, topic)
            if out is not None:
                assert source.metadata is not None
                warnings = _not_owned(source.metadata, state.topic, write.force_owned)
        entries = list(
            migrate.converted_entries(
                state, fmt.value, url, dirs, accept_damage=accept_damage, stats=stats
            )
        )
    except BaseException:
        if out is not None:
            out.discard()
        raise
    from pulsarctl_py.compaction.core import PIP_429_CLIENT_CRASH

    crash = [PIP_429_CLIENT_CRASH] if fmt is CompactedFormat.pip_429 else []
    report: dict[str, Any] = state.to_json() | {
        "format": fmt.value,
        "written_ledger": None,
        "damaged": list(stats.damaged),
        "warnings": crash,
    }
    err = render.stderr_console()
    for text in crash:
        err.print(f"warning: {text}", markup=False, highlight=False)
    damage_note(report["damaged"], stats.damaged_count)
    if out is None:
        _show(report, flags, f"migrate compacted {state.topic}")
        err.print(
            f"compacted ledger {state.ledger_id}: {len(entries)} entries to rewrite as "
            f"{fmt.value}; nothing written (give --plan FILE to write the new ledger)"
        )
        if stats.damaged_count:
            raise typer.Exit(1)
        return
    from pulsarctl_py.commands.plans import announce_plan_file, print_written
    from pulsarctl_py.plans.writing import PlanFile

    what = "a compacted ledger"
    with PlanFile.leased(out, url, state.topic, dirs, what, "migrate compacted") as plan_file:
        announce_plan_file(plan_file, what)
        ledger = write_compacted_ledger(
            metadata_url=url,
            bookie_dirs=dirs,
            topic=state.topic,
            entries=entries,
            compacted_to=state.compacted_to,
            cursor_version=state.cursor_version,
            data_ledgers=state.data_ledgers,
            partition=state.partition,
            settings=write.settings(),
            options=client,
            force=write.force_owned,
            journal=plan_file.journal,
        )
        print_written([ledger], warnings)
        flags.run(
            lambda draft, source: migrate.swap_compacted(
                draft,
                source,
                state,
                ledger.ledger_id,
                report,
                plan_file.journal.written,
                warnings=crash,
                damaged=stats.damaged_count,
            ),
            plan_file.final(),
        )
    if stats.damaged_count:
        raise typer.Exit(1)


@migrate_app.command("index")
@options.bookie_flags
@plan_options
@options.data_write_flags
def index(
    topic: str = typer.Argument(
        ..., metavar="TOPIC", autocompletion=complete_topic, help="The topic."
    ),
    start: int = typer.Option(
        None,
        "--start",
        metavar="N",
        help="The index of the first migrated message; default: 0, or after the index of the "
        "entries before the first ledger without one.",
    ),
    mapping: Path = typer.Option(
        None,
        "--mapping",
        metavar="FILE",
        help="Save the mapping (JSON lines: old position, legacy KoP offset, new index) to "
        "FILE; default with --plan: PLAN.mapping.jsonl.",
    ),
    delete_old: bool = typer.Option(
        False, "--delete-old", help="The plan also deletes the old ledgers' metadata."
    ),
    accept_damage: bool = ACCEPT_DAMAGE,
    flags: PlanFlags = PlanFlags(),
    bookie: options.BookieFlags = options.BOOKIE,
    write: options.WriteFlags = options.WriteFlags(),
) -> None:
    """Continuous offsets for a topic whose ledgers lack broker entry metadata (KoP before
    2.8, or the index interceptor enabled late): every ledger from the first one without
    an index on is copied into a new ledger whose entries carry a continuous index
    (broker_timestamp = publish_time where none was recorded), and a plan swaps them into
    the topic's ledger list in one compare-and-set, raises the ML `index` property and
    moves cursors to the same entries of the new ledgers. The new ledgers are written as
    the managed ledger writes data ledgers: the topic's persistence policies (its
    topic-level ones, read from the namespace's __change_events as the broker reads them,
    else its namespace's) or the broker's quorums, managedLedgerDigestType and
    managedLedgerPassword (--broker-conf, the flags, $LEDGERCTL_MANAGED_LEDGER_PASSWORD);
    topic policies that cannot be read as the broker reads them stop it before anything
    is written. The old ledgers stay until
    --delete-old. Without --plan/--apply: reads only, and prints the mapping. A damaged
    entry (a digest or checksum that does not match, a payload that does not decode) stops
    it before anything is written, unless --accept-damage (then it is copied as stored,
    listed in the report and the plan, and the exit status is 1)."""
    import json

    from rich.markup import escape

    from pulsarctl_py import outputs, render
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair import migrate

    url, dirs, flags = _stores(flags)
    # every output checked before the work: the plan, then the mapping (default beside it)
    out = flags.plan_output(file_only=True)
    client = bookie.client()
    settings = None
    warnings: list[str] = []
    mapping_out = None
    try:
        if mapping is None and out is not None:
            mapping = out.sibling(".mapping.jsonl")
        if mapping is not None:
            mapping_out = outputs.prepare(mapping, outputs.MAPPING, force=flags.force)
        with LedgerSource.open(
            url, dirs, need_metadata=True, need_bookie=True, live=client
        ) as source:
            plan = migrate.plan_index(source, topic, url, dirs, start, accept_damage=accept_damage)
            if out is not None:
                assert source.metadata is not None
                warnings = _not_owned(source.metadata, plan.topic, write.force_owned)
                settings, notes = migrate.index_settings(
                    source, plan, write.settings(), offline=bool(dirs)
                )
                warnings += notes
    except BaseException:
        for prepared in (out, mapping_out):
            if prepared is not None:
                prepared.discard()
        raise
    err = render.stderr_console()
    damage_note(plan.damaged, len(plan.damaged))
    for skipped in plan.past_last:
        err.print(
            f"note: entries {skipped} are stored past the closed ledger's last entry: not "
            "copied (adds in flight when it was closed; readers never get them)",
            markup=False,
            highlight=False,
        )
    if mapping_out is not None:
        with mapping_out.open_text() as fh:
            for row in plan.mapping:
                fh.write(json.dumps(row, sort_keys=True) + "\n")
        err.print(f"mapping of {len(plan.mapping)} entries saved to {escape(str(mapping))}")
    summary = plan.to_json()
    if out is None:
        _show(summary | {"mapping": plan.mapping}, flags, f"migrate index {plan.topic}")
        err.print(
            f"{len(plan.ledgers)} ledgers to copy with index {plan.start}..{plan.last_index}; "
            "nothing written (give --plan FILE to write the new ledgers)"
        )
        if plan.damaged:
            raise typer.Exit(1)
        return
    assert settings is not None
    from pulsarctl_py.commands.plans import announce_plan_file, print_written
    from pulsarctl_py.plans.writing import PlanFile

    what = "the migrated ledgers"
    with PlanFile.leased(out, url, plan.topic, dirs, what, "migrate index") as plan_file:
        announce_plan_file(plan_file, what)
        written = migrate.write_index_ledgers(
            url, dirs, plan, settings=settings, options=client, journal=plan_file.journal
        )
        print_written(written, warnings)
        if not dirs:  # one stopped bookie's ledgers have quorums of 1 (LedgerWriter.effective)
            quorums = {settings.source.get(k) for k in ("ensemble", "write_quorum", "ack_quorum")}
            err.print(
                f"quorums of the new ledgers ({settings.ensemble}/{settings.write_quorum}/"
                f"{settings.ack_quorum}) from {', '.join(sorted(q for q in quorums if q))}",
                markup=False,
                highlight=False,
            )
        err.print(
            f"ledgers {', '.join(f'{o} -> {n}' for o, n in plan.new_ids.items())}; "
            "referenced by nothing until the plan is applied"
        )
        saved_mapping = str(mapping) if mapping_out is not None and not mapping_out.stream else None
        flags.run(
            lambda draft, source: migrate.swap_index_ledgers(
                draft,
                plan,
                source,
                delete_old=delete_old,
                written=plan_file.journal.written,
                mapping_file=saved_mapping,
            ),
            plan_file.final(),
        )
    if plan.damaged:
        raise typer.Exit(1)


def _not_owned(store: Any, topic: str, force: bool) -> list[str]:
    """Refuse to write for a topic a live broker owns (fail fast, before any ledger)."""
    from pulsarctl_py.ownership import check_not_owned

    return check_not_owned(store, [topic], force=force)


def register(app: typer.Typer) -> None:
    app.add_typer(migrate_app, name="migrate")
