"""Writing bookie files: entry logs, journals, ``.idx`` files and DbLedgerStorage indexes.

Every writer creates NEW files only (``O_EXCL``; a RocksDB index only in a directory that
does not exist yet) and never touches an existing bookie's data. The byte layouts come
from the pure modules in ``decoders/`` (entrylog, journal, index_file); the readers of
:mod:`.store` read the result exactly as they read BookKeeper's own files.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pulsarctl_py.decoders import entrylog, index_file
from pulsarctl_py.decoders import journal as journal_format
from pulsarctl_py.decoders.errors import CorruptEntryError, LedgerctlError
from pulsarctl_py.proto.bookkeeper_data_formats_pb2 import LedgerData

from .rocks import LOCATION_VALUE, ledger_key, location_key, write_rocksdb

_IDS = struct.Struct(">qq")


def _create(path: Path) -> int:
    """Open a new file for writing; refuse to overwrite anything."""
    try:
        return os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644
        )
    except FileExistsError:
        raise LedgerctlError(f"refusing to overwrite existing file {path}") from None


def _write_all(fd: int, data: bytes, offset: int | None = None) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        view = view[written:]
        if offset is not None:
            offset += written


def _entry_ids(entry: bytes | memoryview, layer: str) -> tuple[int, int]:
    if len(entry) < entrylog.MIN_SANE_ENTRY_SIZE:
        raise CorruptEntryError(layer, 0, "an entry of at least 16 bytes", f"{len(entry)} bytes")
    ledger_id, entry_id = _IDS.unpack_from(entry, 0)
    if ledger_id < 0 or entry_id < 0:
        raise CorruptEntryError(layer, 0, "ledger and entry ids >= 0", f"{ledger_id}, {entry_id}")
    return ledger_id, entry_id


class EntryLogWriter:
    """One new entry log: header, ``[size][entry]`` records, then the ledgers map at close.

    ``direct=True`` writes the DirectEntryLogger variant: a 4096-byte header with the fake
    record, and 0xF0 padding to 4 KiB before and after the ledgers map.
    """

    def __init__(
        self, path: str | os.PathLike[str], log_id: int | None = None, *, direct: bool = False
    ) -> None:
        self.path = Path(path)
        parsed = entrylog.parse_log_file_name(self.path.name)
        if log_id is None:
            if parsed is None:
                raise LedgerctlError(f"{self.path.name}: expected <hex log id>.log or a log_id")
            log_id = parsed
        self.log_id = log_id
        self.direct = direct
        self.ledger_sizes: dict[int, int] = {}
        self.locations: dict[tuple[int, int], int] = {}
        self._fd = _create(self.path)
        header = entrylog.build_header(direct=direct)
        _write_all(self._fd, header)
        self.position = len(header)

    def add(self, entry: bytes | memoryview) -> int:
        """Append a digest-packed entry; return its location ``(log_id << 32) | offset``."""
        ledger_id, entry_id = _entry_ids(entry, entrylog.LAYER)
        record = entrylog.frame(entry)
        if self.position + len(record) > 0xFFFFFFFF:
            raise LedgerctlError(f"{self.path.name} would pass 4 GiB, beyond a location offset")
        _write_all(self._fd, record)
        location = entrylog.make_location(self.log_id, self.position + entrylog.SIZE.size)
        self.position += len(record)
        self.ledger_sizes[ledger_id] = self.ledger_sizes.get(ledger_id, 0) + len(record)
        self.locations[(ledger_id, entry_id)] = location
        return location

    def _pad(self) -> None:
        if self.direct:
            pad = entrylog.padding(self.position)
            _write_all(self._fd, pad)
            self.position += len(pad)

    def close(
        self, *, ledgers_map: bool = True, map_order: Sequence[int] | None = None
    ) -> dict[int, int]:
        """Finish the log (like a rotation when ``ledgers_map``); return ledger sizes.

        ``map_order`` lists the ledgers in the order to write them in the map (BookKeeper
        writes its hash-map order); default: the order they first appeared.
        """
        if self._fd < 0:
            return self.ledger_sizes
        try:
            self._pad()
            if ledgers_map:
                map_offset = self.position
                order = list(self.ledger_sizes) if map_order is None else list(map_order)
                if sorted(order) != sorted(self.ledger_sizes):
                    raise LedgerctlError(f"map_order {order} must list the ledgers of the log")
                records = entrylog.build_ledgers_map(
                    [(lid, self.ledger_sizes[lid]) for lid in order]
                )
                _write_all(self._fd, records)
                self.position += len(records)
                self._pad()
                head = entrylog.HEADER.pack(
                    entrylog.MAGIC, entrylog.HEADER_V1, map_offset, len(self.ledger_sizes)
                )
                _write_all(self._fd, head, 0)
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1
        return self.ledger_sizes

    def __enter__(self) -> EntryLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_entry_log(
    path: str | os.PathLike[str],
    entries: Iterable[bytes | memoryview],
    *,
    log_id: int | None = None,
    ledgers_map: bool = True,
    direct: bool = False,
) -> dict[tuple[int, int], int]:
    """Write a new entry log holding ``entries``; return ``{(ledger, entry): location}``."""
    writer = EntryLogWriter(path, log_id, direct=direct)
    try:
        for entry in entries:
            writer.add(entry)
    finally:
        writer.close(ledgers_map=ledgers_map)
    return writer.locations


class JournalWriter:
    """A new journal file of ``version`` (default 6): header, records, padding per flush."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        version: int = journal_format.CURRENT_VERSION,
        alignment: int = journal_format.DEFAULT_ALIGNMENT,
    ) -> None:
        self.path = Path(path)
        self.version = version
        self.alignment = alignment
        header = journal_format.build_header(version)
        self._fd = _create(self.path)
        _write_all(self._fd, header)
        self.position = len(header)

    def _append(self, body: bytes) -> int:
        record = journal_format.build_record(body)
        at = self.position
        _write_all(self._fd, record)
        self.position += len(record)
        return at

    def add_entry(self, entry: bytes | memoryview) -> int:
        """Append an add-entry record; return its position (of the length field)."""
        _entry_ids(entry, journal_format.LAYER)
        return self._append(bytes(entry))

    def _require(self, version: int, what: str) -> None:
        if self.version < version:
            raise LedgerctlError(f"a V{self.version} journal cannot hold {what} (needs V{version})")

    def add_master_key(self, ledger_id: int, master_key: bytes) -> int:
        self._require(journal_format.V3, "master-key records")
        return self._append(journal_format.build_master_key_body(ledger_id, master_key))

    def add_fence(self, ledger_id: int) -> int:
        self._require(journal_format.V4, "fence records")
        return self._append(journal_format.build_fence_body(ledger_id))

    def add_explicit_lac(self, ledger_id: int, lac_packet: bytes) -> int:
        self._require(journal_format.V6, "explicit-LAC records")
        return self._append(journal_format.build_explicit_lac_body(ledger_id, lac_packet))

    def flush(self) -> None:
        """End a group of records: V5+ journals pad to the alignment, as a bookie flush does."""
        if self.version >= journal_format.V5:
            pad = journal_format.build_padding(self.position, self.alignment)
            _write_all(self._fd, pad)
            self.position += len(pad)

    def close(self) -> int:
        """Flush and close; return the end position (a ``lastMark`` offset for this file)."""
        if self._fd >= 0:
            try:
                self.flush()
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = -1
        return self.position

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_index_file(
    index_dir: str | os.PathLike[str],
    ledger_id: int,
    master_key: bytes,
    locations: Mapping[int, int],
    *,
    fenced: bool = False,
    explicit_lac: bytes | None = None,
    version: int = index_file.CURRENT_VERSION,
    page_entries: int = 1024,
) -> Path:
    """Write the ``.idx`` file of a ledger under ``index_dir`` (a ``current/`` dir).

    ``locations`` maps entry ids to packed locations; slots are written in whole pages of
    ``page_entries`` like BookKeeper's LedgerEntryPage.
    """
    path = Path(index_dir) / index_file.ledger_index_path(ledger_id)
    header = index_file.IndexHeader(
        master_key, index_file.STATE_FENCED_BIT if fenced else 0, explicit_lac, version
    )
    slots = index_file.build_locations(locations)
    if page_entries > 0:
        page = page_entries * index_file.LOCATION.size
        slots += bytes(-len(slots) % page)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _create(path)
    try:
        _write_all(fd, header.build() + slots)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def ledger_data(
    master_key: bytes,
    *,
    fenced: bool = False,
    explicit_lac: bytes | None = None,
    exists: bool = True,
    limbo: bool | None = None,
) -> bytes:
    """A serialized LedgerData, the value of the ``ledgers`` index."""
    data = LedgerData(exists=exists, fenced=fenced, masterKey=master_key)
    if explicit_lac is not None:
        data.explicitLac = explicit_lac
    if limbo is not None:
        data.limbo = limbo
    return data.SerializeToString()


