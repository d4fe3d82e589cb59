"""``compact --apply`` / ``--plan`` as a plan, like every other write ledgerctl makes.

1. **Before the compaction is computed**: refuse while a live broker owns the topic's
   bundle, and read the ``__compaction`` cursor (its bytes and version). The plan's
   compare-and-set is against THIS read, so that a change made while the compaction was
   computed (a broker's own compaction, a repair) fails the apply instead of being lost.
2. The compaction is computed (:func:`pulsarctl_py.compaction.run.compact`); nothing is
   written before it finished cleanly.
3. The earlier plan saved at the same ``--plan`` path (a run that stopped, or one made
   for review) gives back the ledgers it wrote (:func:`pulsarctl_py.plans.writing.
   reclaim_plan_path`); the run takes its lease (:mod:`pulsarctl_py.plans.leases`).
4. The plan file is saved before each step of the writing (the ledger's id and creator
   token before its metadata is created, a stopped bookie's files before they are
   written, the closed metadata's sha256 before the close); the ledger is written through
   the one "write new ledgers" context (:class:`pulsarctl_py.plans.writing.LedgerTarget`:
   running bookies, or a stopped bookie's directories; a failure before the plan is saved
   deletes it); the plan is drafted like any other (:class:`pulsarctl_py.plans.Draft`)
   and saved again: the cursor change (the horizon, ``CompactedTopicLedger`` = the new
   ledger: :func:`pulsarctl_py.compaction.cursor.draft_compacted_ledger`), the ledger
   written, the previous compacted ledger's deletion with ``--delete-old``, the deletion
   of leftovers of runs that stopped (judged now, on the topic's ledger list, whose
   version the plan checks, and the cursor, whose version it sets with:
   :func:`judge_leftovers`), and the topic to unload.
5. With ``--apply`` the plan is applied (:func:`pulsarctl_py.plans.apply_plan`: backup,
   one compare-and-set transaction). A conflict deletes the new ledger (and no leftover):
   that plan can never apply.

:func:`write_compaction` is steps 3 to 5 as one call (``compact --apply/--plan``).

``ledgerctl undo PLAN`` restores the previous cursor and deletes the new ledger; after a
crash at any step it deletes whatever was created (the plan file was saved first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.plans import Draft, Outcome, Plan
    from pulsarctl_py.plans.writing import PlanFile
    from pulsarctl_py.stores.ledger_writer import NewLedger
    from pulsarctl_py.stores.metadata.base import Node

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
    #: the ``__compaction`` cursor's node as read (None: there is none)
    cursor_node: Node | None
    cursor: Any  # the decoded CursorRecord, or None
    warnings: list[str] = field(default_factory=list)

    @property
    def cursor_data(self) -> bytes | None:
        return None if self.cursor_node is None else self.cursor_node.data

    @property
    def cursor_version(self) -> int | None:
        return None if self.cursor_node is None else self.cursor_node.stat.version


def read_before(metadata_url: str, topic: str, *, force: bool = False) -> Before:
    """Step 1: the live-broker check (with --unload: the unload, so that the cursor is
    read as the broker persisted it) and the ``__compaction`` cursor as it is now."""
    from pulsarctl_py import livewrite
    from pulsarctl_py.stores.metadata import open_metadata_store, read_cursor, resolve_topic

    from .cursor import compaction_cursor_path

    name = resolve_topic(topic)
    with open_metadata_store(metadata_url) as store:
        warnings = livewrite.prepare(store, [name], force=force)
        path = compaction_cursor_path(name.ml_path)
        node = store.get(path)
        cursor = (
            read_cursor(store, name.ml_path, path.rsplit("/", 1)[1]) if node is not None else None
        )
        url = store.url
    return Before(name.full_name, url, path, node, cursor, warnings)


@dataclass(slots=True)
class Leftovers:
    """What a compaction plan does with the leftovers of runs that stopped (compacted
    ledgers of its topic that nothing references): the ones it deletes (drafted, with the
    check of the topic's ledger list they were judged on), the ones kept and why."""

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
    out = {p.value for p in info.properties if p.name == mld.COMPACTED_TOPIC_LEDGER}
    if info.HasField("cursorsLedgerId") and info.cursorsLedgerId != -1:
        out.add(info.cursorsLedgerId)
    return out


def judge_leftovers(draft: Draft, before: Before, state: Any, written: set[int]) -> Leftovers:
    """Draft the deletion of the compacted ledgers of the topic that nothing references,
    above every ledger the topic references (what a run that stopped before its plan was
    applied leaves), judged on what the store holds NOW: the topic's ledger list (drafted
    as a check: the plan applies only while it is unchanged) and the ``__compaction``
    cursor as read before the compute and now (the plan sets it with compare-and-set on
    the version read before the compute, so a compaction committed meanwhile fails the
    whole transaction, deletions included). A ledger a live run holds in its lease, or
    that a plan file neither applied nor undone names (:mod:`pulsarctl_py.plans.leases`),
    is kept and said so; ``written``: the ledgers this run wrote."""
    from pulsarctl_py.plans.leases import Holds
    from pulsarctl_py.stores.metadata import iter_ledger_paths, read_ledger, resolve_topic
    from pulsarctl_py.stores.metadata.base import Node

    store = draft.store
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
    found = []
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
        found.append((ledger_id, record))
    if found:
        draft.read_before(name.ml_path, ml)
        draft.check(
            name.ml_path,
            "managed-ledger",
            "unchanged (a check): the leftovers this plan deletes were judged on this "
            "ledger list and the __compaction cursor; the plan applies only while both are "
            "as read",
        )
    for ledger_id, record in found:
        assert record.stat is not None
        draft.read_before(record.path, Node(record.raw, record.stat))
        draft.delete(
            record.path,
            "ledger",
            f"compacted ledger {ledger_id} of {name.full_name} that nothing references "
            "(left by a run that stopped before its plan was applied)",
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
    entries: Iterable[bytes | memoryview] | None = None,
) -> tuple[Plan, NewLedger]:
    """Step 4: the plan saved before each step of the writing, the ledger written, the
    plan drafted and saved complete; with ``leftovers`` it also deletes what runs that
    stopped left (:func:`judge_leftovers`, in the same transaction as the cursor).

    ``entries``: the compacted entries' bytes as phase two produces them (the ledger is
    created first and each entry added as it comes, within the writer's add window); by
    default, those ``report.spool`` holds."""
    from pulsarctl_py.compaction.run import read_spool
    from pulsarctl_py.plans import Draft
    from pulsarctl_py.plans.writing import LedgerTarget
    from pulsarctl_py.stores.metadata import read_ledger, resolve_topic
    from pulsarctl_py.stores.metadata.base import Node

    from .cursor import draft_compacted_ledger
    from .ledger import compacted_config

    name = resolve_topic(before.topic)
    assert report.horizon is not None
    if entries is None:
        assert report.spool is not None
        entries = (e.data for e in read_spool(report.spool))
    config = compacted_config(
        name.full_name, report.compacted_to or report.horizon, name.partition_index, settings
    )
    journal = plan_file.journal
    journal.after_step = after_step

    with LedgerTarget.opened(
        before.metadata_url,
        bookie_dirs,
        options=options,
        doing="writing a compacted ledger into its storage",
        journal=journal,
        topic_ledgers=[lid for lid, _, _ in state.ledgers],
    ) as target:
        ledger = target.write(config, entries)
        written = plan_file.pending.written[-1]
        after_step("written")

        store = target.store
        draft = Draft(store)
        draft.topic(name.full_name)
        draft.written.append(written)
        h = "{}:{}".format(*report.horizon)
        # the compare-and-set is against the cursor as read before the compute
        draft.read_before(before.cursor_path, before.cursor_node)
        draft_compacted_ledger(
            draft,
            before.cursor_path,
            before.cursor.info if before.cursor is not None else None,
            report.horizon,
            ledger.ledger_id,
            f"the compaction horizon {h} and CompactedTopicLedger {ledger.ledger_id}, the "
            f"compacted ledger written ({ledger.entries} entries, {ledger.config})",
        )
        draft.repairs.append(
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
        draft.warnings.extend(before.warnings + ledger.notes)
        previous = report.previous_compacted_ledger
        if delete_old and previous is not None:
            record = read_ledger(store, previous)
            if record is not None and record.stat is not None:
                if target.place.store is not store:
                    raise LedgerctlError(
                        "--delete-old: BookKeeper's metadata is in another store than the "
                        "topic's; a plan changes one store: delete the old ledger separately"
                    )
                draft.read_before(record.path, Node(record.raw, record.stat))
                draft.delete(
                    record.path,
                    "ledger",
                    f"the previous compacted ledger {previous} (--delete-old)",
                )
                draft.warnings.append(
                    f"--delete-old: ledger {previous}'s metadata is deleted; once its "
                    "bookies collected it, undo restores a cursor pointing to a ledger "
                    "without its entries"
                )
        if leftovers:
            found = judge_leftovers(draft, before, state, {w.ledger_id for w in draft.written})
            draft.unreachable.ledgers.extend(found.deleted)
            draft.repairs[0]["leftovers"] = found.to_json()
            for lid, why in found.kept:
                draft.warnings.append(
                    f"compacted ledger {lid} of {name.full_name} is left, {why}; once "
                    "nothing keeps it, `ledgerctl orphans` lists it"
                )
            if found.not_judged is not None:
                draft.warnings.append(found.not_judged)
        plan = draft.plan(binding=plan_file.binding)
        plan.write(plan_file.final())
        after_step("planned")
        return plan, ledger


def apply_written_plan(
    plan: Plan, plan_path: Path, *, force: bool, say: Say | None = None
) -> Outcome:
    """Step 5: apply the plan (through :func:`pulsarctl_py.livewrite.apply`: refused while
    a broker has the topic loaded, unloaded with --unload); a conflict (it can never
    apply) deletes the new ledger."""
    from pulsarctl_py import livewrite
    from pulsarctl_py.plans import apply_plan
    from pulsarctl_py.plans.written import delete_written
    from pulsarctl_py.stores.metadata import MetadataConflict, open_metadata_store

    with open_metadata_store(plan.metadata_url, read_only=False) as store:
        # a broker may have loaded the topic while the compaction was computed and written
        try:
            return livewrite.apply(
                store,
                plan_path,
                lambda: apply_plan(plan_path, store),
                force=force,
                say=lambda text: (say or _silent)(text, "note"),
            )
        except MetadataConflict as exc:
            delete_written(plan.written, store)
            leftovers = " and no leftover" if any(c.new is None for c in plan.changes) else ""
            refused = MetadataConflict(
                exc.path,
                f"{str(exc).split(': ', 1)[-1]} (the compacted ledger this plan wrote is "
                f"deleted{leftovers})",
            )
            outcome = getattr(exc, "outcome", None)
            if outcome is not None:  # what was refused, for `compact --apply -o json`
                outcome.ledgers_deleted.extend(w.ledger_id for w in plan.written)
                refused.outcome = outcome  # type: ignore[attr-defined]
            raise refused from None


# -- compact --apply / --plan as one call ------------------------------------------------------


#: what :func:`write_compaction` says while it works: (text, kind), kind "" (progress),
#: "warning" or "note"
Say = Callable[[str, str], None]


def _silent(text: str, kind: str) -> None:
    return None


@dataclass(slots=True)
class CompactionWrite:
    """What ``compact --apply/--plan`` wrote: the plan (saved at ``plan_path``), the
    compacted ledger, the outcome of the apply (None: not applied), and the leftovers
    the plan deletes."""

    plan_path: Path
    plan: Plan
    ledger: NewLedger
    outcome: Outcome | None = None
    leftovers: list[int] = field(default_factory=list)


def write_compaction(
    report: Any,
    state: Any,
    *,
    before: Before,
    bookie_dirs: list[str] | None,
    delete_old: bool,
    settings: Any,
    options: Any,
    force: bool,
    full: bool,
    plan_out: Any,
    apply: bool,
    say: Say = _silent,
    entries: Iterable[bytes | memoryview] | None = None,
) -> CompactionWrite | None:
    """Steps 3 to 5 for a compaction (``report``; ``state``, the topic as the compute read
    it): under the run's lease, the compacted ledger written with its plan saved to
    ``plan_out`` (prepared before the compute) and, with ``apply``, the plan applied.
    ``entries``: the compacted entries' bytes while phase two produces them
    (``compact(write=...)``: called once phase one is done, so that the ledger is written
    while phase two runs); without them, those ``report.spool`` holds (a computed
    compaction). ``report`` is completed (the ledger, the plan file, what was deleted or
    is to be). None when nothing is written, decided before any ledger is created: the
    broker would compact nothing, or nothing is new since the horizon of an up-to-date
    compaction (a note in the report says so); ``entries`` are then left unread.
    ``force`` (``--force-owned``) also leaves leftovers alone. ``say`` hears what a person
    is told while it works."""
    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.plans.writing import PlanFile

    if report.spool is None and entries is None:
        plan_out.discard()
        report.notes.append("nothing written: the broker would compact nothing of the topic")
        return None
    if (
        not full
        and state.compacted_ledger is not None
        and state.horizon is not None
        and (report.nothing_new or state.horizon == state.last)
    ):
        if report.spool is not None:
            report.spool.unlink(missing_ok=True)
        plan_out.discard()
        report.notes.append(
            f"nothing written: nothing new since the compaction horizon "
            f"{state.horizon[0]}:{state.horizon[1]} (compacted ledger "
            f"{state.compacted_ledger} is up to date; --full rebuilds it)"
        )
        return None
    bookie = [str(d) for d in resolve_bookie_dirs(bookie_dirs)]
    # the lease is held from before the first ledger until the run ends: what it writes is
    # never taken for a leftover by another run (pulsarctl_py.plans.leases)
    with PlanFile.leased(
        plan_out, before.metadata_url, report.topic, bookie, "a compacted ledger", "compact"
    ) as plan_file:
        for line in plan_file.reclaimed:
            say(line, "")
        path = plan_file.path
        where = (
            f"into the stopped bookie of {', '.join(bookie)}"
            if bookie
            else "to the running bookies"
        )
        what = (
            f"a compacted ledger of {report.stats.entries_out} entries"
            if entries is None
            else "the compacted ledger, entry by entry as phase two computes it,"
        )
        say(
            f"writing {what} {where}; the plan that commits it: {path} (`ledgerctl undo "
            f"{path}` deletes it if this command is interrupted)",
            "",
        )
        try:
            plan, ledger = write_plan(
                before=before,
                report=report,
                state=state,
                plan_file=plan_file,
                bookie_dirs=bookie,
                settings=settings,
                options=options,
                delete_old=delete_old,
                leftovers=not force,
                entries=entries,
            )
        except BaseException:
            _forget_unwritten(plan_file, before.metadata_url)
            raise
        return _written(report, plan, ledger, path, delete_old, force, apply, say)


def _forget_unwritten(plan_file: PlanFile, metadata_url: str) -> None:
    """The write failed (phase two's error, a bookie's, Ctrl-C) and the writer deleted the
    ledger it was writing: the plan file saved before each step, and the lease's record of
    the ledger (:mod:`pulsarctl_py.plans.leases`), name a ledger that no longer exists, so
    both are removed (no plan claims it). Left in place, for ``undo``, while any ledger it
    names is still in the store (or the store cannot say)."""
    from pulsarctl_py.stores.metadata import open_metadata_store

    written = plan_file.pending.written
    if not plan_file.used or plan_file.out.stream:
        return
    try:
        with open_metadata_store(metadata_url) as store:
            place = store.bookkeeper()
            if any(place.store.get(w.path) is not None for w in written):
                return
        lease = plan_file.journal.lease
        for w in written if lease is not None else ():
            lease.drop(w.ledger_id, None)
    except LedgerctlError:
        return
    plan_file.path.unlink(missing_ok=True)


def _written(
    report: Any,
    plan: Plan,
    ledger: NewLedger,
    path: Path,
    delete_old: bool,
    force: bool,
    apply: bool,
    say: Say,
) -> CompactionWrite:
    report.compacted_ledger = ledger.ledger_id
    report.plan_file = str(path)
    for w in ledger.notes:
        say(w, "warning")
    say(
        f"wrote compacted ledger {ledger.ledger_id} ({ledger.entries} entries, {ledger.config}, "
        f"ensemble {', '.join(ledger.ensemble)}); plan saved to {path}",
        "",
    )
    previous = report.previous_compacted_ledger
    deleting = delete_old and previous is not None
    found = plan.repairs[0].get("leftovers") or {}
    for kept in found.get("kept", []):
        say(
            f"left compacted ledger {kept['ledger_id']} of {report.topic}: nothing references "
            f"it, but it is {kept['reason']}",
            "",
        )
    if found.get("not_judged"):
        say(found["not_judged"], "note")
    done = CompactionWrite(path, plan, ledger, leftovers=list(found.get("deleted", [])))
    if not apply:
        report.to_delete = [previous] if previous is not None and not deleting else []
        return done
    done.outcome = apply_written_plan(plan, path, force=force, say=say)
    report.applied = True
    report.deleted = [previous] if deleting else []
    report.to_delete = [previous] if previous is not None and not deleting else []
    return done
