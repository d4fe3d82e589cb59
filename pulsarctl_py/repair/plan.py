"""One plan mechanism for every write ledgerctl makes to a metadata store or, for a
stopped bookie, to its indexes.

A repair never writes directly: it drafts its changes on a :class:`Draft` (a view of the
store with the changes laid over it, so that several repairs can follow one another), and
the draft becomes a :class:`Plan`: every key it changes (znode path; for Pulsar's RocksDB
store the key is the same path), the value's current version, creation id and sha256, the
old and new bytes (base64) and their decoded text with a line diff, and what the change
makes unreachable (ledgers, entries, time range).

A plan file is untrusted input when it comes back (it may have been edited, or be
anything at all), so :meth:`Plan.load` reads it through :mod:`pulsarctl_py.documents`
(regular files only, size cap, no deep nesting) and refuses it unless

* its ``digest`` (sha256 over the rest of the document, canonical JSON) still matches:
  any edit is "plan was edited after it was made" (tamper evidence, not security: the
  digest is not secret);
* every key, kind, value and bookie path is one the plan can be for (:mod:`.validate`).

Apply (and undo, for what it restores) checks the plan against what the store holds
before anything is written (:mod:`.references`): every ledger its values add exists and
is the topic's.

:func:`apply_plan` executes exactly that plan, on the store it was made for only
(:mod:`.binding`: its absolute URL, the store's identity, the bookie directories'
identity): it checks every key's version, creation id and bytes (a key deleted and
created again with the same bytes is a conflict), writes a record with every old value
beside the plan file (``PLAN.backup.json``, the backup), then commits all changes in one
transaction with compare-and-set on every key (ZooKeeper ``multi`` with versions; RocksDB
one WriteBatch checked under the store's lock); a change whose old and new bytes are the
same is a ``check`` (its version checked in the transaction, nothing written: what a
judgment in the plan was made on). Any conflict aborts with nothing written.
Applying a plan whose changes all hold already says "already applied" and writes nothing
(exit 0); after a crash between the metadata commit and the bookie side, applying again
finishes the bookie side. :func:`undo_plan` restores the old values with compare-and-set
against the values the apply wrote; a key already holding its old value is left alone. A
plan that was never applied (no backup, every key at its old value) is refused; one whose
apply found every change in place (recorded "unchanged") restores nothing. Both return an
:class:`Outcome`: the keys written, unchanged and refused, each with why.

A plan may also delete a ledger's entries in a stopped bookie's indexes (``bookie``;
:mod:`.bookie_index`): checked byte for byte before anything is written, backed up in the
same backup file, deleted after the metadata transaction commits, and written back first
by undo.

Metadata writes need the topics unloaded (formats.md §8.3): the owning broker caches the
state and rewrites the znodes on every ledger roll and cursor close.

For other writers (a compaction plan: new ledgers written first, then the ``__compaction``
cursor changed): draft the metadata changes on a :class:`Draft` (``set``/``delete``, each
with its kind; a new ledger's metadata is a ``create`` of kind ``ledger``), record what the
writer made in ``draft.repairs`` (as ``migrate`` does with ``written_ledger``), and save
with :meth:`Plan.save` through an output prepared with :func:`pulsarctl_py.outputs.prepare`
before the work; :func:`apply_plan` and :func:`undo_plan` then give binding, validation,
compare-and-set, the backup record, "already applied" and undo for free. A new kind of
change needs its key rule and value check in :mod:`.validate`, and the ledgers its value
names in :mod:`.references`.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import DataError, LedgerctlError
from pulsarctl_py.stores.metadata.base import MetadataConflict, MetadataStore, Node

from .binding import DEFAULT_ROOTS, Binding, check_binding
from .bookie_index import BookieChange, Writer
from .references import Problem, ReferenceRefused, Step, problems
from .validate import validate_bookie_change, validate_change
from .written import Written, check_written, delete_written, validate_written

if TYPE_CHECKING:
    from pulsarctl_py.outputs import Output

PLAN_FORMAT = "ledgerctl-plan"
#: 3: bound to its store, a digest, creation ids (1 and 2 had none of these: refused)
PLAN_VERSION = 3
BACKUP_FORMAT = PLAN_FORMAT + "-backup"
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
        if version is not None and (
            isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 2**63
        ):
            raise LedgerctlError(f"plan: the version of {key} is not a version number")
        creation = obj.get("creation")
        if creation is not None and not isinstance(creation, str):
            raise LedgerctlError(f"plan: the creation id of {key} is not text")
        if not isinstance(why, list) or not all(isinstance(w, str) for w in why):
            raise LedgerctlError(f"plan: the reasons of {key} are not a list of text")
        old = _unb64(obj.get("old_base64"), f"{key} old_base64")
        new = _unb64(obj.get("new_base64"), f"{key} new_base64")
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
    #: the store it was made for (None only for a plan built by hand in a test)
    binding: Binding | None = None
    #: the digest it was loaded with (set by :meth:`from_json`)
    digest: str | None = None
    #: ledgers the command wrote before the plan (undo deletes them; see written)
    written: list[Written] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.changes and not self.bookie

    def to_json(self) -> dict[str, Any]:
        from pulsarctl_py.timeparse import format_time_ms

        binding = self.binding or Binding(self.metadata_url)
        body = {
            "format": PLAN_FORMAT,
            "version": PLAN_VERSION,
            "created": format_time_ms(self.created_ms),
            "metadata_url": binding.metadata_url,
            "store": binding.to_json(),
            "topics": list(self.topics),
            "repairs": list(self.repairs),
            "warnings": list(self.warnings),
            "unreachable": self.unreachable.to_json(),
            "changes": [c.to_json() for c in self.changes],
            "bookie": [c.to_json() for c in self.bookie],
        }
        if self.written:
            body["written"] = [w.to_json() for w in self.written]
        digest = document_digest(body)
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "digest": digest, **body}

    @classmethod
    def from_json(cls, obj: Any) -> Plan:
        """The plan in ``obj``, refused unless its digest holds and every change is one
        it can be for (:mod:`.validate`)."""
        if not isinstance(obj, dict) or obj.get("format") != PLAN_FORMAT:
            raise LedgerctlError(f'not a ledgerctl plan (no "format": "{PLAN_FORMAT}")')
        version = obj.get("version")
        if version in (1, 2):
            raise LedgerctlError(
                f"plan format version {version} was made by an older ledgerctl, without the "
                "store it is for or a digest: make the plan again"
            )
        if version != PLAN_VERSION:
            raise LedgerctlError(f"plan format version {version!r} is not supported")
        digest = obj.get("digest")
        if not isinstance(digest, str) or digest != document_digest(obj):
            raise PlanEdited(
                "plan was edited after it was made (its digest does not match its content): "
                "refused; make the plan again"
            )
        raw_changes, raw_bookie = obj.get("changes", []), obj.get("bookie", [])
        if not isinstance(raw_changes, list) or not isinstance(raw_bookie, list):
            raise LedgerctlError('plan: "changes" or "bookie" is not a list')
        changes = [Change.from_json(c) for c in raw_changes]
        bookie = [BookieChange.from_json(c) for c in raw_bookie]
        keys = [c.key for c in changes] + [c.key for c in bookie]
        if len(set(keys)) != len(keys):
            raise LedgerctlError("plan: a key appears twice")
        url = obj.get("metadata_url", "")
        if not isinstance(url, str) or not url:
            raise LedgerctlError('plan: "metadata_url" is not text')
        raw_written = obj.get("written", [])
        if not isinstance(raw_written, list):
            raise LedgerctlError('plan: "written" is not a list')
        written = [Written.from_json(w) for w in raw_written]
        binding = Binding.from_json(
            url, obj.get("store"), empty=not changes and not bookie and not written
        )
        for change in changes:
            validate_change(change, binding.roots)
        for bc in bookie:
            validate_bookie_change(bc, binding)
        for w in written:
            validate_written(w, binding)

        def texts(name: str) -> list[str]:
            value = obj.get(name, [])
            return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

        repairs = obj.get("repairs", [])
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
            binding=binding,
            digest=digest,
            written=written,
        )

    def write(self, out: Output) -> None:
        """Write the plan to a prepared output (see :func:`pulsarctl_py.outputs.prepare`)."""
        _write_document(out, self.to_json(), "plan")

    def save(self, path: Path, *, force: bool = False) -> None:
        """Write the plan to ``path`` (an output of kind plan: see :mod:`pulsarctl_py.outputs`)."""
        from pulsarctl_py import outputs

        self.write(outputs.prepare(path, outputs.PLAN, force=force))

    @classmethod
    def load(cls, path: Path) -> Plan:
        from pulsarctl_py.documents import load_document

        return cls.from_json(load_document(path, "plan"))


class PlanEdited(LedgerctlError):
    """A plan whose content no longer matches its digest (exit 2)."""


def document_digest(doc: dict[str, Any]) -> str:
    """sha256 of the document without its ``digest``, as canonical JSON (sorted keys,
    ASCII, no spaces): the same for the document saved and for the one read back."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    try:
        text = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not a JSON document at all: cannot match
        return ""
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _write_document(out: Output, obj: Any, what: str) -> None:
    """A JSON document, indented for people, to a prepared output; a plan too large to be
    read back is refused before it is written."""
    from pulsarctl_py.documents import ENV_MAX_SIZE, max_document_size

    text = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # text that is not Unicode (lone surrogates): escape it
        data = (json.dumps(obj, indent=2, ensure_ascii=True) + "\n").encode("ascii")
    if len(data) > max_document_size():
        out.discard()
        raise LedgerctlError(
            f"the {what} would be {len(data)} bytes, more than the {max_document_size()} a "
            f"{what} may hold (set {ENV_MAX_SIZE} to raise the limit; the same value is "
            "needed to read it back)"
        )
    out.write_bytes(data)


