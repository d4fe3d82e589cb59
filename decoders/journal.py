"""BookKeeper journal files (``<hex journalId>.txn``) and the ``lastMark`` file.

Wire grammar (big-endian; BookKeeper ``bookie/JournalChannel.java`` (header, versions),
``bookie/Journal.java`` (``scanJournal``, ``writePaddingBytes``, ``LastLogMark``),
``bookie/BookieImpl.java`` (meta entries ``METAENTRY_ID_*`` and their replay))::

    journal      = header record* end
    header       = ""                                          V1: no magic
                 | "BKLG" version:i32                          V2-V4: 8 bytes
                 | "BKLG" version:i32 zero[504]                V5, V6: one 512-byte sector
    record       = len:i32 body[len]                           len > 0
                 | pad_mask:i32 (= -0x100) pad_len:i32 filler[pad_len]
                                                               V5+: aligns each flush to
                                                               journalAlignmentSize (512)
    end          = len:i32 (= 0)                               preallocated zeros
                 | end of file | a record cut short            where writing stopped
    body         = entry                                       a digest-packed entry
                                                               (decoders.bookkeeper)
                 | ledger_id:i64 -0x1000:i64 key_len:i32 key[key_len]     master key, V3+
                 | ledger_id:i64 -0x2000:i64                              fence, V4+
                 | ledger_id:i64 -0x8000:i64 lac_len:i32 lac_packet[lac_len]
                                                               explicit LAC, V6
                 (-0x4000, force ledger, is never written; other negative ids are skipped)
    lastMark     = journal_id:i64 offset:i64                   16 bytes, in each ledger dir

A record's position is that of its ``len`` field (what ``scanJournal`` reports); replay
after a restart starts at the ``lastMark`` offset of the marked journal.
See ../shared/spec/formats.md §11.3.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from ._readat import ReadAt, Window
from .errors import CorruptEntryError
from .nodes import Problem

LAYER = "journal"
MAGIC = b"BKLG"
V1, V2, V3, V4, V5, V6 = 1, 2, 3, 4, 5, 6
CURRENT_VERSION = V6
SECTOR_SIZE = 512
VERSION_HEADER = struct.Struct(">4si")
LEN = struct.Struct(">i")
IDS = struct.Struct(">qq")
#: ledger id, entry id and the i32 length of a master-key or explicit-LAC meta record
META_HEAD = struct.Struct(">qqi")
LAST_MARK = struct.Struct(">qq")
PADDING_MASK = -0x100
PADDING_HEAD = struct.Struct(">ii")
DEFAULT_ALIGNMENT = 512

METAENTRY_ID_LEDGER_KEY = -0x1000
METAENTRY_ID_FENCE_KEY = -0x2000
METAENTRY_ID_FORCE_LEDGER = -0x4000
METAENTRY_ID_LEDGER_EXPLICITLAC = -0x8000


class RecordKind(enum.Enum):
    ENTRY = "entry"
    MASTER_KEY = "master-key"
    FENCE = "fence"
    EXPLICIT_LAC = "explicit-lac"
    FORCE_LEDGER = "force-ledger"
    UNKNOWN_META = "unknown-meta"


_META_KINDS = {
    METAENTRY_ID_LEDGER_KEY: RecordKind.MASTER_KEY,
    METAENTRY_ID_FENCE_KEY: RecordKind.FENCE,
    METAENTRY_ID_FORCE_LEDGER: RecordKind.FORCE_LEDGER,
    METAENTRY_ID_LEDGER_EXPLICITLAC: RecordKind.EXPLICIT_LAC,
}
#: the first journal version that may hold each meta record
_META_MIN_VERSION = {
    RecordKind.MASTER_KEY: V3,
    RecordKind.FENCE: V4,
    RecordKind.EXPLICIT_LAC: V6,
}


def header_size(version: int) -> int:
    """Bytes before the first record: 0 (V1), 8 (V2-V4) or 512 (V5+)."""
    if version >= V5:
        return SECTOR_SIZE
    if version >= V2:
        return VERSION_HEADER.size
    return 0


def parse_header(buf: bytes | memoryview) -> tuple[int, int]:
    """``(version, first record position)`` from the first bytes of a journal.

    Like ``JournalChannel``: no magic (or fewer than 8 bytes) means V1.
    """
    if len(buf) < VERSION_HEADER.size or bytes(buf[:4]) != MAGIC:
        return V1, 0
    version = VERSION_HEADER.unpack_from(buf, 0)[1]
    if not V1 <= version <= CURRENT_VERSION:
        raise CorruptEntryError(LAYER, 4, f"journal version 1 to {CURRENT_VERSION}", str(version))
    return version, header_size(version)


def build_header(version: int = CURRENT_VERSION) -> bytes:
    """The header a journal of ``version`` starts with (empty for V1)."""
    if not V1 <= version <= CURRENT_VERSION:
        raise CorruptEntryError(LAYER, 4, f"journal version 1 to {CURRENT_VERSION}", str(version))
    out = bytearray(header_size(version))
    if out:
        VERSION_HEADER.pack_into(out, 0, MAGIC, version)
    return bytes(out)


def parse_journal_file_name(name: str) -> int | None:
    """The journal id of ``<hex id>.txn``, or None for other files."""
    if not name.endswith(".txn"):
        return None
    try:
        return int(name[:-4], 16)
    except ValueError:
        return None


def journal_file_name(journal_id: int) -> str:
    return f"{journal_id:x}.txn"


def parse_last_mark(buf: bytes | memoryview) -> tuple[int, int]:
    """``(journal_id, offset)`` from a 16-byte ``lastMark`` file."""
    if len(buf) != LAST_MARK.size:
        raise CorruptEntryError("last-mark", 0, "16 bytes", f"{len(buf)} bytes")
    journal_id, offset = LAST_MARK.unpack(buf)
    return journal_id, offset


def build_last_mark(journal_id: int, offset: int) -> bytes:
    return LAST_MARK.pack(journal_id, offset)


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One data or meta record. ``position`` is its length field; the body follows it."""

    position: int
    size: int
    ledger_id: int
    entry_id: int
    kind: RecordKind
    version: int
    master_key: bytes | None = None
    explicit_lac: bytes | None = None

    @property
    def offset(self) -> int:
        """Where the body (the entry for data records) starts."""
        return self.position + LEN.size

    @property
    def end(self) -> int:
        return self.offset + self.size


