"""Read one ledger offloaded by Pulsar's jcloud offloader (drivers S3, aws-s3, GCS, Azure).

Wire grammar (apache/pulsar ``tiered-storage/jcloud``; spec formats.md §18), integers
big-endian:

    keys          data  = "<uuid>-ledger-<ledgerId>"                   (DataBlockUtils)
                  index = "<uuid>-ledger-<ledgerId>-index"
    user metadata s3managedledgeroffloaderformatversion = "1" on both objects
                  (DataBlockUtils.VERSION_CHECK; jclouds lowercases the key)
    data object   = block+                       ; one multipart part per block
    block         = header record* padding       ; block_length bytes in all
    header        = magic:u32(0xFBDBABCB) header_length:i64(128) block_length:i64
                    first_entry_id:i64 zero[header_length - 28]   (DataBlockHeaderImpl)
    record        = length:i32 entry_id:i64 bytes[length]
                    ; consecutive ids, never across blocks   (BlockAwareSegmentInputStreamImpl)
    padding       = FE DC DE AD repeated, cut at block_length; read as a length it is
                    negative: the end of the block's records
    index object  = magic:u32(0xDE47DE47) index_length:i32 data_object_length:i64
                    data_header_length:i64 entry_count:i32 metadata_length:i32
                    LedgerMetadataFormat[metadata_length]
                    entry_count x (first_entry_id:i64 part_id:i32 block_offset:i64)
                    ; V1, one index entry per block              (OffloadIndexBlockImpl)

Entry E (``BlobStoreBackedReadHandleImpl.readAsync``): the index entry with the greatest
first_entry_id <= E, seek to block_offset + data_header_length, read records forward
until entry_id == E. The entry bytes are the BookKeeper payload as the broker wrote it
(``[0x0e02 BrokerEntryMetadata] 0x0e01 crc32c MessageMetadata payload``): no bookie
header, no digest. Decode them with ``Outer.PULSAR_ENTRY``.

Reads go through an :class:`ObjectSource` (S3 in :mod:`.s3`) by ranged reads of at most
``window`` bytes (or one entry), never the whole data object; no size read from the
objects is allocated before it is checked against the object's real size.
"""

from __future__ import annotations

import bisect
import struct
import uuid as uuidlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pulsarctl_py.decoders import ledger_metadata
from pulsarctl_py.decoders.errors import DataError, LedgerctlError, NotFoundError, StoreUnavailable
from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata

BLOCK_MAGIC = 0xFBDBABCB
INDEX_MAGIC = 0xDE47DE47
#: the streaming offloader's index (``StreamingOffloadIndexBlockImpl``): multi-ledger
#: segments under ``<uuid>`` / ``<uuid>-index``, not what ``topics offload`` writes
STREAMING_INDEX_MAGIC = 0x3D1FB0BC
#: DataBlockHeaderImpl.HEADER_MAX_SIZE: where a block's records start
HEADER_LENGTH = 128
BLOCK_PADDING = bytes.fromhex("FEDCDEAD")
FORMAT_VERSION_KEY = "s3managedledgeroffloaderformatversion"
FORMAT_VERSION = "1"

BLOCK_HEADER = struct.Struct(">Iqqq")
RECORD_HEADER = struct.Struct(">iq")
INDEX_HEADER = struct.Struct(">Iiqqii")
INDEX_ENTRY = struct.Struct(">qiq")

#: bytes fetched at a time while records are read forward (the broker's
#: ``managedLedgerOffloadReadBufferSizeInBytes`` default is 1 MiB)
DEFAULT_WINDOW = 1 << 20
#: a record's place in its block is remembered every MARK_EVERY records read, so that
#: reading one entry again (a seek's probes) starts from the nearest remembered record
#: before it instead of the block's start, where the broker's reader starts
MARK_EVERY = 16
#: bytes fetched for a read that starts at most MARK_EVERY records before its entry
POINT_WINDOW = 64 << 10
#: the largest index object read (20 bytes per block: 64 MiB holds millions of blocks)
MAX_INDEX_BYTES = 64 << 20


