"""The ways a bookie finds an entry: RocksDB indexes, ``.idx`` files, a scan, the journal.

Each source answers the same questions for the store: which ledgers, what it knows about a
ledger, where an entry is, the locations of a range of entries in order, the last entry.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from google.protobuf.message import DecodeError

from pulsarctl_py.decoders import index_file, journal
from pulsarctl_py.decoders._readat import ReadAt
from pulsarctl_py.decoders.entrylog import (
    HEADER_SIZE,
    log_file_name,
    scan_records,
    split_location,
)
from pulsarctl_py.decoders.errors import CorruptEntryError
from pulsarctl_py.decoders.nodes import Problem
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.proto.bookkeeper_data_formats_pb2 import LedgerData

from .files import FileCache
from .model import BookieDirError, JournalInfo, LedgerRecord, Location
from .rocks import (
    LOCATION_KEY,
    LOCATION_VALUE,
    MAX_ID,
    ReadOnlyRocksDB,
    decode_location_item,
    is_rocksdb_dir,
    ledger_key,
    location_key,
)

_SLOT = index_file.LOCATION.size
_CHUNK_SLOTS = 1024  # one BookKeeper index page
_MAX_CACHED_PATHS = 4096  # entry log paths remembered per index (one Path per log)
#: slots handed to the head scans at once (an index file is read this much at a time)
SLOT_CHUNK = 4096
#: location items read from a DbLedgerStorage index at once for the slot scans
_ITEM_BATCH = 4096
#: bytes of an entry log read at once while scanning it for a lost index
_SCAN_WINDOW = 1 << 20
#: the largest record a scan window is grown for; a larger one is left to scan_records
_SCAN_MAX_RECORD = 64 << 20
_SIZE = struct.Struct(">i")

#: what the head scans read slots from: ``(first_entry_id, slots)``, slot i an 8-byte
#: location of entry first_entry_id + i (0: none); or ``(entry_id, Location)`` for an
#: entry a slot cannot name, which the Python path reads
SlotChunk = tuple[int, bytes | memoryview | Location]


def parse_ledger_data(ledger_id: int, value: bytes, source: str, path: Path) -> LedgerRecord:
    """A ``ledgers`` value (LedgerData protobuf) as a LedgerRecord."""
    data = LedgerData()
    try:
        data.ParseFromString(value)
    except DecodeError as exc:
        raise CorruptEntryError(
            "ledger-data", 0, f"a LedgerData of ledger {ledger_id}", str(exc)
        ) from None
    return LedgerRecord(
        ledger_id=ledger_id,
        exists=data.exists,
        fenced=data.fenced,
        master_key=data.masterKey,
        explicit_lac=data.explicitLac if data.HasField("explicitLac") else None,
        limbo=data.limbo if data.HasField("limbo") else False,
        source=source,
        path=path,
    )


class DbIndex:
    """DbLedgerStorage: ``locations`` and ``ledgers`` RocksDB databases of one ledger dir.

    Each database is opened on its own: when ``locations`` cannot be read
    (``locations_error``) the ledger records are still served and the store scans the
    entry logs of the dir for locations.
    """

    source = "rocksdb"

    def __init__(self, index_dir: Path, log_dir: Path, problems: list[Problem]) -> None:
        self.index_dir = index_dir
        self.log_dir = log_dir
        self.locations: ReadOnlyRocksDB | None = None
        self.ledgers: ReadOnlyRocksDB | None = None
        self.locations_error: str | None = None
        self._log_paths: dict[int, Path] = {}
        try:
            self.locations = ReadOnlyRocksDB(index_dir / "locations")
        except CorruptEntryError as exc:
            self.locations_error = str(exc)
            problems.append(Problem("error", "rocksdb", 0, str(exc)))
        if is_rocksdb_dir(index_dir / "ledgers"):
            try:
                self.ledgers = ReadOnlyRocksDB(index_dir / "ledgers")
            except CorruptEntryError as exc:
                problems.append(Problem("error", "rocksdb", 0, str(exc)))

    def location(self, packed: int) -> Location:
        """The entry-log location of a packed ``locations`` value."""
        return self._location(packed)

    def _location(self, packed: int) -> Location:
        log_id, offset = split_location(packed)
        path = self._log_paths.get(log_id)
        if path is None:
            if len(self._log_paths) >= _MAX_CACHED_PATHS:
                self._log_paths.clear()
            path = self._log_paths[log_id] = self.log_dir / log_file_name(log_id)
        return Location(self.source, path, log_id, offset)

    def ledger_ids(self) -> Iterator[int]:
        if self.ledgers is not None:
            for key, _ in self.ledgers.items():
                if len(key) == 8:
                    yield int.from_bytes(key, "big", signed=True)
            return
        if self.locations is None:
            return
        low = None
        while True:
            found = next(self.locations.items(low), None)
            if found is None:
                return
            ledger_id = decode_location_item(*found)[0]
            yield ledger_id
            if ledger_id >= MAX_ID:
                return
            low = location_key(ledger_id + 1, 0)

    def record(self, ledger_id: int) -> LedgerRecord | None:
        if self.ledgers is None:
            if self.last_entry(ledger_id) is None:
                return None
            return LedgerRecord(ledger_id, True, None, None, None, None, self.source, None)
        value = self.ledgers.get(ledger_key(ledger_id))
        if value is None:
            return None
        return parse_ledger_data(ledger_id, value, self.source, self.index_dir / "ledgers")

    def locate(self, ledger_id: int, entry_id: int) -> Location | None:
        if self.locations is None:
            return None
        value = self.locations.get(location_key(ledger_id, entry_id))
        if value is None:
            return None
        return self._location(decode_location_item(location_key(ledger_id, entry_id), value)[2])

    def iter_locations(
        self, ledger_id: int, first: int, last: int | None
    ) -> Iterator[tuple[int, Location]]:
        if self.locations is None:
            return
        # decode_location_item and _location inlined: this loop runs once per entry read
        unpack_key, unpack_value = LOCATION_KEY.unpack, LOCATION_VALUE.unpack
        paths, source = self._log_paths, self.source
        for key, value in self.locations.items(*_key_range(ledger_id, first, last)):
            if len(key) != LOCATION_KEY.size or len(value) != LOCATION_VALUE.size:
                decode_location_item(key, value)  # raises CorruptEntryError
            found_ledger, entry_id = unpack_key(key)
            if found_ledger != ledger_id:
                return
            (packed,) = unpack_value(value)
            log_id = packed >> 32
            path = paths.get(log_id)
            if path is None:
                path = self._location(packed).path
            yield entry_id, Location(source, path, log_id, packed & 0xFFFFFFFF)

    def slot_chunks(self, ledger_id: int, first: int, last: int | None) -> Iterator[SlotChunk]:
        """The ledger's entries in [first, last] as :data:`SlotChunk` runs: consecutive
        locations items as slots (the native ``item_slots``), any other item of the
        ledger on its own; the same entries :meth:`iter_locations` gives, in order."""
        if self.locations is None or native is None:
            return
        to_slots = native.item_slots
        for batch in self.locations.item_batches(*_key_range(ledger_id, first, last), _ITEM_BATCH):
            i = 0
            while i < len(batch):
                slots, first_entry, stop = to_slots(batch, i, ledger_id)
                if stop > i:
                    yield first_entry, slots
                    i = stop
                    continue
                found, entry_id, packed = decode_location_item(*batch[i])  # raises: malformed
                if found != ledger_id:
                    return
                yield entry_id, self._location(packed)
                i += 1

    def log_path(self, log_id: int) -> Path:
        """The entry log a slot's log id names."""
        return self._location(log_id << 32).path

    def slot_location(self, ledger_id: int, entry_id: int, packed: int) -> Location:
        """The location :meth:`iter_locations` gives for a slot's value."""
        return self._location(packed)

    def last_entry(self, ledger_id: int) -> int | None:
        if self.locations is None:
            return None
        found = self.locations.floor_before(location_key(ledger_id, MAX_ID))
        if found is None:
            return None
        found_ledger, entry_id, _ = decode_location_item(*found)
        return entry_id if found_ledger == ledger_id else None

    def iter_all(self) -> Iterator[tuple[int, int, Location]]:
        if self.locations is None:
            return
        for key, value in self.locations.items():
            ledger_id, entry_id, packed = decode_location_item(key, value)
            yield ledger_id, entry_id, self._location(packed)

    def close(self) -> None:
        for db in (self.locations, self.ledgers):
            if db is not None:
                db.close()


