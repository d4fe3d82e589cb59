"""Compacted-ledger framing: each entry of a compacted ledger wraps one topic entry.

Wire grammar (Pulsar ``RawMessageImpl.serialize``):

    compacted = id_size:u32 MessageIdData[id_size] entry_size:u32 entry[entry_size]

MessageIdData holds the ORIGINAL topic position (ledgerId, entryId; the ids are
uint64 on the wire and Java longs, so -1 arrives as 2**64-1). ``entry`` is a Pulsar
stored entry, possibly with its 0x0e02 prefix. See ../shared/spec/formats.md §6.2.
"""

from __future__ import annotations

import struct

from google.protobuf.message import Message as ProtoMessage

from pulsarctl_py.proto import pulsar_api_pb2 as api

from ._reader import need, read_u32
from .errors import CorruptEntryError
from .nodes import Layer, Problem
from .protos import parse_proto, proto_fields, signed64

LAYER = "compacted"
SIZE = struct.Struct(">I")
#: a MessageIdData larger than this is not one (ids, partition, batch fields, ack set)
MAX_ID_SIZE = 4096


def parse(
    buf: bytes | memoryview, pos: int, end: int, problems: list[Problem]
) -> tuple[Layer, ProtoMessage, int, int]:
    """Decode the framing at ``pos``; return the layer, the id, and the inner entry span."""
    id_size = read_u32(buf, pos, end, LAYER, "MessageIdData size")
    if id_size > min(MAX_ID_SIZE, end - pos - 4):
        raise CorruptEntryError(LAYER, pos, "a MessageIdData size that fits", str(id_size))
    at = pos + 4
    mv = memoryview(buf)
    msg_id, missing = parse_proto(api.MessageIdData, mv[at : at + id_size], LAYER, at)
    if missing:
        problems.append(Problem("error", LAYER, at, "MessageIdData lacks " + ", ".join(missing)))
    at += id_size
    entry_size = read_u32(buf, at, end, LAYER, "entry size")
    need(buf, at + 4, entry_size, end, LAYER, "the wrapped entry")
    inner = at + 4
    if inner + entry_size != end:
        problems.append(
            Problem(
                "warning",
                LAYER,
                inner + entry_size,
                f"{end - inner - entry_size} bytes after the wrapped entry",
            )
        )
    fields = proto_fields(msg_id)
    fields["ledger_id"] = signed64(msg_id.ledgerId)
    fields["entry_id"] = signed64(msg_id.entryId)
    # the position consumers saw the message at, as everywhere in JSON: "L:E"
    fields["original_position"] = f"{fields['ledger_id']}:{fields['entry_id']}"
    fields["entry_size"] = entry_size
    layer = Layer(LAYER, pos, inner - pos, mv[pos:inner], fields)
    return layer, msg_id, inner, inner + entry_size


def build(message_id: ProtoMessage, entry: bytes | memoryview) -> bytes:
    """Wrap a stored entry with its original position, as the compactor does."""
    body = message_id.SerializeToString()
    return SIZE.pack(len(body)) + body + SIZE.pack(len(entry)) + bytes(entry)


def plausible(buf: bytes | memoryview, pos: int, end: int) -> bool:
    """Whether the bytes at ``pos`` look like compacted framing."""
    if end - pos < 12:
        return False
    (id_size,) = SIZE.unpack_from(buf, pos)
    if not 4 <= id_size <= min(MAX_ID_SIZE, end - pos - 8):
        return False
    (entry_size,) = SIZE.unpack_from(buf, pos + 4 + id_size)
    if pos + 8 + id_size + entry_size != end:
        return False
    try:
        _msg_id, missing = parse_proto(
            api.MessageIdData, memoryview(buf)[pos + 4 : pos + 4 + id_size], LAYER, pos
        )
    except CorruptEntryError:
        return False
    return not missing
