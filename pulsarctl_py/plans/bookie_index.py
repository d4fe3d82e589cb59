"""The bookie side of a plan: a ledger's index entries in an offline bookie's storage.

Deleting an orphan ledger's metadata leaves its entries to the bookies' garbage collector,
which needs the bookie running. For a bookie that is offline (its directories given with
``--bookie-dir``) a plan also removes the ledger from the bookie's indexes, as the
bookie's own ``deleteLedger`` does:

* DbLedgerStorage: every ``(ledger, entry)`` key of the ledger in the ``locations`` RocksDB
  index, then its ``LedgerData`` key in ``ledgers`` (formats.md §11; keys and values as
  :mod:`pulsarctl_py.stores.bookie.rocks` reads them), in the order of BookKeeper's
  ``SingleDirectoryDbLedgerStorage.deleteLedger``;
* Interleaved/SortedLedgerStorage: the ledger's ``.idx`` file, as
  ``IndexPersistenceMgr.removeLedger`` deletes it.

The entry log bytes stay: entry log compaction drops the entries of ledgers the bookie no
longer knows. Every change records the exact bytes it removes (the RocksDB values, the
whole ``.idx`` file) and their sha256, which apply compares before writing anything
(compare-and-set) and undo writes back.

Writes refuse while the bookie holds its RocksDB lock or is registered as available, like
``compact --apply``; the RocksDB databases stay open (locked) from the check to the last
write, so a bookie cannot start in between. A repair drafts the deletions with
:func:`pulsarctl_py.plans.draft.draft_deletion`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import DataError, LedgerctlError
from pulsarctl_py.stores.metadata.base import MetadataConflict

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata.base import MetadataStore

#: ``ledgers`` RocksDB value, ``locations`` RocksDB keys of one ledger, a ``.idx`` file
KINDS = ("ledger-data", "locations", "index-file")
#: the apply and undo step names the test hook sees after each bookie-side write
STEP_PREFIX = "bookie-"
#: one ``locations`` record as a change holds it: the 16-byte key, then the 8-byte value
_RECORD = 24
DOING = "changing its indexes"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(slots=True)
class BookieChange:
    """One ledger's entries in one index of one ledger dir, deleted by the plan.

    ``path``: the RocksDB database (``ledgers/``, ``locations/``) or the ``.idx`` file;
    ``current``: the ledger dir whose lock is checked. ``old``: the exact bytes removed
    (the LedgerData value; the locations records, 24 bytes each; the file).
    """

    kind: str
    current: str
    path: str
    ledger_id: int
    old: bytes
    why: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.path}#{self.ledger_id}" if self.kind != "index-file" else self.path

    @property
    def step(self) -> str:
        return STEP_PREFIX + self.kind

    def records(self) -> list[tuple[bytes, bytes]]:
        """The RocksDB (key, value) pairs this change deletes."""
        from pulsarctl_py.stores.bookie.rocks import ledger_key

        if self.kind == "ledger-data":
            return [(ledger_key(self.ledger_id), self.old)]
        if self.kind == "locations":
            return [
                (self.old[i : i + 16], self.old[i + 16 : i + _RECORD])
                for i in range(0, len(self.old), _RECORD)
            ]
        return []

    def decoded(self) -> dict[str, Any]:
        """What the removed bytes say, for people (never the bytes themselves)."""
        from pulsarctl_py.decoders import index_file
        from pulsarctl_py.decoders.entrylog import split_location
        from pulsarctl_py.stores.bookie.indexes import parse_ledger_data
        from pulsarctl_py.stores.bookie.rocks import decode_location_item

        def spans(locations: list[tuple[int, int]]) -> dict[str, Any]:
            entries = [e for e, _ in locations]
            return {
                "entries": len(entries),
                "first_entry": min(entries, default=None),
                "last_entry": max(entries, default=None),
                "entry_logs": sorted({split_location(loc)[0] for _, loc in locations}),
            }

        try:
            if self.kind == "ledger-data":
                record = parse_ledger_data(self.ledger_id, self.old, "rocksdb", Path(self.path))
                return {
                    "exists": record.exists,
                    "fenced": record.fenced,
                    "master_key": f"{len(record.master_key or b'')} bytes",
                    "explicit_lac": record.explicit_lac is not None,
                    "limbo": record.limbo,
                }
            if self.kind == "locations":
                pairs = [decode_location_item(k, v) for k, v in self.records()]
                return spans([(e, loc) for _, e, loc in pairs])
            header = index_file.parse_header(self.old[: index_file.START_OF_DATA])
            slots = self.old[index_file.START_OF_DATA :]
            return {
                "size": len(self.old),
                "fenced": header.fenced,
                "master_key": f"{len(header.master_key)} bytes",
                "explicit_lac": header.explicit_lac is not None,
                **spans(list(index_file.parse_locations(slots))),
            }
        except LedgerctlError as exc:
            return {"error": exc.one_line(), "size": len(self.old)}

    def summary(self) -> str:
        """One line: what is deleted where."""
        d = self.decoded()
        what = {
            "ledger-data": "LedgerData (ledgers index)",
            "locations": "entry locations (locations index)",
            "index-file": "index file",
        }[self.kind]
        if "entries" in d:
            logs = d["entry_logs"]
            span = (
                f"{d['entries']} entr{'ies' if d['entries'] != 1 else 'y'} "
                f"{d['first_entry']}..{d['last_entry']} in entry "
                f"log{'s' if len(logs) != 1 else ''} {', '.join(map(str, logs))}"
                if d["entries"]
                else "no entries"
            )
            what += f": {span}"
        elif "exists" in d:
            what += f": exists={d['exists']} fenced={d['fenced']}"
        return f"ledger {self.ledger_id}: {what}"

    def removes(self) -> dict[str, Any]:
        """The keys (or the file) this change deletes, named as the index names them: a
        ``locations`` key is (ledger id, entry id), two big-endian 64-bit integers; a
        ``ledgers`` key is the ledger id, one."""
        if self.kind == "index-file":
            return {"file": self.path, "text": f"the file {self.path}"}
        keys = [key for key, _ in self.records()]
        if self.kind == "ledger-data":
            return {
                "database": self.path,
                "count": 1,
                "keys": [keys[0].hex()],
                "text": f"key {keys[0].hex()} (ledger {self.ledger_id}) from {self.path}",
            }
        entries = sorted(int.from_bytes(k[8:16], "big", signed=True) for k in keys)
        runs: list[list[int]] = []
        for e in entries:
            if runs and e == runs[-1][1] + 1:
                runs[-1][1] = e
            else:
                runs.append([e, e])
        shown = [f"{a}" if a == b else f"{a}..{b}" for a, b in runs[:8]]
        if len(runs) > 8:
            shown.append(f"... ({len(runs) - 8} more runs)")
        first, last = keys[0].hex(), keys[-1].hex()
        return {
            "database": self.path,
            "count": len(keys),
            "entries": [[a, b] for a, b in runs],
            "first_key": first,
            "last_key": last,
            "text": f"{len(keys)} key{'s' if len(keys) != 1 else ''} (ledger "
            f"{self.ledger_id}, entr{'ies' if len(entries) != 1 else 'y'} {', '.join(shown)}; "
            f"{first}" + (f" .. {last}" if last != first else "") + f") from {self.path}",
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "action": "delete",
            "ledger_id": self.ledger_id,
            "current": self.current,
            "path": self.path,
            "old_sha256": _sha256(self.old),
            "why": list(self.why),
            "removes": self.removes(),
            "summary": self.summary(),
            "old": self.decoded(),
            "old_base64": base64.b64encode(self.old).decode("ascii"),
        }

    @classmethod
    def from_json(cls, obj: Any) -> BookieChange:
        if not isinstance(obj, dict):
            raise LedgerctlError("plan: a bookie change is not a JSON object")
        kind, current, path, ledger_id = (
            obj.get(k) for k in ("kind", "current", "path", "ledger_id")
        )
        if (
            kind not in KINDS
            or not isinstance(current, str)
            or not isinstance(path, str)
            or isinstance(ledger_id, bool)
            or not isinstance(ledger_id, int)
        ):
            raise LedgerctlError("plan: a bookie change lacks its kind, path or ledger")
        if obj.get("action", "delete") != "delete":
            raise LedgerctlError(f"plan: {path}: bookie changes only delete")
        for name in (path, current):
            if not os.path.isabs(name) or os.path.normpath(name) != name or "\x00" in name:
                raise LedgerctlError(f"plan: {name!r}: bookie paths must be absolute and plain")
        why = obj.get("why", [])
        if not isinstance(why, list) or not all(isinstance(w, str) for w in why):
            raise LedgerctlError(f"plan: the reasons of {path} are not a list of text")
        text = obj.get("old_base64")
        try:
            old = base64.b64decode(str(text).encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            raise LedgerctlError(f"plan: {path}: old_base64 is not valid base64") from None
        if not isinstance(text, str) or obj.get("old_sha256") != _sha256(old):
            raise LedgerctlError(f"plan: the old value of {path} does not match its sha256")
        if not old or (kind == "locations" and len(old) % _RECORD):
            raise LedgerctlError(f"plan: {path}: the old value of ledger {ledger_id} is malformed")
        return cls(kind, current, path, ledger_id, old, list(why))


# -- reading --------------------------------------------------------------------------------


def _read_db(path: Path, ledger_ids: list[int], kind: str) -> dict[int, bytes]:
    """Each ledger's bytes in one ``ledgers`` or ``locations`` database (opened once)."""
    from pulsarctl_py.stores.bookie.rocks import ReadOnlyRocksDB, ledger_key, location_key

    found: dict[int, bytes] = {}
    db = ReadOnlyRocksDB(path)
    try:
        for ledger_id in ledger_ids:
            if kind == "ledger-data":
                value = db.get(ledger_key(ledger_id))
            else:
                low, high = location_key(ledger_id, 0), location_key(ledger_id + 1, 0)
                value = b"".join(k + v for k, v in db.items(low, high)) or None
            if value is not None:
                found[ledger_id] = value
    finally:
        db.close()
    return found


