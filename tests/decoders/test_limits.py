"""Limits that keep a small hostile entry from costing much, and formats we only label."""

from __future__ import annotations

import resource

from pulsarctl_py.decoders import decode_entry
from pulsarctl_py.decoders.codecs import compress
from pulsarctl_py.decoders.entry import MAX_BATCH_MESSAGES
from pulsarctl_py.decoders.payload import build_batch
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api


def test_tiny_batch_claiming_too_many_messages_is_refused() -> None:
    count = MAX_BATCH_MESSAGES + 1
    plain = build_batch([(api.SingleMessageMetadata(), b"")] * count)
    md = api.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        compression=api.ZSTD,
        uncompressed_size=len(plain),
        num_messages_in_batch=count,
    )
    data = build_entry(md, compress(api.ZSTD, plain))
    assert len(data) < 1024
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    entry = decode_entry(data)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert not entry.ok and entry.messages == []
    assert entry.problems[0].layer == "batch"
    assert f"{count}" in entry.problems[0].message
    assert grown_kib < 64 * 1024


def test_kafka_entry_format_is_labelled_not_an_error() -> None:
    md = api.MessageMetadata(
        producer_name="",
        sequence_id=0,
        publish_time=1,
        num_messages_in_batch=3,
        properties=[api.KeyValue(key="entry.format", value="kafka")],
    )
    entry = decode_entry(build_entry(md, bytes(70), checksum=False))
    assert entry.ok
    assert [layer.name for layer in entry.layers] == ["message-metadata", "kafka-record-batch"]
    assert entry.layers[-1].fields["records"] == 3
