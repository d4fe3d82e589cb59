"""Undo after the store moved on: what changed since the apply, and a new plan that puts
the backed-up state back over what the store holds now.

A broker that loads a topic after a plan was applied rewrites its metadata: it rolls a
new ledger into the topic's ledger list, persists cursor positions, closes ledgers. A key
the apply wrote then holds neither the applied value nor the backed-up one, and restoring
the backed-up bytes would throw away what the broker wrote (a ledger it wrote data into).
So :func:`rebase_undo` compares, per key, three values: the one the apply wrote
(``applied``), the one the store holds now (``current``) and the backed-up one
(``backup``), and merges them field by field (a three-way merge, the apply's change taken
back, the broker's changes kept):

* a field the apply did not change keeps the current value (the broker's);
* a field the apply changed and the broker did not goes back to the backed-up value;
* a field both changed is a conflict: the undo is refused for that key, with the reason;
* a topic's ledger list (ManagedLedgerInfo ``ledgerInfo``) is merged ledger by ledger:
  the ledgers the apply dropped come back, the ones it added go again (refused if the
  broker wrote into one since), the ones the broker added since stay (refused unless they
  come after the restored list's last ledger: BookKeeper hands out ledger ids in
  increasing order, and ``ManagedLedgerImpl`` keeps its ledgers in a map ordered by id),
  a ledger the broker removed since (trimmed, or an empty one deleted) stays out, and
  every ledger listed now keeps the broker's entry count and size;
* a cursor's position (``cursorsLedgerId``, the mark-delete position, the individually
  deleted ranges and batch indexes: ``ManagedCursorImpl`` persists them together) is one
  field: moved by both the apply and the broker (consumers acknowledged, or the broker
  switched to a new cursor ledger), it is refused; ``lastActive`` is always the broker's;
* a ledger's BookKeeper metadata, a key deleted or created since, is refused.

The result is a normal plan (:class:`~.document.Plan`) bound to the store, whose changes
go from the current values (their versions and creation ids: compare-and-set against
them) to the merged ones: reviewed, saved, applied with ``apply``, backed up and undone
like any other. It is offered only when every key that moved on merges; otherwise the
refusal says which key and why, and nothing is offered. Ledgers the original plan wrote
(``compact``, ``migrate``) are not in the new plan: once it is applied they are referenced
by nothing (``orphans --delete`` removes them).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.errors import PlanConflict

from .change import Change, Unreachable, describe, sha256

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from pulsarctl_py.stores.metadata.base import MetadataStore, Node

    from .document import Plan

#: a cursor's position, persisted together by the broker (ManagedCursorImpl)
CURSOR_POSITION = (
    "cursorsLedgerId",
    "markDeleteLedgerId",
    "markDeleteEntryId",
    "individualDeletedMessages",
    "batchedEntryDeletionIndexInfo",
)
#: fields that are always the broker's (the time of the cursor's last activity)
BROKERS_OWN = ("lastActive",)


class _Refused(Exception):
    """One key that cannot be put back (the reason, for people)."""


def diff_text(kind: str, a: bytes | None, b: bytes | None, labels: tuple[str, str]) -> list[str]:
    """A line diff of two values of ``kind``, decoded as plans show them."""
    a_text, _ = describe(kind, a)
    b_text, _ = describe(kind, b)
    return [
        line.rstrip("\n")
        for line in difflib.unified_diff(
            a_text.splitlines(keepends=True),
            b_text.splitlines(keepends=True),
            fromfile=labels[0],
            tofile=labels[1],
            n=2,
        )
    ]


@dataclass(slots=True)
class Drift:
    """One key the apply wrote that holds something else now."""

    change: Change
    current: Node | None
    #: what the new plan writes (None with ``refused``, or a key to delete)
    merged: bytes | None = None
    notes: list[str] = field(default_factory=list)
    refused: str | None = None

    @property
    def now(self) -> bytes | None:
        return None if self.current is None else self.current.data

    def to_json(self) -> dict[str, Any]:
        c = self.change
        _, applied = describe(c.kind, c.new)
        _, current = describe(c.kind, self.now)
        _, backup = describe(c.kind, c.old)
        out: dict[str, Any] = {
            "key": c.key,
            "kind": c.kind,
            "applied_sha256": sha256(c.new),
            "current_sha256": sha256(self.now),
            "backup_sha256": sha256(c.old),
            "current_version": None if self.current is None else self.current.stat.version,
            # what changed since the apply, then what the new plan would do
            "changed_since_apply": diff_text(
                c.kind, c.new, self.now, (f"{c.key} (applied)", f"{c.key} (now)")
            ),
            "applied": applied,
            "current": current,
            "backup": backup,
            "notes": list(self.notes),
            "refused": self.refused,
        }
        if self.refused is None:
            out["new_plan_diff"] = diff_text(
                c.kind, self.now, self.merged, (f"{c.key} (now)", f"{c.key} (put back)")
            )
        return out


@dataclass(slots=True)
class Rebase:
    """What changed since the apply, per key, and the plan that puts the backup back
    (None when a key is refused)."""

    plan_path: str
    drifts: list[Drift]
    plan: Plan | None
    #: where the new plan was saved (set by the command that saves it)
    saved: str | None = None

    @property
    def refused(self) -> list[Drift]:
        return [d for d in self.drifts if d.refused is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan_path,
            "keys": [d.to_json() for d in self.drifts],
            "new_plan_file": self.saved,
            "new_plan": None if self.plan is None else self.plan.to_json(),
        }


class UndoMovedOn(PlanConflict):
    """Undo refused: keys the apply wrote were rewritten since (exit 5, nothing written);
    ``rebase`` says what changed and holds the new plan, when one can be made."""

    def __init__(self, message: str, rebase: Rebase) -> None:
        self.rebase = rebase
        self.key = rebase.drifts[0].change.key if rebase.drifts else None
        super().__init__(message)


# -- the three-way merge ---------------------------------------------------------------------


def _ser(msg: Message) -> bytes:
    """A message's bytes, for comparison (its text when it lacks a required field, which
    serializing refuses)."""
    from google.protobuf import text_format
    from google.protobuf.message import EncodeError

    try:
        return msg.SerializeToString(deterministic=True)
    except EncodeError:
        return text_format.MessageToString(msg).encode()


def _value(msg: Message, name: str) -> Any:
    """A field's value, comparable: serialized messages, lists of them, None when unset."""
    fd = msg.DESCRIPTOR.fields_by_name[name]
    value = getattr(msg, name)
    if fd.is_repeated:
        if fd.message_type is not None:
            return [_ser(m) for m in value]
        return list(value)
    if fd.has_presence and not msg.HasField(name):
        return None
    return _ser(value) if fd.message_type is not None else value


