"""The values a bookie store returns: locations, ledger facts, entries and findings."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders.entrylog import make_location
from pulsarctl_py.decoders.errors import NotFoundError, StoreUnavailable
from pulsarctl_py.decoders.nodes import Problem

#: where a location came from, strongest first
SOURCES = ("rocksdb", "idx", "scan", "journal")


class EntryNotFound(NotFoundError):
    """The bookie holds no such ledger or entry."""

    def __init__(self, ledger_id: int, entry_id: int | None = None) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        what = (
            f"ledger {ledger_id}" if entry_id is None else f"entry {entry_id} of ledger {ledger_id}"
        )
        super().__init__(f"{what} is not on this bookie")


class BookieDirError(StoreUnavailable):
    """A --bookie-dir that holds no bookie data or cannot be opened (exit code 3)."""


@dataclass(frozen=True, slots=True)
class Location:
    """Where one entry's bytes are: an entry log (or, for the journal tail, a journal).

    ``offset`` is the position of the entry itself, 4 bytes after its size field.
    ``source`` says which index gave it: rocksdb, idx, scan or journal.
    """

    source: str
    path: Path
    file_id: int
    offset: int
    size: int | None = None

    @property
    def in_journal(self) -> bool:
        return self.source == "journal"

    @property
    def packed(self) -> int | None:
        """``(log_id << 32) | offset`` as the indexes store it; None for the journal."""
        return None if self.in_journal else make_location(self.file_id, self.offset)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "file": self.path.name,
            "offset": self.offset,
        }
        if self.in_journal:
            out["journal_id"] = self.file_id
        else:
            out["entry_log_id"] = self.file_id
            out["location"] = self.packed
        if self.size is not None:
            out["size"] = self.size
        return out


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """One entry as the bookie stores it: the raw digest-packed bytes and their location.
    ``verified``: the store checked the entry's ids and digest against its ledger's digest
    type and password when it read it, and they verified (a live read does; a reader of
    the entry need not check them again)."""

    ledger_id: int
    entry_id: int
    location: Location
    data: bytes
    verified: bool = False


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """What one index knows about a ledger (``ledgers`` LedgerData or an ``.idx`` header).

    ``None`` means unknown: a ledger rebuilt by scanning entry logs has no master key or
    fence state.
    """

    ledger_id: int
    exists: bool
    fenced: bool | None
    master_key: bytes | None
    explicit_lac: bytes | None
    limbo: bool | None
    source: str
    path: Path | None


_LAC = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    """A ledger as this bookie sees it, after replaying the journal tail."""

    ledger_id: int
    exists: bool
    fenced: bool | None
    master_key: bytes | None
    explicit_lac: bytes | None
    limbo: bool | None
    last_entry_id: int | None
    source: str
    path: Path | None = None

    @property
    def explicit_lac_value(self) -> int | None:
        """The LAC inside the explicit-LAC packet (``[ledgerId][lac][digest]``)."""
        if self.explicit_lac is None or len(self.explicit_lac) < _LAC.size:
            return None
        return _LAC.unpack_from(self.explicit_lac, 0)[1]

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "exists": self.exists,
            "fenced": self.fenced,
            # the master key is derived from the ledger password: never shown, only known
            "has_master_key": None if self.master_key is None else bool(self.master_key),
            "explicit_lac": None if self.explicit_lac is None else self.explicit_lac.hex(),
            "explicit_lac_value": self.explicit_lac_value,
            "limbo": self.limbo,
            "last_entry_id": self.last_entry_id,
            "source": self.source,
        }


@dataclass(frozen=True, slots=True)
class EntryLogInfo:
    """One entry log file. ``header`` is None when it could not be read (see ``problem``)."""

    log_id: int
    path: Path
    size: int
    header_version: int | None
    ledgers_map_offset: int
    ledgers_count: int
    header_size: int
    problem: str | None = None

    @property
    def has_ledgers_map(self) -> bool:
        return bool(self.header_version) and self.ledgers_map_offset > 0

    @property
    def empty(self) -> bool:
        """A preallocated 0-byte log: BookKeeper writes the header lazily."""
        return self.size == 0


@dataclass(frozen=True, slots=True)
class JournalInfo:
    """One journal file and where replay starts in it (None: it is entirely before lastMark)."""

    journal_id: int
    path: Path
    size: int
    version: int | None
    replay_from: int | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """One inconsistency between the indexes and the entry logs.

    kinds: ``in-log-not-in-index``, ``in-index-not-in-log``, ``stale-copy`` (the log holds
    a copy the index does not point to, normal until garbage collection),
    ``journal-only`` (entry only in the journal tail), ``unusable-index``.
    """

    kind: str
    ledger_id: int | None
    entry_id: int | None
    location: Location | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "location": None if self.location is None else self.location.to_json(),
            "message": self.message,
        }


@dataclass(slots=True)
class ConsistencyReport:
    """Entries in logs but not in the index and the reverse, plus problems met on the way."""

    findings: list[Finding] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    entries_in_logs: int = 0
    entries_in_index: int = 0

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def ok(self) -> bool:
        bad = {"in-log-not-in-index", "in-index-not-in-log", "unusable-index"}
        return not self.problems and not any(f.kind in bad for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "entries_in_logs": self.entries_in_logs,
            "entries_in_index": self.entries_in_index,
            "findings": [f.to_json() for f in self.findings],
            "problems": [p.to_json() for p in self.problems],
        }
