"""BookKeeper entry log files (``<hex logId>.log``): header, records and ledgers map.

Wire grammar (big-endian; BookKeeper ``bookie/DefaultEntryLogger.java`` (``Header``,
``scanEntryLog``, ``extractEntryLogMetadataFromIndex``, ``BufferedLogChannel.appendLedgersMap``),
``bookie/EntryLoggerAllocator.java`` (the header it writes) and
``bookie/storage/directentrylogger/{Header,LogMetadata,Buffer}.java``)::

    log          = header record*
    header       = "BKLO" version:i32 map_offset:i64 ledger_count:i32 zero[1004]      1024 bytes
                 | "BKLO" version:i32 map_offset:i64 ledger_count:i32 zero[1004]
                   fake:record zero[..]                                             4096 bytes
    fake         = size:i32 (= 3068) ledger_id:i64 (= -1)   DirectEntryLogger: makes a
                                                            1024-byte scanner jump to 4096
    record       = size:i32 body[size]                      size > 0
                 | pad:u8                                   the i32 read here is <= 0: skip
                                                            one byte (0xF0 fill of the direct
                                                            logger, zeros)
    body         = entry                                    a digest-packed entry, ledger_id >= 0
                                                            (see decoders.bookkeeper)
                 | ledgers_map                              ledger_id = -1
    ledgers_map  = ledger_id:i64 (= -1) entry_id:i64 (= -2) count:i32
                   (ledger_id:i64 bytes:i64){count}         count <= 10000 per record

* ``version`` 0 has no ledgers map; version 1 gets one when the log is rotated, and
  ``map_offset`` stays 0 on the log being written (scan it instead).
* ``bytes`` per ledger counts every record of that ledger *including* its 4-byte size.
* A location is ``(log_id << 32) | offset`` where ``offset`` is the position of the entry
  body, 4 bytes after its size field. BookKeeper's ``readlog`` prints the size position.
* A reader checks ``size >= 16`` and that the ledger and entry ids at the offset match.

Nothing here touches files: scanners take a ``read_at(offset, size)`` (decoders._readat).
See ../shared/spec/formats.md §11.2.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from . import limits
from ._readat import ReadAt, Window, read_exact
from .errors import CorruptEntryError
from .nodes import Problem

LAYER = "entry-log"
MAGIC = b"BKLO"
HEADER_V0 = 0
HEADER_V1 = 1
HEADER_SIZE = 1024
DIRECT_HEADER_SIZE = 4096
DIRECT_ALIGNMENT = 4096
PADDING_BYTE = 0xF0
INVALID_LEDGER_ID = -1
LEDGERS_MAP_ENTRY_ID = -2
LEDGERS_MAP_MAX_BATCH = 10_000
MIN_SANE_ENTRY_SIZE = 16

#: magic, version, ledgers-map offset, ledger count: the first 20 bytes of every log
HEADER = struct.Struct(">4siqi")
#: size field, then the ledger id and entry id of the body
RECORD_HEAD = struct.Struct(">iqq")
SIZE = struct.Struct(">i")
#: BookKeeper's scanner needs the size and the ledger id (12 bytes) to go on
LEDGER_ID_END = SIZE.size + 8
#: one ledgers-map record up to its pairs: size, -1, -2, count
LEDGERS_MAP_HEAD = struct.Struct(">iqqi")
LEDGERS_MAP_PAIR = struct.Struct(">qq")
#: the fake record of a 4096-byte header: size, ledger id -1
FAKE_RECORD = struct.Struct(">iq")
FAKE_RECORD_SIZE = DIRECT_HEADER_SIZE - HEADER_SIZE - SIZE.size

_NOT_HIGH = re.compile(rb"[\x00-\x7f]")
_NOT_ZERO = re.compile(rb"[^\x00]")


def make_location(log_id: int, offset: int) -> int:
    """Pack a location the way the indexes store it: ``(log_id << 32) | offset``."""
    return (log_id << 32) | offset


def split_location(location: int) -> tuple[int, int]:
    """Unpack a location into ``(log_id, offset)``."""
    return location >> 32, location & 0xFFFFFFFF


def log_file_name(log_id: int) -> str:
    """``<hex log id>.log``, lowercase hex without padding."""
    return f"{log_id:x}.log"


def parse_log_file_name(name: str) -> int | None:
    """The log id of an entry log file name, or None for other files."""
    if not name.endswith(".log"):
        return None
    try:
        return int(name[:-4], 16)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class EntryLogHeader:
    """The header of an entry log. ``size`` is 1024, or 4096 for DirectEntryLogger logs."""

    version: int = HEADER_V1
    ledgers_map_offset: int = 0
    ledgers_count: int = 0
    size: int = HEADER_SIZE

    @property
    def has_ledgers_map(self) -> bool:
        return self.version >= HEADER_V1 and self.ledgers_map_offset > 0

    @property
    def direct(self) -> bool:
        return self.size == DIRECT_HEADER_SIZE

    def build(self) -> bytes:
        """The header bytes, 1024 or 4096 long."""
        out = bytearray(self.size)
        HEADER.pack_into(out, 0, MAGIC, self.version, self.ledgers_map_offset, self.ledgers_count)
        if self.size == DIRECT_HEADER_SIZE:
            FAKE_RECORD.pack_into(out, HEADER_SIZE, FAKE_RECORD_SIZE, INVALID_LEDGER_ID)
        return bytes(out)


def parse_header(buf: bytes | memoryview) -> EntryLogHeader:
    """Decode the first 20 bytes of a log (and the fake record at 1024 if present)."""
    if len(buf) < HEADER.size:
        raise CorruptEntryError(
            LAYER, 0, f"a {HEADER_SIZE}-byte entry log header", f"{len(buf)} bytes"
        )
    magic, version, map_offset, count = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptEntryError(LAYER, 0, "magic 'BKLO'", repr(bytes(magic)))
    if version not in (HEADER_V0, HEADER_V1):
        raise CorruptEntryError(LAYER, 4, "header version 0 or 1", str(version))
    if map_offset < 0 or count < 0:
        raise CorruptEntryError(
            LAYER, 8, "a non-negative ledgers map offset and count", f"{map_offset}, {count}"
        )
    size = HEADER_SIZE
    if len(buf) >= HEADER_SIZE + FAKE_RECORD.size:
        fake_size, fake_ledger = FAKE_RECORD.unpack_from(buf, HEADER_SIZE)
        if fake_size == FAKE_RECORD_SIZE and fake_ledger == INVALID_LEDGER_ID:
            size = DIRECT_HEADER_SIZE
    return EntryLogHeader(version, map_offset, count, size)


def build_header(
    version: int = HEADER_V1,
    ledgers_map_offset: int = 0,
    ledgers_count: int = 0,
    *,
    direct: bool = False,
) -> bytes:
    """Header bytes: 1024 like DefaultEntryLogger, or 4096 with the fake record."""
    size = DIRECT_HEADER_SIZE if direct else HEADER_SIZE
    return EntryLogHeader(version, ledgers_map_offset, ledgers_count, size).build()


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record found by scanning. ``position`` is where its size field starts."""

    position: int
    size: int
    ledger_id: int
    entry_id: int

    @property
    def offset(self) -> int:
        """Where the body starts: the offset part of the entry's location."""
        return self.position + SIZE.size

    @property
    def end(self) -> int:
        return self.position + SIZE.size + self.size

    @property
    def is_meta(self) -> bool:
        """A ledgers-map record or the fake record of a direct header (ledger id -1)."""
        return self.ledger_id == INVALID_LEDGER_ID

    def location(self, log_id: int) -> int:
        return make_location(log_id, self.offset)


