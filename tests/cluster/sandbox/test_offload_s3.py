"""Ledgers the real broker offloaded to S3 and then deleted from BookKeeper, read by
ledgerctl's jcloud reader straight from the sandbox's S3 server and compared, message by
message, with what a broker reader returns for them.

The data is the session's ``offload_world["s3"]`` (tests/support/offload_world.py): a topic
of ``public/offload-s3``, whose offload policies name the jcloud ``S3`` driver and the
sandbox's moto server, with two ledgers (1200 unbatched random 1 KiB values, then keyed LZ4
batches) offloaded by the broker's admin API and ``bookkeeperDeleted``: the broker reader
got them from S3. ledgerctl finds the objects from each ledger's offload context alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from pulsarctl_py.decoders.entry import DecodeOptions, Outer, decode_entry
from pulsarctl_py.stores.tiered.jcloud import OffloadedEntry, uuid_of
from pulsarctl_py.stores.tiered.s3 import S3Location, S3Objects, list_offload_objects, open_ledger
from tests.support.offload_world import ReadMessage, offload_context, use_s3_environment


@pytest.fixture
def s3_env(offload_sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's S3 credentials in the environment, as the broker's S3 driver gets them
    (Pulsar's ACCESS_KEY_ID / ACCESS_KEY_SECRET); no AWS configuration of this machine."""
    use_s3_environment(monkeypatch, offload_sandbox)


def _read(ledger_id: int, ctx: Any) -> list[ReadMessage]:
    """Every message of one offloaded ledger, read from S3 where its offload context says."""
    ledger = open_ledger(ledger_id, ctx)
    options = DecodeOptions(outer=Outer.PULSAR_ENTRY)
    out = []
    for item in ledger.read_entries():
        assert isinstance(item, OffloadedEntry), item
        entry = decode_entry(item.data, options, (item.ledger_id, item.entry_id))
        assert not entry.problems, entry.problems  # checksums verified as for bookie data
        for m in entry.messages:
            out.append(
                ReadMessage(
                    ledger_id=item.ledger_id,
                    entry_id=item.entry_id,
                    batch_index=m.batch_index,
                    key=m.key,
                    value=bytes(m.value or b""),
                    properties=dict(m.properties),
                    publish_time=m.publish_time,
                    event_time=m.event_time or 0,
                )
            )
    return out


def test_every_offloaded_message_matches_the_broker_reader(
    offload_world: Any, offload_sandbox: Any, s3_env: None
) -> None:
    topic = offload_world["s3"]
    contexts = offload_context(offload_sandbox, topic.topic)
    assert len(topic.ledgers) == 2
    read: list[ReadMessage] = []
    for ledger_id in topic.ledgers:
        ctx = contexts[ledger_id]
        # the broker could read it from S3 only: its BookKeeper ledger is gone
        assert ctx.complete and ctx.bookkeeperDeleted and ctx.driverMetadata.name == "S3"
        read += _read(ledger_id, ctx)
    from_broker = [m for m in topic.messages if m.ledger_id in topic.ledgers]
    assert len(from_broker) == 1600  # 1200 unbatched, 400 in batches
    assert read == from_broker


def test_the_bucket_listing_groups_each_offload(
    offload_world: Any, offload_sandbox: Any, s3_env: None
) -> None:
    topic = offload_world["s3"]
    s3 = offload_sandbox.offload_info["s3"]
    listing = list_offload_objects(S3Objects(S3Location(s3["bucket"], s3["endpoint"])))
    contexts = offload_context(offload_sandbox, topic.topic)
    for ledger_id in topic.ledgers:
        ctx = contexts[ledger_id]
        group = listing.groups[(uuid_of(ctx.uidMsb, ctx.uidLsb), ledger_id)]
        assert group.complete, group.to_json()
        assert group.data is not None and group.data.size > 0
