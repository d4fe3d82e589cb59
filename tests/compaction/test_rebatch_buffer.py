"""Pure checks of the broker rules compaction follows (the sandbox tests compare them with
a real Pulsar 4.0.7 broker: tests/cluster/sandbox/test_compaction.py)."""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.compaction.rebatch_buffer import (
    new_capacity,
    rebatch_failure,
    replay,
    size_class,
)
from pulsarctl_py.decoders.codecs import compress_as_broker, decompress
from pulsarctl_py.decoders.payload import build_batch, placeholder
from pulsarctl_py.proto import pulsar_api_pb2 as api


def test_pooled_size_classes_and_growth_are_nettys():
    # Netty 4.1 SizeClasses: 16-byte steps to 128, then four classes per doubling
    assert [size_class(n) for n in (1, 16, 17, 128, 129, 161, 214, 216, 257)] == [
        16,
        16,
        32,
        128,
        160,
        192,
        224,
        224,
        320,
    ]
    assert [new_capacity(n) for n in (1, 64, 65, 300, 4 << 20, (4 << 20) + 1)] == [
        64,
        64,
        128,
        512,
        4 << 20,
        8 << 20,
    ]


def _kept(key: str, value: bytes) -> tuple:
    smm = api.SingleMessageMetadata(partition_key=key)
    return smm, value


def test_a_key_across_the_buffers_capacity_is_where_the_broker_fails():
    # the batch shape the sandbox's 4.0.7 broker failed on, "IndexOutOfBoundsException:
    # dstIndex: 214", received as 216 bytes: ten placeholders (8 bytes each), a kept record
    # of 128 bytes, then a kept record whose 13-byte key starts at 214 (after its 4-byte
    # size, tag and length) and would end past the buffer's capacity
    rows = [(placeholder(), None)] * 10 + [_kept("f", b"x" * 119)]
    rows += [_kept("r1-snappy-k12", b"v" * 150)]
    plain = build_batch(rows)
    assert rebatch_failure(216, plain) == 214
    # a capacity the key fits in first: the next writes grow the buffer, no failure
    assert rebatch_failure(228, plain) is None
    # everything fits when nothing has to grow
    assert rebatch_failure(len(plain), plain) is None
    # placeholders alone grow the buffer and never fail
    assert rebatch_failure(10, build_batch([(placeholder(), None)] * 200)) is None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000))
def test_zlib_as_the_broker_writes_it_is_sync_flushed_and_inflates(data):
    out = compress_as_broker(2, data)
    assert out.endswith(b"\x00\x00\xff\xff")  # SYNC_FLUSH, no final block, no Adler-32
    assert decompress(2, out, len(data)) == data
    # the same stream Deflater(DEFAULT_COMPRESSION) gives: a default compressobj, flushed
    c = zlib.compressobj()
    assert out == c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)


@st.composite
def rebuilt_batches(draw: st.DrawFn) -> bytes:
    rows = []
    for _ in range(draw(st.integers(1, 60))):
        if draw(st.booleans()):
            rows.append((placeholder(), None))
            continue
        smm = api.SingleMessageMetadata()
        if draw(st.integers(0, 4)):
            smm.partition_key = draw(st.text(min_size=1, max_size=70))
        for _ in range(draw(st.integers(0, 2))):
            smm.properties.add(key=draw(st.text(max_size=20)), value=draw(st.text(max_size=30)))
        if draw(st.booleans()):
            smm.event_time = draw(st.integers(0, 2**40))
        if draw(st.integers(0, 5)) == 0:
            smm.ordering_key = draw(st.binary(min_size=1, max_size=20))
        rows.append((smm, draw(st.binary(max_size=300))))
    return build_batch(rows)


@settings(max_examples=200, deadline=None)
@given(plain=rebuilt_batches(), share=st.floats(0.02, 1.2))
def test_the_fast_prediction_is_the_write_by_write_replay(plain, share):
    received = max(1, int(len(plain) * share))
    assert rebatch_failure(received, plain) == replay(received, plain)