def classify(entry_id: int) -> RecordKind:
    """The record kind for the entry id at body offset 8."""
    if entry_id >= 0:
        return RecordKind.ENTRY
    return _META_KINDS.get(entry_id, RecordKind.UNKNOWN_META)


def parse_body(
    body: bytes | memoryview, version: int = CURRENT_VERSION, position: int = 0
) -> JournalRecord:
    """Decode a record body (without its length field); ``position`` is the length field's."""
    size = len(body)
    at = position + LEN.size
    if size < IDS.size:
        raise CorruptEntryError(LAYER, at, "a record of at least 16 bytes", f"{size} bytes")
    ledger_id, entry_id = IDS.unpack_from(body, 0)
    kind = classify(entry_id)
    minimum = _META_MIN_VERSION.get(kind)
    if minimum is not None and version < minimum:
        raise CorruptEntryError(
            LAYER, at, f"no {kind.value} record before journal V{minimum}", f"V{version}"
        )
    key = lac = None
    if kind in (RecordKind.MASTER_KEY, RecordKind.EXPLICIT_LAC):
        if size < META_HEAD.size:
            raise CorruptEntryError(LAYER, at, f"a {kind.value} length field", f"{size} bytes")
        length = META_HEAD.unpack_from(body, 0)[2]
        if length < 0 or META_HEAD.size + length > size:
            raise CorruptEntryError(
                LAYER, at, f"{kind.value} of at most {size - META_HEAD.size} bytes", str(length)
            )
        value = bytes(body[META_HEAD.size : META_HEAD.size + length])
        if kind is RecordKind.MASTER_KEY:
            key = value
        else:
            lac = value
    return JournalRecord(position, size, ledger_id, entry_id, kind, version, key, lac)


def build_record(body: bytes | memoryview) -> bytes:
    """A record: the length, then the body (an entry or a meta body)."""
    return LEN.pack(len(body)) + bytes(body)


