"""Hadoop SequenceFile version 6, as Pulsar's filesystem offloader writes it.

The layout follows Hadoop's ``org.apache.hadoop.io.SequenceFile`` (``Writer``,
``RecordCompressWriter``, ``BlockCompressWriter``, ``Reader``) and
``org.apache.hadoop.io.WritableUtils`` (VInts); integers are big-endian:

* header: ``"SEQ" 06 | Text keyClass | Text valueClass | bool compressed |
  bool blockCompressed | Text codecClass (when compressed) | i32 metadataCount |
  metadataCount x (Text, Text) | 16-byte sync``; a Text is ``VInt length | UTF-8``;
* records (not compressed, or RECORD compression): ``i32 recordLength | i32 keyLength |
  key | value`` with the value compressed by the codec under RECORD compression; an
  ``i32 -1 | sync`` may stand before any record;
* BLOCK compression: each block ``i32 -1 | sync | VInt n | VInt len | codec(key lengths) |
  VInt len | codec(keys) | VInt len | codec(value lengths) | VInt len | codec(values)``,
  the lengths as VInts.

Only Hadoop's ``DefaultCodec`` (zlib, what Pulsar's shipped profile and Hadoop's default
use) is read; another codec is refused in one line (:data:`CODEC_NEEDS` says what each
would need). Memory is bounded whatever a file claims: a length is checked against the
bytes left before anything is read, and compressed buffers are inflated incrementally,
one record at a time, each at most :func:`record_limit` bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pulsarctl_py.decoders import limits
from pulsarctl_py.errors import CorruptEntryError, UnsupportedCodec

LAYER = "sequence-file"
MAGIC = b"SEQ"
#: the version Hadoop has written since 0.x with metadata (BLOCK_COMPRESS_VERSION is 4,
#: CUSTOM_COMPRESS_VERSION 5, VERSION_WITH_METADATA 6); Pulsar's offloader writes 6
VERSION = 6
SYNC_ESCAPE = -1
SYNC_SIZE = 16
DEFAULT_CODEC = "org.apache.hadoop.io.compress.DefaultCodec"
#: what reading another Hadoop codec would need (none is used by Pulsar's profile)
CODEC_NEEDS = {
    "org.apache.hadoop.io.compress.GzipCodec": "gzip members per buffer",
    "org.apache.hadoop.io.compress.BZip2Codec": "bzip2 streams",
    "org.apache.hadoop.io.compress.SnappyCodec": "Hadoop's BlockCompressorStream framing "
    "around Snappy",
    "org.apache.hadoop.io.compress.Lz4Codec": "Hadoop's BlockCompressorStream framing around LZ4",
    "org.apache.hadoop.io.compress.ZStandardCodec": "zstd frames",
}
#: a header's Text fields (class names) and metadata are small; a larger claim is damage
MAX_TEXT = 64 * 1024
MAX_METADATA_ENTRIES = 1024

_I32 = struct.Struct(">i")


def record_limit() -> int:
    """The largest key or value a record may hold: one frame of the broker's maximum
    message size (an offloaded entry is one BookKeeper entry)."""
    return limits.max_frame()


@dataclass(frozen=True, slots=True)
class Header:
    key_class: str
    value_class: str
    compressed: bool
    block_compressed: bool
    codec: str | None
    metadata: dict[str, str]
    sync: bytes
    length: int  # bytes; the first record or block starts here

    @property
    def compression(self) -> str:
        """NONE, RECORD or BLOCK (Hadoop's SequenceFile.CompressionType)."""
        if not self.compressed:
            return "NONE"
        return "BLOCK" if self.block_compressed else "RECORD"


@dataclass(frozen=True, slots=True)
class Record:
    """One key/value pair; ``offset`` is where its record (or its block) starts."""

    key: bytes
    value: bytes
    offset: int


@dataclass(slots=True)
class _Cursor:
    """Reads a bounded buffer, refusing any claim past its end."""

    data: memoryview
    pos: int
    end: int
    name: str
    base: int = 0  # the file offset of data[0], for messages
    what: list[str] = field(default_factory=list)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            left = self.end - self.pos
            raise CorruptEntryError(
                LAYER,
                self.base + self.pos,
                f"{n} bytes of {what}",
                f"{max(left, 0)} bytes left in {self.name}",
            )

    def take(self, n: int, what: str) -> memoryview:
        self.need(n, what)
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i32(self, what: str) -> int:
        return _I32.unpack(self.take(4, what))[0]

    def vlong(self, what: str) -> int:
        first = self.take(1, what)[0]
        return _vlong_rest(first, lambda n: self.take(n, what))


def _vlong_rest(first: int, take: Callable[[int], bytes | memoryview]) -> int:
    """Hadoop's WritableUtils.readVLong given its first byte."""
    b = first - 256 if first > 127 else first
    if b >= -112:
        return b
    size = -119 - b if b < -120 else -111 - b  # decodeVIntSize
    rest = bytes(take(size - 1))
    value = int.from_bytes(rest, "big")
    return value ^ -1 if b < -120 else value


def write_vlong(value: int) -> bytes:
    """Hadoop's WritableUtils.writeVLong (for the tests' writer and for round trips)."""
    if -112 <= value <= 127:
        return struct.pack(">b", value)
    length = -112
    if value < 0:
        value ^= -1
        length = -120
    tmp = value
    while tmp != 0:
        tmp >>= 8
        length -= 1
    size = -(length + 120) if length < -120 else -(length + 112)
    return struct.pack(">b", length) + value.to_bytes(size, "big")


def parse_header(data: bytes | memoryview, name: str) -> Header:
    """The header of a SequenceFile in ``data``; wrong magic or version, an unknown
    codec or a damaged header raise one line."""
    mv = memoryview(data)
    if len(mv) < 4 or bytes(mv[:3]) != MAGIC:
        raise CorruptEntryError(
            LAYER, 0, f"a Hadoop SequenceFile ({name} starting with SEQ)", bytes(mv[:4]).hex()
        )
    if mv[3] != VERSION:
        raise CorruptEntryError(
            LAYER,
            3,
            f"SequenceFile version {VERSION} (what Pulsar's filesystem offloader writes)",
            f"version {mv[3]} in {name}",
        )
    cur = _Cursor(mv, 4, len(mv), name)
    key_class = _text(cur, "the key class")
    value_class = _text(cur, "the value class")
    compressed = bool(cur.take(1, "the compressed flag")[0])
    block = bool(cur.take(1, "the block-compressed flag")[0])
    codec = _text(cur, "the codec class") if compressed else None
    count = cur.i32("the metadata count")
    if not 0 <= count <= MAX_METADATA_ENTRIES:
        raise CorruptEntryError(
            LAYER, cur.pos - 4, f"0 to {MAX_METADATA_ENTRIES} metadata entries", str(count)
        )
    metadata = {}
    for _ in range(count):
        k = _text(cur, "a metadata key")
        metadata[k] = _text(cur, "a metadata value")
    sync = bytes(cur.take(SYNC_SIZE, "the sync marker"))
    if codec is not None and codec != DEFAULT_CODEC:
        need = CODEC_NEEDS.get(codec, "its own decompressor")
        raise UnsupportedCodec(
            f"{name}: compression codec {codec} is not supported (only {DEFAULT_CODEC}, "
            f"zlib, as Pulsar's offloader profile writes; it would need {need})"
        )
    return Header(key_class, value_class, compressed, block, codec, metadata, sync, cur.pos)


def _text(cur: _Cursor, what: str) -> str:
    n = cur.vlong(f"the length of {what}")
    if not 0 <= n <= MAX_TEXT:
        raise CorruptEntryError(LAYER, cur.pos, f"{what} of 0 to {MAX_TEXT} bytes", f"{n} bytes")
    raw = cur.take(n, what)
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptEntryError(LAYER, cur.pos - n, f"{what} in UTF-8", "other bytes") from None


class _Inflater:
    """One codec buffer of a block, inflated as it is read (never more than asked)."""

    def __init__(self, data: memoryview, offset: int, name: str, what: str) -> None:
        self.z = zlib.decompressobj()
        self.pending = data
        self.buf = b""
        self.offset = offset
        self.name = name
        self.what = what

    def take(self, n: int) -> bytes:
        while len(self.buf) < n:
            try:
                if self.z.unconsumed_tail:
                    chunk = self.z.decompress(self.z.unconsumed_tail, n - len(self.buf))
                elif self.pending:
                    src, self.pending = self.pending, memoryview(b"")
                    chunk = self.z.decompress(src, n - len(self.buf))
                else:
                    chunk = b""
            except zlib.error as exc:
                raise CorruptEntryError(
                    LAYER, self.offset, f"zlib data ({self.what})", f"damaged ({exc})"
                ) from None
            if not chunk:
                raise CorruptEntryError(
                    LAYER,
                    self.offset,
                    f"{n} more bytes of {self.what}",
                    f"{len(self.buf)} bytes when inflated",
                )
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def vlong(self) -> int:
        return _vlong_rest(self.take(1)[0], self.take)

    def finish(self) -> None:
        """The buffer must end where its records do, its zlib stream whole (its Adler-32
        checked): anything else is damage."""
        if self.buf:
            raise CorruptEntryError(
                LAYER, self.offset, f"the end of {self.what}", "more bytes than its records"
            )
        while not self.z.eof:
            src = self.z.unconsumed_tail or self.pending
            self.pending = memoryview(b"")
            try:
                extra = self.z.decompress(src, 1)
            except zlib.error as exc:
                raise CorruptEntryError(
                    LAYER, self.offset, f"zlib data ({self.what})", f"damaged ({exc})"
                ) from None
            if extra:
                raise CorruptEntryError(
                    LAYER, self.offset, f"the end of {self.what}", "more bytes than its records"
                )
            if not self.z.unconsumed_tail and not self.z.eof:
                raise CorruptEntryError(
                    LAYER, self.offset, f"a whole zlib stream ({self.what})", "a truncated one"
                )


def _inflate_whole(data: memoryview, limit: int, offset: int, what: str) -> bytes:
    """A RECORD-compressed value, at most ``limit`` bytes once inflated."""
    z = zlib.decompressobj()
    try:
        out = z.decompress(data, limit + 1)
    except zlib.error as exc:
        raise CorruptEntryError(LAYER, offset, f"zlib data ({what})", f"damaged ({exc})") from None
    if len(out) > limit:
        raise CorruptEntryError(LAYER, offset, f"{what} of at most {limit} bytes", "more")
    if not z.eof:
        raise CorruptEntryError(LAYER, offset, f"a whole zlib stream ({what})", "a truncated one")
    return out


class SequenceFile:
    """Records of one SequenceFile held in ``data`` (bytes or a memory map)."""

    def __init__(
        self,
        data: bytes | memoryview,
        name: str,
        check: Callable[[int, int], None] | None = None,
    ) -> None:
        """``check(start, end)``, when given, is called on the bytes of each record or
        block before its records are yielded (a checksum side file), and on the header's."""
        self.data = memoryview(data)
        self.name = name
        self.check = check
        self.header = parse_header(self.data, name)
        if check is not None:
            check(0, self.header.length)

    @property
    def size(self) -> int:
        return len(self.data)

    def records(self, offset: int | None = None) -> Iterator[Record]:
        """Every record from ``offset`` (a record's or a block's start, or a sync
        marker's; default: the first) to the end of the file."""
        start = self.header.length if offset is None else offset
        if not self.header.length <= start <= self.size:
            raise CorruptEntryError(
                LAYER,
                start,
                f"an offset within the records of {self.name} "
                f"({self.header.length} to {self.size})",
                str(start),
            )
        cur = _Cursor(self.data, start, self.size, self.name)
        if self.header.block_compressed:
            yield from self._blocks(cur)
        else:
            yield from self._records(cur)

    def _sync(self, cur: _Cursor) -> None:
        at = cur.pos
        found = bytes(cur.take(SYNC_SIZE, "a sync marker"))
        if found != self.header.sync:
            raise CorruptEntryError(
                LAYER, at, f"the sync marker {self.header.sync.hex()}", found.hex()
            )

    def _records(self, cur: _Cursor) -> Iterator[Record]:
        limit = record_limit()
        while cur.pos < cur.end:
            at = cur.pos
            length = cur.i32("a record length")
            if length == SYNC_ESCAPE:
                self._sync(cur)
                continue
            key_len = cur.i32("a key length")
            if not 0 <= key_len <= length or length - key_len > limit + 64:
                raise CorruptEntryError(
                    LAYER,
                    at,
                    f"a record of at most {limit} bytes with its key inside",
                    f"record length {length}, key length {key_len}",
                )
            cur.need(length, "a record")
            if self.check is not None:
                self.check(at, cur.pos + length)
            key = bytes(cur.take(key_len, "a key"))
            raw = cur.take(length - key_len, "a value")
            if self.header.compressed:
                value = _inflate_whole(raw, limit + 4, at, "a record's value")
            else:
                value = bytes(raw)
            yield Record(key, value, at)

    def _blocks(self, cur: _Cursor) -> Iterator[Record]:
        limit = record_limit()
        while cur.pos < cur.end:
            at = cur.pos
            if cur.i32("a block's sync escape") != SYNC_ESCAPE:
                raise CorruptEntryError(LAYER, at, "a block starting with i32 -1 | sync", "other")
            self._sync(cur)
            count = cur.vlong("a block's record count")
            if count < 1:
                raise CorruptEntryError(LAYER, at, "a block of 1 or more records", str(count))
            parts = []
            for what in ("key lengths", "keys", "value lengths", "values"):
                n = cur.vlong(f"the length of a block's {what}")
                parts.append(_Inflater(cur.take(n, f"a block's {what}"), at, self.name, what))
            if self.check is not None:
                self.check(at, cur.pos)
            key_lens, keys, value_lens, values = parts
            for _ in range(count):
                klen = key_lens.vlong()
                vlen = value_lens.vlong()
                if not 0 <= klen <= limit or not 0 <= vlen <= limit + 4:
                    raise CorruptEntryError(
                        LAYER,
                        at,
                        f"keys and values of at most {limit} bytes",
                        f"a key of {klen}, a value of {vlen}",
                    )
                yield Record(keys.take(klen), values.take(vlen), at)
            for part in parts:
                part.finish()


def long_key(key: bytes, offset: int) -> int:
    """A LongWritable key: 8 bytes, big-endian, signed."""
    if len(key) != 8:
        raise CorruptEntryError(LAYER, offset, "an 8-byte LongWritable key", f"{len(key)} bytes")
    return int.from_bytes(key, "big", signed=True)


def bytes_value(value: bytes, offset: int) -> bytes:
    """A BytesWritable value: ``i32 length | bytes``, the length matching."""
    if len(value) < 4:
        raise CorruptEntryError(LAYER, offset, "a BytesWritable value", f"{len(value)} bytes")
    n = _I32.unpack_from(value, 0)[0]
    if n != len(value) - 4:
        raise CorruptEntryError(
            LAYER, offset, f"a BytesWritable of {len(value) - 4} bytes", f"length {n}"
        )
    return value[4:]
