"""What the payload of a stored entry holds: a batch, a marker, or one value.

Batch grammar (Pulsar ``Commands.serializeSingleMessageInBatchWithPayload``):

    batch  = record{K}
    record = smm_size:u32 SingleMessageMetadata value[payload_size]

K is ``num_messages_in_batch``, or ``len(compacted_batch_indexes)`` for a PIP-429
compacted batch (record j then has batch index ``compacted_batch_indexes[j]``). A
record with ``compacted_out`` is a placeholder left by the compactor and holds no
message. A message is batched iff MessageMetadata *has* num_messages_in_batch, so a
batch of one is still a batch. Markers are entries whose metadata has marker_type;
their payload is a marker protobuf chosen by :data:`MARKER_PAYLOADS`.
See ../shared/spec/formats.md §3.5, §4 and §6.5.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage

from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.proto import pulsar_markers_pb2 as markers

from ._reader import U32
from .errors import CorruptEntryError
from .nodes import Layer, Problem
from .protos import parse_proto, proto_fields

BATCH = "batch"
RECORD_HEADER = struct.Struct(">I")
_SMM = api.SingleMessageMetadata
_SMM_FROM = api.SingleMessageMetadata.FromString


@dataclass(slots=True)
class BatchRecord:
    """One record of a batch: its batch index, metadata and value bytes."""

    batch_index: int
    smm: Any
    value: memoryview
    offset: int  # of the record's size field, within the decoded payload


#: the fewest bytes a batch record takes: its 4-byte metadata size (an empty metadata and
#: value follow it at the least)
MIN_RECORD = RECORD_HEADER.size


def batch_fit_error(count: int, size: int) -> str | None:
    """Why ``count`` records cannot fit in ``size`` decompressed bytes, or None: checked
    before anything is allocated per record (a tiny entry may claim 2^31 of them)."""
    if count > size // MIN_RECORD:
        return f"{count} records cannot fit in {size} bytes (each takes at least {MIN_RECORD})"
    return None


def parse_batch(
    buf: bytes | memoryview,
    count: int,
    indexes: list[int] | None,
    problems: list[Problem],
) -> tuple[Layer, list[BatchRecord], list[int]]:
    """Split a decompressed batch into records; return the layer, kept records, placeholders.

    With ``indexes`` (PIP-429), ``count`` is their number: one record per retained index."""
    if indexes is not None and len(indexes) != count:
        raise CorruptEntryError(
            BATCH, 0, f"{count} compacted_batch_indexes, one per record", f"{len(indexes)}"
        )
    mv = memoryview(buf)
    end = len(mv)
    pos = 0
    kept: list[BatchRecord] = []
    placeholders: list[int] = []
    unpack = U32.unpack_from
    parse = _SMM_FROM
    keep = kept.append
    record = BatchRecord
    for j in range(count):
        batch_index = indexes[j] if indexes is not None else j
        start = pos
        if pos + 4 > end:
            raise CorruptEntryError(
                BATCH, pos, f"record {j} of {count} (4-byte metadata size)", f"{end - pos} bytes"
            )
        (size,) = unpack(mv, pos)
        pos += 4
        if size > end - pos:
            raise CorruptEntryError(
                BATCH, start, f"record {j} metadata of at most {end - pos} bytes", f"size {size}"
            )
        try:
            smm = parse(mv[pos : pos + size])
        except DecodeError:
            smm, missing = parse_proto(_SMM, mv[pos : pos + size], BATCH, pos)
            problems.append(
                Problem(
                    "error",
                    BATCH,
                    pos,
                    f"record {j}: SingleMessageMetadata lacks " + ", ".join(missing),
                )
            )
        else:  # upb's FromString does not check required fields
            if not smm.payload_size and not smm.HasField("payload_size"):
                problems.append(
                    Problem(
                        "error", BATCH, pos, f"record {j}: SingleMessageMetadata lacks payload_size"
                    )
                )
        pos += size
        value_size = smm.payload_size
        if value_size < 0 or value_size > end - pos:
            raise CorruptEntryError(
                BATCH,
                start,
                f"record {j} value of at most {end - pos} bytes",
                f"payload_size {value_size}",
            )
        if smm.compacted_out:
            placeholders.append(batch_index)
        else:
            keep(record(batch_index, smm, mv[pos : pos + value_size], start))
        pos += value_size
    if pos != end:
        problems.append(trailing_bytes(pos, end, count))
    return batch_layer(mv, count, len(kept), placeholders, indexes, pos), kept, placeholders


def batch_layer(
    buf: bytes | memoryview,
    count: int,
    messages: int,
    placeholders: list[int],
    indexes: list[int] | None,
    end: int,
) -> Layer:
    """The batch layer over ``buf[:end]``: ``count`` records, ``messages`` of them kept."""
    fields: dict[str, Any] = {"records": count, "messages": messages}
    if placeholders:
        fields["compacted_out"] = placeholders
    if indexes is not None:
        fields["compacted_batch_indexes"] = list(indexes)
    return Layer(BATCH, 0, end, memoryview(buf)[:end], fields, space="payload")


def trailing_bytes(pos: int, end: int, count: int) -> Problem:
    """The warning for bytes left after the last record of a batch."""
    return Problem("warning", BATCH, pos, f"{end - pos} bytes after the last of {count} records")


def build_batch(records: Iterable[tuple[ProtoMessage, bytes | memoryview | None]]) -> bytes:
    """Serialize batch records; payload_size is set from each value (0 for a null value)."""
    parts: list[bytes] = []
    for smm, value in records:
        data = b"" if value is None else bytes(value)
        smm.payload_size = len(data)
        body = smm.SerializeToString()
        parts.append(RECORD_HEADER.pack(len(body)))
        parts.append(body)
        parts.append(data)
    return b"".join(parts)


def placeholder() -> ProtoMessage:
    """The record the compactor writes for a message it removed from a batch."""
    return api.SingleMessageMetadata(compacted_out=True, payload_size=0)


#: marker payload protobufs by MessageMetadata.marker_type
MARKER_PAYLOADS: dict[int, type[ProtoMessage]] = {
    markers.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST: (
        markers.ReplicatedSubscriptionsSnapshotRequest
    ),
    markers.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE: (
        markers.ReplicatedSubscriptionsSnapshotResponse
    ),
    markers.REPLICATED_SUBSCRIPTION_SNAPSHOT: markers.ReplicatedSubscriptionsSnapshot,
    markers.REPLICATED_SUBSCRIPTION_UPDATE: markers.ReplicatedSubscriptionsUpdate,
}


def marker_name(marker_type: int) -> str:
    value = markers.MarkerType.DESCRIPTOR.values_by_number.get(marker_type)
    return value.name if value is not None else f"UNKNOWN({marker_type})"


def parse_marker(payload: bytes | memoryview, marker_type: int, problems: list[Problem]) -> Layer:
    """Decode a marker payload when its layout is known; otherwise keep it raw."""
    fields: dict[str, Any] = {"marker_type": marker_type, "name": marker_name(marker_type)}
    cls = MARKER_PAYLOADS.get(marker_type)
    if cls is not None:
        try:
            msg, missing = parse_proto(cls, payload, "marker", 0)
            fields["payload"] = proto_fields(msg)
            if missing:
                problems.append(
                    Problem("warning", "marker", 0, "marker payload lacks " + ", ".join(missing))
                )
        except CorruptEntryError as exc:
            problems.append(Problem("error", "marker", 0, str(exc)))
    else:
        fields["payload_layout"] = "not decoded (no known layout for this marker type)"
    return Layer("marker", 0, len(payload), payload, fields)
