"""``ledgerctl migrate compacted|index`` as one library call each: read what the migration
copies, and with a plan output, write the new ledgers under the plan's lease and hand the
draft that swaps them in to the plan runner (:mod:`pulsarctl_py.plans`).

The recipes (what is copied, how the swap is drafted) are :mod:`pulsarctl_py.repair.migrate`'s;
this module is the verb's sequence: the reads, the refusal while a live broker owns the
topic (before any ledger is written), the writing, and the plan. Nothing here prints: a
:class:`MigrateHooks` hears each step, in order, and runs the plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.outputs import Output
    from pulsarctl_py.plans import Draft
    from pulsarctl_py.plans.writing import PlanFile


class MigrateHooks(Protocol):
    """What a migration tells while it works, and who runs its plan."""

    def found(self, migration: Any) -> None:
        """What was read (before anything is written)."""

    def announce(self, plan_file: PlanFile, what: str) -> None:
        """The plan file is leased: where the plan goes, what it gave back of a run before."""

    def written(self, ledgers: list[Any], warnings: list[str]) -> None:
        """The new ledgers are written (referenced by nothing yet)."""

    def say(self, text: str, kind: str = "") -> None:
        """A line for people (``kind`` "plain": as it is, no highlighting)."""

    def run(self, build: Callable[[Draft, LedgerSource], Any], out: Output) -> Any:
        """Draft, save and (when asked) apply the plan ``build`` drafts, to ``out``."""


@dataclass(slots=True)
class CompactedMigration:
    """``migrate compacted``: the topic's compaction as read, the entries rewritten in
    ``fmt``, and the report (JSON)."""

    state: Any
    fmt: str
    entries: list[Any]
    stats: Any
    report: dict[str, Any]
    #: what people must know (pip-429: clients that crash on it)
    crash: list[str] = field(default_factory=list)
    #: the refusal's warnings (--force-owned) and the like
    warnings: list[str] = field(default_factory=list)


def migrate_compacted(
    topic: str,
    fmt: str,
    *,
    metadata_url: str,
    bookie_dirs: list[str],
    out: Output | None,
    client: Any,
    settings: Callable[[], Any],
    force_owned: bool,
    accept_damage: bool,
    hooks: MigrateHooks,
) -> CompactedMigration:
    """Rewrite the topic's compacted ledger in ``fmt`` with the compaction's own writer
    and, with a plan output ``out``, re-point the ``__compaction`` cursor to it in a plan
    (``settings()``: the write settings, resolved once the plan is leased)."""
    from pulsarctl_py.compaction.core import PIP_429_CLIENT_CRASH, Stats
    from pulsarctl_py.compaction.ledger import write_compacted_ledger
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair import migrate

    url, dirs = metadata_url, bookie_dirs
    stats = Stats()
    warnings: list[str] = []
    try:
        with LedgerSource.open(
            url, dirs, need_metadata=True, need_bookie=True, live=client
        ) as source:
            state = migrate.compacted_state(source, topic)
            if out is not None:
                assert source.metadata is not None
                warnings = _not_owned(source.metadata, state.topic, force_owned)
        entries = list(
            migrate.converted_entries(
                state, fmt, url, dirs, accept_damage=accept_damage, stats=stats
            )
        )
    except BaseException:
        if out is not None:
            out.discard()
        raise
    crash = [PIP_429_CLIENT_CRASH] if fmt == "pip-429" else []
    report: dict[str, Any] = state.to_json() | {
        "format": fmt,
        "written_ledger": None,
        "damaged": list(stats.damaged),
        "warnings": crash,
    }
    found = CompactedMigration(state, fmt, entries, stats, report, crash, warnings)
    hooks.found(found)
    if out is None:
        return found
    from pulsarctl_py.plans.writing import PlanFile

    what = "a compacted ledger"
    with PlanFile.leased(out, url, state.topic, dirs, what, "migrate compacted") as plan_file:
        hooks.announce(plan_file, what)
        ledger = write_compacted_ledger(
            metadata_url=url,
            bookie_dirs=dirs,
            topic=state.topic,
            entries=entries,
            compacted_to=state.compacted_to,
            cursor_version=state.cursor_version,
            data_ledgers=state.data_ledgers,
            partition=state.partition,
            settings=settings(),
            options=client,
            force=force_owned,
            journal=plan_file.journal,
        )
        hooks.written([ledger], warnings)
        hooks.run(
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
    return found


@dataclass(slots=True)
class IndexMigration:
    """``migrate index``: the plan of the copy (:func:`pulsarctl_py.repair.migrate.plan_index`),
    the mapping file written (None: none), and the settings the new ledgers get."""

    plan: Any
    mapping: Any = None
    mapping_written: bool = False
    settings: Any = None
    warnings: list[str] = field(default_factory=list)


def migrate_index(
    topic: str,
    start: int | None,
    *,
    metadata_url: str,
    bookie_dirs: list[str],
    out: Output | None,
    mapping: Any,
    force_outputs: bool,
    client: Any,
    settings: Callable[[], Any],
    force_owned: bool,
    delete_old: bool,
    accept_damage: bool,
    hooks: MigrateHooks,
) -> IndexMigration:
    """Copy the topic's ledgers from the first without an index on into new ledgers with a
    continuous index, write the mapping (``mapping``; default beside the plan), and with a
    plan output ``out`` swap them in by a plan."""
    import json

    from pulsarctl_py import outputs
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair import migrate

    url, dirs = metadata_url, bookie_dirs
    chosen = None
    warnings: list[str] = []
    mapping_out = None
    try:
        if mapping is None and out is not None:
            mapping = out.sibling(".mapping.jsonl")
        if mapping is not None:
            mapping_out = outputs.prepare(mapping, outputs.MAPPING, force=force_outputs)
        with LedgerSource.open(
            url, dirs, need_metadata=True, need_bookie=True, live=client
        ) as source:
            plan = migrate.plan_index(source, topic, url, dirs, start, accept_damage=accept_damage)
            if out is not None:
                assert source.metadata is not None
                warnings = _not_owned(source.metadata, plan.topic, force_owned)
                chosen, notes = migrate.index_settings(source, plan, settings(), offline=bool(dirs))
                warnings += notes
    except BaseException:
        for prepared in (out, mapping_out):
            if prepared is not None:
                prepared.discard()
        raise
    found = IndexMigration(plan, mapping, mapping_out is not None, chosen, warnings)
    hooks.found(found)
    if mapping_out is not None:
        with mapping_out.open_text() as fh:
            for row in plan.mapping:
                fh.write(json.dumps(row, sort_keys=True) + "\n")
        hooks.say(f"mapping of {len(plan.mapping)} entries saved to {mapping}")
    if out is None:
        return found
    assert chosen is not None
    from pulsarctl_py.plans.writing import PlanFile

    what = "the migrated ledgers"
    with PlanFile.leased(out, url, plan.topic, dirs, what, "migrate index") as plan_file:
        hooks.announce(plan_file, what)
        written = migrate.write_index_ledgers(
            url, dirs, plan, settings=chosen, options=client, journal=plan_file.journal
        )
        hooks.written(written, warnings)
        if not dirs:  # one stopped bookie's ledgers have quorums of 1 (LedgerWriter.effective)
            quorums = {chosen.source.get(k) for k in ("ensemble", "write_quorum", "ack_quorum")}
            hooks.say(
                f"quorums of the new ledgers ({chosen.ensemble}/{chosen.write_quorum}/"
                f"{chosen.ack_quorum}) from {', '.join(sorted(q for q in quorums if q))}",
                "plain",
            )
        hooks.say(
            f"ledgers {', '.join(f'{o} -> {n}' for o, n in plan.new_ids.items())}; "
            "referenced by nothing until the plan is applied"
        )
        saved_mapping = str(mapping) if mapping_out is not None and not mapping_out.stream else None
        hooks.run(
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
    return found


def _not_owned(store: Any, topic: str, force: bool) -> list[str]:
    """Refuse to write for a topic a live broker has loaded (fail fast, before any
    ledger); with --unload, unload it now, so that the plan reads what it persisted."""
    from pulsarctl_py import livewrite

    return livewrite.prepare(store, [topic], force=force)
