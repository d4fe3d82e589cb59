"""Apply and undo: the one door through which a plan is written, and taken back.

:func:`apply_plan` executes exactly the plan saved at a path, on the store it was made for
only (:mod:`.binding`: its absolute URL, the store's identity, the bookie directories'
identity), after checking it against what the store holds (:mod:`.references`: every
ledger its values add exists and is the topic's): it checks every key's version, creation
id and bytes (a key deleted and created again with the same bytes is a conflict), writes a
record with every old value beside the plan file (``PLAN.backup.json``, the backup), then
commits all changes in one transaction with compare-and-set on every key (ZooKeeper
``multi`` with versions; RocksDB one WriteBatch checked under the store's lock); a change
whose old and new bytes are the same is a ``check`` (its version checked in the
transaction, nothing written: what a judgment in the plan was made on). Any conflict
aborts with nothing written. Applying a plan whose changes all hold already says "already
applied" and writes nothing (exit 0); after a crash between the metadata commit and the
bookie side, applying again finishes the bookie side. :func:`undo_plan` restores the old
values with compare-and-set against the values the apply wrote; a key already holding its
old value is left alone. A plan that was never applied (no backup, every key at its old
value) is refused; one whose apply found every change in place (recorded "unchanged")
restores nothing. Both return an :class:`Outcome`: the keys written, unchanged and
refused, each with why.

A plan may also delete a ledger's entries in a stopped bookie's indexes (``bookie``;
:mod:`.bookie_index`): checked byte for byte before anything is written, backed up in the
same backup file, deleted after the metadata transaction commits, and written back first
by undo. The ledgers a command wrote before its plan (:mod:`.written`) are checked by
apply (still as written) and deleted by undo.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.stores.metadata.base import MetadataConflict, MetadataStore, Node

from .binding import DEFAULT_ROOTS, check_binding
from .bookie_index import BookieChange, Writer
from .change import Change, b64, sha256
from .document import PLAN_FORMAT, Plan, write_document
from .leases import forget
from .references import Problem, ReferenceRefused, Step, problems
from .validate import check_bookie_place
from .written import check_written, delete_written

BACKUP_FORMAT = PLAN_FORMAT + "-backup"
BACKUP_SUFFIX = ".backup.json"
#: apply/undo steps, in order; a test hook is called after each (see ``after_step``)
STEPS = ("backup", "commit", "record")

AfterStep = Callable[[str], None]


# -- the record beside a plan: the backup ----------------------------------------------------


def backup_path(plan_path: Path) -> Path:
    return plan_path.with_name(plan_path.name + BACKUP_SUFFIX)


#: what the backup says happened: the apply began (nothing may be committed yet), the
#: apply finished, the plan was undone; or the apply found every change in place already
#: and wrote nothing ("unchanged": what holds was written by someone else, so its undo
#: restores nothing)
APPLYING, APPLIED, UNDONE, UNCHANGED = "applying", "applied", "undone", "unchanged"
STATUSES = (APPLYING, APPLIED, UNDONE, UNCHANGED)


@dataclass(slots=True)
class Record:
    """The backup beside a plan file: the old values, and how far apply and undo went."""

    status: str
    plan_digest: str
    applied: str | None = None
    #: what the undo would point at that was already broken when the apply ran (a ledger
    #: the repair dropped because it has no metadata): the undo may restore those only
    #: (:mod:`.references`)
    broken: list[Problem] = field(default_factory=list)
    #: what the tiered side copied before it deleted (:mod:`.offload`): per change its
    #: key, fingerprint digest and where its copy is
    offload: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, bpath: Path, plan: Plan) -> Record | None:
        """The record of ``plan`` at ``bpath`` (None when there is none); a backup of
        another plan, or one that does not match this plan's old values, is refused."""
        import os

        from pulsarctl_py.documents import load_document

        if not os.path.lexists(bpath):
            return None
        doc = load_document(bpath, "plan backup")
        if not isinstance(doc, dict) or doc.get("format") != BACKUP_FORMAT:
            raise LedgerctlError(f"{bpath} is not a ledgerctl plan backup: move it away first")
        if doc.get("plan_digest") != plan.digest:
            raise LedgerctlError(
                f"{bpath} is the backup of another plan (or of one made by an older "
                "ledgerctl): refused, so that its undo is not lost; move it away if that "
                "plan's undo is no longer needed"
            )
        status = doc.get("status")
        if status not in STATUSES:
            raise LedgerctlError(f"{bpath}: unknown status {status!r}")
        olds = {c.key: sha256(c.old) for c in [*plan.changes, *plan.bookie]}
        olds |= {c.key: c.digest for c in plan.offload}
        raw_offload = doc.get("offload", [])
        try:
            held = {
                item["key"]: item.get("sha256")
                for item in [*doc.get("values", []), *doc.get("bookie", [])]
            }
            held |= {item["key"]: item.get("fingerprint") for item in raw_offload}
        except (KeyError, TypeError, AttributeError):
            raise LedgerctlError(f"{bpath} is not a ledgerctl plan backup") from None
        if held != olds:
            raise LedgerctlError(f"backup {bpath} does not hold the plan's old values: refused")
        applied = doc.get("applied")
        raw = doc.get("restores_broken", [])
        broken = [p for p in map(Problem.from_json, raw if isinstance(raw, list) else []) if p]
        return cls(
            status,
            plan.digest or "",
            applied if isinstance(applied, str) else None,
            broken,
            list(raw_offload),
        )