# -- drafting --------------------------------------------------------------------------------


class Draft:
    """The store as the changes drafted so far would leave it; reads go through it.

    Nothing is written: :meth:`plan` turns the draft into a :class:`Plan` holding, per
    key, the value in the store now (its version and creation id) and the last drafted
    value, bound to the store (and to the bookie directories in ``bookie_dirs``).
    """

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._orig: dict[str, Node | None] = {}
        self._new: dict[str, bytes | None] = {}
        self._kind: dict[str, str] = {}
        self._why: dict[str, list[str]] = {}
        self.repairs: list[dict[str, Any]] = []
        self.unreachable = Unreachable()
        self.warnings: list[str] = []
        self.topics: list[str] = []
        #: bookie index entries to delete (:func:`bookie_index.draft_deletion`)
        self.bookie: list[BookieChange] = []
        #: the stopped bookies' ledger dirs the bookie changes are in (bound to the plan)
        self.bookie_dirs: set[Path] = set()
        #: ledgers written before the plan, which it swaps in (undo deletes them)
        self.written: list[Written] = []

    def ledgers_root(self) -> str:
        """The root of BookKeeper's ledger metadata in this store (``/ledgers`` unless the
        cluster keeps it elsewhere: ``bookkeeperMetadataServiceUri``). A plan reads and
        changes keys of one store only: ledger metadata kept in another store is refused."""
        place = self.store.bookkeeper()
        if place.store is not self.store:
            raise LedgerctlError(
                f"BookKeeper's metadata is in another store ({place.url}) than the topics' "
                f"({self.store.url}): a plan that reads or changes ledger metadata needs both "
                "in one store (another root of the same store is fine)"
            )
        return place.root

    def _load(self, key: str) -> None:
        if key not in self._orig:
            self._orig[key] = self.store.get(key)

    def get(self, key: str) -> bytes | None:
        if key in self._new:
            return self._new[key]
        self._load(key)
        node = self._orig[key]
        return None if node is None else node.data

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
            node = self._orig[key]
            old = None if node is None else node.data
            if old == new:
                continue  # drafted back to what it was
            changes.append(
                Change(
                    key,
                    self._kind[key],
                    old,
                    new,
                    None if node is None else node.stat.version,
                    self._why[key],
                    None if node is None else node.stat.creation,
                )
            )
        warnings = list(self.warnings)
        if changes and self.topics:
            warnings.insert(0, UNLOAD_WARNING)
        dirs = self.bookie_dirs | {Path(w.files["current"]) for w in self.written if w.files}
        binding = Binding.of(self.store, sorted(dirs))
        return Plan(
            metadata_url=binding.metadata_url,
            changes=changes,
            repairs=list(self.repairs),
            unreachable=self.unreachable,
            warnings=warnings,
            topics=list(self.topics),
            bookie=list(self.bookie),
            binding=binding,
            written=list(self.written),
        )


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
        try:
            held = {
                item["key"]: item.get("sha256")
                for item in [*doc.get("values", []), *doc.get("bookie", [])]
            }
        except (KeyError, TypeError, AttributeError):
            raise LedgerctlError(f"{bpath} is not a ledgerctl plan backup") from None
        if held != olds:
            raise LedgerctlError(f"backup {bpath} does not hold the plan's old values: refused")
        applied = doc.get("applied")
        raw = doc.get("restores_broken", [])
        broken = [p for p in map(Problem.from_json, raw if isinstance(raw, list) else []) if p]
        return cls(status, plan.digest or "", applied if isinstance(applied, str) else None, broken)


