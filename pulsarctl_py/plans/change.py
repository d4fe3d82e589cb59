"""One change of a plan and what a plan makes unreachable.

A :class:`Change` is one metadata key the plan changes, from its value in the store
(``old``: its bytes, version and creation id; None when absent) to the value it writes
(``new``: None deletes it); the same bytes make it a ``check`` (the version checked in
the transaction, nothing written). Its JSON carries both values as base64 with their
sha256, and decoded for people with a line diff (:func:`describe`, :func:`diff_lines`).
:class:`Unreachable` is what the plan makes unreachable: ledgers, entries, a time range,
what cursors skip.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.decoders.errors import LedgerctlError

#: what a change may write: a topic's ML info, a cursor's info, a ledger's metadata
KINDS = ("managed-ledger", "cursor", "ledger")


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text: Any, what: str) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise LedgerctlError(f"plan: {what} is not a base64 string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise LedgerctlError(f"plan: {what} is not valid base64") from None


# -- decoding values for people --------------------------------------------------------------


def describe(kind: str, data: bytes | None) -> tuple[str, Any]:
    """A value as readable text (for the diff) and as JSON (decoded, never raw bytes)."""
    if data is None:
        return "(absent)", None
    try:
        if kind in ("managed-ledger", "cursor"):
            from google.protobuf import text_format

            from pulsarctl_py.decoders import managed_ledger as mld

            decoded = (
                mld.parse_ml_info(data) if kind == "managed-ledger" else mld.parse_cursor_info(data)
            )
            text = text_format.MessageToString(decoded.message) or "(empty)\n"
            return text, decoded.to_json()
        if kind == "ledger":
            from pulsarctl_py.decoders import ledger_metadata as lm

            md = lm.parse(data)
            js = md.to_json()
            text = json.dumps(js, indent=1, sort_keys=True, default=str) + "\n"
            return text, js
    except LedgerctlError as exc:
        return f"(does not decode: {exc.one_line()})\n", {"error": exc.one_line()}
    return f"({len(data)} bytes)\n", {"size": len(data)}


def diff_lines(kind: str, old: bytes | None, new: bytes | None, key: str) -> list[str]:
    old_text, _ = describe(kind, old)
    new_text, _ = describe(kind, new)
    return [
        line.rstrip("\n")
        for line in difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"{key} (now)",
            tofile=f"{key} (planned)",
            n=2,
        )
    ]


# -- the parts of a plan ---------------------------------------------------------------------


@dataclass(slots=True)
class Change:
    """One key the plan changes: from ``old`` (None = absent) to ``new`` (None = delete)."""

    key: str
    kind: str  # managed-ledger, cursor, ledger
    old: bytes | None
    new: bytes | None
    version: int | None  # the store's version of the old value (None when absent)
    why: list[str] = field(default_factory=list)
    #: the old node's incarnation (:attr:`Stat.creation`; None when absent)
    creation: str | None = None

    @property
    def action(self) -> str:
        if self.old is None:
            return "create"
        if self.new is None:
            return "delete"
        # the same bytes: a precondition only (the transaction checks the version; a
        # judgment made on this value, such as the leftovers a compaction deletes)
        return "check" if self.new == self.old else "set"

    def to_json(self) -> dict[str, Any]:
        _, old_json = describe(self.kind, self.old)
        _, new_json = describe(self.kind, self.new)
        return {
            "key": self.key,
            "kind": self.kind,
            "action": self.action,
            "version": self.version,
            "creation": self.creation,
            "old_sha256": sha256(self.old),
            "new_sha256": sha256(self.new),
            "why": list(self.why),
            "diff": diff_lines(self.kind, self.old, self.new, self.key),
            "old": old_json,
            "new": new_json,
            "old_base64": b64(self.old),
            "new_base64": b64(self.new),
        }

    @classmethod
    def from_json(cls, obj: Any) -> Change:
        from pulsarctl_py.stores.metadata.base import validate_path

        if not isinstance(obj, dict):
            raise LedgerctlError("plan: a change is not a JSON object")
        key, kind, version, why = (
            obj.get("key"),
            obj.get("kind"),
            obj.get("version"),
            obj.get("why", []),
        )
        if not isinstance(key, str) or kind not in KINDS:
            raise LedgerctlError("plan: a change lacks its key or kind")
        validate_path(key)
        if version is not None and (
            isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 2**63
        ):
            raise LedgerctlError(f"plan: the version of {key} is not a version number")
        creation = obj.get("creation")
        if creation is not None and not isinstance(creation, str):
            raise LedgerctlError(f"plan: the creation id of {key} is not text")
        if not isinstance(why, list) or not all(isinstance(w, str) for w in why):
            raise LedgerctlError(f"plan: the reasons of {key} are not a list of text")
        old = unb64(obj.get("old_base64"), f"{key} old_base64")
        new = unb64(obj.get("new_base64"), f"{key} new_base64")
        if old is not None and (version is None or creation is None):
            raise LedgerctlError(f"plan: {key} has an old value but no version or creation id")
        if old is None and (version is not None or creation is not None):
            raise LedgerctlError(f"plan: {key} is absent but has a version")
        change = cls(key, kind, old, new, version, list(why), creation)
        if obj.get("old_sha256") != sha256(old) or obj.get("new_sha256") != sha256(new):
            raise LedgerctlError(f"plan: the values of {key} do not match their sha256")
        if old is None and new is None:
            raise LedgerctlError(f"plan: {key} changes from absent to absent")
        return change


@dataclass(slots=True)
class Unreachable:
    """What a plan makes unreachable: whole ledgers, and entries cursors skip."""

    ledgers: list[int] = field(default_factory=list)
    entries: int = 0
    #: entries whose count is not known (an open ledger the metadata does not size)
    entries_unknown: bool = False
    size: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    #: per cursor: what moving it skips (positive) or redelivers (negative)
    cursors: list[dict[str, Any]] = field(default_factory=list)
    #: messages in the unreachable entries that could be read (num_messages of each entry)
    messages: int | None = None
    #: some unreachable entries could not be read: ``messages`` is a lower bound
    messages_unknown: bool = False
    #: what the time range was taken from: "data" (the entries' own times), "close times"
    #: (the bounds the ledgers' close times give, the data unread)
    time_basis: list[str] = field(default_factory=list)

    def add_messages(self, count: int | None) -> None:
        if count is None:
            self.messages_unknown = True
        else:
            self.messages = (self.messages or 0) + count

    def add_time(self, start: int | None, end: int | None, *, basis: str | None = None) -> None:
        if basis is not None and basis not in self.time_basis and (start or end):
            self.time_basis.append(basis)
        for t in (start, end):
            if t:
                self.first_ms = t if self.first_ms is None else min(self.first_ms, t)
                self.last_ms = t if self.last_ms is None else max(self.last_ms, t)

    def merge(self, other: Unreachable) -> None:
        for lid in other.ledgers:
            if lid not in self.ledgers:
                self.ledgers.append(lid)
        self.entries += other.entries
        self.entries_unknown |= other.entries_unknown
        self.size += other.size
        self.add_time(other.first_ms, other.last_ms)
        for basis in other.time_basis:
            if basis not in self.time_basis:
                self.time_basis.append(basis)
        self.cursors.extend(other.cursors)
        if other.messages is not None:
            self.add_messages(other.messages)
        self.messages_unknown |= other.messages_unknown

    def to_json(self) -> dict[str, Any]:
        from pulsarctl_py.timeparse import format_time_ms

        return {
            "ledgers": sorted(set(self.ledgers)),
            "entries": self.entries,
            "entries_unknown": self.entries_unknown,
            # from the entries' num_messages where they could be read (None: none could)
            "messages": self.messages,
            "messages_unknown": self.messages_unknown,
            "size": self.size,
            "time_range": None
            if self.first_ms is None
            else [format_time_ms(self.first_ms), format_time_ms(self.last_ms)],
            "time_range_basis": list(self.time_basis),
            "cursors": list(self.cursors),
        }

    @classmethod
    def from_json(cls, obj: Any) -> Unreachable:
        """Informative only (apply never acts on it): kept when it is well formed."""
        if not isinstance(obj, dict):
            return cls()
        ledgers = obj.get("ledgers")
        cursors = obj.get("cursors")
        entries, size = obj.get("entries"), obj.get("size")
        messages = obj.get("messages")
        return cls(
            ledgers=[i for i in ledgers if isinstance(i, int)] if isinstance(ledgers, list) else [],
            entries=entries if isinstance(entries, int) else 0,
            entries_unknown=obj.get("entries_unknown") is True,
            size=size if isinstance(size, int) else 0,
            messages=messages
            if isinstance(messages, int) and not isinstance(messages, bool)
            else None,
            messages_unknown=obj.get("messages_unknown") is True,
            cursors=[c for c in cursors if isinstance(c, dict)]
            if isinstance(cursors, list)
            else [],
        )