def _earlier(record: Record | None) -> Any:
    """What the backup says of an earlier apply, for the tiered side (:mod:`.offload`)."""
    from .offload import Earlier

    if record is None:
        return Earlier()
    return Earlier(
        record.status in (APPLYING, APPLIED),
        record.status == APPLYING,
        record.applied,
        list(record.offload),
    )


def _write_record(
    bpath: Path,
    plan: Plan,
    status: str,
    applied: str | None,
    broken: list[Problem],
    offload: list[dict[str, Any]] | None = None,
) -> None:
    from pulsarctl_py import outputs

    doc = {
        "format": BACKUP_FORMAT,
        "plan_digest": plan.digest,
        "metadata_url": plan.metadata_url,
        "status": status,
        "applied": applied,
        "values": [
            {
                "key": c.key,
                "version": c.version,
                "creation": c.creation,
                "sha256": sha256(c.old),
                "base64": b64(c.old),
            }
            for c in plan.changes
        ],
        "bookie": [
            {"key": c.key, "sha256": sha256(c.old), "base64": b64(c.old)} for c in plan.bookie
        ],
        # what the old values pointed at that did not hold when the apply ran
        "restores_broken": [p.to_json() for p in broken],
    }
    if plan.offload:  # the tiered side's copies (:mod:`.offload`)
        doc["offload"] = list(offload or [])
    write_document(outputs.prepare(bpath, outputs.BACKUP), doc, "plan backup")


