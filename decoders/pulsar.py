"""The Pulsar stored entry ("headersAndPayload") and its prefix layers.

Wire grammar (big-endian; Pulsar ``Commands.java``, pulsar-client-cpp ``lib/Commands.cc``):

    entry    = [bem] [checksum] md_size:u32 MessageMetadata payload
    bem      = 0x0e02 size:u32 BrokerEntryMetadata[size]        added by the broker
    checksum = 0x0e01 crc32c:u32                                 added by the producer

The CRC32C covers everything after its own 4 bytes: md_size, the metadata and the
payload. The payload is every remaining byte. Prefix layers are found by their
magic through :data:`PREFIX_LAYERS`; a u16 that is not a known magic starts md_size.
See ../shared/spec/formats.md §1-§3.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message as ProtoMessage

from pulsarctl_py.proto import pulsar_api_pb2 as api

from ._reader import need, peek_u16, read_u32
from .checksums import crc32c
from .errors import CorruptEntryError
from .nodes import Check, Layer, Problem
from .protos import parse_proto, proto_fields


@dataclass(slots=True)
class PrefixResult:
    """What the prefix layers of one entry yielded."""

    broker_entry_metadata: Any = None
    checksum: Check | None = None


class BrokerEntryMetadataLayer:
    """0x0e02 size:u32 BrokerEntryMetadata."""

    name = "broker-entry-metadata"
    MAGIC = 0x0E02
    HEADER = struct.Struct(">HI")

    @classmethod
    def parse(
        cls,
        buf: bytes | memoryview,
        pos: int,
        end: int,
        result: PrefixResult,
        problems: list[Problem],
        verify: bool,
    ) -> tuple[Layer, int]:
        need(buf, pos, cls.HEADER.size, end, cls.name, "magic and size")
        _, size = cls.HEADER.unpack_from(buf, pos)
        body = pos + cls.HEADER.size
        need(buf, body, size, end, cls.name, "BrokerEntryMetadata")
        mv = memoryview(buf)
        bem, _missing = parse_proto(api.BrokerEntryMetadata, mv[body : body + size], cls.name, body)
        result.broker_entry_metadata = bem
        layer = Layer(cls.name, pos, body + size - pos, mv[pos : body + size], proto_fields(bem))
        return layer, body + size

    @classmethod
    def build(cls, bem: ProtoMessage) -> bytes:
        body = bem.SerializeToString()
        return cls.HEADER.pack(cls.MAGIC, len(body)) + body


class ChecksumLayer:
    """0x0e01 crc32c:u32, covering everything after it."""

    name = "checksum"
    MAGIC = 0x0E01
    HEADER = struct.Struct(">HI")

    @classmethod
    def parse(
        cls,
        buf: bytes | memoryview,
        pos: int,
        end: int,
        result: PrefixResult,
        problems: list[Problem],
        verify: bool,
    ) -> tuple[Layer, int]:
        need(buf, pos, cls.HEADER.size, end, cls.name, "magic and CRC32C")
        _, stored = cls.HEADER.unpack_from(buf, pos)
        covered = pos + cls.HEADER.size
        computed = crc32c(memoryview(buf)[covered:end]) if verify else None
        ok = None if computed is None else computed == stored
        check = Check(
            "CRC32C",
            f"{stored:08x}",
            None if computed is None else f"{computed:08x}",
            ok,
            None if verify else "not verified",
        )
        result.checksum = check
        if ok is False:
            problems.append(
                Problem(
                    "error",
                    cls.name,
                    pos,
                    f"CRC32C mismatch: stored {stored:08x}, computed {computed:08x}",
                )
            )
        layer = Layer(
            cls.name,
            pos,
            cls.HEADER.size,
            memoryview(buf)[pos:covered],
            {"covers": [covered, end]},
            check,
        )
        return layer, covered

    @classmethod
    def build(cls, covered: bytes | memoryview) -> bytes:
        return cls.HEADER.pack(cls.MAGIC, crc32c(covered))


#: prefix layers by magic, in the only order they may appear
PREFIX_LAYERS: dict[int, type[BrokerEntryMetadataLayer] | type[ChecksumLayer]] = {
    BrokerEntryMetadataLayer.MAGIC: BrokerEntryMetadataLayer,
    ChecksumLayer.MAGIC: ChecksumLayer,
}


class MetadataLayer:
    """md_size:u32 MessageMetadata."""

    name = "message-metadata"
    HEADER = struct.Struct(">I")

    @classmethod
    def parse(
        cls, buf: bytes | memoryview, pos: int, end: int, problems: list[Problem]
    ) -> tuple[Layer, Any, int]:
        size = read_u32(buf, pos, end, cls.name, "metadata size")
        body = pos + cls.HEADER.size
        if size > end - body:
            raise CorruptEntryError(
                cls.name, pos, f"a metadata size of at most {end - body}", f"{size}"
            )
        mv = memoryview(buf)
        md, missing = parse_proto(api.MessageMetadata, mv[body : body + size], cls.name, body)
        if missing:
            problems.append(
                Problem(
                    "error",
                    cls.name,
                    body,
                    "MessageMetadata lacks required field(s): " + ", ".join(missing),
                )
            )
        layer = Layer(cls.name, pos, body + size - pos, mv[pos : body + size], proto_fields(md))
        return layer, md, body + size

    @classmethod
    def build(cls, md: ProtoMessage) -> bytes:
        body = md.SerializePartialToString()
        return cls.HEADER.pack(len(body)) + body


def parse_prefixes(
    buf: bytes | memoryview,
    pos: int,
    end: int,
    problems: list[Problem],
    verify: bool = True,
    stop_before_checksum: bool = False,
) -> tuple[list[Layer], PrefixResult, int]:
    """Decode the magic-tagged prefix layers at ``pos``; return them and the next offset."""
    layers: list[Layer] = []
    result = PrefixResult()
    order = list(PREFIX_LAYERS)
    allowed = 0  # prefixes before order[allowed] were seen or skipped
    while True:
        magic = peek_u16(buf, pos, end)
        if magic not in PREFIX_LAYERS:
            break
        at = order.index(magic)
        if at < allowed:
            raise CorruptEntryError(
                PREFIX_LAYERS[magic].name,
                pos,
                "prefix layers once each, in the order 0x0e02, 0x0e01",
                f"0x{magic:04x} again",
            )
        if stop_before_checksum and magic == ChecksumLayer.MAGIC:
            break
        layer, pos = PREFIX_LAYERS[magic].parse(buf, pos, end, result, problems, verify)
        layers.append(layer)
        allowed = at + 1
    return layers, result, pos


def build_entry(
    metadata: ProtoMessage,
    payload: bytes | memoryview,
    *,
    checksum: bool = True,
    broker_entry_metadata: ProtoMessage | None = None,
) -> bytes:
    """Serialize a stored entry: [0x0e02 BEM] [0x0e01 crc] md_size MessageMetadata payload."""
    body = MetadataLayer.build(metadata) + bytes(payload)
    out = ChecksumLayer.build(body) + body if checksum else body
    if broker_entry_metadata is not None:
        out = BrokerEntryMetadataLayer.build(broker_entry_metadata) + out
    return out
