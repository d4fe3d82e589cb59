"""One plan mechanism for every write ledgerctl makes to a metadata store or, for a
stopped bookie, to its indexes.

A repair never writes directly: it drafts its changes on a :class:`Draft` (a view of the
store with the changes laid over it, so that several repairs can follow one another), and
the draft becomes a :class:`Plan`: every key it changes (znode path; for Pulsar's RocksDB
store the key is the same path), the value's current version and sha256, the old and new
bytes (base64) and their decoded text with a line diff, and what the change makes
unreachable (ledgers, entries, time range).

:func:`apply_plan` executes exactly that plan: it checks every key's version and hash,
writes a backup of every old value beside the plan file, then commits all changes in one
transaction with compare-and-set on every key (ZooKeeper ``multi`` with versions; RocksDB
one WriteBatch checked under the store's lock). Any conflict aborts with nothing written.
:func:`undo_plan` restores the old values with compare-and-set against the values the
apply wrote; a key already holding its old value is left alone, so undo after an apply
that failed half-way (or never ran) restores the state before the plan.

A plan may also delete a ledger's entries in a stopped bookie's indexes (``bookie``, plan
format version 2; :mod:`.bookie_index`): checked byte for byte with the metadata before
anything is written, backed up in the same backup file, deleted after the metadata
transaction commits, and written back first by undo.

Metadata writes need the topics unloaded (formats.md §8.3): the owning broker caches the
state and rewrites the znodes on every ledger roll and cursor close.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders.errors import DataError, LedgerctlError
from pulsarctl_py.stores.metadata.base import MetadataConflict, MetadataStore

from .bookie_index import BookieChange, Writer
from .written import Written, check_written, delete_written

PLAN_FORMAT = "ledgerctl-plan"
PLAN_VERSION = 1
#: a plan that also changes bookie indexes (``bookie``): older readers must refuse it
PLAN_VERSION_BOOKIE = 2
BACKUP_SUFFIX = ".backup.json"
UNLOAD_WARNING = (
    "the topics this plan changes must be unloaded first (no broker may own them): the "
    "owning broker caches their metadata and rewrites it on every ledger roll and cursor close"
)

#: what a change may write: a topic's ML info, a cursor's info, a ledger's metadata
KINDS = ("managed-ledger", "cursor", "ledger")
#: apply/undo steps, in order; a test hook is called after each (see ``after_step``)
STEPS = ("backup", "commit", "record")

AfterStep = Callable[[str], None]


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes | None:
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


# -- the plan --------------------------------------------------------------------------------


@dataclass(slots=True)
class Change:
    """One key the plan changes: from ``old`` (None = absent) to ``new`` (None = delete)."""

    key: str
    kind: str  # managed-ledger, cursor, ledger
    old: bytes | None
    new: bytes | None
    version: int | None  # the store's version of the old value (None when absent)
    why: list[str] = field(default_factory=list)

    @property
    def action(self) -> str:
        if self.old is None:
            return "create"
        return "delete" if self.new is None else "set"

    def to_json(self) -> dict[str, Any]:
        _, old_json = describe(self.kind, self.old)
        _, new_json = describe(self.kind, self.new)
        return {
            "key": self.key,
            "kind": self.kind,
            "action": self.action,
            "version": self.version,
            "old_sha256": sha256(self.old),
            "new_sha256": sha256(self.new),
            "why": list(self.why),
            "diff": diff_lines(self.kind, self.old, self.new, self.key),
            "old": old_json,
            "new": new_json,
            "old_base64": _b64(self.old),
            "new_base64": _b64(self.new),
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
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise LedgerctlError(f"plan: the version of {key} is not a number")
        if not isinstance(why, list) or not all(isinstance(w, str) for w in why):
            raise LedgerctlError(f"plan: the reasons of {key} are not a list of text")
        old = _unb64(obj.get("old_base64"), f"{key} old_base64")
        new = _unb64(obj.get("new_base64"), f"{key} new_base64")
        if old is not None and version is None:
            raise LedgerctlError(f"plan: {key} has an old value but no version")
        change = cls(key, kind, old, new, version, list(why))
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

    def add_messages(self, count: int | None) -> None:
        if count is None:
            self.messages_unknown = True
        else:
            self.messages = (self.messages or 0) + count

    def add_time(self, start: int | None, end: int | None) -> None:
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


@dataclass(slots=True)
class Plan:
    """What a repair will write, exactly; applied only by :func:`apply_plan`."""

    metadata_url: str
    changes: list[Change] = field(default_factory=list)
    repairs: list[dict[str, Any]] = field(default_factory=list)
    unreachable: Unreachable = field(default_factory=Unreachable)
    warnings: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    #: bookie index entries the plan deletes (offline bookies; see bookie_index)
    bookie: list[BookieChange] = field(default_factory=list)
    created_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    #: ledgers the command wrote before the plan (undo deletes them; see written)
    written: list[Written] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.changes and not self.bookie

    def to_json(self) -> dict[str, Any]:
        from pulsarctl_py.timeparse import format_time_ms

        extra: dict[str, Any] = (
            {"bookie": [c.to_json() for c in self.bookie]} if self.bookie else {}
        )
        if self.written:
            extra["written"] = [w.to_json() for w in self.written]
        return {
            "format": PLAN_FORMAT,
            "version": PLAN_VERSION_BOOKIE if self.bookie else PLAN_VERSION,
            "created": format_time_ms(self.created_ms),
            "metadata_url": self.metadata_url,
            "topics": list(self.topics),
            "repairs": list(self.repairs),
            "warnings": list(self.warnings),
            "unreachable": self.unreachable.to_json(),
            "changes": [c.to_json() for c in self.changes],
            **extra,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Plan:
        if not isinstance(obj, dict) or obj.get("format") != PLAN_FORMAT:
            raise LedgerctlError(f'not a ledgerctl plan (no "format": "{PLAN_FORMAT}")')
        if obj.get("version") not in (PLAN_VERSION, PLAN_VERSION_BOOKIE):
            raise LedgerctlError(f"plan format version {obj.get('version')!r} is not supported")
        raw_changes, raw_bookie = obj.get("changes", []), obj.get("bookie", [])
        if not isinstance(raw_changes, list) or not isinstance(raw_bookie, list):
            raise LedgerctlError('plan: "changes" or "bookie" is not a list')
        if raw_bookie and obj.get("version") != PLAN_VERSION_BOOKIE:
            raise LedgerctlError(f"plan: bookie changes need format version {PLAN_VERSION_BOOKIE}")
        changes = [Change.from_json(c) for c in raw_changes]
        bookie = [BookieChange.from_json(c) for c in raw_bookie]
        keys = [c.key for c in changes] + [c.key for c in bookie]
        if len(set(keys)) != len(keys):
            raise LedgerctlError("plan: a key appears twice")
        url = obj.get("metadata_url", "")
        if not isinstance(url, str):
            raise LedgerctlError('plan: "metadata_url" is not text')

        def texts(name: str) -> list[str]:
            value = obj.get(name, [])
            return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

        repairs = obj.get("repairs", [])
        raw_written = obj.get("written", [])
        if not isinstance(raw_written, list):
            raise LedgerctlError('plan: "written" is not a list')
        return cls(
            metadata_url=url,
            changes=changes,
            repairs=[r for r in repairs if isinstance(r, dict)]
            if isinstance(repairs, list)
            else [],
            unreachable=Unreachable.from_json(obj.get("unreachable", {})),
            warnings=texts("warnings"),
            topics=texts("topics"),
            bookie=bookie,
            written=[Written.from_json(w) for w in raw_written],
        )

    def save(self, path: Path) -> None:
        _write_json(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> Plan:
        return cls.from_json(_read_json(path, "plan"))


def _write_json(path: Path, obj: Any) -> None:
    """Write atomically (temp file, fsync, rename): a crash leaves the old file or the new."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise LedgerctlError(f"cannot write {path}: {exc.strerror or exc}") from None