def _copy(dst: Message, src: Message, name: str) -> None:
    fd = dst.DESCRIPTOR.fields_by_name[name]
    dst.ClearField(name)
    if fd.is_repeated:
        getattr(dst, name).extend(getattr(src, name))
    elif fd.has_presence and not src.HasField(name):
        return
    elif fd.message_type is not None:
        getattr(dst, name).CopyFrom(getattr(src, name))
    else:
        setattr(dst, name, getattr(src, name))


def _merge_fields(
    backup: Message,
    applied: Message,
    current: Message,
    merged: Message,
    groups: list[tuple[str, ...]],
    refuse: Callable[[tuple[str, ...], Any, Any, Any], str],
) -> None:
    """Into ``merged`` (a copy of ``current``): each group of fields the apply changed and
    the broker did not goes back to ``backup``; one both changed is refused."""
    for group in groups:
        b = [_value(backup, n) for n in group]
        a = [_value(applied, n) for n in group]
        c = [_value(current, n) for n in group]
        if b == a or c == b:
            continue  # the apply left it, or it is back already: the current value
        if c != a:
            raise _Refused(refuse(group, backup, applied, current))
        for name in group:
            _copy(merged, backup, name)


def _position(info: Any) -> str:
    return (
        f"mark-delete {info.markDeleteLedgerId}:{info.markDeleteEntryId}, cursor ledger "
        f"{info.cursorsLedgerId}, {len(info.individualDeletedMessages)} acknowledged range(s)"
    )


