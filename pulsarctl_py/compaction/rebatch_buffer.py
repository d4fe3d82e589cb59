"""Where a Pulsar 4.0/4.1 broker's compaction fails on a rebatched batch (apache/pulsar#26290).

``RawBatchConverter.rebatchMessage`` (pulsar-broker 4.0.7) allocates the rebuilt batch's
buffer with the capacity of the *received* headersAndPayload (``payload.capacity()``: the
compressed entry) and serializes every record into it. Ints, varints and payloads grow the
buffer as Netty does (``AbstractByteBuf.ensureWritable0``); but a kept record's string and
bytes fields (``partition_key``, ``ordering_key``, the properties' keys and values) are
copied zero-copy from the parsed buffer by the generated ``SingleMessageMetadata.writeTo``
(LightProto before 0.6) with ``ByteBuf.getBytes(index, dst, length)``, which never grows
``dst``: when such a field does not fit in the buffer's current capacity the broker throws
``IndexOutOfBoundsException: dstIndex: N`` and the compaction fails, every time it is
retried. (Pulsar 4.2's LightProto 0.6 grows the buffer first.)

:func:`rebatch_failure` replays those writes over the rebuilt batch (the bytes
:mod:`.core` writes are the broker's own, checked byte for byte on a 4.0.7 broker) with the
growth of Netty 4.1's pooled allocator, the broker's default: a buffer may first grow into
its size class (``maxFastWritableBytes``), then to the next power of two
(``calculateNewCapacity``, in 4 MiB steps past 4 MiB). ``tests/cluster/sandbox/test_compaction.py``
compares its answer with the real broker's.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from typing import Any

from google.protobuf.message import DecodeError

_U32 = struct.Struct(">I")
_MiB4 = 4 * 1024 * 1024  # Netty's CALCULATE_THRESHOLD and the pooled arena's chunk size

#: SingleMessageMetadata's zero-copy fields: partition_key (2) and ordering_key (7) are
#: copied from the parsed buffer, as are both fields of each property (1: KeyValue)
_SMM_STRINGS = frozenset({2, 7})
_SMM_PROPERTIES = 1
_KEYVALUE_STRINGS = frozenset({1, 2})


def size_class(n: int) -> int:
    """The pooled allocation a request of ``n`` bytes gets (Netty 4.1 ``SizeClasses``:
    16-byte steps to 128, then four classes per doubling); past a chunk it is exact."""
    if n > _MiB4:
        return n
    if n <= 128:
        return max(16, (n + 15) // 16 * 16)
    group = 128
    while True:
        step = group // 4
        for k in range(1, 5):
            if group + k * step >= n:
                return group + k * step
        group *= 2


def new_capacity(minimum: int) -> int:
    """``AbstractByteBufAllocator.calculateNewCapacity`` (no maximum in practice)."""
    if minimum == _MiB4:
        return _MiB4
    if minimum > _MiB4:
        return minimum // _MiB4 * _MiB4 + _MiB4
    capacity = 64
    while capacity < minimum:
        capacity <<= 1
    return capacity


class _Buffer:
    """A pooled Netty buffer's writer index and capacity."""

    __slots__ = ("capacity", "longest", "w")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.longest = size_class(capacity)  # PooledByteBuf.maxLength
        self.w = 0

    def ensure(self, n: int) -> None:
        target = self.w + n
        if target <= self.capacity:
            return
        if self.longest - self.w >= n:  # maxFastWritableBytes: grow within the allocation
            self.capacity = self.longest
        else:
            self.capacity = new_capacity(target)
            self.longest = size_class(self.capacity)

    def put(self, n: int) -> None:
        self.ensure(n)
        self.w += n

    def put_bytewise(self, n: int) -> None:
        for _ in range(n):  # LightProtoCodec.writeVarInt: one writeByte per byte
            self.ensure(1)
            self.w += 1

    def copy(self, n: int) -> bool:
        """A zero-copy ``getBytes`` into the buffer: False when it does not fit."""
        if self.w + n > self.capacity:
            return False
        self.w += n
        return True


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    start = pos
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos - start


def _message(out: _Buffer, buf: bytes, pos: int, end: int, kept: bool, keyvalue: bool) -> bool:
    """Write one message's fields as LightProto does; False when a copy does not fit."""
    strings = _KEYVALUE_STRINGS if keyvalue else _SMM_STRINGS
    while pos < end:
        tag, n = _varint(buf, pos)
        out.put_bytewise(n)
        pos += n
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _value, n = _varint(buf, pos)
            out.put_bytewise(n)
            pos += n
        elif wire == 2:
            length, n = _varint(buf, pos)
            out.put_bytewise(n)
            pos += n
            if kept and not keyvalue and field == _SMM_PROPERTIES:
                if not _message(out, buf, pos, pos + length, kept, True):
                    return False
            elif kept and field in strings:
                if not out.copy(length):
                    return False
            else:
                out.put(length)
            pos += length
        elif wire == 1:
            out.put(8)
            pos += 8
        elif wire == 5:
            out.put(4)
            pos += 4
        else:
            return True  # not a field LightProto writes: no prediction
    return True


def replay(received: int, plain: bytes) -> int | None:
    """:func:`rebatch_failure` the slow way, every write replayed one after the other (the
    reference the tests compare it with)."""
    if len(plain) <= received:
        return None  # every write fits in the first allocation
    out = _Buffer(received)
    pos, end = 0, len(plain)
    try:
        while pos < end:
            (size,) = _U32.unpack_from(plain, pos)
            out.put(4)  # writeInt: one ensureWritable(4)
            pos += 4
            body = plain[pos : pos + size]
            kept = not _compacted_out(body)
            if not _message(out, plain, pos, pos + size, kept, False):
                return out.w
            pos += size
            payload = _payload_size(body)
            out.put(payload)  # writeBytes(payload)
            pos += payload
    except (IndexError, struct.error):
        return None  # not a batch this model reads: no prediction
    return None


