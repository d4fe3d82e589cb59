"""`ledgerctl migrate ...`: rewrite ledgers into new ones, swapped in by a plan.

Without --plan or --apply a migration only reads and reports what it would write. With
--plan FILE it writes the new ledgers (to the running bookies, with the cluster's
settings; or with --bookie-dir into a stopped bookie, refused while the bookie holds its
lock) and saves the plan that swaps them in; --apply applies that plan too. `ledgerctl
undo FILE` restores the metadata; the new ledgers stay, unreferenced (`ledgerctl orphans`
lists them).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands import options
from pulsarctl_py.commands.repair import PlanFlags, plan_options

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


@migrate_app.command("compacted")
@options.bookie_flags
@plan_options
@options.compacted_write_flags
def compacted(
    topic: str = typer.Argument(..., metavar="TOPIC", help="The topic."),
    fmt: CompactedFormat = typer.Option(
        ...,
        "--format",
        help="pip-429: kept batch indexes in field 31 (compacted_batch_indexes; the Java "
        "client reads it, older clients do not); classic: compacted_out placeholders.",
    ),
    flags: PlanFlags = PlanFlags(),
    bookie: options.BookieFlags = options.BOOKIE,
    write: options.WriteFlags = options.WriteFlags(),
) -> None:
    """Rewrite the topic's compacted ledger in the other batch format, with the
    compaction's own writer (the broker's quorums, CRC32, empty password, the compactor's
    custom metadata), and re-point the __compaction cursor to it in a plan (its horizon
    kept). Without --plan/--apply: reads only, and reports the batches it would rewrite."""
    from pulsarctl_py import render
    from pulsarctl_py.compaction.apply import apply_compaction
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair import migrate, repairs

    url, dirs, flags = _stores(flags)
    client = bookie.client()
    with LedgerSource.open(url, dirs, need_metadata=True, need_bookie=True, live=client) as source:
        state = migrate.compacted_state(source, topic)
        assert source.metadata is not None
        writes = flags.plan_file is not None or flags.apply
        warnings = _not_owned(source.metadata, state.topic, write.force) if writes else []
    entries = list(migrate.converted_entries(state, fmt.value, url, dirs))
    report: dict[str, Any] = state.to_json() | {"format": fmt.value, "written_ledger": None}
    err = render.stderr_console()
    if flags.plan_file is None and not flags.apply:
        render.write_json(report)
        err.print(
            f"compacted ledger {state.ledger_id}: {len(entries)} entries to rewrite as "
            f"{fmt.value}; nothing written (give --plan FILE to write the new ledger)"
        )
        return
    flags, journal = _pending(flags, url, state.topic, "a compacted ledger")
    result = apply_compaction(
        metadata_url=url,
        bookie_dirs=dirs,
        topic=state.topic,
        entries=entries,
        horizon=state.horizon,
        compacted_to=state.compacted_to,
        cursor_version=state.cursor_version,
        previous=state.ledger_id,
        previous_cursor_ledger=None,
        data_ledgers=state.data_ledgers,
        partition=state.partition,
        commit_cursor=False,
        settings=write.settings(),
        options=client,
        force=write.force,
        journal=journal,
    )
    _print_written(err, [result.ledger], warnings)

    def build(draft: Any, source: Any) -> None:
        repairs.point_compaction(
            draft, state.topic, result.ledger_id, source, horizon=state.horizon
        )
        draft.repairs[-1]["migration"] = report | {"written_ledger": result.ledger_id}
        draft.written.extend(journal.written)

    flags.run(build)


@migrate_app.command("index")
@options.bookie_flags
@plan_options
@options.data_write_flags
def index(
    topic: str = typer.Argument(..., metavar="TOPIC", help="The topic."),
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
    the managed ledger writes data ledgers: the namespace's persistence policies or the
    broker's quorums, managedLedgerDigestType and managedLedgerPassword (--broker-conf,
    the flags, $LEDGERCTL_MANAGED_LEDGER_PASSWORD). The old ledgers stay until
    --delete-old. Without --plan/--apply: reads only, and prints the mapping."""
    import json

    from pulsarctl_py import render
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair import migrate

    url, dirs, flags = _stores(flags)
    client = bookie.client()
    with LedgerSource.open(url, dirs, need_metadata=True, need_bookie=True, live=client) as source:
        plan = migrate.plan_index(source, topic, url, dirs, start)
        settings = None
        warnings: list[str] = []
        if flags.plan_file is not None or flags.apply:
            assert source.metadata is not None
            warnings = _not_owned(source.metadata, plan.topic, write.force)
            settings, notes = migrate.index_settings(source, plan, write.settings())
            warnings += notes
    if mapping is None and flags.plan_file is not None:
        mapping = flags.plan_file.with_name(flags.plan_file.name + ".mapping.jsonl")
    err = render.stderr_console()
    if mapping is not None:
        try:
            with open(mapping, "w", encoding="utf-8") as fh:
                for row in plan.mapping:
                    fh.write(json.dumps(row, sort_keys=True) + "\n")
        except OSError as exc:
            from pulsarctl_py.errors import LedgerctlError

            raise LedgerctlError(f"cannot write {mapping}: {exc.strerror or exc}") from None
        err.print(f"mapping of {len(plan.mapping)} entries saved to {mapping}")
    summary = plan.to_json()
    if flags.plan_file is None and not flags.apply:
        render.write_json(summary | {"mapping": plan.mapping})
        err.print(
            f"{len(plan.ledgers)} ledgers to copy with index {plan.start}..{plan.last_index}; "
            "nothing written (give --plan FILE to write the new ledgers)"
        )
        return
    assert settings is not None
    flags, journal = _pending(flags, url, plan.topic, "the migrated ledgers")
    written = migrate.write_index_ledgers(
        url, dirs, plan, settings=settings, options=client, journal=journal
    )
    _print_written(err, written, warnings)
    err.print(
        f"ledgers {', '.join(f'{o} -> {n}' for o, n in plan.new_ids.items())}; "
        "referenced by nothing until the plan is applied"
    )

    def build(draft: Any, source: Any) -> None:
        migrate.swap_index_ledgers(draft, plan, source, delete_old=delete_old)
        if mapping is not None:
            draft.repairs[-1]["mapping_file"] = str(mapping)
        draft.written.extend(journal.written)

    flags.run(build)