def _merge_cursor(backup: bytes, applied: bytes, current: bytes, notes: list[str]) -> bytes:
    from pulsarctl_py.decoders import managed_ledger as mld

    b, a, c = (_decoded(mld.parse_cursor_info, v, w) for v, w in _three(backup, applied, current))
    merged = type(c.message)()
    merged.CopyFrom(c.message)
    names = [f.name for f in merged.DESCRIPTOR.fields]
    groups = [CURSOR_POSITION] + [
        (n,) for n in names if n not in CURSOR_POSITION and n not in BROKERS_OWN
    ]

    def refuse(group: tuple[str, ...], bm: Any, am: Any, cm: Any) -> str:
        if group == CURSOR_POSITION:
            return (
                f"the broker moved the cursor since the apply (the apply set {_position(am)}; "
                f"now {_position(cm)}; the backup has {_position(bm)}): putting the old "
                "position back would take back what consumers acknowledged since; reset it "
                "with `ledgerctl repair cursor` if that is what is wanted"
            )
        return (
            f"{group[0]} was changed by the apply and again since: the undo cannot tell "
            "which to keep"
        )

    _merge_fields(b.message, a.message, c.message, merged, groups, refuse)
    return mld.rebuild(c, merged)


def _three(backup: bytes, applied: bytes, current: bytes) -> list[tuple[bytes, str]]:
    return [(backup, "backed-up"), (applied, "applied"), (current, "current")]


def _decoded(parse: Callable[[bytes], Any], data: bytes, which: str) -> Any:
    try:
        decoded = parse(data)
    except LedgerctlError as exc:
        raise _Refused(f"its {which} value does not decode ({exc.one_line()})") from None
    if decoded.missing:
        raise _Refused(f"its {which} value lacks {', '.join(decoded.missing)}")
    return decoded


def _merge_ml(backup: bytes, applied: bytes, current: bytes, notes: list[str]) -> bytes:
    from pulsarctl_py.decoders import managed_ledger as mld

    b, a, c = (_decoded(mld.parse_ml_info, v, w) for v, w in _three(backup, applied, current))
    merged = type(c.message)()
    merged.CopyFrom(c.message)
    names = [f.name for f in merged.DESCRIPTOR.fields if f.name != "ledgerInfo"]

    def refuse(group: tuple[str, ...], bm: Any, am: Any, cm: Any) -> str:
        return (
            f"{group[0]} was changed by the apply and again since (by the broker): the undo "
            "cannot tell which to keep"
        )

    _merge_fields(b.message, a.message, c.message, merged, [(n,) for n in names], refuse)
    _merge_ledgers(b.message, a.message, c.message, merged, notes)
    return mld.rebuild(c, merged)


