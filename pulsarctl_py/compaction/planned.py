"""``compact --apply`` / ``--plan`` as a plan, like every other write ledgerctl makes.

1. **Before the compaction is computed**: refuse while a live broker owns the topic's
   bundle, and read the ``__compaction`` cursor (its bytes and version). The plan's
   compare-and-set is against THIS read, so that a change made while the compaction was
   computed (a broker's own compaction, a repair) fails the apply instead of being lost.
2. The compaction is computed (:func:`pulsarctl_py.compaction.run.compact`); nothing is
   written before it finished cleanly.
3. The earlier plan saved at the same ``--plan`` path (a run that stopped, or one made
   for review) gives back the ledgers it wrote (:func:`pulsarctl_py.repair.written.
   reclaim_plan_path`); the run takes its lease (:mod:`pulsarctl_py.leases`).
4. The plan file is saved before each step of the writing (the ledger's id and creator
   token before its metadata is created, a stopped bookie's files before they are
   written, the closed metadata's sha256 before the close); the ledger is written
   (running bookies, or a stopped bookie's directories, :mod:`pulsarctl_py.plans.writing`);
   the plan is saved again with the cursor change (the horizon, ``CompactedTopicLedger``
   = the new ledger), the ledger written, the previous compacted ledger's deletion with
   ``--delete-old``, the deletion of leftovers of runs that stopped (judged now, on the
   topic's ledger list, whose version the plan checks, and the cursor, whose version it
   sets with: :func:`judge_leftovers`), and the topic to unload.
5. With ``--apply`` the plan is applied (:func:`pulsarctl_py.repair.plan.apply_plan`:
   backup, one compare-and-set transaction). A conflict deletes the new ledger (and no
   leftover): that plan can never apply.

``ledgerctl undo PLAN`` restores the previous cursor and deletes the new ledger; after a
crash at any step it deletes whatever was created (the plan file was saved first).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.plans import Plan
    from pulsarctl_py.plans.writing import PlanFile
    from pulsarctl_py.stores.ledger_writer import NewLedger
    from pulsarctl_py.stores.metadata import MetadataStore

#: test hook: called with the name of each step as it completes
AfterStep = Callable[[str], None]
STEPS = ("creating", "files", "closing", "written", "planned")


def _nothing(_: str) -> None:
    return None


@dataclass(slots=True)
class Before:
    """What the write is checked against, read before the compaction is computed."""

    topic: str
    metadata_url: str
    cursor_path: str
    cursor_data: bytes | None
    cursor_version: int | None
    cursor: Any  # the decoded CursorRecord, or None
    cursor_creation: str | None = None  # which incarnation of the node (Stat.creation)
    warnings: list[str] = field(default_factory=list)


def read_before(metadata_url: str, topic: str, *, force: bool = False) -> Before:
    """Step 1: the ownership check and the ``__compaction`` cursor as it is now."""
    from pulsarctl_py.ownership import check_not_owned
    from pulsarctl_py.stores.metadata import open_metadata_store, read_cursor, resolve_topic

    name = resolve_topic(topic)
    with open_metadata_store(metadata_url) as store:
        warnings = check_not_owned(store, [name], force=force)
        znode = mld.url_encode(mld.COMPACTION_CURSOR)
        path = f"{name.ml_path}/{znode}"
        node = store.get(path)
        cursor = read_cursor(store, name.ml_path, znode) if node is not None else None
        url = store.url
    return Before(
        name.full_name,
        url,
        path,
        None if node is None else node.data,
        None if node is None else node.stat.version,
        cursor,
        None if node is None else node.stat.creation,
        warnings,
    )


@dataclass(slots=True)
class Leftovers:
    """What a compaction plan does with the leftovers of runs that stopped (compacted
    ledgers of its topic that nothing references): the changes that delete them (with
    the check of the topic's ledger list they were judged on), the ones kept and why."""

    changes: list[Any] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    kept: list[tuple[int, str]] = field(default_factory=list)
    #: why none was judged (None: they were)
    not_judged: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "deleted": list(self.deleted),
            "kept": [{"ledger_id": lid, "reason": why} for lid, why in self.kept],
            "not_judged": self.not_judged,
        }


def _references(cursor_data: bytes | None) -> set[int] | None:
    """The ledgers a ``__compaction`` cursor value references (its cursor ledger, its
    ``CompactedTopicLedger``); None when it does not decode (nothing can be judged)."""
    if cursor_data is None:
        return set()
    try:
        info = mld.parse_cursor_info(cursor_data).message
    except LedgerctlError:
        return None
    out = {p.value for p in info.properties if p.name == "CompactedTopicLedger"}
    if info.HasField("cursorsLedgerId") and info.cursorsLedgerId != -1:
        out.add(info.cursorsLedgerId)
    return out