def _write_record(
    bpath: Path, plan: Plan, status: str, applied: str | None, broken: list[Problem]
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
                "base64": _b64(c.old),
            }
            for c in plan.changes
        ],
        "bookie": [
            {"key": c.key, "sha256": sha256(c.old), "base64": _b64(c.old)} for c in plan.bookie
        ],
        # what the old values pointed at that did not hold when the apply ran
        "restores_broken": [p.to_json() for p in broken],
    }
    _write_document(outputs.prepare(bpath, outputs.BACKUP), doc, "plan backup")


def _now_text() -> str:
    from pulsarctl_py.timeparse import format_time_ms

    return format_time_ms(time.time_ns() // 1_000_000)


# -- apply and undo --------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """What apply or undo did, per key: what it wrote, what already held the value it
    wanted (unchanged, not written), and what it refused and why (then nothing is written,
    and the error carries this outcome as ``outcome``)."""

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

    @property
    def keys_written(self) -> list[dict[str, Any]]:
        """The written keys of the plan itself (not the ledgers it wrote, deleted by undo)."""
        return [w for w in self.written if "written_ledger" not in w]

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "plan": self.plan,
            "backup": self.backup,
            "written": self.written,
            "unchanged": self.unchanged,
            "refused": self.refused,
            "note": self.note,
        }


def _refuse(outcome: Outcome, exc: LedgerctlError) -> None:
    """Record the refusal ``exc`` in ``outcome`` and give the error the outcome."""
    key = getattr(exc, "key", None) or getattr(exc, "path", None)
    entry: dict[str, Any] = {"key": key if isinstance(key, str) else None}
    problem = getattr(exc, "problem", None)
    if isinstance(problem, Problem):
        entry["ledger_id"] = problem.ledger_id
        entry["problem"] = problem.code
    entry["reason"] = exc.one_line()
    outcome.refused.append(entry)
    exc.outcome = outcome  # type: ignore[attr-defined]


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
    plan_path: Path, store: MetadataStore, *, after_step: AfterStep = _nothing
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
    """
    plan = _load_bound(plan_path, store)
    bpath = backup_path(plan_path)
    record = Record.read(bpath, plan)
    outcome = Outcome("apply", str(plan_path), str(bpath))
    try:
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
    _write_record(bpath, plan, APPLIED, _now_text(), broken)
    after_step("record")


def _forget_written(plan: Plan, plan_path: Path, store: MetadataStore) -> None:
    """The plan is applied: the records that kept its ledgers from being judged leftovers
    (:mod:`pulsarctl_py.leases`) go; the ledgers are referenced now."""
    if plan.written:
        from pulsarctl_py.leases import forget

        forget(store, [w.ledger_id for w in plan.written], plan_path)


def _holds_any_planned(plan: Plan, store: MetadataStore) -> bool:
    """Whether some key the plan writes (checks aside) holds the value it plans."""
    return any(c.action != "check" and _holds_new(c, store.get(c.key)) for c in plan.changes)


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
    for change in plan.changes:
        old = change.old
        node = store.get(change.key)
        now = None if node is None else node.data
        if now == old:
            outcome.unchanged.append({"key": change.key, "reason": "already holds its old value"})
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
        restores.append({"key": change.key, "action": "restore", "sha256": sha256(old)})
        steps.append(Step(change.key, change.kind, change.new, change.old))
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