def _read_json(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LedgerctlError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise LedgerctlError(f"{path} is not JSON: {exc}") from None


# -- drafting --------------------------------------------------------------------------------


class Draft:
    """The store as the changes drafted so far would leave it; reads go through it.

    Nothing is written: :meth:`plan` turns the draft into a :class:`Plan` holding, per
    key, the value in the store now (and its version) and the last drafted value.
    """

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._orig: dict[str, tuple[bytes | None, int | None]] = {}
        self._new: dict[str, bytes | None] = {}
        self._kind: dict[str, str] = {}
        self._why: dict[str, list[str]] = {}
        self.repairs: list[dict[str, Any]] = []
        self.unreachable = Unreachable()
        self.warnings: list[str] = []
        self.topics: list[str] = []
        #: bookie index entries to delete (:func:`bookie_index.draft_deletion`)
        self.bookie: list[BookieChange] = []
        #: ledgers written before the plan, which it swaps in (undo deletes them)
        self.written: list[Written] = []

    def _load(self, key: str) -> None:
        if key not in self._orig:
            node = self.store.get(key)
            self._orig[key] = (None, None) if node is None else (node.data, node.stat.version)

    def get(self, key: str) -> bytes | None:
        if key in self._new:
            return self._new[key]
        self._load(key)
        return self._orig[key][0]

    def set(self, key: str, kind: str, data: bytes, why: str) -> None:
        self._write(key, kind, bytes(data), why)

    def delete(self, key: str, kind: str, why: str) -> None:
        self._write(key, kind, None, why)

    def _write(self, key: str, kind: str, data: bytes | None, why: str) -> None:
        self._load(key)
        self._new[key] = data
        self._kind[key] = kind
        self._why.setdefault(key, []).append(why)

    def topic(self, name: str) -> None:
        if name not in self.topics:
            self.topics.append(name)

    def plan(self) -> Plan:
        changes = []
        for key, new in self._new.items():
            old, version = self._orig[key]
            if old == new:
                continue  # drafted back to what it was
            changes.append(Change(key, self._kind[key], old, new, version, self._why[key]))
        warnings = list(self.warnings)
        if changes and self.topics:
            warnings.insert(0, UNLOAD_WARNING)
        return Plan(
            metadata_url=self.store.url,
            changes=changes,
            repairs=list(self.repairs),
            unreachable=self.unreachable,
            warnings=warnings,
            topics=list(self.topics),
            bookie=list(self.bookie),
            written=list(self.written),
        )


# -- apply and undo --------------------------------------------------------------------------


def backup_path(plan_path: Path) -> Path:
    return plan_path.with_name(plan_path.name + BACKUP_SUFFIX)


@dataclass(slots=True)
class Outcome:
    """What apply or undo did, per key."""

    action: str  # "apply" or "undo"
    plan: str
    backup: str | None
    written: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "plan": self.plan,
            "backup": self.backup,
            "written": self.written,
            "skipped": self.skipped,
        }