def _key_range(ledger_id: int, first: int, last: int | None) -> tuple[bytes, bytes | None]:
    """The locations keys of a ledger's entries in [first, last]: low, and high (excluded)."""
    high = (
        location_key(ledger_id, last + 1)
        if last is not None and last < MAX_ID
        else (location_key(ledger_id + 1, 0) if ledger_id < MAX_ID else None)
    )
    return location_key(ledger_id, max(first, 0)), high


class IdxIndex:
    """Interleaved/SortedLedgerStorage: one ``.idx`` file per ledger in the index dirs."""

    source = "idx"

    def __init__(
        self, index_dirs: list[Path], resolve_log: Callable[[int], Path], files: FileCache
    ) -> None:
        self.index_dirs = index_dirs
        self.resolve_log = resolve_log
        self.files = files
        self._paths: dict[int, Path] | None = None
        self._log_paths: dict[int, Path] = {}

    def paths(self) -> dict[int, Path]:
        if self._paths is None:
            found: dict[int, Path] = {}
            for base in self.index_dirs:
                for outer in sorted(os.scandir(base), key=lambda e: e.name):
                    if not outer.is_dir():
                        continue
                    for inner in sorted(os.scandir(outer.path), key=lambda e: e.name):
                        if not inner.is_dir():
                            continue
                        for name in sorted(os.listdir(inner.path)):
                            ledger_id = index_file.parse_index_file_name(name)
                            if ledger_id is not None:
                                found.setdefault(ledger_id, Path(inner.path) / name)
            self._paths = found
        return self._paths

    def ledger_ids(self) -> Iterator[int]:
        yield from sorted(self.paths())

    def header(self, ledger_id: int) -> index_file.IndexHeader | None:
        path = self.paths().get(ledger_id)
        if path is None:
            return None
        with self.files.open(path) as f:
            head = f.read_at(0, index_file.START_OF_DATA)
        try:
            return index_file.parse_header(head)
        except CorruptEntryError as exc:
            raise CorruptEntryError(
                f"{exc.layer} {path.name}", exc.offset, exc.expected, exc.found
            ) from None

    def record(self, ledger_id: int) -> LedgerRecord | None:
        header = self.header(ledger_id)
        if header is None:
            return None
        return LedgerRecord(
            ledger_id,
            True,
            header.fenced,
            header.master_key,
            header.explicit_lac,
            None,
            self.source,
            self.paths()[ledger_id],
        )

    def _location(self, packed: int) -> Location:
        log_id, offset = split_location(packed)
        path = self._log_paths.get(log_id)
        if path is None:
            if len(self._log_paths) >= _MAX_CACHED_PATHS:
                self._log_paths.clear()
            path = self._log_paths[log_id] = self.resolve_log(log_id)
        return Location(self.source, path, log_id, offset)

    def locate(self, ledger_id: int, entry_id: int) -> Location | None:
        return next((loc for _, loc in self.iter_locations(ledger_id, entry_id, entry_id)), None)

    def iter_locations(
        self, ledger_id: int, first: int, last: int | None
    ) -> Iterator[tuple[int, Location]]:
        for first_id, chunk in self._slot_reads(ledger_id, first, last, _CHUNK_SLOTS):
            for entry_id, packed in index_file.parse_locations(chunk, first_id):
                yield entry_id, self._location(packed)

    def slot_chunks(self, ledger_id: int, first: int, last: int | None) -> Iterator[SlotChunk]:
        """The ledger's slots for entries [first, last], read from its index file
        :data:`SLOT_CHUNK` at a time, as :meth:`iter_locations` reads them (the header
        checked first, a trailing part of a slot left out)."""
        for first_id, chunk in self._slot_reads(ledger_id, first, last, SLOT_CHUNK):
            whole = len(chunk) - len(chunk) % _SLOT
            if whole:
                yield first_id, chunk[:whole]

    def _slot_reads(
        self, ledger_id: int, first: int, last: int | None, slots: int
    ) -> Iterator[tuple[int, bytes]]:
        """The ledger's index file for entries [first, last], ``slots`` slots at a time:
        the first slot's entry id and the bytes read (the header checked first)."""
        path = self.paths().get(ledger_id)
        if path is None or (last is not None and last < first):
            return
        self.header(ledger_id)  # a garbage header makes the whole file suspect
        with self.files.open(path) as f:
            end = f.size
            if last is not None:
                end = min(end, index_file.entry_position(last + 1))
            pos = index_file.entry_position(max(first, 0))
            while pos < end:
                size = min(slots * _SLOT, end - pos)
                yield (pos - index_file.START_OF_DATA) // _SLOT, f.read_at(pos, size)
                pos += size

    def log_path(self, log_id: int) -> Path:
        """The entry log a slot's log id names."""
        return self._location(log_id << 32).path

    def slot_location(self, ledger_id: int, entry_id: int, packed: int) -> Location:
        """The location :meth:`iter_locations` gives for a slot's value."""
        return self._location(packed)

    def last_entry(self, ledger_id: int) -> int | None:
        path = self.paths().get(ledger_id)
        if path is None:
            return None
        with self.files.open(path) as f:
            slots = max(0, (f.size - index_file.START_OF_DATA) // _SLOT)
            top = slots
            while top > 0:
                low = max(0, top - _CHUNK_SLOTS)
                chunk = f.read_at(index_file.entry_position(low), (top - low) * _SLOT)
                found = [e for e, _ in index_file.parse_locations(chunk, low)]
                if found:
                    return found[-1]
                top = low
        return None

    def iter_all(self) -> Iterator[tuple[int, int, Location]]:
        for ledger_id in self.ledger_ids():
            for entry_id, location in self.iter_locations(ledger_id, 0, None):
                yield ledger_id, entry_id, location

    def close(self) -> None:
        pass


class ScanIndex:
    """Locations rebuilt by scanning entry logs, as BookKeeper's index rebuild does.

    Logs are read in id order and a later copy of an entry wins: the fallback when an
    index is missing or unreadable. The logs are scanned by the native ``log_slots``
    into slot tables, two bytearrays per ledger indexed by entry id (the location and
    the record size: 12 bytes per entry, a location with the log's place in ``logs``
    instead of its id, since logs of two directories may share an id); the records it
    stops at (a damaged log) are read by ``scan_records`` into the same tables. Where a
    table cannot take an entry (an entry id below 0 or far past the ledger's others),
    or without the native module, the index is one :class:`Location` per entry in
    dicts, as scanned by ``scan_records`` alone. Both give the same locations and the
    same problems.
    """

    source = "scan"

    def __init__(
        self, logs: list[tuple[int, Path]], files: FileCache, problems: list[Problem]
    ) -> None:
        self.logs = sorted(logs)
        self.files = files
        self.problems = problems
        self._entries: dict[int, dict[int, Location]] | None = None
        self._locs: dict[int, bytearray] | None = None
        self._sizes: dict[int, bytearray] = {}

    def _index(self) -> None:
        """Scan the logs, once."""
        if self._locs is not None or self._entries is not None:
            return
        problems: list[Problem] = []
        tables = _scan_tables(self.logs, self.files, problems) if native is not None else None
        if tables is None:
            problems = []
            self._entries = _scan_entries(self.logs, self.files, problems, self.source)
        else:
            self._locs, self._sizes = tables
        self.problems.extend(problems)

    def _location(self, key: int, offset: int, size: int | None) -> Location:
        log_id, path = self.logs[key]
        return Location(self.source, path, log_id, offset, size)

    def ledger_ids(self) -> Iterator[int]:
        self._index()
        yield from sorted(self._locs) if self._locs is not None else self._entries or {}

    def record(self, ledger_id: int) -> LedgerRecord | None:
        self._index()
        if ledger_id not in (self._locs if self._locs is not None else self._entries or {}):
            return None
        return LedgerRecord(ledger_id, True, None, None, None, None, self.source, None)

    def locate(self, ledger_id: int, entry_id: int) -> Location | None:
        self._index()
        if self._locs is None:
            return (self._entries or {}).get(ledger_id, {}).get(entry_id)
        return next((loc for _, loc in self.iter_locations(ledger_id, entry_id, entry_id)), None)

    def iter_locations(
        self, ledger_id: int, first: int, last: int | None
    ) -> Iterator[tuple[int, Location]]:
        self._index()
        if self._locs is None:
            for entry_id, location in (self._entries or {}).get(ledger_id, {}).items():
                if entry_id >= first and (last is None or entry_id <= last):
                    yield entry_id, location
            return
        table = self._locs.get(ledger_id)
        if table is None:
            return
        sizes = self._sizes[ledger_id]
        stop = len(table) // _SLOT if last is None else min(len(table) // _SLOT, last + 1)
        for entry_id in range(max(first, 0), stop):
            (packed,) = index_file.LOCATION.unpack_from(table, _SLOT * entry_id)
            if packed:
                (size,) = _SIZE.unpack_from(sizes, 4 * entry_id)
                yield entry_id, self._location(packed >> 32, packed & 0xFFFFFFFF, size)

    def last_entry(self, ledger_id: int) -> int | None:
        self._index()
        if self._locs is None:
            entries = (self._entries or {}).get(ledger_id)
            return next(reversed(entries)) if entries else None
        table = self._locs.get(ledger_id)
        # a table ends with the highest entry written into it
        return len(table) // _SLOT - 1 if table else None

    def iter_all(self) -> Iterator[tuple[int, int, Location]]:
        for ledger_id in self.ledger_ids():
            for entry_id, location in self.iter_locations(ledger_id, 0, None):
                yield ledger_id, entry_id, location

    def slot_chunks(self, ledger_id: int, first: int, last: int | None) -> Iterator[SlotChunk]:
        """The ledger's slots for entries [first, last], :data:`SLOT_CHUNK` at a time;
        nothing where the index is not in slot tables (see :meth:`has_slots`)."""
        self._index()
        table = self._locs.get(ledger_id) if self._locs is not None else None
        if table is None:
            return
        view = memoryview(table)
        stop = len(table) // _SLOT if last is None else min(len(table) // _SLOT, last + 1)
        for at in range(max(first, 0), stop, SLOT_CHUNK):
            yield at, view[_SLOT * at : _SLOT * min(at + SLOT_CHUNK, stop)]

    def has_slots(self) -> bool:
        """Whether the scanned locations are in slot tables (see the class)."""
        self._index()
        return self._locs is not None

    def log_path(self, key: int) -> Path:
        """The entry log a slot names (by its place in ``logs``)."""
        return self.logs[key][1] if 0 <= key < len(self.logs) else Path("")

    def slot_location(self, ledger_id: int, entry_id: int, packed: int) -> Location:
        """The location :meth:`iter_locations` gives for a slot's value."""
        (size,) = _SIZE.unpack_from(self._sizes[ledger_id], 4 * entry_id)
        return self._location(packed >> 32, packed & 0xFFFFFFFF, size)

    def close(self) -> None:
        pass


def _scan_entries(
    logs: list[tuple[int, Path]], files: FileCache, problems: list[Problem], source: str
) -> dict[int, dict[int, Location]]:
    """Every entry record of the logs as a Location (by ``scan_records``), a later copy
    winning; the problems met, named after their log."""
    found: dict[int, dict[int, Location]] = {}
    for log_id, path in logs:
        with files.open(path) as f:
            if f.size == 0:
                continue
            met: list[Problem] = []
            for rec in scan_records(f.read_at, f.size, HEADER_SIZE, problems=met):
                found.setdefault(rec.ledger_id, {})[rec.entry_id] = Location(
                    source, path, log_id, rec.offset, rec.size
                )
            problems.extend(_named(met, path))
    return {lid: dict(sorted(e.items())) for lid, e in sorted(found.items())}


def _named(problems: list[Problem], path: Path) -> list[Problem]:
    return [Problem(p.severity, f"{p.layer} {path.name}", p.offset, p.message) for p in problems]


def _scan_tables(
    logs: list[tuple[int, Path]], files: FileCache, problems: list[Problem]
) -> tuple[dict[int, bytearray], dict[int, bytearray]] | None:
    """The entry records of the logs in slot tables (see :class:`ScanIndex`), walked by
    the native ``log_slots`` a window at a time; from a record it stops at (one that
    ``scan_records`` reports, or the end of the log) to the end of that log, by
    ``scan_records``. None when a table cannot take an entry."""
    locs: dict[int, bytearray] = {}
    sizes: dict[int, bytearray] = {}
    walk, window_status, odd = native.log_slots, native.HEADS_WINDOW, native.SLOTS_ODD
    for key, (_log_id, path) in enumerate(logs):
        with files.open(path) as f:
            end = f.size
            if end == 0:
                continue
            pos = HEADER_SIZE
            size = _SCAN_WINDOW
            tail = False
            while pos < end:
                data = f.read_at(pos, size)
                at, status = walk(data, 0, pos, key, locs, sizes)
                if status == odd:
                    return None
                if status != window_status or pos + len(data) >= end:
                    tail = True  # a record scan_records reports, or the end of the log
                    pos += at
                    break
                if at == 0:  # a record larger than the window
                    size *= 2
                    if size > _SCAN_MAX_RECORD:
                        tail = True
                        break
                    continue
                pos += at
                size = _SCAN_WINDOW
            if tail and pos < end:
                met: list[Problem] = []
                for rec in scan_records(f.read_at, end, pos, problems=met):
                    if not _put(
                        locs, sizes, key, rec.ledger_id, rec.entry_id, rec.offset, rec.size
                    ):
                        return None
                problems.extend(_named(met, path))
    return locs, sizes


def _put(
    locs: dict[int, bytearray],
    sizes: dict[int, bytearray],
    key: int,
    ledger_id: int,
    entry_id: int,
    offset: int,
    size: int,
) -> bool:
    """One entry record into the slot tables, as the native ``log_slots`` writes it;
    False where a table does not take it (the same rule)."""
    table = locs.get(ledger_id)
    if table is None:
        table = locs[ledger_id] = bytearray()
        sizes[ledger_id] = bytearray()
    have = len(table) // _SLOT
    if entry_id < 0 or entry_id >= have * 2 + native.SLOTS_TABLE_SLACK or offset > 0xFFFFFFFF:
        return False
    if entry_id >= have:
        table.extend(bytes(_SLOT * (entry_id + 1 - have)))
        sizes[ledger_id].extend(bytes(4 * (entry_id + 1 - have)))
    index_file.LOCATION.pack_into(table, _SLOT * entry_id, (key << 32) | offset)
    _SIZE.pack_into(sizes[ledger_id], 4 * entry_id, size)
    return True


class JournalTail:
    """What a restarting bookie would replay: journal records after ``lastMark``.

    ``mode`` "tail" starts at the last mark (as BookieImpl replays), "all" reads every
    journal from its start. Entries become ``journal`` locations; master-key, fence and
    explicit-LAC records update the ledger facts.
    """

    source = "journal"

    def __init__(
        self,
        journal_dirs: list[Path],
        marks: list[tuple[int, int]],
        mode: str,
        files: FileCache,
        problems: list[Problem],
    ) -> None:
        self.files = files
        self.problems = problems
        self.journals: list[JournalInfo] = []
        self.entries: dict[int, dict[int, Location]] = {}
        self.master_keys: dict[int, bytes] = {}
        self.fenced: set[int] = set()
        self.explicit_lacs: dict[int, bytes] = {}
        for directory in journal_dirs:
            self._read_dir(directory, marks, mode)
        self.entries = {lid: dict(sorted(e.items())) for lid, e in sorted(self.entries.items())}

    def _read_dir(self, directory: Path, marks: list[tuple[int, int]], mode: str) -> None:
        ids = sorted(
            (jid, directory / name)
            for name in os.listdir(directory)
            if (jid := journal.parse_journal_file_name(name)) is not None
        )
        known = {jid for jid, _ in ids}
        mine = [m for m in marks if m[0] in known] or marks
        mark_id, mark_offset = max(mine) if mine and mode == "tail" else (0, 0)
        for journal_id, path in ids:
            try:
                self._read_journal(journal_id, path, mark_id, mark_offset)
            except BookieDirError as exc:  # unreadable: the rest of the storage still is
                problem = exc.one_line()
                self.problems.append(Problem("error", f"journal {path.name}", 0, problem))
                self.journals.append(JournalInfo(journal_id, path, 0, None, None, problem))

    def _read_journal(self, journal_id: int, path: Path, mark_id: int, mark_offset: int) -> None:
        start: int | None = None
        if journal_id < mark_id:
            replay_from = None
        elif journal_id == mark_id and mark_offset > 0:
            start = replay_from = mark_offset
        else:
            replay_from = 0
        with self.files.open(path) as f:
            problem = None
            version: int | None = None
            try:
                version, _ = journal.parse_header(f.read_at(0, journal.VERSION_HEADER.size))
            except CorruptEntryError as exc:
                problem = str(exc)
                self.problems.append(Problem("error", f"journal {path.name}", exc.offset, problem))
            if problem is None and start is not None and start > f.size:
                # the bookie recorded this far as flushed: bytes it wrote are gone
                problem = (
                    f"journal {path.name} is {f.size} bytes, shorter than its lastMark "
                    f"offset {start}: truncated"
                )
                self.problems.append(Problem("error", f"journal {path.name}", f.size, problem))
            info = JournalInfo(journal_id, path, f.size, version, replay_from, problem)
            self.journals.append(info)
            if replay_from is None or problem is not None:
                return
            self._replay(f.read_at, f.size, start, journal_id, path)

    def _replay(
        self, read_at: ReadAt, size: int, start: int | None, journal_id: int, path: Path
    ) -> None:
        problems: list[Problem] = []
        for rec in journal.scan_records(read_at, size, start, problems=problems):
            kind = rec.kind
            if kind is journal.RecordKind.ENTRY:
                self.entries.setdefault(rec.ledger_id, {})[rec.entry_id] = Location(
                    self.source, path, journal_id, rec.offset, rec.size
                )
            elif kind is journal.RecordKind.MASTER_KEY and rec.master_key is not None:
                self.master_keys[rec.ledger_id] = rec.master_key
            elif kind is journal.RecordKind.FENCE:
                self.fenced.add(rec.ledger_id)
            elif kind is journal.RecordKind.EXPLICIT_LAC and rec.explicit_lac is not None:
                self.explicit_lacs[rec.ledger_id] = rec.explicit_lac
        for p in problems:
            self.problems.append(Problem(p.severity, f"{p.layer} {path.name}", p.offset, p.message))

    def ledger_ids(self) -> set[int]:
        return set(self.entries) | set(self.master_keys) | self.fenced | set(self.explicit_lacs)

    def iter_locations(
        self, ledger_id: int, first: int, last: int | None
    ) -> Iterator[tuple[int, Location]]:
        for entry_id, location in self.entries.get(ledger_id, {}).items():
            if entry_id >= first and (last is None or entry_id <= last):
                yield entry_id, location

    def locate(self, ledger_id: int, entry_id: int) -> Location | None:
        return self.entries.get(ledger_id, {}).get(entry_id)

    def last_entry(self, ledger_id: int) -> int | None:
        entries = self.entries.get(ledger_id)
        return next(reversed(entries)) if entries else None
