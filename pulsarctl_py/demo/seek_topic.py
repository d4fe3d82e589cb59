"""The demo's ``seek-times`` topic: generated entries where ``ledgerctl seek`` shows something.

No real-client capture has what a seek needs to show, so these entries are built with
ledgerctl's own encoders (``decoders.pulsar.build_entry``), deterministically:

* four ledgers of :data:`LEDGERS` entries, one entry every :data:`STEP_MS` (30 s) from
  :data:`T0` (2026-11-21T10:50:00Z, after every real-client topic of the demo, so the
  ledger ids of those topics do not change), some entries a batch of 3 messages;
* broker entry metadata (broker_timestamp, continuous index) on the last two ledgers only,
  as after enabling ``AppendIndexMetadataInterceptor`` and
  ``AppendBrokerTimestampMetadataInterceptor`` on a running cluster;
* one non-monotonic region: entries 3..5 of the second ledger were published by a producer
  whose clock had gone back :data:`CLOCK_JUMP_MS` (10 minutes). Without broker entry
  metadata their publish time is what the broker seeks by (formats.md §15).

The broker appends every entry :data:`APPEND_DELAY_MS` after its honest publish time; a
ledger closes 1 ms after its last append and the next one is created then.
"""

from __future__ import annotations

from pulsarctl_py.decoders.payload import build_batch
from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer, build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api

from .model import TOPIC_LOAD_MS, Draft, Real, TopicPlan

NAME = "seek-times"
T0 = 1_795_258_200_000  # 2026-11-21T10:50:00Z
STEP_MS = 30_000
APPEND_DELAY_MS = 2
LEDGERS = (8, 8, 8, 6)
#: ledger numbers (0-based) whose entries carry broker entry metadata
WITH_BEM = frozenset({2, 3})
#: (ledger number, first entry, last entry) published by a clock that went back
BACKWARDS = (1, 3, 5)
CLOCK_JUMP_MS = 600_000
PRODUCER = "standalone-0-seek"


def _entry(k: int, publish_time: int) -> tuple[bytes, api.MessageMetadata, int]:
    """Entry number ``k`` of the topic: a Pulsar entry, its metadata, its message count."""
    md = api.MessageMetadata(producer_name=PRODUCER, sequence_id=k, publish_time=publish_time)
    if k % 4 == 3:
        md.num_messages_in_batch = 3
        records = []
        for i in range(3):
            smm = api.SingleMessageMetadata(sequence_id=3 * k + i)
            smm.partition_key = f"sensor-{(k + i) % 3}"
            records.append((smm, f"reading {k}.{i}".encode()))
        payload = build_batch(records)
        count = 3
    else:
        md.partition_key = f"sensor-{k % 3}"
        payload = f"reading {k}".encode()
        count = 1
    md.uncompressed_size = len(payload)
    return build_entry(md, payload, checksum=True), md, count


def plan_drafts(topic: int, plan: TopicPlan) -> list[Draft]:
    """The topic's ledgers as the demo builder's drafts (the builder assigns ids)."""
    drafts = []
    ctime = T0 + STEP_MS - TOPIC_LOAD_MS
    k = 0
    index = -1
    back_ledger, back_first, back_last = BACKWARDS
    for number, count in enumerate(plan.ledgers):
        entries = []
        for entry_id in range(count):
            honest = T0 + (k + 1) * STEP_MS
            published = honest
            if number == back_ledger and back_first <= entry_id <= back_last:
                published -= CLOCK_JUMP_MS
            data, md, messages = _entry(k, published)
            at = honest + APPEND_DELAY_MS
            payload, entry_index = data, None
            if number in WITH_BEM:
                index += messages
                entry_index = index
                bem = api.BrokerEntryMetadata(broker_timestamp=at, index=index)
                payload = BrokerEntryMetadataLayer.build(bem) + data
            real = Real(f"generated/{NAME}/{k:06d}", data, md)
            entries.append((real, payload, at, entry_index))
            k += 1
        closed = entries[-1][2] + 1
        drafts.append(Draft(topic, number, ctime, closed, entries))
        ctime = closed
    return drafts
