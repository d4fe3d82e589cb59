"""Ledgers the real broker offloaded to S3 and then deleted from BookKeeper, read by
ledgerctl's jcloud reader straight from the sandbox's S3 server and compared, message by
message, with what a broker reader returns for them.

The sandbox runs with ``--offload``: the namespace ``public/offload-s3`` has offload
policies naming the jcloud ``S3`` driver and the local S3 server (cluster.json's
``offload.s3``). The official client produces (unbatched with keys and properties, LZ4
batches, a payload larger than the read window), the topic is unloaded twice (three
ledgers), the broker's admin API offloads the closed ones, and the test waits until each
is ``bookkeeperDeleted``: from then on the broker serves them from S3 only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.decoders.entry import DecodeOptions, Outer, decode_entry
from pulsarctl_py.stores.tiered.jcloud import JcloudLedger, OffloadedEntry, uuid_of
from pulsarctl_py.stores.tiered.s3 import S3Location, S3Objects, list_offload_objects

NAMESPACE = "public/offload-s3"
TOPIC = f"persistent://{NAMESPACE}/read-back"
#: seconds to wait for the offload and the BookKeeper deletion (lag 1 s, checked every 2 s)
WAIT = 120.0


def _wait(what: str, check: Any, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}", pytrace=False)
        time.sleep(0.2)


def _ml_info(sandbox: Any) -> Any:
    from pulsarctl_py.stores.metadata import open_metadata_store
    from pulsarctl_py.stores.metadata.managed_ledgers import read_managed_ledger

    store = open_metadata_store(sandbox.metadata_url)
    try:
        record = read_managed_ledger(store, TOPIC, with_cursors=False)
    finally:
        store.close()
    assert record is not None and record.info is not None
    return record.info.message


def _message(m: Any) -> dict[str, Any]:
    mid = m.message_id()
    return {
        "id": (mid.ledger_id(), mid.entry_id(), mid.batch_index()),
        "key": m.partition_key() or None,
        "properties": dict(m.properties()),
        "value": bytes(m.data()),
        "publish_time": m.publish_timestamp(),
    }


@pytest.fixture(scope="module")
def offloaded(sandbox: Any) -> dict[str, Any]:
    """Produce, offload, wait for bookkeeperDeleted; what a broker reader returns then."""
    import pulsar

    if "offload" not in sandbox.state:
        pytest.fail("the session sandbox runs without --offload", pytrace=False)
    s3 = sandbox.state["offload"]["s3"]
    client = sandbox.client()
    try:
        plain = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(20):
            plain.send(f"plain-{i}".encode(), partition_key=f"k{i % 4}", properties={"i": str(i)})
        plain.send(b"L" * 300_000, partition_key="large")  # larger than a read window
        plain.close()
        sandbox.unload(TOPIC)
        batched = client.create_producer(
            TOPIC,
            batching_enabled=True,
            batching_max_messages=10,
            batching_max_publish_delay_ms=1000,
            compression_type=pulsar.CompressionType.LZ4,
        )
        for i in range(40):
            batched.send_async(f"batched-{i}".encode() * 5, None, partition_key=f"b{i % 3}")
        batched.flush()
        batched.close()
        sandbox.unload(TOPIC)
        tail = client.create_producer(TOPIC, batching_enabled=False)
        last = tail.send(b"stays on bookkeeper")
        tail.close()
        path = sandbox.topic_path(TOPIC)
        sandbox.admin(
            "PUT",
            path + "/offload",
            {"ledgerId": last.ledger_id(), "entryId": last.entry_id(), "partitionIndex": -1},
        )
        status = _wait(
            "the offload",
            lambda: (s := sandbox.admin("GET", path + "/offload"))["status"] != "RUNNING" and s,
        )
        assert status["status"] == "SUCCESS", status

        def deleted() -> list[Any]:
            info = _ml_info(sandbox)
            done = [
                li
                for li in info.ledgerInfo
                if li.HasField("offloadContext") and li.offloadContext.bookkeeperDeleted
            ]
            return done if len(done) == len(info.ledgerInfo) - 1 else []

        ledgers = _wait("bookkeeperDeleted on every offloaded ledger", deleted)
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        messages = []
        while reader.has_message_available():
            messages.append(_message(reader.read_next(timeout_millis=30_000)))
        reader.close()
    finally:
        client.close()
    credentials = dict(
        line.split("=", 1)
        for line in Path(s3["credentials_file"]).read_text().splitlines()
        if "=" in line
    )
    return {"ledgers": ledgers, "messages": messages, "s3": s3, "credentials": credentials}


@pytest.fixture
def s3_env(offloaded: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's S3 credentials, the way the broker's S3 driver gets them."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for key, value in offloaded["credentials"].items():
        monkeypatch.setenv(key, value)


def _read(li: Any) -> list[dict[str, Any]]:
    """Every message of one offloaded ledger, read from S3 where its offload context says."""
    ctx = li.offloadContext
    props = {p.key: p.value for p in ctx.driverMetadata.properties}
    location = S3Location.from_driver_metadata(ctx.driverMetadata.name, props)
    ledger = JcloudLedger(S3Objects(location), li.ledgerId, uuid_of(ctx.uidMsb, ctx.uidLsb))
    assert ledger.metadata.last_entry_id == li.entries - 1
    assert ledger.metadata.length == li.size
    options = DecodeOptions(outer=Outer.PULSAR_ENTRY)
    out = []
    for item in ledger.read_entries():
        assert isinstance(item, OffloadedEntry), item
        entry = decode_entry(item.data, options, (item.ledger_id, item.entry_id))
        assert not entry.problems, entry.problems
        for m in entry.messages:
            out.append(
                {
                    "id": (item.ledger_id, item.entry_id, m.batch_index),
                    "key": m.key,
                    "properties": dict(m.properties),
                    "value": bytes(m.value or b""),
                    "publish_time": m.publish_time,
                }
            )
    return out


def test_every_offloaded_message_matches_the_broker_reader(
    offloaded: dict[str, Any], s3_env: None
) -> None:
    ledgers = offloaded["ledgers"]
    assert len(ledgers) == 2
    for li in ledgers:
        assert li.offloadContext.complete and li.offloadContext.driverMetadata.name == "S3"
    read = [m for li in ledgers for m in _read(li)]
    from_broker = [
        m for m in offloaded["messages"] if m["id"][0] in {li.ledgerId for li in ledgers}
    ]
    assert len(from_broker) == 61  # 20 + 1 unbatched, 40 batched
    assert read == from_broker
    # the one message left on BookKeeper is the only one the broker returned besides
    assert [m["value"] for m in offloaded["messages"] if m not in from_broker] == [
        b"stays on bookkeeper"
    ]


def test_the_bucket_listing_finds_each_offload(offloaded: dict[str, Any], s3_env: None) -> None:
    s3 = offloaded["s3"]
    listing = list_offload_objects(S3Objects(S3Location(s3["bucket"], s3["endpoint"])))
    for li in offloaded["ledgers"]:
        ctx = li.offloadContext
        group = listing.groups[(uuid_of(ctx.uidMsb, ctx.uidLsb), li.ledgerId)]
        assert group.complete, group.to_json()