def _fields(body: bytes) -> dict[int, int]:
    """Varint fields of a SingleMessageMetadata (last value wins)."""
    out: dict[int, int] = {}
    pos, end = 0, len(body)
    while pos < end:
        tag, n = _varint(body, pos)
        pos += n
        wire = tag & 7
        if wire == 0:
            value, n = _varint(body, pos)
            out[tag >> 3] = value
            pos += n
        elif wire == 2:
            length, n = _varint(body, pos)
            pos += n + length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            break
    return out


def _compacted_out(body: bytes) -> bool:
    return _fields(body).get(4, 0) != 0


def _payload_size(body: bytes) -> int:
    return _fields(body).get(3, 0)


# -- the fast way: only where the buffer grows ------------------------------------------------

_PLACEHOLDER = b"\x00\x00\x00\x04\x18\x00\x20\x01"  # a compacted_out record, serialized
_PLACEHOLDERS = re.compile(b"(?:" + re.escape(_PLACEHOLDER) + b")*")
_SMM = None


def _smm_class() -> Any:
    global _SMM
    if _SMM is None:
        from pulsarctl_py.proto import pulsar_api_pb2 as api

        _SMM = api.SingleMessageMetadata
    return _SMM


#: a write: (start, end, kind); kinds: bulk (one ensureWritable for the whole write),
#: bytes (one ensureWritable(1) per byte: varints, booleans), copy (zero-copy getBytes)
_BULK, _BYTES, _COPY = 0, 1, 2


def _writes(plain: bytes, start: int, end: int, kept: bool, keyvalue: bool) -> Iterator[tuple]:
    """The writes of one message's fields in ``plain[start:end]``, in order."""
    strings = _KEYVALUE_STRINGS if keyvalue else _SMM_STRINGS
    pos = start
    while pos < end:
        tag, n = _varint(plain, pos)
        yield pos, pos + n, _BYTES
        pos += n
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _value, n = _varint(plain, pos)
            yield pos, pos + n, _BYTES
            pos += n
        elif wire == 2:
            length, n = _varint(plain, pos)
            yield pos, pos + n, _BYTES
            pos += n
            if kept and not keyvalue and field == _SMM_PROPERTIES:
                yield from _writes(plain, pos, pos + length, kept, True)
            elif kept and field in strings:
                yield pos, pos + length, _COPY
            else:
                yield pos, pos + length, _BULK
            pos += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            yield pos, pos + size, _BULK
            pos += size
        else:
            raise ValueError("not a field LightProto writes")


def rebatch_failure(received: int, plain: bytes) -> int | None:
    """The write position (``dstIndex``) at which a 4.0/4.1 broker fails to rebuild this
    batch, or None when it succeeds. ``received``: the headersAndPayload the compactor
    received; ``plain``: the rebuilt, uncompressed batch (records in Pulsar's format).

    Every write before a failure fits, so the writes are the bytes of ``plain`` in order and
    only those that cross the buffer's capacity matter: at each crossing, the write there
    either grows the buffer (bulk and byte-wise writes, as Netty grows it) or is a zero-copy
    field, which fails. Records in between are skipped (runs of placeholders at C speed)."""
    end = len(plain)
    if end <= received:
        return None  # every write fits in the first allocation
    capacity, longest = received, size_class(received)
    smm_from = _smm_class().FromString
    unpack = _U32.unpack_from
    pos = 0  # the start of the record being looked at
    run_end: int | None = None  # the end of the placeholders from `pos` on, once matched
    try:
        while capacity < end:
            # the record holding byte `capacity`: skip placeholders, then whole records
            while True:
                run = pos
                if run_end is None or run_end < run:
                    run_end = _PLACEHOLDERS.match(plain, run).end()
                pos = run_end
                if pos > capacity:
                    break  # inside a placeholder run; placeholders have no zero-copy field
                run_end = None
                (size,) = unpack(plain, pos)
                smm = smm_from(plain[pos + 4 : pos + 4 + size])
                record_end = pos + 4 + size + smm.payload_size
                if record_end > capacity:
                    break
                pos = record_end
            if pos > capacity:
                # a placeholder record: its size (bulk), then four one-byte writes
                at = run + (capacity - run) // len(_PLACEHOLDER) * len(_PLACEHOLDER)
                if capacity < at + 4:
                    start, stop, kind = at, at + 4, _BULK
                else:
                    start, stop, kind = capacity, capacity + 1, _BYTES
                pos = run
            else:
                start, stop, kind = pos, pos + 4, _BULK
                if capacity >= pos + 4:
                    smm_end = pos + 4 + size
                    kept = not smm.compacted_out
                    for write in _writes(plain, pos + 4, smm_end, kept, False):
                        if write[1] > capacity:
                            start, stop, kind = write
                            break
                    else:
                        start, stop, kind = smm_end, record_end, _BULK
            if kind == _COPY:
                return start  # the zero-copy write does not fit: the broker throws here
            if kind == _BYTES:
                start, stop = capacity, capacity + 1
            # ensureWritable(stop - start) at writer index `start`
            if longest - start >= stop - start:
                capacity = longest
            else:
                capacity = new_capacity(stop)
                longest = size_class(capacity)
    except (IndexError, ValueError, struct.error, DecodeError):
        return None  # not a batch this model reads: no prediction
    return None