def find_index_entries(current: Path, ledger_ids: Iterable[int]) -> list[BookieChange]:
    """What the ledger dir ``current`` indexes of ``ledger_ids``, as deletions: per ledger,
    in the bookie's own deleteLedger order (its locations, then its LedgerData record: a
    crash between leaves a ledger the bookie still lists, so its GC finishes the job)."""
    from pulsarctl_py.decoders import index_file
    from pulsarctl_py.stores.bookie.rocks import is_rocksdb_dir

    ids = list(ledger_ids)
    held = {
        kind: _read_db(current / name, ids, kind) if is_rocksdb_dir(current / name) else {}
        for kind, name in (("locations", "locations"), ("ledger-data", "ledgers"))
    }
    found = []
    for ledger_id in ids:
        for kind, name in (("locations", "locations"), ("ledger-data", "ledgers")):
            if ledger_id in held[kind]:
                db = str(current / name)
                found.append(BookieChange(kind, str(current), db, ledger_id, held[kind][ledger_id]))
        idx = current / index_file.ledger_index_path(ledger_id)
        if idx.is_file():
            try:
                old = idx.read_bytes()
            except OSError as exc:
                raise LedgerctlError(f"cannot read {idx}: {exc.strerror or exc}") from None
            found.append(BookieChange("index-file", str(current), str(idx), ledger_id, old))
    return found