def _merge_ledgers(b: Any, a: Any, c: Any, merged: Any, notes: list[str]) -> None:
    """The topic's ledger list, ledger by ledger (see the module's docstring)."""
    ser = _value
    if ser(b, "ledgerInfo") == ser(a, "ledgerInfo"):
        return  # the apply left the list alone: the broker's
    B = {li.ledgerId: li for li in b.ledgerInfo}
    A = {li.ledgerId: li for li in a.ledgerInfo}
    C = {li.ledgerId: li for li in c.ledgerInfo}
    out: dict[int, Any] = {}
    dropped: list[int] = []
    for lid, li in C.items():
        if lid in A and lid not in B:  # the apply put it in the list: the undo drops it
            if _ser(li) != _ser(A[lid]):
                raise _Refused(
                    f"ledger {lid}, which the apply put in the topic's list, has changed since "
                    f"(the broker wrote to it: {A[lid].entries} entries then, {li.entries} "
                    "now): dropping it again would lose what the broker wrote"
                )
            dropped.append(lid)
            continue
        out[lid] = li  # as the broker knows it now (its entries and size)
    gone = []
    for lid, li in B.items():
        if lid in C:
            continue
        if lid in A:  # listed by both, removed by the broker since: it stays out
            gone.append(lid)
            continue
        out[lid] = li  # the apply dropped it: back
    added = [lid for lid in C if lid not in A and lid not in B]
    last = max((lid for lid in out if lid not in added), default=-1)
    early = [lid for lid in added if lid < last]
    if early:
        raise _Refused(
            f"the broker added ledger(s) {', '.join(map(str, early))} since the apply, before "
            f"ledger {last} of the list the undo puts back: the list cannot keep the broker's "
            "order"
        )
    if added:
        notes.append(
            f"keeps ledger(s) {', '.join(map(str, added))} the broker added since the apply "
            f"(after the restored list's last, {last})"
        )
    back = sorted(lid for lid in out if lid in B and lid not in A)
    if back:
        notes.append(f"puts back ledger(s) {', '.join(map(str, back))} the apply dropped")
    if dropped:
        notes.append(f"drops ledger(s) {', '.join(map(str, dropped))} the apply added")
    if gone:
        notes.append(
            f"leaves out ledger(s) {', '.join(map(str, gone))}: the broker removed them from "
            "the list since the apply (trimmed or deleted)"
        )
    merged.ClearField("ledgerInfo")
    merged.ledgerInfo.extend(out[lid] for lid in sorted(out))


def merge(change: Change, current: Node | None) -> Drift:
    """The drift of one key: what it holds now, and what the new plan writes there (or
    why it cannot be put back)."""
    drift = Drift(change, current)
    now = drift.now
    try:
        if change.old is None:
            raise _Refused(
                "the apply created it and it has changed since: deleting it would lose "
                "what was written to it"
                if now is not None
                else "the apply created it and it was deleted since: nothing to undo"
            )
        if change.new is None:
            raise _Refused("the apply deleted it and it was created again since")
        if now is None:
            raise _Refused("it was deleted since the apply (the topic or cursor is gone)")
        if change.kind == "managed-ledger":
            drift.merged = _merge_ml(change.old, change.new, now, drift.notes)
        elif change.kind == "cursor":
            drift.merged = _merge_cursor(change.old, change.new, now, drift.notes)
        else:
            raise _Refused(
                "BookKeeper's metadata of the ledger changed since the apply (the broker "
                "opened, recovered or closed it): ledgerctl does not merge ledger metadata"
            )
    except _Refused as exc:
        drift.refused = str(exc)
        drift.merged = None
    return drift


