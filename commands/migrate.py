"""`ledgerctl migrate ...`: rewrite ledgers into new ones, swapped in by a plan.

Without --plan or --apply a migration only reads and reports what it would write. With
--plan FILE it writes the new ledgers (refused while the bookie holds its lock) and saves
the plan that swaps them in; --apply applies that plan too. `ledgerctl undo FILE` restores
the metadata; the new ledgers stay, unreferenced (`ledgerctl orphans` lists them).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import typer

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
@plan_options
def compacted(
    topic: str = typer.Argument(..., metavar="TOPIC", help="The topic."),
    fmt: CompactedFormat = typer.Option(
        ...,
        "--format",
        help="pip-429: kept batch indexes in field 31 (compacted_batch_indexes; the Java "
        "client reads it, older clients do not); classic: compacted_out placeholders.",
    ),
    flags: PlanFlags = PlanFlags(),
) -> None:
    """Rewrite the topic's compacted ledger in the other batch format, with the
    compaction's own writer (CRC32, empty password, CompactedTopicLedger custom metadata),
    and re-point the __compaction cursor to it in a plan (its horizon kept). Without
    --plan/--apply: reads only, and reports the batches it would rewrite."""
    from pulsarctl_py import render
    from pulsarctl_py.compaction.apply import apply_compaction
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair import migrate, repairs

    url, dirs, flags = _stores(flags)
    with LedgerSource.open(url, dirs, need_metadata=True, need_bookie=True) as source:
        state = migrate.compacted_state(source, topic)
    entries = list(migrate.converted_entries(state, fmt.value, url, dirs))
    report: dict[str, Any] = state.to_json() | {"format": fmt.value, "written_ledger": None}
    err = render.stderr_console()
    if flags.plan_file is None and not flags.apply:
        _show(report, flags, f"migrate compacted {state.topic}")
        err.print(
            f"compacted ledger {state.ledger_id}: {len(entries)} entries to rewrite as "
            f"{fmt.value}; nothing written (give --plan FILE to write the new ledger)"
        )
        return
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
    )
    err.print(
        f"wrote ledger {result.ledger_id} ({result.entries} entries, {result.index} index, "
        f"{result.entry_log.name}); referenced by nothing until the plan is applied"
    )

    def build(draft: Any, source: Any) -> None:
        repairs.point_compaction(
            draft, state.topic, result.ledger_id, source, horizon=state.horizon
        )
        draft.repairs[-1]["migration"] = report | {"written_ledger": result.ledger_id}

    flags.run(build)


@migrate_app.command("index")
@plan_options
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
) -> None:
    """Continuous offsets for a topic whose ledgers lack broker entry metadata (KoP before
    2.8, or the index interceptor enabled late): every ledger from the first one without
    an index on is copied into a new ledger whose entries carry a continuous index
    (broker_timestamp = publish_time where none was recorded), and a plan swaps them into
    the topic's ledger list in one compare-and-set, raises the ML `index` property and
    moves cursors to the same entries of the new ledgers. The old ledgers stay until
    --delete-old. Without --plan/--apply: reads only, and prints the mapping."""
    import json

    from rich.markup import escape

    from pulsarctl_py import render
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair import migrate

    url, dirs, flags = _stores(flags)
    with LedgerSource.open(url, dirs, need_metadata=True, need_bookie=True) as source:
        plan = migrate.plan_index(source, topic, url, dirs, start)
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
        err.print(f"mapping of {len(plan.mapping)} entries saved to {escape(str(mapping))}")
    summary = plan.to_json()
    if flags.plan_file is None and not flags.apply:
        _show(summary | {"mapping": plan.mapping}, flags, f"migrate index {plan.topic}")
        err.print(
            f"{len(plan.ledgers)} ledgers to copy with index {plan.start}..{plan.last_index}; "
            "nothing written (give --plan FILE to write the new ledgers)"
        )
        return
    if flags.apply and flags.plan_file is None:
        import dataclasses

        from pulsarctl_py.commands.repair import _default_plan_path

        flags = dataclasses.replace(flags, plan_file=_default_plan_path())
    migrate.write_index_ledgers(url, dirs, plan)
    err.print(
        f"wrote ledgers {', '.join(f'{o} -> {n}' for o, n in plan.new_ids.items())}; "
        "referenced by nothing until the plan is applied"
    )

    def build(draft: Any, source: Any) -> None:
        migrate.swap_index_ledgers(draft, plan, source, delete_old=delete_old)
        if mapping is not None:
            draft.repairs[-1]["mapping_file"] = str(mapping)

    flags.run(build)


def register(app: typer.Typer) -> None:
    app.add_typer(migrate_app, name="migrate")
