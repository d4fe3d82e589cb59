"""Ledger index files (``.idx``) of InterleavedLedgerStorage and SortedLedgerStorage.

Wire grammar (big-endian; BookKeeper ``bookie/FileInfo.java`` (``readHeader``,
``writeHeader``), ``bookie/IndexPersistenceMgr.java`` (``getLedgerName``),
``bookie/LedgerEntryPage.java``)::

    idx          = header locations
    header       = "BKLE" version:i32 key_len:i32 master_key[key_len] state_bits:i32
                   [lac_len:i32 lac_packet[lac_len]]       version 1 only
                   zero[..]                                up to 1024 bytes (START_OF_DATA)
    locations    = location:i64*                           entry e at 1024 + 8*e;
                                                           0 = not on this bookie
    location     = (entry_log_id << 32) | offset           see decoders.entrylog

* ``state_bits`` bit 0 = fenced. ``lac_len`` is 0 (no explicit LAC) or at least 16: the
  explicit-LAC packet (decoders.bookkeeper.parse_lac_packet).
* Pages of 1024 locations (8 KiB) are written whole, so files end in zeros; the last
  entry is the last non-zero location.
* Path under ``<indexDir>/current``: ``<hex((L >> 8) & 0xff)>/<hex(L & 0xff)>/<hex L>.idx``.

See ../shared/spec/formats.md §11.4.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .errors import CorruptEntryError

LAYER = "ledger-index-file"
SIGNATURE = b"BKLE"
V0 = 0
V1 = 1
CURRENT_VERSION = V1
START_OF_DATA = 1024
STATE_FENCED_BIT = 0x1
LAC_METADATA_LENGTH = 16

#: signature, version, master key length: the fixed start of the header
HEADER_HEAD = struct.Struct(">4sii")
I32 = struct.Struct(">i")
LOCATION = struct.Struct(">q")


def ledger_index_path(ledger_id: int) -> str:
    """The file path of a ledger's index, relative to ``<indexDir>/current``."""
    return f"{(ledger_id >> 8) & 0xFF:x}/{ledger_id & 0xFF:x}/{ledger_id:x}.idx"


def parse_index_file_name(name: str) -> int | None:
    """The ledger id of ``<hex id>.idx``, or None for other files."""
    if not name.endswith(".idx"):
        return None
    try:
        return int(name[:-4], 16)
    except ValueError:
        return None


def entry_position(entry_id: int) -> int:
    """Where the location of ``entry_id`` is stored in the file."""
    return START_OF_DATA + LOCATION.size * entry_id


@dataclass(frozen=True, slots=True)
class IndexHeader:
    """The header of a ``.idx`` file."""

    master_key: bytes
    state_bits: int = 0
    explicit_lac: bytes | None = None
    version: int = CURRENT_VERSION

    @property
    def fenced(self) -> bool:
        return bool(self.state_bits & STATE_FENCED_BIT)

    def build(self) -> bytes:
        """The 1024-byte header."""
        out = bytearray(START_OF_DATA)
        HEADER_HEAD.pack_into(out, 0, SIGNATURE, self.version, len(self.master_key))
        pos = HEADER_HEAD.size
        out[pos : pos + len(self.master_key)] = self.master_key
        pos += len(self.master_key)
        I32.pack_into(out, pos, self.state_bits)
        pos += I32.size
        if self.version >= V1:
            lac = self.explicit_lac or b""
            if lac and len(lac) < LAC_METADATA_LENGTH:
                raise CorruptEntryError(
                    LAYER, pos, "an explicit LAC of 16 bytes or more", str(len(lac))
                )
            if pos + I32.size + len(lac) > START_OF_DATA:
                raise CorruptEntryError(LAYER, pos, "a header within 1024 bytes", "too long")
            I32.pack_into(out, pos, len(lac))
            out[pos + I32.size : pos + I32.size + len(lac)] = lac
        elif self.explicit_lac:
            raise CorruptEntryError(LAYER, 4, "version 1 to store an explicit LAC", "version 0")
        return bytes(out)


def parse_header(buf: bytes | memoryview) -> IndexHeader:
    """Decode the header from the first (up to) 1024 bytes of a ``.idx`` file."""
    end = min(len(buf), START_OF_DATA)

    def need(pos: int, size: int, what: str) -> None:
        if pos + size > end or size < 0:
            raise CorruptEntryError(
                LAYER, pos, f"{size} bytes of {what}", f"{end - pos} bytes left"
            )

    need(0, HEADER_HEAD.size, "header")
    signature, version, key_len = HEADER_HEAD.unpack_from(buf, 0)
    if signature != SIGNATURE:
        raise CorruptEntryError(LAYER, 0, "signature 'BKLE'", repr(bytes(signature)))
    if version not in (V0, V1):
        raise CorruptEntryError(LAYER, 4, "header version 0 or 1", str(version))
    if key_len < 0:
        raise CorruptEntryError(LAYER, 8, "a master key length >= 0", str(key_len))
    pos = HEADER_HEAD.size
    need(pos, key_len, "master key")
    master_key = bytes(buf[pos : pos + key_len])
    pos += key_len
    need(pos, I32.size, "state bits")
    state_bits = I32.unpack_from(buf, pos)[0]
    pos += I32.size
    lac = None
    if version >= V1:
        need(pos, I32.size, "explicit LAC length")
        lac_len = I32.unpack_from(buf, pos)[0]
        if lac_len != 0 and lac_len < LAC_METADATA_LENGTH:
            raise CorruptEntryError(LAYER, pos, "explicit LAC length 0 or >= 16", str(lac_len))
        pos += I32.size
        if lac_len:
            need(pos, lac_len, "explicit LAC")
            lac = bytes(buf[pos : pos + lac_len])
    return IndexHeader(master_key, state_bits, lac, version)


def parse_locations(buf: bytes | memoryview, first_entry_id: int = 0) -> Iterator[tuple[int, int]]:
    """``(entry_id, location)`` for each non-zero slot of ``buf``.

    ``buf`` holds consecutive slots starting with the one of ``first_entry_id``; a
    trailing partial slot is ignored.
    """
    count = len(buf) // LOCATION.size
    for i, (location,) in enumerate(LOCATION.iter_unpack(memoryview(buf)[: count * LOCATION.size])):
        if location != 0:
            yield first_entry_id + i, location


def build_locations(locations: Mapping[int, int]) -> bytes:
    """The slots from entry 0 to the highest entry of ``locations`` (missing ones are 0)."""
    if not locations:
        return b""
    if min(locations) < 0:
        raise CorruptEntryError(LAYER, START_OF_DATA, "entry ids >= 0", str(min(locations)))
    out = bytearray(LOCATION.size * (max(locations) + 1))
    for entry_id, location in locations.items():
        LOCATION.pack_into(out, LOCATION.size * entry_id, location)
    return bytes(out)


def build_index_file(header: IndexHeader, locations: Mapping[int, int]) -> bytes:
    """A whole ``.idx`` file: the header, then the location slots."""
    return header.build() + build_locations(locations)