def judge_leftovers(
    store: MetadataStore, before: Before, state: Any, written: set[int]
) -> Leftovers:
    """The compacted ledgers of the topic that nothing references, above every ledger the
    topic references (what a run that stopped before its plan was applied leaves), judged
    on what the store holds NOW: the topic's ledger list (its version becomes a check in
    the plan: the plan applies only while it is unchanged) and the ``__compaction`` cursor
    as read before the compute and now (the plan sets it with compare-and-set on the
    version read before the compute, so a compaction committed meanwhile fails the whole
    transaction, deletions included). A ledger a live run holds in its lease, or that a
    plan file neither applied nor undone names (:mod:`pulsarctl_py.leases`), is kept and
    said so; ``written``: the ledgers this run wrote."""
    from pulsarctl_py.plans import Change
    from pulsarctl_py.plans.leases import Holds
    from pulsarctl_py.stores.metadata import iter_ledger_paths, read_ledger, resolve_topic

    out = Leftovers()
    name = resolve_topic(before.topic)
    place = store.bookkeeper()
    if place.store is not store:
        out.not_judged = (
            "BookKeeper's metadata is in another store than the topic's: a plan changes one "
            "store, so leftovers are left to `ledgerctl orphans`"
        )
        return out
    ml = store.get(name.ml_path)
    now = store.get(before.cursor_path)
    cursors = [_references(before.cursor_data), _references(None if now is None else now.data)]
    if ml is None or any(refs is None for refs in cursors):
        out.not_judged = (
            "the topic's ledger list or __compaction cursor cannot be read: leftovers are "
            "not judged"
        )
        return out
    try:
        ids = {li.ledgerId for li in mld.parse_ml_info(ml.data).message.ledgerInfo}
    except LedgerctlError:
        out.not_judged = "the topic's ledger list does not decode: leftovers are not judged"
        return out
    referenced = ids | {lid for refs in cursors for lid in refs or ()}
    referenced |= {lid for lid in (state.compacted_ledger, state.cursor_ledger) if lid is not None}
    above = max(referenced, default=-1)
    holds = Holds(store)
    for ledger_id, _path in iter_ledger_paths(place.store, place.root):
        if ledger_id <= above or ledger_id in referenced or ledger_id in written:
            continue
        record = read_ledger(place.store, ledger_id, place.root)
        md = record.metadata if record is not None else None
        if md is None or record is None or record.stat is None:
            continue
        tags = md.pulsar()
        if tags.kind != "compacted" or tags.compacted_topic != name.full_name:
            continue
        why = holds.why(ledger_id)
        if why is not None:
            out.kept.append((ledger_id, why))
            continue
        out.deleted.append(ledger_id)
        out.changes.append(
            Change(
                record.path,
                "ledger",
                record.raw,
                None,
                record.stat.version,
                [
                    f"compacted ledger {ledger_id} of {name.full_name} that nothing "
                    "references (left by a run that stopped before its plan was applied)"
                ],
                record.stat.creation,
            )
        )
    if out.changes:
        out.changes.insert(
            0,
            Change(
                name.ml_path,
                "managed-ledger",
                ml.data,
                ml.data,
                ml.stat.version,
                [
                    "unchanged (a check): the leftovers this plan deletes were judged on this "
                    "ledger list and the __compaction cursor; the plan applies only while "
                    "both are as read"
                ],
                ml.stat.creation,
            ),
        )
    return out