class OffloadFormatError(DataError):
    """An offloaded object that is not what the jcloud offloader writes (exit code 1)."""


class OffloadObjectMissing(NotFoundError):
    """An offload object that the store does not hold (exit code 1)."""


class OffloadUnreachable(StoreUnavailable):
    """The object store of an offloaded ledger could not be reached or refused (exit 3)."""


@dataclass(frozen=True, slots=True)
class ObjectHead:
    """What a HEAD request says of an object: its size and user metadata (lowercased keys)."""

    size: int
    metadata: Mapping[str, str]


class ObjectSource(Protocol):
    """Where offload objects are read from (one bucket)."""

    #: names the store in messages (``s3://bucket at http://endpoint``)
    name: str

    def head(self, key: str) -> ObjectHead:
        """Size and user metadata; raises OffloadObjectMissing, OffloadUnreachable."""
        ...

    def read(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (a ranged read; fewer only at the object's end)."""
        ...


def uuid_of(msb: int, lsb: int) -> str:
    """The offload UUID from ``offloadContext.uidMsb``/``uidLsb`` (Java's signed halves)."""
    return str(uuidlib.UUID(int=((msb & (2**64 - 1)) << 64) | (lsb & (2**64 - 1))))


def data_key(uuid: str, ledger_id: int) -> str:
    """``DataBlockUtils.dataBlockOffloadKey``."""
    return f"{uuid}-ledger-{ledger_id}"


def index_key(uuid: str, ledger_id: int) -> str:
    """``DataBlockUtils.indexBlockOffloadKey``."""
    return f"{uuid}-ledger-{ledger_id}-index"


def check_format_version(head: ObjectHead, where: str) -> None:
    """Refuse an object whose format version is not 1 (``DataBlockUtils.VERSION_CHECK``)."""
    version = {k.lower(): v for k, v in head.metadata.items()}.get(FORMAT_VERSION_KEY)
    if version != FORMAT_VERSION:
        found = "none" if version is None else repr(version)
        raise OffloadFormatError(
            f"{where}: offload format version {found} in the object's metadata "
            f"({FORMAT_VERSION_KEY}); only version {FORMAT_VERSION} is known"
        )


# -- the data block header -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BlockHeader:
    """``DataBlockHeaderImpl``: the first ``header_length`` bytes of a block."""

    header_length: int
    block_length: int
    first_entry_id: int
    magic: int = BLOCK_MAGIC

    @classmethod
    def parse(cls, data: bytes | memoryview) -> BlockHeader:
        if len(data) < BLOCK_HEADER.size:
            raise OffloadFormatError(
                f"a data block header needs {BLOCK_HEADER.size} bytes, found {len(data)}"
            )
        magic, header_length, block_length, first = BLOCK_HEADER.unpack_from(data, 0)
        return cls(header_length, block_length, first, magic)

    def encode(self) -> bytes:
        head = BLOCK_HEADER.pack(
            self.magic, self.header_length, self.block_length, self.first_entry_id
        )
        return head + bytes(max(0, self.header_length - len(head)))


# -- the index object ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One block of the data object (``OffloadIndexEntryImpl``); ``part_id`` is 1-based."""

    first_entry_id: int
    part_id: int
    block_offset: int


@dataclass(slots=True)
class OffloadIndex:
    """The index object of one offloaded ledger (V1)."""

    data_object_length: int
    data_header_length: int
    metadata: LedgerMetadata
    entries: list[IndexEntry]
    index_length: int
    metadata_bytes: bytes = b""
    #: the first ids of ``entries``, for the floor search
    _firsts: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._firsts = [e.first_entry_id for e in self.entries]

    @property
    def last_entry_id(self) -> int:
        return (
            self.metadata.stored_last_entry_id
            if self.metadata.stored_last_entry_id is not None
            else -1
        )

    def block_of(self, entry_id: int) -> int:
        """The position in ``entries`` of the block that holds ``entry_id`` (floor search)."""
        at = bisect.bisect_right(self._firsts, entry_id) - 1
        if at < 0:
            raise NotFoundError(f"entry {entry_id} is before the first offloaded block")
        return at

    def block_extent(self, at: int) -> tuple[int, int]:
        """[start, end) of block ``at`` in the data object."""
        start = self.entries[at].block_offset
        end = (
            self.entries[at + 1].block_offset
            if at + 1 < len(self.entries)
            else self.data_object_length
        )
        return start, end

    def block_last_entry(self, at: int) -> int:
        """The last entry id block ``at`` must hold."""
        if at + 1 < len(self.entries):
            return self.entries[at + 1].first_entry_id - 1
        return self.last_entry_id

    def to_json(self) -> dict[str, Any]:
        return {
            "data_object_length": self.data_object_length,
            "data_header_length": self.data_header_length,
            "index_length": self.index_length,
            "blocks": [
                {"first_entry_id": e.first_entry_id, "part_id": e.part_id, "offset": e.block_offset}
                for e in self.entries
            ],
            "metadata": self.metadata.to_json(),
        }


def parse_index(data: bytes | memoryview, *, data_size: int | None = None) -> OffloadIndex:
    """Decode an index object and check it is consistent with itself (and with the data
    object's real size when ``data_size`` is given). Raises OffloadFormatError."""
    data = bytes(data)
    if len(data) < 4:
        raise OffloadFormatError(f"truncated index object: {len(data)} bytes")
    (magic,) = struct.unpack_from(">I", data, 0)
    if magic == STREAMING_INDEX_MAGIC:
        raise OffloadFormatError(
            "a streaming offloader's segment index (magic 0x3D1FB0BC): not read by ledgerctl"
        )
    if magic != INDEX_MAGIC:
        raise OffloadFormatError(
            f"not an offload index object: magic 0x{magic:08X}, expected 0x{INDEX_MAGIC:08X}"
        )
    if len(data) < INDEX_HEADER.size:
        raise OffloadFormatError(
            f"truncated index object: {len(data)} bytes, its header alone needs {INDEX_HEADER.size}"
        )
    _, index_length, object_length, header_length, count, md_length = INDEX_HEADER.unpack_from(
        data, 0
    )
    if index_length != len(data):
        raise OffloadFormatError(
            f"index object of {len(data)} bytes says it has {index_length}"
            + (" (truncated)" if index_length > len(data) else "")
        )
    if count < 0 or md_length < 0:
        raise OffloadFormatError(
            f"index object with a negative count: {count} blocks, {md_length} metadata bytes"
        )
    need = INDEX_HEADER.size + md_length + count * INDEX_ENTRY.size
    if need != len(data):
        raise OffloadFormatError(
            f"index object of {len(data)} bytes says it holds {md_length} metadata bytes and "
            f"{count} blocks ({need} bytes)"
        )
    if header_length < BLOCK_HEADER.size or object_length < 0:
        raise OffloadFormatError(
            f"index object with data header length {header_length} and data object length "
            f"{object_length}"
        )
    md_at = INDEX_HEADER.size
    try:
        md = ledger_metadata.parse_format(data[md_at : md_at + md_length], md_at)
    except LedgerctlError as exc:
        raise OffloadFormatError(f"index object's ledger metadata: {exc.one_line()}") from None
    entries = [
        IndexEntry(*INDEX_ENTRY.unpack_from(data, md_at + md_length + i * INDEX_ENTRY.size))
        for i in range(count)
    ]
    index = OffloadIndex(
        object_length, header_length, md, entries, index_length, data[md_at : md_at + md_length]
    )
    _check_blocks(index, data_size)
    return index


def _check_blocks(index: OffloadIndex, data_size: int | None) -> None:
    """Blocks in order, inside the data object, each big enough for its header."""
    if data_size is not None and data_size != index.data_object_length:
        raise OffloadFormatError(
            f"the data object has {data_size} bytes, its index says {index.data_object_length}"
        )
    if not index.entries:
        if index.last_entry_id >= 0:
            raise OffloadFormatError(
                f"index object lists no block for entries 0..{index.last_entry_id}"
            )
        return
    previous: IndexEntry | None = None
    for i, entry in enumerate(index.entries):
        start = entry.block_offset
        if not 0 <= start < index.data_object_length:
            raise OffloadFormatError(
                f"index block {i} (entries from {entry.first_entry_id}) points at offset "
                f"{start}, outside the data object of {index.data_object_length} bytes"
            )
        if previous is None:
            if start != 0 or entry.first_entry_id != 0:
                raise OffloadFormatError(
                    f"index block 0 starts at entry {entry.first_entry_id}, offset {start} "
                    "(expected entry 0 at offset 0)"
                )
        elif entry.first_entry_id <= previous.first_entry_id or (
            start - previous.block_offset < index.data_header_length
        ):
            raise OffloadFormatError(
                f"index block {i} (entry {entry.first_entry_id}, offset {start}) does not "
                f"follow block {i - 1} (entry {previous.first_entry_id}, offset "
                f"{previous.block_offset}, a header of {index.data_header_length} bytes)"
            )
        previous = entry
    assert previous is not None
    if index.data_object_length - previous.block_offset < index.data_header_length:
        raise OffloadFormatError(
            f"index block {len(index.entries) - 1} at offset {previous.block_offset} leaves "
            f"less than a block header before the data object's end "
            f"({index.data_object_length} bytes)"
        )
    if index.last_entry_id >= 0 and previous.first_entry_id > index.last_entry_id:
        raise OffloadFormatError(
            f"index's last block starts at entry {previous.first_entry_id}, after the "
            f"ledger's last entry {index.last_entry_id}"
        )


def encode_index(
    metadata_bytes: bytes,
    blocks: list[IndexEntry],
    data_object_length: int,
    data_header_length: int = HEADER_LENGTH,
) -> bytes:
    """An index object as ``OffloadIndexBlockImpl.toStream`` writes it."""
    length = INDEX_HEADER.size + len(metadata_bytes) + len(blocks) * INDEX_ENTRY.size
    head = INDEX_HEADER.pack(
        INDEX_MAGIC,
        length,
        data_object_length,
        data_header_length,
        len(blocks),
        len(metadata_bytes),
    )
    body = b"".join(INDEX_ENTRY.pack(b.first_entry_id, b.part_id, b.block_offset) for b in blocks)
    return head + metadata_bytes + body


# -- entries -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObjectLocation:
    """Where an entry's bytes are in a data object: ``offset`` is the first byte of the
    entry itself (after its 12-byte record header); ``part_id`` is the block's part."""

    key: str
    part_id: int
    offset: int
    size: int
    source: str = "jcloud"

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "key": self.key,
            "part": self.part_id,
            "offset": self.offset,
            "size": self.size,
        }


@dataclass(frozen=True, slots=True)
class OffloadedEntry:
    """One entry as the broker wrote it (no bookie header, no digest)."""

    ledger_id: int
    entry_id: int
    location: ObjectLocation
    data: bytes


@dataclass(frozen=True, slots=True)
class UnreadableOffloadedEntry:
    """An entry the offloaded objects should hold but that cannot be read from them: a
    finding on that entry (a damaged block); the read goes on with the next block."""

    ledger_id: int
    entry_id: int
    reason: str


class _Window:
    """Ranged reads of one object, ``window`` bytes at a time, never past ``limit``."""

    def __init__(self, source: ObjectSource, key: str, window: int) -> None:
        self.source = source
        self.key = key
        self.window = window
        self.start = 0
        self.buffer = b""
        self.requests = 0
        self.fetched = 0

    def read(self, offset: int, length: int, limit: int, window: int | None = None) -> bytes:
        end = offset + length
        if self.start <= offset and end <= self.start + len(self.buffer):
            return self.buffer[offset - self.start : end - self.start]
        want = min(max(length, window or self.window), limit - offset)
        data = self.source.read(self.key, offset, want)
        self.requests += 1
        self.fetched += len(data)
        if len(data) < length:
            raise OffloadFormatError(
                f"{self.key}: {length} bytes at offset {offset} asked, the object returned "
                f"{len(data)} (truncated object)"
            )
        if length >= self.window:  # one large entry: keep no copy of it
            return data[:length]
        self.start, self.buffer = offset, data
        return data[:length]


class _BlockDamage(Exception):
    """Internal: the rest of a block cannot be read (the entries from ``entry_id`` on)."""

    def __init__(self, entry_id: int, reason: str) -> None:
        self.entry_id = entry_id
        self.reason = reason


class JcloudLedger:
    """One offloaded ledger in a jcloud object store, read by entry id through its index.

    ``open`` reads the index object (HEAD both objects for size and format version, then
    the index) and checks it; :meth:`read_entries` reads the data object by ranged reads.
    Errors: OffloadObjectMissing (an object is not there), OffloadFormatError (an object
    that is not a readable offload: truncated, wrong magic or version, an index pointing
    outside the data object), OffloadUnreachable (exit 3: the store did not answer).
    """

    def __init__(
        self,
        source: ObjectSource,
        ledger_id: int,
        uuid: str,
        *,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        self.source = source
        self.ledger_id = ledger_id
        self.uuid = uuid
        self.data_key = data_key(uuid, ledger_id)
        self.index_key = index_key(uuid, ledger_id)
        self.window = window
        self._index: OffloadIndex | None = None
        self._reader = _Window(source, self.data_key, window)
        #: per block read: (entry id, record offset) of every MARK_EVERY-th record read,
        #: in order, the first being the block's first record (its header checked)
        self._marks: dict[int, list[tuple[int, int]]] = {}

    def _where(self, key: str) -> str:
        return f"ledger {self.ledger_id}: {key} in {self.source.name}"

    def _call(self, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OffloadUnreachable as exc:
            raise OffloadUnreachable(f"ledger {self.ledger_id}: {exc.one_line()}") from None
        except (OffloadObjectMissing, OffloadFormatError) as exc:
            raise type(exc)(f"{self._where(key)}: {exc.one_line()}") from None

    @property
    def index(self) -> OffloadIndex:
        if self._index is None:
            self._index = self._open()
        return self._index

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger metadata embedded in the index object."""
        return self.index.metadata

    @property
    def requests(self) -> int:
        """Ranged reads of the data object made so far."""
        return self._reader.requests

    def _open(self) -> OffloadIndex:
        head = self._call(self.index_key, self.source.head, self.index_key)
        self._call(self.index_key, check_format_version, head, "index object")
        if head.size > MAX_INDEX_BYTES:
            raise OffloadFormatError(
                f"{self._where(self.index_key)}: an index object of {head.size} bytes "
                f"(more than {MAX_INDEX_BYTES}): not an offload index"
            )
        data_head = self._call(self.data_key, self.source.head, self.data_key)
        self._call(self.data_key, check_format_version, data_head, "data object")
        raw = self._call(self.index_key, self.source.read, self.index_key, 0, head.size)
        return self._call(self.index_key, parse_index, raw[: head.size], data_size=data_head.size)

    def read_entries(
        self, first: int = 0, last: int | None = None
    ) -> Iterator[OffloadedEntry | UnreadableOffloadedEntry]:
        """The entries in [first, last] (``last`` None: the ledger's last), in order.

        A damaged block yields an :class:`UnreadableOffloadedEntry` for each of its
        entries in the range that could not be read, and the read goes on with the next
        block.
        """
        index = self.index
        end = index.last_entry_id if last is None else last
        if first < 0 or end > index.last_entry_id:
            raise NotFoundError(
                f"ledger {self.ledger_id}: entries {first}..{end} asked, the offloaded "
                f"ledger holds 0..{index.last_entry_id}"
            )
        if first > end:
            return
        at = index.block_of(first)
        while at < len(index.entries):
            block_first = index.entries[at].first_entry_id
            if block_first > end:
                return
            block_last = min(index.block_last_entry(at), end)
            next_id = max(first, block_first)
            try:
                for item in self._block(at, next_id, block_last):
                    next_id = item.entry_id + 1
                    yield item
            except _BlockDamage as damage:
                for entry_id in range(max(next_id, damage.entry_id), block_last + 1):
                    yield UnreadableOffloadedEntry(self.ledger_id, entry_id, damage.reason)
            at += 1

    def read_entry(self, entry_id: int) -> OffloadedEntry:
        """One entry; a damaged block raises OffloadFormatError naming the entry."""
        for item in self.read_entries(entry_id, entry_id):
            if isinstance(item, UnreadableOffloadedEntry):
                raise OffloadFormatError(f"{self._where(self.data_key)}: {item.reason}")
            return item
        raise NotFoundError(f"ledger {self.ledger_id}: entry {entry_id} not offloaded")

    def _block(self, at: int, first: int, last: int) -> Iterator[OffloadedEntry]:
        """Entries [first, last] of block ``at`` (all of them inside it)."""
        index = self.index
        block = index.entries[at]
        start, end = index.block_extent(at)
        marks = self._marks.get(at)
        if marks is None:
            self._check_header(at, start, end)
            marks = self._marks[at] = [(block.first_entry_id, start + index.data_header_length)]
        # from the nearest record before ``first`` whose place is known: its records were
        # read (and checked) when it was marked
        entry_id, pos = marks[bisect.bisect_right(marks, (first, end)) - 1]
        window = min(POINT_WINDOW, self.window) if last - entry_id < MARK_EVERY else None

        def read(offset: int, length: int, limit: int) -> bytes:
            return self._read(offset, length, limit, window)

        while entry_id <= last:
            if (entry_id - block.first_entry_id) % MARK_EVERY == 0 and entry_id > marks[-1][0]:
                marks.append((entry_id, pos))
            if pos + RECORD_HEADER.size > end:
                raise _BlockDamage(
                    entry_id,
                    f"data block {block.part_id} ends at offset {end} before entry {entry_id}",
                )
            length, stored_id = RECORD_HEADER.unpack(read(pos, RECORD_HEADER.size, end))
            if length < 0:
                raise _BlockDamage(
                    entry_id,
                    f"data block {block.part_id}: its records end at offset {pos}, before "
                    f"entry {entry_id}",
                )
            if stored_id != entry_id:
                raise _BlockDamage(
                    entry_id,
                    f"data block {block.part_id}: record at offset {pos} holds entry id "
                    f"{stored_id}, expected {entry_id}",
                )
            body = pos + RECORD_HEADER.size
            if body + length > end:
                raise _BlockDamage(
                    entry_id,
                    f"data block {block.part_id}: entry {entry_id} at offset {pos} claims "
                    f"{length} bytes, past the block's end at {end}",
                )
            if entry_id >= first:
                data = read(body, length, end)
                location = ObjectLocation(self.data_key, block.part_id, body, length)
                yield OffloadedEntry(self.ledger_id, entry_id, location, data)
            pos = body + length
            entry_id += 1

    def _check_header(self, at: int, start: int, end: int) -> None:
        """Block ``at``'s header against the index (DataBlockHeaderImpl)."""
        index = self.index
        block = index.entries[at]
        header = BlockHeader.parse(self._read(start, BLOCK_HEADER.size, end))
        expected = (BLOCK_MAGIC, index.data_header_length, end - start, block.first_entry_id)
        found = (header.magic, header.header_length, header.block_length, header.first_entry_id)
        if found != expected:
            names = ("magic", "header length", "block length", "first entry id")
            diffs = ", ".join(
                f"{n} {_show(f, n)} (expected {_show(e, n)})"
                for n, f, e in zip(names, found, expected, strict=True)
                if f != e
            )
            raise _BlockDamage(
                block.first_entry_id,
                f"data block {block.part_id} at offset {start}: damaged header: {diffs}",
            )

    def _read(self, offset: int, length: int, limit: int, window: int | None = None) -> bytes:
        return self._call(self.data_key, self._reader.read, offset, length, limit, window)


def _show(value: int, name: str) -> str:
    return f"0x{value & 0xFFFFFFFF:08X}" if name == "magic" else str(value)