def write_db_index(
    index_dir: str | os.PathLike[str],
    ledgers: Mapping[int, bytes],
    locations: Iterable[tuple[int, int, int]],
) -> None:
    """Create ``ledgers/`` and ``locations/`` RocksDB databases under ``index_dir``.

    ``ledgers`` maps ledger ids to serialized LedgerData (see :func:`ledger_data`);
    ``locations`` yields ``(ledger_id, entry_id, location)``. Both databases must not exist.
    """
    base = Path(index_dir)
    for name in ("ledgers", "locations"):
        if (base / name).exists():
            raise LedgerctlError(f"refusing to write into existing {base / name}")
    base.mkdir(parents=True, exist_ok=True)
    write_rocksdb(base / "ledgers", ((ledger_key(lid), v) for lid, v in sorted(ledgers.items())))
    write_rocksdb(
        base / "locations",
        ((location_key(lid, eid), LOCATION_VALUE.pack(loc)) for lid, eid, loc in locations),
        lz4=True,
    )


def write_last_mark(
    current_dir: str | os.PathLike[str], journal_id: int, offset: int, name: str = "lastMark"
) -> Path:
    """Write a ``lastMark`` file (journal id and offset replay would start from)."""
    path = Path(current_dir) / name
    fd = _create(path)
    try:
        _write_all(fd, journal_format.build_last_mark(journal_id, offset))
    finally:
        os.close(fd)
    return path