def rebase_undo(
    plan: Plan, plan_path: Path, store: MetadataStore, drifted: list[Change]
) -> UndoMovedOn:
    """The refusal of an undo whose keys ``drifted`` were rewritten since the apply, with
    what changed and, when every one of them merges, the new plan: the other keys of the
    plan restored as undo restores them (those holding the applied value), the drifted
    ones merged, each with compare-and-set on the version the store holds now."""
    from .binding import Binding
    from .document import UNLOAD_WARNING
    from .document import Plan as PlanDoc

    drifts = [merge(c, store.get(c.key)) for c in drifted]
    moved = {d.change.key for d in drifts}
    new_plan = None
    changes: list[Change] | None = None
    unreachable = Unreachable()
    warnings: list[str] = []
    if plan.bookie:
        for d in drifts:
            d.refused = d.refused or (
                "the plan also deleted bookie index entries, which only its own undo (the "
                "bookie stopped) writes back"
            )
    if not any(d.refused for d in drifts):
        changes = []
        why = f"undo of {plan_path} after the store moved on since its apply"
        for c in plan.changes:
            node = store.get(c.key)
            now = None if node is None else node.data
            if c.key in moved:
                (d,) = [d for d in drifts if d.change.key == c.key]
                new = d.merged
                reasons = [why, *d.notes]
            elif now == c.new and now != c.old:
                new, reasons = c.old, [why, "holds the applied value: restored"]
            else:
                continue  # holds its old value
            if new == now:
                continue
            changes.append(
                Change(
                    c.key,
                    c.kind,
                    now,
                    new,
                    None if node is None else node.stat.version,
                    reasons,
                    None if node is None else node.stat.creation,
                )
            )
            unreachable.ledgers.extend(_dropped(c.kind, now, new))
        found = _references(plan, store, changes)
        for d in drifts:  # the new plan would be refused by apply: say so now
            mine = [text for key, text in found if key == d.change.key or key not in moved]
            if mine:
                d.refused = "; ".join(mine) + " (apply would refuse the plan that puts it back)"
        if changes and plan.topics:
            warnings.append(UNLOAD_WARNING)
        if plan.written:
            ids = ", ".join(str(w.ledger_id) for w in plan.written)
            warnings.append(
                f"ledger(s) {ids}, which {plan_path} wrote, are referenced by nothing once "
                "this plan is applied (`ledgerctl orphans --delete` removes them)"
            )
    if changes is not None and not any(d.refused for d in drifts):
        new_plan = PlanDoc(
            metadata_url=plan.metadata_url,
            changes=changes,
            repairs=[
                {
                    "repair": "undo-after-the-store-moved-on",
                    "plan": str(plan_path),
                    "plan_digest": plan.digest,
                    "notes": [n for d in drifts for n in d.notes],
                }
            ],
            unreachable=unreachable,
            warnings=warnings,
            topics=list(plan.topics),
            binding=Binding.of(store),
        )
    rebase = Rebase(str(plan_path), drifts, new_plan)
    keys = ", ".join(d.change.key for d in drifts)
    if new_plan is None:
        why = "; ".join(f"{d.change.key}: {d.refused}" for d in rebase.refused)
        text = (
            f"undo refused, nothing restored: {keys} changed after the plan was applied, and "
            f"cannot be put back over what holds now ({why})"
        )
    else:
        text = (
            f"undo refused, nothing restored: {keys} changed after the plan was applied (a "
            "broker that loads the topic rewrites it); a new plan puts the backed-up state "
            "back over what holds now, keeping what was added since"
        )
    return UndoMovedOn(text, rebase)


def _references(plan: Plan, store: MetadataStore, changes: list[Change]) -> list[tuple[str, str]]:
    """What the new plan's values would point at that does not hold (a ledger put back
    that is gone now, or not the topic's): apply would refuse it (:mod:`.references`)."""
    from .binding import DEFAULT_ROOTS
    from .references import Step, problems

    root = (plan.binding.roots if plan.binding is not None else DEFAULT_ROOTS)["ledgers"]
    steps = [Step(c.key, c.kind, c.old, c.new) for c in changes]
    return [(p.key, p.text) for p in problems(store, steps, root)]


def _dropped(kind: str, old: bytes | None, new: bytes | None) -> list[int]:
    """The ledgers a topic's list loses from ``old`` to ``new``."""
    if kind != "managed-ledger" or old is None or new is None:
        return []
    from pulsarctl_py.decoders import managed_ledger as mld

    try:
        before = {li.ledgerId for li in mld.parse_ml_info(old).message.ledgerInfo}
        after = {li.ledgerId for li in mld.parse_ml_info(new).message.ledgerInfo}
    except LedgerctlError:
        return []
    return sorted(before - after)