def _pending(flags: PlanFlags, url: str, topic: str, what: str) -> tuple[PlanFlags, Any]:
    """The plan file (default with --apply), and a journal that saves it before each step
    of the writing: a crash leaves a plan whose `ledgerctl undo` deletes what was made."""
    import dataclasses

    from pulsarctl_py import render
    from pulsarctl_py.commands.repair import _default_plan_path
    from pulsarctl_py.repair.plan import Plan
    from pulsarctl_py.repair.written import PlanJournal
    from pulsarctl_py.stores.metadata import resolve_topic

    if flags.plan_file is None:
        flags = dataclasses.replace(flags, plan_file=_default_plan_path())
    path = flags.plan_file
    assert path is not None
    pending = Plan(metadata_url=_store_url(url), topics=[resolve_topic(topic).full_name])
    pending.warnings.append(
        f"the command stopped while it wrote {what}: `ledgerctl undo` this plan to delete them"
    )
    render.stderr_console().print(
        f"writing {what}; the plan: {path} (`ledgerctl undo {path}` deletes them if this "
        "command is interrupted)",
        markup=False,
        highlight=False,
    )
    return flags, PlanJournal(pending.written, lambda: pending.save(path))


def _store_url(url: str) -> str:
    """The URL a plan names its store by (the store's own, as run_repair's draft does)."""
    from pulsarctl_py.stores.metadata import open_metadata_store

    with open_metadata_store(url) as store:
        return store.url


def _not_owned(store: Any, topic: str, force: bool) -> list[str]:
    """Refuse to write for a topic a live broker owns (fail fast, before any ledger)."""
    from pulsarctl_py.ownership import check_not_owned

    return check_not_owned(store, [topic], force=force)


def _print_written(err: Any, ledgers: list[Any], warnings: list[str]) -> None:
    from rich.markup import escape

    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}")
    for ledger in ledgers:
        for note in ledger.notes:
            err.print(f"[yellow]warning:[/] {escape(note)}")
        err.print(
            f"wrote ledger {ledger.ledger_id} ({ledger.entries} entries, {escape(ledger.config)}"
            f", to {escape(ledger.where)}); referenced by nothing until the plan is applied"
        )


def register(app: typer.Typer) -> None:
    app.add_typer(migrate_app, name="migrate")