def write_last_id(current_dir: str | os.PathLike[str], log_id: int) -> Path:
    """Write ``lastId``: the hex id of the last allocated entry log and a newline."""
    path = Path(current_dir) / "lastId"
    fd = _create(path)
    try:
        _write_all(fd, f"{log_id:x}\n".encode())
    finally:
        os.close(fd)
    return path


@dataclass(slots=True)
class LedgerDirSummary:
    """What :func:`write_db_ledger_dir` wrote."""

    current_dir: Path
    log_ids: list[int] = field(default_factory=list)
    locations: dict[tuple[int, int], int] = field(default_factory=dict)
    ledger_ids: list[int] = field(default_factory=list)


def write_db_ledger_dir(
    current_dir: str | os.PathLike[str],
    entries: Iterable[bytes | memoryview],
    master_keys: Mapping[int, bytes] | bytes,
    *,
    fenced: Iterable[int] = (),
    explicit_lacs: Mapping[int, bytes] | None = None,
    log_size_limit: int = 1 << 30,
    active_log: bool = True,
) -> LedgerDirSummary:
    """A new DbLedgerStorage ledger dir (``current/``) holding ``entries``.

    Entry logs rotate at ``log_size_limit`` (rotated logs get their ledgers map); the last
    one stays "active" without a map when ``active_log``. Then ``lastId`` and the RocksDB
    ``ledgers`` and ``locations`` indexes. ``master_keys`` is one key for every ledger or a
    key per ledger.
    """
    base = Path(current_dir)
    base.mkdir(parents=True, exist_ok=True)
    summary = LedgerDirSummary(base)
    writer: EntryLogWriter | None = None
    log_id = 0
    for entry in entries:
        if writer is not None and writer.position + 4 + len(entry) > log_size_limit:
            writer.close(ledgers_map=True)
            summary.locations.update(writer.locations)
            writer = None
            log_id += 1
        if writer is None:
            writer = EntryLogWriter(base / entrylog.log_file_name(log_id), log_id)
            summary.log_ids.append(log_id)
        writer.add(entry)
    if writer is not None:
        writer.close(ledgers_map=not active_log)
        summary.locations.update(writer.locations)
    write_last_id(base, log_id)
    ledger_ids = sorted({lid for lid, _ in summary.locations})
    summary.ledger_ids = ledger_ids
    fenced_set = set(fenced)
    lacs = explicit_lacs or {}
    records = {}
    for lid in sorted(set(ledger_ids) | fenced_set | set(lacs)):
        key = master_keys if isinstance(master_keys, bytes) else master_keys[lid]
        records[lid] = ledger_data(key, fenced=lid in fenced_set, explicit_lac=lacs.get(lid))
    write_db_index(
        base,
        records,
        ((lid, eid, loc) for (lid, eid), loc in sorted(summary.locations.items())),
    )
    return summary