def write_plan(
    *,
    before: Before,
    report: Any,
    state: Any,
    plan_file: PlanFile,
    bookie_dirs: list[str],
    settings: Any,
    options: Any,
    delete_old: bool,
    after_step: AfterStep = _nothing,
    leftovers: bool = True,
) -> tuple[Plan, NewLedger]:
    """Step 4: the plan saved before each step of the writing, the ledger written, the
    plan saved complete; with ``leftovers`` it also deletes what runs that stopped left
    (:func:`judge_leftovers`, in the same transaction as the cursor)."""
    from pulsarctl_py.compaction.apply import (
        compacted_custom_metadata,
        compaction_settings,
        cursor_value,
    )
    from pulsarctl_py.compaction.run import read_spool
    from pulsarctl_py.plans import UNLOAD_WARNING, Change, Plan
    from pulsarctl_py.plans.writing import LedgerTarget
    from pulsarctl_py.stores.metadata import open_metadata_store, read_ledger, resolve_topic

    name = resolve_topic(before.topic)
    assert report.spool is not None and report.horizon is not None
    config = compaction_settings(settings).compacted_config(
        compacted_custom_metadata(
            name.full_name, report.compacted_to or report.horizon, name.partition_index
        )
    )
    fallback = None
    if bookie_dirs:
        from pulsarctl_py.compaction.apply import bookie_id_for
        from pulsarctl_py.ledgers import LedgerSource

        with LedgerSource.open(before.metadata_url, bookie_dirs, need_metadata=True) as ro:
            fallback = bookie_id_for(ro, [lid for lid, _, _ in state.ledgers])

    pending = plan_file.pending
    journal = plan_file.journal
    journal.after_step = after_step

    store = open_metadata_store(before.metadata_url, read_only=False)
    try:
        target = LedgerTarget(
            store,
            bookie_dirs=bookie_dirs,
            options=options,
            doing="writing a compacted ledger into its storage",
        )
        ledger = target.write(
            config,
            (e.data for e in read_spool(report.spool)),
            journal=journal,
            fallback_bookie=fallback,
        )
        written = pending.written[-1]
        after_step("written")

        new_cursor = cursor_value(before.cursor, report.horizon, ledger.ledger_id)
        h = "{}:{}".format(*report.horizon)
        plan = Plan(
            metadata_url=plan_file.binding.metadata_url,
            changes=[
                Change(
                    before.cursor_path,
                    "cursor",
                    before.cursor_data,
                    new_cursor,
                    before.cursor_version,
                    [
                        f"the compaction horizon {h} and CompactedTopicLedger "
                        f"{ledger.ledger_id}, the compacted ledger written "
                        f"({ledger.entries} entries, {ledger.config})"
                    ],
                    before.cursor_creation,
                )
            ],
            topics=[name.full_name],
            binding=plan_file.binding,
            written=[written],
        )
        plan.repairs.append(
            {
                "repair": "compact",
                "topic": name.full_name,
                "horizon": h,
                "compacted_ledger": ledger.ledger_id,
                "previous_compacted_ledger": report.previous_compacted_ledger,
                "ledger": ledger.to_json(),
                "cursor_version_before_compute": before.cursor_version,
            }
        )
        plan.warnings.append(UNLOAD_WARNING)
        plan.warnings.extend(before.warnings + ledger.notes)
        previous = report.previous_compacted_ledger
        if delete_old and previous is not None:
            record = read_ledger(store, previous)
            if record is not None and record.stat is not None:
                if target.place.store is not store:
                    raise LedgerctlError(
                        "--delete-old: BookKeeper's metadata is in another store than the "
                        "topic's; a plan changes one store: delete the old ledger separately"
                    )
                plan.changes.append(
                    Change(
                        record.path,
                        "ledger",
                        record.raw,
                        None,
                        record.stat.version,
                        [f"the previous compacted ledger {previous} (--delete-old)"],
                        record.stat.creation,
                    )
                )
                plan.warnings.append(
                    f"--delete-old: ledger {previous}'s metadata is deleted; once its "
                    "bookies collected it, undo restores a cursor pointing to a ledger "
                    "without its entries"
                )
        if leftovers:
            found = judge_leftovers(store, before, state, {w.ledger_id for w in pending.written})
            plan.changes.extend(found.changes)
            plan.unreachable.ledgers.extend(found.deleted)
            plan.repairs[0]["leftovers"] = found.to_json()
            for lid, why in found.kept:
                plan.warnings.append(
                    f"compacted ledger {lid} of {name.full_name} is left, {why}; once "
                    "nothing keeps it, `ledgerctl orphans` lists it"
                )
            if found.not_judged is not None:
                plan.warnings.append(found.not_judged)
        plan.created_ms = time.time_ns() // 1_000_000
        plan.write(plan_file.final())
        after_step("planned")
        return plan, ledger
    finally:
        store.close()


def apply_written_plan(plan: Plan, plan_path: Path, *, force: bool) -> Any:
    """Step 5: apply the plan; a conflict (it can never apply) deletes the new ledger."""
    from pulsarctl_py.ownership import check_not_owned
    from pulsarctl_py.plans import apply_plan
    from pulsarctl_py.plans.written import delete_written
    from pulsarctl_py.stores.metadata import MetadataConflict, open_metadata_store

    with open_metadata_store(plan.metadata_url, read_only=False) as store:
        # an owner may have come back while the compaction was computed and written
        check_not_owned(store, plan.topics, force=force)
        try:
            return apply_plan(plan_path, store)
        except MetadataConflict as exc:
            delete_written(plan.written, store)
            leftovers = " and no leftover" if any(c.new is None for c in plan.changes) else ""
            raise MetadataConflict(
                exc.path,
                f"{str(exc).split(': ', 1)[-1]} (the compacted ledger this plan wrote is "
                f"deleted{leftovers})",
            ) from None