def _now_text() -> str:
    from pulsarctl_py.timeparse import format_time_ms

    return format_time_ms(time.time_ns() // 1_000_000)


# -- apply and undo --------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """What apply or undo did, per key: what it wrote, what already held the value it
    wanted (unchanged, not written), and what it refused and why (then nothing is written,
    and the error carries this outcome as ``outcome``); and what became of whole ledgers.

    One shape for every verb that writes (``apply``, ``undo``, every ``--apply``), as
    JSON (:meth:`to_json`, documented in docs/guide.md): ``refused`` entries carry
    ``key``, ``reason`` and ``exit_code`` (5: the store changed since the plan was made),
    and ``broker`` when a live broker that has the topic loaded refused it.
    """

    action: str  # "apply" or "undo"
    plan: str
    backup: str | None
    #: keys written (metadata set, created or deleted; bookie index entries deleted or
    #: written back; ledgers the plan wrote deleted again by undo)
    written: list[dict[str, Any]] = field(default_factory=list)
    #: keys already in the wanted state, each with the reason
    unchanged: list[dict[str, Any]] = field(default_factory=list)
    #: keys refused, each with the reason
    refused: list[dict[str, Any]] = field(default_factory=list)
    #: "already applied", "resumed", "nothing to restore" ... (None: a plain run)
    note: str | None = None
    #: ledgers the command wrote that this apply swapped in (referenced from now on)
    ledgers_written: list[int] = field(default_factory=list)
    #: ledgers whose metadata (or stopped bookie's index entries) this write deleted;
    #: for undo, the ledgers the plan wrote, deleted again
    ledgers_deleted: list[int] = field(default_factory=list)
    #: ledgers referenced by nothing after this write but kept: after apply, what the
    #: plan made unreachable and `undo` brings back; after undo, what a migration wrote
    #: that stays (`orphans --delete` removes it)
    ledgers_left: list[int] = field(default_factory=list)
    #: undo after the store moved on (:mod:`.rebase`): per key what changed, and the
    #: new plan that puts the backed-up state back (None: not needed)
    rebase: dict[str, Any] | None = None

    @property
    def keys_written(self) -> list[dict[str, Any]]:
        """The written keys of the plan itself (not the ledgers it wrote, deleted by undo)."""
        return [w for w in self.written if "written_ledger" not in w]

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "plan": self.plan,
            "backup": self.backup,
            "note": self.note,
            "already_applied": self.note == "already applied",
            "written": self.written,
            "unchanged": self.unchanged,
            "refused": self.refused,
            "ledgers": {
                "written": sorted(set(self.ledgers_written)),
                "deleted": sorted(set(self.ledgers_deleted)),
                "left": sorted(set(self.ledgers_left)),
            },
            "rebase": self.rebase,
        }


def _refuse(outcome: Outcome, exc: LedgerctlError) -> None:
    """Record the refusal ``exc`` in ``outcome`` and give the error the outcome (an undo
    refused because keys moved on since the apply: one entry per key, with why)."""
    rebase = getattr(exc, "rebase", None)
    for drift in getattr(rebase, "drifts", []):
        outcome.refused.append(
            {
                "key": drift.change.key,
                "reason": drift.refused
                or "changed since the apply (holds neither the applied nor the backed-up "
                "value): a new plan puts the backup back over it",
                "exit_code": exc.exit_code,
            }
        )
    if rebase is not None:
        exc.outcome = outcome  # type: ignore[attr-defined]
        return
    key = getattr(exc, "key", None) or getattr(exc, "path", None)
    entry: dict[str, Any] = {"key": key if isinstance(key, str) else None}
    problem = getattr(exc, "problem", None)
    if isinstance(problem, Problem):
        entry["ledger_id"] = problem.ledger_id
        entry["problem"] = problem.code
    entry["reason"] = exc.one_line()
    entry["exit_code"] = exc.exit_code
    broker = getattr(exc, "broker", None)  # a live broker that has the topic loaded
    if broker is not None:
        entry["broker"] = str(getattr(broker, "url", broker))
    outcome.refused.append(entry)
    exc.outcome = outcome  # type: ignore[attr-defined]


def refused_outcome(action: str, plan_path: Path, exc: LedgerctlError) -> Outcome:
    """The outcome of a write refused before apply or undo ran (the check that no live
    broker has the topic, say): nothing written, the refusal with why (and the broker,
    when the error names one); the error carries it as ``outcome``."""
    outcome = Outcome(action, str(plan_path), None)
    _refuse(outcome, exc)
    return outcome


def _ledgers_done(outcome: Outcome, done: list[dict[str, Any]]) -> None:
    """What deleting the ledgers a plan wrote did (:func:`delete_written`), each where it
    belongs: deleted (written), gone already (unchanged), not ours any more (refused)."""
    for item in done:
        item = item | {"written_ledger": item.get("ledger_id")}
        action = str(item.get("action"))
        if action == "left":
            outcome.refused.append(item)
        elif action == "absent":
            outcome.unchanged.append(item | {"reason": "deleted already"})
        else:
            outcome.written.append(item)
            if isinstance(item.get("ledger_id"), int):
                outcome.ledgers_deleted.append(item["ledger_id"])


def _nothing(_: str) -> None:
    return None


def _commit(txn: Any, conflict: str) -> None:
    """Commit a metadata transaction (if it has anything to do); a conflict names its key."""
    if not txn.ops:
        return
    try:
        txn.commit()
    except MetadataConflict as exc:
        raise MetadataConflict(exc.path, conflict) from None


def _bookie_writer(plan: Plan, store: MetadataStore) -> Any:
    """The bookie indexes held open for writing (none when the plan has no bookie side),
    once every place they name is checked (:func:`~.validate.check_bookie_place`)."""
    import contextlib

    if not plan.bookie:
        return contextlib.nullcontext()
    for change in plan.bookie:
        check_bookie_place(change)
    return Writer(plan.bookie, store)


def _load_bound(plan_path: Path, store: MetadataStore) -> Plan:
    plan = Plan.load(plan_path)
    if plan.binding is not None:
        check_binding(plan.binding, store)
    return plan


def _holds_new(change: Change, node: Node | None) -> bool:
    return node is None if change.new is None else node is not None and node.data == change.new


def _old_conflict(change: Change, node: Node | None) -> str | None:
    """Why ``node`` is not the one the plan read (None: it is, version, creation, bytes)."""
    if change.old is None:
        return None if node is None else "exists now; the plan expects it absent"
    if node is None:
        return "no longer exists; nothing was written"
    if node.stat.version != change.version or node.data != change.old:
        return (
            f"changed since the plan was made (version {node.stat.version}, the plan "
            f"read {change.version}); nothing was written: make a new plan"
        )
    if node.stat.creation != change.creation:
        return (
            "was deleted and created again since the plan was made (same bytes and "
            f"version {change.version}, but another node: {node.stat.creation}, the plan "
            f"read {change.creation}); nothing was written: make a new plan"
        )
    return None


def _ledgers_root(plan: Plan) -> str:
    return (plan.binding.roots if plan.binding is not None else DEFAULT_ROOTS)["ledgers"]


def _check_apply(
    plan: Plan, store: MetadataStore, bookie: list[BookieChange] | None = None
) -> list[Problem]:
    """Refuse (:class:`ReferenceRefused`) a plan whose values name a ledger that is not
    there or not the topic's (:mod:`.references`); return what its undo would point at
    that does not hold now (recorded in the backup: that undo may restore it)."""
    root = _ledgers_root(plan)
    forward = [Step(c.key, c.kind, c.old, c.new) for c in plan.changes]
    found = problems(store, forward, root, bookie=plan.bookie if bookie is None else bookie)
    if found:
        raise ReferenceRefused(found[0], "apply refused, nothing written")
    backward = [Step(c.key, c.kind, c.new, c.old) for c in plan.changes]
    return problems(store, backward, root, gone=[w.ledger_id for w in plan.written])


def apply_plan(
    plan_path: Path,
    store: MetadataStore,
    *,
    after_step: AfterStep = _nothing,
    say: Callable[[str], None] = _nothing,
    admin_url: list[str] | None = None,
    force_owned: bool = False,
) -> Outcome:
    """Execute the plan saved at ``plan_path`` on ``store`` (open read-write), the store
    it was made for.

    Every key must still hold the plan's old value at the plan's version and creation id,
    and every bookie index entry the plan deletes its exact old bytes (the bookie stopped),
    else :class:`MetadataConflict` (or :class:`BookieInUse`) and nothing is written; every
    ledger the new values add must exist and be the topic's (:mod:`.references`), else
    :class:`ReferenceRefused` and nothing is written. The record with the old values goes
    beside the plan before anything is written; then one transaction commits every
    metadata change with compare-and-set, and then the bookie index entries are deleted
    (the hook sees ``bookie-<kind>`` after each). A plan whose every change holds already
    is "already applied" (nothing written: recorded so, so that its undo restores nothing
    either); one whose metadata committed but whose bookie side was cut short is finished
    ("resumed"). A refusal carries the outcome (``exc.outcome``) with the key refused.

    A plan deleting offload objects (``offload``; :mod:`.offload`) is applied by
    :func:`~.offload.apply_offload`: ``admin_url`` and ``force_owned`` say how the brokers
    are asked whether an offload runs, ``say`` what was not asked.
    """
    plan = _load_bound(plan_path, store)
    bpath = backup_path(plan_path)
    record = Record.read(bpath, plan)
    outcome = Outcome("apply", str(plan_path), str(bpath))
    try:
        if plan.offload:  # the tiered side: a plan of its own (:mod:`.offload`)
            from .offload import apply_offload

            def save(stage: str, items: list[dict[str, Any]]) -> None:
                status, when = (APPLYING, None) if stage == "applying" else (APPLIED, _now_text())
                _write_record(bpath, plan, status, when, [], items)

            apply_offload(
                plan,
                store,
                bpath,
                _earlier(record),
                outcome,
                after_step,
                say,
                save,
                admin_url=admin_url,
                force_owned=force_owned,
            )
        else:
            _apply(plan, store, bpath, record, outcome, after_step)
    except LedgerctlError as exc:
        _refuse(outcome, exc)
        raise
    if not plan.empty:
        _forget_written(plan, plan_path, store)
    return outcome


def _apply(
    plan: Plan,
    store: MetadataStore,
    bpath: Path,
    record: Record | None,
    outcome: Outcome,
    after_step: AfterStep,
) -> None:
    if plan.empty:
        check_written(plan.written, store)  # a plan cut short while it wrote: refused
        outcome.backup = None
        return
    nodes = [store.get(change.key) for change in plan.changes]
    with _bookie_writer(plan, store) as bookie:
        places = [bookie.now(c) for c in plan.bookie] if bookie is not None else []
        if all(_holds_new(c, n) for c, n in zip(plan.changes, nodes, strict=True)):
            pending = [c for c, now in zip(plan.bookie, places, strict=True) if now is not None]
            if not pending:
                outcome.note = "already applied"
                outcome.unchanged = [
                    {"key": c.key, "reason": "holds the planned value"}
                    for c in [*plan.changes, *plan.bookie]
                ]
                if record is not None and record.status == APPLYING:
                    _write_record(bpath, plan, APPLIED, _now_text(), record.broken)
                elif record is None or record.status == UNDONE:
                    # this apply changed nothing: its undo must not take back what
                    # another wrote
                    _write_record(bpath, plan, UNCHANGED, _now_text(), [])
                return
            if record is not None and record.status == APPLYING:
                # the metadata committed, then the apply stopped: finish the bookie side
                assert bookie is not None
                bookie.check_planned(pending)
                _check_apply(plan, store, pending)
                outcome.note = "resumed"
                outcome.unchanged = [
                    {"key": c.key, "reason": "holds the planned value"}
                    for c in [*plan.changes, *(c for c in plan.bookie if c not in pending)]
                ]
                outcome.written.extend(bookie.delete(after_step, pending))
                _applied_ledgers(plan, outcome)
                _write_record(bpath, plan, APPLIED, _now_text(), record.broken)
                after_step("record")
                return
        for change, node in zip(plan.changes, nodes, strict=True):
            conflict = _old_conflict(change, node)
            if conflict is not None:
                if record is not None and record.status == APPLIED:
                    conflict = (
                        f"the plan was applied already ({record.applied}) and the store has "
                        f"changed since: {conflict}"
                    )
                raise MetadataConflict(change.key, conflict)
        if bookie is not None:
            bookie.check_planned()
        # the ledgers the plan swaps in are as they were written
        check_written(plan.written, store)
        # every ledger the new values add is there and the topic's
        broken = _check_apply(plan, store)
        _write_record(bpath, plan, APPLYING, None, broken)
        after_step("backup")
        # The creation ids were checked just above; the transaction itself can check only
        # versions (ZooKeeper's multi has no czxid check), so a node deleted and created
        # again in the milliseconds between the two is not seen there. Pulsar's RocksDB
        # store is held locked by this process throughout, so nothing changes it between.
        txn = store.transaction()
        for change in plan.changes:
            if change.new is None:
                txn.delete(change.key, change.version)
            elif change.old is None:
                txn.create(change.key, change.new)
            elif change.action == "check":
                assert change.version is not None
                txn.check(change.key, change.version)
            else:
                txn.set(change.key, change.new, change.version)
        _commit(txn, "changed while applying; nothing was written")
        after_step("commit")
        for change in plan.changes:
            if change.action == "check":
                outcome.unchanged.append(
                    {"key": change.key, "reason": "checked: unchanged since the plan was made"}
                )
                continue
            outcome.written.append(
                {"key": change.key, "action": change.action, "sha256": sha256(change.new)}
            )
        if bookie is not None:
            outcome.written.extend(bookie.delete(after_step))
    _applied_ledgers(plan, outcome)
    _write_record(bpath, plan, APPLIED, _now_text(), broken)
    after_step("record")


def _ledger_id(key: str, plan: Plan) -> int | None:
    from pulsarctl_py.decoders import ledger_metadata as lm

    return lm.ledger_id_from_path(key, _ledgers_root(plan))


def _applied_ledgers(plan: Plan, outcome: Outcome) -> None:
    """What the apply did to whole ledgers: those the command wrote are swapped in, those
    whose metadata or bookie index entries it deleted are gone, and the rest of what it
    made unreachable is left for `undo` to bring back."""
    deleted = {
        _ledger_id(c.key, plan) for c in plan.changes if c.kind == "ledger" and c.new is None
    }
    deleted |= {c.ledger_id for c in plan.bookie}
    deleted.discard(None)
    outcome.ledgers_written = [w.ledger_id for w in plan.written]
    outcome.ledgers_deleted = sorted(i for i in deleted if i is not None)
    outcome.ledgers_left = [i for i in plan.unreachable.ledgers if i not in deleted]


def _forget_written(plan: Plan, plan_path: Path, store: MetadataStore) -> None:
    """The plan is applied: the records that kept its ledgers from being judged leftovers
    (:mod:`.leases`) go; the ledgers are referenced now."""
    if plan.written:
        forget(store, [w.ledger_id for w in plan.written], plan_path)


def _holds_any_planned(plan: Plan, store: MetadataStore) -> bool:
    """Whether some key the plan writes (checks aside) holds the value it plans."""
    return any(c.action != "check" and _holds_new(c, store.get(c.key)) for c in plan.changes)


#: the note of an undo whose keys hold the backed-up state merged with what was added since
PUT_BACK = "put back already"


class NeverApplied(LedgerctlError):
    """Undo of a plan that was never applied (exit 2)."""


def undo_plan(
    plan_path: Path, store: MetadataStore, *, after_step: AfterStep = _nothing
) -> Outcome:
    """Restore every key the plan changed to its old value, on the store it was made for.

    A key holding the value the apply wrote is restored with compare-and-set on its current
    version; a key already holding its old value is left alone (unchanged); a key holding
    anything else (changed since the apply) aborts the undo with nothing written. What
    the restored values bring back is checked as apply checks it (:mod:`.references`): a
    ledger that is not there or not the topic's is refused unless the apply recorded it
    was so already. Bookie index entries the apply deleted are written back first (exact
    bytes; the bookie stopped), then the metadata in one transaction. A plan never applied
    (no backup beside it, every key at its old value) is refused (:class:`NeverApplied`);
    one whose apply changed nothing (every change held already) restores nothing. A
    refusal carries the outcome (``exc.outcome``) with the key refused.
    """
    plan = _load_bound(plan_path, store)
    bpath = backup_path(plan_path)
    record = Record.read(bpath, plan)
    outcome = Outcome("undo", str(plan_path), str(bpath) if record is not None else None)
    try:
        if plan.offload:  # the tiered side: a plan of its own (:mod:`.offload`)
            from .offload import undo_offload

            if record is None or not record.offload:
                raise NeverApplied(
                    f"the plan {plan_path} was never applied (there is no backup "
                    f"{bpath.name} with its copies beside it): nothing to undo"
                )
            done = record

            def save() -> None:
                _write_record(bpath, plan, UNDONE, done.applied, done.broken, done.offload)

            undo_offload(
                plan,
                bpath,
                _earlier(record),
                record.status == UNDONE,
                outcome,
                after_step,
                save,
            )
        else:
            _undo(plan, plan_path, store, bpath, record, outcome, after_step)
    except LedgerctlError as exc:
        _refuse(outcome, exc)
        raise
    return outcome


def _check_undo(
    plan: Plan, store: MetadataStore, steps: list[Step], record: Record | None, bpath: Path
) -> None:
    """Refuse an undo whose restored values bring back a reference that does not hold,
    unless the apply recorded that it did not hold then either."""
    allowed = {p.ident for p in record.broken} if record is not None else set()
    gone = [w.ledger_id for w in plan.written]  # the undo deletes them
    for problem in problems(store, steps, _ledgers_root(plan), gone=gone):
        if problem.ident in allowed:
            continue
        why = (
            "it was not so when the plan was applied"
            if record is not None
            else f"there is no backup {bpath.name} saying it was so before the apply"
        )
        raise ReferenceRefused(
            Problem(problem.key, problem.ledger_id, problem.code, f"{problem.text} ({why})"),
            "undo refused, nothing restored",
        )


def _undo(
    plan: Plan,
    plan_path: Path,
    store: MetadataStore,
    bpath: Path,
    record: Record | None,
    outcome: Outcome,
    after_step: AfterStep,
) -> None:
    if plan.empty:
        if plan.written:  # a plan cut short while it wrote its ledgers: delete them
            outcome.note = "the command stopped while it wrote: what it wrote is deleted"
            _ledgers_done(outcome, delete_written(plan.written, store))
            after_step("written")
        return
    if record is not None and record.status == UNCHANGED:
        # every change held already when it was applied: what holds is another's
        outcome.note = "apply changed nothing"
        outcome.unchanged = [
            {"key": c.key, "reason": "its apply wrote nothing (the key held the planned value)"}
            for c in [*plan.changes, *plan.bookie]
        ]
        return
    if record is None and plan.written and not _holds_any_planned(plan, store):
        # never applied (an apply writes the backup before anything), and the keys hold
        # none of its values, whatever others wrote since (a plan saved for review while
        # another compaction committed): nothing to restore, its ledgers go
        outcome.note = "never applied: the ledgers it wrote are deleted"
        _ledgers_done(outcome, delete_written(plan.written, store))
        after_step("written")
        return
    txn = store.transaction()
    restores: list[dict[str, Any]] = []
    steps: list[Step] = []
    drifted: list[Change] = []
    for change in plan.changes:
        old = change.old
        node = store.get(change.key)
        now = None if node is None else node.data
        if now == old:
            outcome.unchanged.append({"key": change.key, "reason": "already holds its old value"})
            continue
        if now != change.new:
            # rewritten since the apply (a broker loaded the topic): nothing restored;
            # what changed, and a new plan that puts the backup back over it (.rebase)
            drifted.append(change)
            continue
        if old is None:
            assert node is not None
            txn.delete(change.key, node.stat.version)
        elif node is None:
            txn.create(change.key, old)
        else:
            txn.set(change.key, old, node.stat.version)
        restores.append({"key": change.key, "action": "restore", "sha256": sha256(old)})
        steps.append(Step(change.key, change.kind, change.new, change.old))
        if change.kind == "ledger" and old is None:
            ledger_id = _ledger_id(change.key, plan)
            if ledger_id is not None:
                outcome.ledgers_deleted.append(ledger_id)
    if drifted:
        from .rebase import rebase_undo

        outcome.unchanged.clear()
        moved = rebase_undo(plan, plan_path, store, drifted)
        if moved.rebase.plan is not None and not moved.rebase.plan.changes:
            # the backed-up state holds already, with what the store gained since (the
            # new plan of an earlier undo was applied): nothing to restore
            outcome.note = PUT_BACK
            outcome.unchanged = [
                {"key": c.key, "reason": "holds its backed-up state, with what was added since"}
                for c in plan.changes
            ]
            if record is not None and record.status != UNDONE:
                _write_record(bpath, plan, UNDONE, record.applied, record.broken)
            return
        outcome.rebase = moved.rebase.to_json()
        raise moved
    with _bookie_writer(plan, store) as bookie:
        todo: list[tuple[BookieChange, bytes]] = []
        if bookie is not None:
            todo, unchanged = bookie.check_restore({c.key: c.old for c in plan.bookie})
            outcome.unchanged.extend(unchanged)
        if not restores and not todo:
            if record is None and plan.written:
                # never applied: nothing to restore, but the ledgers it wrote go
                outcome.note = "never applied: the ledgers it wrote are deleted"
                _ledgers_done(outcome, delete_written(plan.written, store))
                after_step("written")
                return
            if record is None:
                raise NeverApplied(
                    f"the plan {plan_path} was never applied (there is no backup "
                    f"{bpath.name} beside it, and every key holds its old value): nothing "
                    "to undo"
                )
            outcome.note = "already undone" if record.status == UNDONE else "nothing to restore"
            if record.status != UNDONE:
                _write_record(bpath, plan, UNDONE, record.applied, record.broken)
            if plan.written:  # deleted already when undone before: "absent" then
                _ledgers_done(outcome, delete_written(plan.written, store))
                after_step("written")
            return
        _check_undo(plan, store, steps, record, bpath)
        if bookie is not None:
            outcome.written.extend(bookie.restore(todo, after_step))
        _commit(txn, "changed while undoing; nothing was restored")
        outcome.written.extend(restores)
    after_step("commit")
    if record is not None:
        _write_record(bpath, plan, UNDONE, record.applied, record.broken)
    if plan.written:
        _ledgers_done(outcome, delete_written(plan.written, store))
        after_step("written")
