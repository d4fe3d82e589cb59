"""One value of Pulsar's RocksDB metadata store: a small header, then the node's data.

Wire grammar (big-endian; Pulsar ``pulsar-metadata/.../impl/RocksdbMetadataStore.java``,
class ``MetaValue``; ../shared/spec/formats.md §17):

    value   = header_size:u32 format_version:u32 version:i64 owner:i64
              created_ms:i64 modified_ms:i64 ephemeral:i8 [header padding] data
    key     = the node path as UTF-8 bytes, e.g. b"/ledgers/00/0000/L0001"

``header_size`` is 41 in format version 1; a reader honours the stored value and takes the
data from that offset on, so later versions can append header fields. ``ephemeral`` is a
Java signed byte compared with ``> 0``. The two reserved keys hold plain 8-byte big-endian
longs without a header: ``__metadata_sequentialId_key`` (the next suffix for sequential
nodes, appended to the path without padding) and ``__metadata_instanceId_key`` (bumped on
every open by Pulsar; an ephemeral node whose owner differs is stale).

The children of ``P`` are the keys in ``[P + "/", P + "0")`` (``'0'`` sorts right after
``'/'``), cut at the next ``/``; the root's children are the keys in ``["/", "0")``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._reader import need
from .errors import CorruptEntryError

#: header_size, format_version, version, owner, created_ms, modified_ms, ephemeral
HEADER = struct.Struct(">IIqqqqb")
HEADER_SIZE = HEADER.size  # 41
FORMAT_VERSION = 1
LAYER = "metadata-record"

SEQUENTIAL_ID_KEY = b"__metadata_sequentialId_key"
INSTANCE_ID_KEY = b"__metadata_instanceId_key"
RESERVED_KEYS = (SEQUENTIAL_ID_KEY, INSTANCE_ID_KEY)

_LONG = struct.Struct(">q")


@dataclass(slots=True)
class MetaValue:
    """A decoded metadata-store value: the node's stat fields and its data."""

    version: int
    owner: int
    created_ms: int
    modified_ms: int
    ephemeral: bool
    data: bytes
    header_size: int = HEADER_SIZE
    format_version: int = FORMAT_VERSION


def header(value: bytes | memoryview) -> tuple[int, int, int, int, int, int, int] | None:
    """The header fields (header_size, format_version, version, owner, created_ms,
    modified_ms, ephemeral flag) when :func:`parse` accepts ``value``, else None.

    One unpack: listings of many nodes read every header through here."""
    if len(value) < HEADER_SIZE:
        return None  # parse raises: too short for any header it accepts
    fields = HEADER.unpack_from(value, 0)
    if HEADER_SIZE <= fields[0] <= len(value) and FORMAT_VERSION <= fields[1] <= 0x7FFFFFFF:
        return fields
    return None


def parse(value: bytes | memoryview) -> MetaValue:
    """Decode one value as stored under a path key."""
    fields = header(value)
    if fields is not None:
        header_size, format_version, version, owner, created, modified, flag = fields
        return MetaValue(
            version,
            owner,
            created,
            modified,
            flag > 0,
            bytes(value[header_size:]),
            header_size,
            format_version,
        )
    # the value is refused: say why, in the order a reader meets the fields
    end = len(value)
    need(value, 0, 4, end, LAYER, "header size")
    header_size = struct.unpack_from(">I", value, 0)[0]
    if header_size > end:
        raise CorruptEntryError(
            LAYER, 0, f"a header of {header_size} bytes", f"{end} bytes in the value"
        )
    need(value, 4, 4, end, LAYER, "format version")
    format_version = struct.unpack_from(">I", value, 4)[0]
    if format_version < FORMAT_VERSION or format_version > 0x7FFFFFFF:
        raise CorruptEntryError(LAYER, 4, "format version >= 1", str(format_version))
    if header_size < HEADER_SIZE:
        raise CorruptEntryError(
            LAYER, 0, f"a header of at least {HEADER_SIZE} bytes", f"header size {header_size}"
        )
    _, _, version, owner, created, modified, flag = HEADER.unpack_from(value, 0)
    return MetaValue(
        version=version,
        owner=owner,
        created_ms=created,
        modified_ms=modified,
        ephemeral=flag > 0,
        data=bytes(value[header_size:]),
        header_size=header_size,
        format_version=format_version,
    )


def is_stale(value: bytes, instance_id: int) -> bool:
    """``parse(value)`` is an ephemeral node owned by another instance than
    ``instance_id``; False when it does not parse. The header alone is read (no copy of
    the data): listings ask it of every key they pass."""
    fields = header(value)
    return fields is not None and fields[6] > 0 and fields[3] != instance_id


def build(meta: MetaValue) -> bytes:
    """Encode a value in format version 1 (Pulsar's own writer), whatever was read."""
    head = HEADER.pack(
        HEADER_SIZE,
        FORMAT_VERSION,
        meta.version,
        meta.owner,
        meta.created_ms,
        meta.modified_ms,
        1 if meta.ephemeral else 0,
    )
    return head + bytes(meta.data)


def parse_long(value: bytes | memoryview, what: str = "reserved key") -> int:
    """Decode the 8-byte big-endian long held by a reserved key."""
    if len(value) != _LONG.size:
        raise CorruptEntryError(LAYER, 0, f"an 8-byte long in the {what}", f"{len(value)} bytes")
    return _LONG.unpack(bytes(value))[0]


def build_long(number: int) -> bytes:
    """Encode a reserved key's long."""
    return _LONG.pack(number)


def path_key(path: str) -> bytes:
    """The RocksDB key of a metadata path."""
    return path.encode("utf-8")


def children_range(parent: str) -> tuple[bytes, bytes]:
    """The key range ``[first, last)`` that holds every descendant of ``parent``."""
    if parent == "/":
        return b"/", b"0"
    return path_key(parent + "/"), path_key(parent + "0")


def child_name(parent: str, key: bytes) -> str | None:
    """The direct child of ``parent`` that ``key`` lies under, or None if outside it."""
    first, last = children_range(parent)
    if not (first <= key < last):
        return None
    rest = key[len(first) :].decode("utf-8", errors="surrogateescape")
    name = rest.split("/", 1)[0]
    return name or None


def sequential_path(prefix: str, sequence: int) -> str:
    """The path Pulsar's RocksDB store gives a sequential node: the number, unpadded."""
    return f"{prefix}{sequence}"