# -- apply and undo ------------------------------------------------------------------------


def _conflict(change: BookieChange, message: str) -> MetadataConflict:
    return MetadataConflict(change.key, message)


class Writer:
    """The bookie side of one apply or undo: databases held open (locked) throughout
    (apply checks each place first: :func:`~.validate.check_bookie_place`)."""

    def __init__(self, changes: list[BookieChange], store: MetadataStore) -> None:
        self.changes = changes
        self.store = store
        self._stack = contextlib.ExitStack()
        self._dbs: dict[str, Any] = {}

    def __enter__(self) -> Writer:
        from pulsarctl_py.stores.bookie.newledger import check_bookie_free, writable_rocksdb

        try:
            for current in sorted({c.current for c in self.changes}):
                check_bookie_free(Path(current), self.store, DOING)
            for path in sorted({c.path for c in self.changes if c.kind != "index-file"}):
                self._dbs[path] = self._stack.enter_context(writable_rocksdb(Path(path)))
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def now(self, change: BookieChange) -> bytes | None:
        """The bytes the change's place holds now, in the change's form (None: absent)."""
        if change.kind == "index-file":
            try:
                return Path(change.path).read_bytes()
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise LedgerctlError(f"cannot read {change.path}: {exc.strerror or exc}") from None
        db = self._dbs[change.path]
        if change.kind == "ledger-data":
            value = db.get(change.records()[0][0])
            return None if value is None else bytes(value)
        from pulsarctl_py.stores.bookie.rocks import location_key

        high = location_key(change.ledger_id + 1, 0)
        held = []
        for key, value in db.items(from_key=location_key(change.ledger_id, 0)):
            if bytes(key) >= high:
                break
            held.append(bytes(key) + bytes(value))
        return b"".join(held) or None

    def check_planned(self, changes: list[BookieChange] | None = None) -> None:
        """Every place (of ``changes``, default all) still holds exactly what the plan
        read, else a conflict."""
        for change in self.changes if changes is None else changes:
            if self.now(change) != change.old:
                raise _conflict(
                    change,
                    f"ledger {change.ledger_id}'s {change.kind} changed since the plan was "
                    "made; nothing was written: make a new plan",
                )

    def delete(
        self, after_step: Callable[[str], None], changes: list[BookieChange] | None = None
    ) -> list[dict[str, Any]]:
        """Delete what ``changes`` (default all) name, in order; the hook after each."""
        from rocksdict import WriteBatch

        written = []
        for change in self.changes if changes is None else changes:
            if change.kind == "index-file":
                os.unlink(change.path)
            else:
                batch = WriteBatch(raw_mode=True)
                for key, _ in change.records():
                    batch.delete(key)
                self._dbs[change.path].write(batch)
            written.append({"key": change.key, "action": "delete", "sha256": None})
            after_step(change.step)
        return written

    def check_restore(
        self, olds: dict[str, bytes]
    ) -> tuple[list[tuple[BookieChange, bytes]], list[dict[str, Any]]]:
        """What undo writes back: (change, old bytes) for each place the apply emptied,
        and the places already holding their old bytes. A place holding anything else
        aborts the undo (nothing is written yet)."""
        todo, skipped = [], []
        for change in self.changes:
            now, old = self.now(change), olds[change.key]
            if now == old:
                skipped.append({"key": change.key, "reason": "already holds its old value"})
            elif now is None:
                todo.append((change, old))
            else:
                raise DataError(
                    f"{change.key} changed after the plan was applied (it holds neither the "
                    "planned nor the old value); nothing was restored"
                )
        return todo, skipped

    def restore(
        self, todo: list[tuple[BookieChange, bytes]], after_step: Callable[[str], None]
    ) -> list[dict[str, Any]]:
        """Put back the bytes :meth:`check_restore` found missing."""
        from rocksdict import WriteBatch

        written = []
        for change, old in reversed(todo):  # the reverse of apply's order
            if change.kind == "index-file":
                _write_file(Path(change.path), old)
            else:
                batch = WriteBatch(raw_mode=True)
                kind, path = change.kind, change.path
                again = BookieChange(kind, change.current, path, change.ledger_id, old)
                for key, value in again.records():
                    batch.put(key, value)
                self._dbs[change.path].write(batch)
            written.append({"key": change.key, "action": "restore", "sha256": _sha256(old)})
            after_step(change.step)
        return written


def _write_file(path: Path, data: bytes) -> None:
    """Create ``path`` holding exactly ``data`` (temp file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".ledgerctl-tmp")
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise LedgerctlError(f"cannot write {path}: {exc.strerror or exc}") from None


def iter_steps(changes: Iterable[BookieChange]) -> Iterator[str]:
    """The hook's step names for these changes, in order, once each."""
    seen: set[str] = set()
    for change in changes:
        if change.step not in seen:
            seen.add(change.step)
            yield change.step