def build_master_key_body(ledger_id: int, master_key: bytes) -> bytes:
    return META_HEAD.pack(ledger_id, METAENTRY_ID_LEDGER_KEY, len(master_key)) + master_key


def build_fence_body(ledger_id: int) -> bytes:
    return IDS.pack(ledger_id, METAENTRY_ID_FENCE_KEY)


def build_explicit_lac_body(ledger_id: int, lac_packet: bytes) -> bytes:
    return META_HEAD.pack(ledger_id, METAENTRY_ID_LEDGER_EXPLICITLAC, len(lac_packet)) + lac_packet


def build_padding(position: int, alignment: int = DEFAULT_ALIGNMENT) -> bytes:
    """The padding record that aligns ``position`` to ``alignment`` (``writePaddingBytes``).

    Empty when already aligned. The 8-byte record head counts toward the alignment; when
    fewer than 8 bytes are missing the padding runs to the boundary after the next one.
    """
    missing = -position % alignment
    if missing == 0:
        return b""
    pad_len = (
        missing - PADDING_HEAD.size
        if missing >= PADDING_HEAD.size
        else (alignment - (PADDING_HEAD.size - missing))
    )
    return PADDING_HEAD.pack(PADDING_MASK, pad_len) + bytes(pad_len)


def _problem(problems: list[Problem] | None, offset: int, message: str, expected: str) -> None:
    if problems is None:
        raise CorruptEntryError(LAYER, offset, expected, message)
    problems.append(Problem("error", LAYER, offset, message))


def scan_records(
    read_at: ReadAt,
    file_size: int,
    start: int | None = None,
    *,
    problems: list[Problem] | None = None,
) -> Iterator[JournalRecord]:
    """The records of a journal in order, as ``Journal.scanJournal`` reads them.

    ``start`` defaults to the first record after the header (a ``lastMark`` offset resumes
    there). Stops at a zero length, at the end of the file, or at a record cut short (where
    writing stopped: not a problem). A negative length other than V5+ padding, or a body
    that does not decode, is a problem: appended to ``problems`` (the scan stops or skips
    the record), or raised as CorruptEntryError when ``problems`` is None. Entry bodies are
    not read: use ``record.offset`` and ``record.size``.
    """
    head = read_at(0, VERSION_HEADER.size)
    try:
        version, data_start = parse_header(head)
    except CorruptEntryError as exc:
        _problem(problems, exc.offset, exc.found, exc.expected)
        return
    pos = data_start if start is None or start <= 0 else start
    win = Window(read_at, file_size)
    while pos + LEN.size <= file_size:
        length = LEN.unpack(win.get(pos, LEN.size))[0]
        if length == 0:
            return
        if length < 0:
            if length != PADDING_MASK or version < V5:
                _problem(
                    problems,
                    pos,
                    f"negative record length {length} in a V{version} journal",
                    "a record length >= 0",
                )
                return
            pad = win.get(pos + LEN.size, LEN.size)
            if len(pad) < LEN.size:
                return
            pad_len = LEN.unpack(pad)[0]
            if pad_len < 0:
                _problem(problems, pos, f"negative padding length {pad_len}", "padding >= 0")
                return
            pos += PADDING_HEAD.size + pad_len
            continue
        if pos + LEN.size + length > file_size:
            return  # where writing stopped
        if length < IDS.size:
            _problem(problems, pos, f"record of {length} bytes; skipped", "16 bytes or more")
            pos += LEN.size + length
            continue
        ids = win.get(pos + LEN.size, IDS.size)
        entry_id = IDS.unpack(ids)[1]
        if classify(entry_id) is RecordKind.ENTRY:
            ledger_id = IDS.unpack(ids)[0]
            yield JournalRecord(pos, length, ledger_id, entry_id, RecordKind.ENTRY, version)
        else:
            body = (
                win.get(pos + LEN.size, length)
                if length <= 1 << 16
                else read_at(pos + LEN.size, length)
            )
            try:
                yield parse_body(body, version, pos)
            except CorruptEntryError as exc:
                _problem(problems, exc.offset, f"{exc.found}; skipped", exc.expected)
        pos += LEN.size + length