def frame(entry: bytes | memoryview) -> bytes:
    """One record: the 4-byte size, then the entry."""
    return SIZE.pack(len(entry)) + bytes(entry)


def padding(position: int, alignment: int = DIRECT_ALIGNMENT) -> bytes:
    """0xF0 bytes from ``position`` up to the next multiple of ``alignment``."""
    return bytes([PADDING_BYTE]) * (-position % alignment)


def _problem(problems: list[Problem] | None, offset: int, message: str, expected: str) -> None:
    if problems is None:
        raise CorruptEntryError(LAYER, offset, expected, message)
    problems.append(Problem("error", LAYER, offset, message))


def _skip_padding(win: Window, pos: int) -> int:
    """From ``pos`` where the i32 is <= 0, the first position whose i32 is > 0.

    Same result as BookKeeper's one-byte-at-a-time loop: an i32 is negative when its first
    byte is >= 0x80 and zero when all four bytes are zero; any other i32 is positive.
    Returns a position with fewer than 4 bytes left when the input ends first.
    """
    while True:
        chunk = win.get(pos, win.chunk)
        if len(chunk) < SIZE.size:
            return pos
        if chunk[0] >= 0x80:
            match = _NOT_HIGH.search(chunk)
            pos += match.start() if match else len(chunk)
        elif chunk[:4] == b"\0\0\0\0":
            match = _NOT_ZERO.search(chunk)
            pos += max(1, (match.start() if match else len(chunk)) - 3)
        else:
            return pos