def _check_store(plan: Plan, store: MetadataStore) -> None:
    if plan.metadata_url and plan.metadata_url != store.url:
        raise LedgerctlError(
            f"the plan was made for {plan.metadata_url}, not {store.url}: "
            "pass --metadata-url to name the store it was made for"
        )


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
    """The bookie indexes held open for writing (none when the plan has no bookie side)."""
    import contextlib

    return Writer(plan.bookie, store) if plan.bookie else contextlib.nullcontext()


def apply_plan(
    plan_path: Path, store: MetadataStore, *, after_step: AfterStep = _nothing
) -> Outcome:
    """Execute the plan saved at ``plan_path`` on ``store`` (open read-write).

    Every key must still hold the plan's old value at the plan's version, and every bookie
    index entry the plan deletes its exact old bytes (the bookie stopped), else
    :class:`MetadataConflict` (or :class:`BookieInUse`) and nothing is written. The old
    values go to the backup file beside the plan before anything is written; then one
    transaction commits every metadata change with compare-and-set, and then the bookie
    index entries are deleted (the hook sees ``bookie-<kind>`` after each).
    """
    plan = Plan.load(plan_path)
    _check_store(plan, store)
    outcome = Outcome("apply", str(plan_path), str(backup_path(plan_path)))
    if plan.empty:
        outcome.backup = None
        return outcome
    check_written(plan.written, store)
    current = []
    for change in plan.changes:
        node = store.get(change.key)
        if change.old is None:
            if node is not None:
                raise MetadataConflict(change.key, "exists now; the plan expects it absent")
        elif node is None:
            raise MetadataConflict(change.key, "no longer exists; nothing was written")
        elif node.stat.version != change.version or node.data != change.old:
            raise MetadataConflict(
                change.key,
                f"changed since the plan was made (version {node.stat.version}, the plan "
                f"read {change.version}); nothing was written: make a new plan",
            )
        current.append(None if node is None else node.stat.version)
    with _bookie_writer(plan, store) as bookie:
        if bookie is not None:
            bookie.check_planned()
        _write_json(
            backup_path(plan_path),
            {
                "format": PLAN_FORMAT + "-backup",
                "metadata_url": store.url,
                "values": [
                    {"key": c.key, "version": v, "sha256": sha256(c.old), "base64": _b64(c.old)}
                    for c, v in zip(plan.changes, current, strict=True)
                ],
                "bookie": [
                    {"key": c.key, "sha256": sha256(c.old), "base64": _b64(c.old)}
                    for c in plan.bookie
                ],
            },
        )
        after_step("backup")
        txn = store.transaction()
        for change in plan.changes:
            if change.new is None:
                txn.delete(change.key, change.version)
            elif change.old is None:
                txn.create(change.key, change.new)
            else:
                txn.set(change.key, change.new, change.version)
        _commit(txn, "changed while applying; nothing was written")
        after_step("commit")
        for change in plan.changes:
            outcome.written.append(
                {"key": change.key, "action": change.action, "sha256": sha256(change.new)}
            )
        if bookie is not None:
            outcome.written.extend(bookie.delete(after_step))
    after_step("record")
    return outcome