def scan_records(
    read_at: ReadAt,
    file_size: int,
    start: int = HEADER_SIZE,
    *,
    include_meta: bool = False,
    problems: list[Problem] | None = None,
) -> Iterator[LogRecord]:
    """Walk the records of a log in file order, as BookKeeper's ``scanEntryLog`` does.

    Starts at ``start`` (1024; a direct header's fake record then jumps to 4096), treats
    any position whose i32 is <= 0 as padding, and stops at the end of the data. Records
    with ledger id -1 (ledgers map, fake header record) are yielded only with
    ``include_meta``. A record cut short by the end of the file, a size below 16 or a
    ledger id below -1 is a problem: appended to ``problems`` (scan goes on where it can),
    or raised as CorruptEntryError when ``problems`` is None.
    """
    win = Window(read_at, file_size)
    pos = start
    while pos < file_size:
        head = win.get(pos, RECORD_HEAD.size)
        if len(head) < SIZE.size:
            if any(0 < b < 0x80 for b in head):
                _problem(problems, pos, f"{len(head)} trailing bytes", "a record size")
            return
        size = SIZE.unpack_from(head)[0]
        if size <= 0:
            pos = _skip_padding(win, pos)
            continue
        if len(head) < LEDGER_ID_END:
            left = file_size - pos
            _problem(problems, pos, f"{left} bytes left: record cut short", "a record header")
            return
        if pos + SIZE.size + size > file_size:
            left = file_size - pos - SIZE.size
            _problem(
                problems,
                pos,
                f"record of {size} bytes with {left} bytes left: truncated",
                f"{size} bytes of record body",
            )
            return
        if len(head) < RECORD_HEAD.size:
            head = head + bytes(RECORD_HEAD.size - len(head))
        _, ledger_id, entry_id = RECORD_HEAD.unpack(head)
        if ledger_id < INVALID_LEDGER_ID or (ledger_id >= 0 and size < MIN_SANE_ENTRY_SIZE):
            _problem(
                problems,
                pos,
                f"implausible record (size {size}, ledger id {ledger_id}); skipped",
                "a record with size >= 16 and ledger id >= -1",
            )
        elif ledger_id >= 0 or include_meta:
            yield LogRecord(pos, size, ledger_id, entry_id)
        pos += SIZE.size + size


def check_entry_size(size: int, offset: int, layer: str = LAYER) -> None:
    """Refuse a stored entry larger than a bookie frame (the maximum message size plus
    10 KiB), before it is read: no bookie could serve it (BookKeeper's EntryLogger
    sanity-checks entries against ``maxSaneEntrySize``, its frame size less 500 bytes,
    and Pulsar's client reads frames of at most maxMessageSize plus the padding)."""
    cap = limits.max_frame()
    if size > cap:
        raise CorruptEntryError(
            layer,
            offset,
            f"an entry of at most {cap} bytes (the maximum message size plus 10 KiB; "
            "raise it with --max-message-size)",
            f"size {size}",
        )


def check_entry_head(
    head: bytes, offset: int, ledger_id: int | None = None, entry_id: int | None = None
) -> int:
    """Validate the 20 bytes before and at a location; return the entry size.

    ``head`` holds the size field and the first 16 bytes of the entry, read from
    ``offset - 4``; this is BookKeeper's ``validateEntry``.
    """
    if len(head) < RECORD_HEAD.size:
        raise CorruptEntryError(
            LAYER, offset - SIZE.size, "a size field and entry header", f"{len(head)} bytes"
        )
    size, found_ledger, found_entry = RECORD_HEAD.unpack(head)
    if size < MIN_SANE_ENTRY_SIZE:
        raise CorruptEntryError(LAYER, offset - SIZE.size, "an entry size >= 16", str(size))
    check_entry_size(size, offset - SIZE.size)
    if (ledger_id is not None and found_ledger != ledger_id) or (
        entry_id is not None and found_entry != entry_id
    ):
        raise CorruptEntryError(
            LAYER,
            offset,
            f"ledger {ledger_id} entry {entry_id}",
            f"ledger {found_ledger} entry {found_entry}",
        )
    return size


def read_entry(
    read_at: ReadAt,
    offset: int,
    ledger_id: int | None = None,
    entry_id: int | None = None,
) -> bytes:
    """The entry whose body starts at ``offset``, checked like BookKeeper's ``readEntry``."""
    if offset < SIZE.size:
        raise CorruptEntryError(LAYER, offset, "an entry offset >= 4", str(offset))
    head = read_at(offset - SIZE.size, RECORD_HEAD.size)
    size = check_entry_head(head, offset, ledger_id, entry_id)
    return read_exact(read_at, offset, size, LAYER, f"entry of ledger {ledger_id}")


def build_ledgers_map(sizes: Mapping[int, int] | Iterable[tuple[int, int]]) -> bytes:
    """The ledgers-map records for ``{ledger_id: bytes}``, 10 000 pairs per record."""
    pairs = list(sizes.items() if isinstance(sizes, Mapping) else sizes)
    out = bytearray()
    for at in range(0, len(pairs), LEDGERS_MAP_MAX_BATCH):
        batch = pairs[at : at + LEDGERS_MAP_MAX_BATCH]
        body = LEDGERS_MAP_HEAD.size - SIZE.size + LEDGERS_MAP_PAIR.size * len(batch)
        out += LEDGERS_MAP_HEAD.pack(body, INVALID_LEDGER_ID, LEDGERS_MAP_ENTRY_ID, len(batch))
        for ledger_id, size in batch:
            out += LEDGERS_MAP_PAIR.pack(ledger_id, size)
    return bytes(out)


def parse_ledgers_map_record(buf: bytes | memoryview, position: int = 0) -> list[tuple[int, int]]:
    """The ``(ledger_id, bytes)`` pairs of one ledgers-map record (size field included)."""
    if len(buf) < LEDGERS_MAP_HEAD.size:
        raise CorruptEntryError(LAYER, position, "a ledgers-map record header", f"{len(buf)} bytes")
    size, ledger_id, entry_id, count = LEDGERS_MAP_HEAD.unpack_from(buf, 0)
    if ledger_id != INVALID_LEDGER_ID:
        raise CorruptEntryError(LAYER, position + 4, "ledger id -1 in ledgers map", str(ledger_id))
    if entry_id != LEDGERS_MAP_ENTRY_ID:
        raise CorruptEntryError(LAYER, position + 12, "entry id -2 in ledgers map", str(entry_id))
    expected = LEDGERS_MAP_HEAD.size - SIZE.size + LEDGERS_MAP_PAIR.size * count
    if count < 0 or size != expected or len(buf) < SIZE.size + size:
        raise CorruptEntryError(
            LAYER, position, f"{count} pairs in a record of {expected} bytes", f"{size} bytes"
        )
    return [
        LEDGERS_MAP_PAIR.unpack_from(buf, LEDGERS_MAP_HEAD.size + LEDGERS_MAP_PAIR.size * i)
        for i in range(count)
    ]


def read_ledgers_map(
    read_at: ReadAt, file_size: int, header: EntryLogHeader
) -> dict[int, int] | None:
    """The ledgers map of a rotated log: ``{ledger_id: bytes}``; None if it has none.

    Follows ``extractEntryLogMetadataFromIndex``: records from ``map_offset`` until a size
    <= 0 or the end of the file; the ledger count must match the header.
    """
    if not header.has_ledgers_map:
        return None
    sizes: dict[int, int] = {}
    pos = header.ledgers_map_offset
    max_size = LEDGERS_MAP_HEAD.size + LEDGERS_MAP_PAIR.size * LEDGERS_MAP_MAX_BATCH
    while pos + SIZE.size <= file_size:
        size = SIZE.unpack(read_exact(read_at, pos, SIZE.size, LAYER, "ledgers-map size"))[0]
        if size <= 0:
            break
        if size > max_size:
            raise CorruptEntryError(
                LAYER, pos, f"a ledgers-map record of at most {max_size} bytes", str(size)
            )
        record = read_exact(read_at, pos, SIZE.size + size, LAYER, "ledgers-map record")
        for ledger_id, ledger_bytes in parse_ledgers_map_record(record, pos):
            sizes[ledger_id] = sizes.get(ledger_id, 0) + ledger_bytes
        pos += SIZE.size + size
    if len(sizes) != header.ledgers_count:
        raise CorruptEntryError(
            LAYER,
            header.ledgers_map_offset,
            f"{header.ledgers_count} ledgers in the ledgers map (header)",
            str(len(sizes)),
        )
    return sizes


def ledger_sizes(records: Iterable[LogRecord]) -> dict[int, int]:
    """``{ledger_id: bytes}`` computed from scanned records, as the ledgers map counts them."""
    sizes: dict[int, int] = {}
    for record in records:
        if not record.is_meta:
            sizes[record.ledger_id] = sizes.get(record.ledger_id, 0) + SIZE.size + record.size
    return sizes