def _backup_olds(plan: Plan, bpath: Path) -> tuple[dict[str, bytes | None], dict[str, bytes]]:
    """The old values to restore: the backup's, else the plan's (metadata, bookie)."""
    olds: dict[str, bytes | None] = {c.key: c.old for c in plan.changes}
    bookie_olds: dict[str, bytes] = {c.key: c.old for c in plan.bookie}
    if not bpath.exists():
        return olds, bookie_olds
    backup = _read_json(bpath, "backup")
    try:
        for values, into in ((backup["values"], olds), (backup.get("bookie", []), bookie_olds)):
            for item in values:
                data = _unb64(item.get("base64"), f"backup of {item['key']}")
                if sha256(data) != item.get("sha256"):
                    raise LedgerctlError(f"backup {bpath}: {item['key']} does not match its sha256")
                if item["key"] not in into or (into is bookie_olds and data is None):
                    raise LedgerctlError(f"backup {bpath} names {item['key']}, the plan does not")
                into[item["key"]] = data
    except (KeyError, TypeError, AttributeError):
        raise LedgerctlError(f"{bpath} is not a ledgerctl backup") from None
    return olds, bookie_olds


def undo_plan(
    plan_path: Path, store: MetadataStore, *, after_step: AfterStep = _nothing
) -> Outcome:
    """Restore every key the plan changed to the value the backup holds.

    A key holding the value the apply wrote is restored with compare-and-set on its current
    version; a key already holding its old value is skipped; a key holding anything else
    (changed since the apply) aborts the undo with nothing written. Bookie index entries
    the apply deleted are written back first (exact bytes; the bookie stopped), then the
    metadata in one transaction.
    """
    plan = Plan.load(plan_path)
    _check_store(plan, store)
    bpath = backup_path(plan_path)
    olds, bookie_olds = _backup_olds(plan, bpath)
    outcome = Outcome("undo", str(plan_path), str(bpath) if bpath.exists() else None)
    txn = store.transaction()
    for change in plan.changes:
        old = olds[change.key]
        node = store.get(change.key)
        now = None if node is None else node.data
        if now == old:
            outcome.skipped.append({"key": change.key, "reason": "already holds its old value"})
            continue
        if now != change.new:
            raise DataError(
                f"{change.key} changed after the plan was applied (it holds neither the "
                "planned nor the old value); nothing was restored"
            )
        if old is None:
            assert node is not None
            txn.delete(change.key, node.stat.version)
        elif node is None:
            txn.create(change.key, old)
        else:
            txn.set(change.key, old, node.stat.version)
        outcome.written.append({"key": change.key, "action": "restore", "sha256": sha256(old)})
    with _bookie_writer(plan, store) as bookie:
        if bookie is not None:
            todo, skipped = bookie.check_restore(bookie_olds)
            outcome.skipped.extend(skipped)
            outcome.written.extend(bookie.restore(todo, after_step))
        _commit(txn, "changed while undoing; nothing was restored")
    after_step("commit")
    if plan.written:
        outcome.written.extend(delete_written(plan.written, store))
        after_step("written")
    return outcome
