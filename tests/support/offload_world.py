"""Offloaded topics on the sandbox (``scripts/sandbox up --offload``): produced with the
official Python client, offloaded through the broker's admin API, the BookKeeper copy
deleted, and what a broker reader then returns (the broker reads them from tiered storage).

One topic per way the sandbox offloads: the filesystem offloader with Pulsar's shipped
profile (BLOCK compression, the broker's default), with RECORD compression (namespace
``public/offload-record``) and the jcloud ``S3`` driver (namespace ``public/offload-s3``).
Each has two ledgers: the first past the BLOCK profile's 1 MB block size and Hadoop's
100 KB RECORD sync interval (random 1 KiB values), the second with LZ4 batches of keyed
messages; both past the MapFile index interval (128 keys).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.fixtures.sandbox import Sandbox

#: a suffix for this run's topic names: a sandbox reused across runs gets new topics
RUN = uuid.uuid4().hex[:6]

KINDS = {
    "fs-block": ("public/default", "filesystem", "BLOCK"),
    "fs-record": ("public/offload-record", "filesystem", "RECORD"),
    "s3": ("public/offload-s3", "S3", None),
}


#: what points ledgerctl elsewhere than where each ledger's offload context says, or at
#: bookie directories instead of the running bookies
OVERRIDES = (
    "LEDGERCTL_OFFLOAD_URL",
    "LEDGERCTL_S3_ENDPOINT",
    "LEDGERCTL_PREFER",
    "LEDGERCTL_BOOKIE_DIRS",
)


def s3_environment(box: Sandbox) -> dict[str, str | None]:
    """The sandbox broker's S3 credentials as the broker's S3 driver gets them (Pulsar's
    ACCESS_KEY_ID / ACCESS_KEY_SECRET) and no AWS configuration of this machine: variable ->
    value, None for a variable to unset."""
    env: dict[str, str | None] = dict.fromkeys(
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
    )
    env.update(
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        AWS_EC2_METADATA_DISABLED="true",
    )
    path = Path(box.offload_info["s3"]["credentials_file"])
    for line in path.read_text().splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            env[key] = value
    return env


def use_s3_environment(monkeypatch: pytest.MonkeyPatch, box: Sandbox) -> None:
    """:func:`s3_environment` in this test's environment."""
    for key, value in s3_environment(box).items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)


def use_offload_stores(monkeypatch: pytest.MonkeyPatch, box: Sandbox) -> None:
    """The sandbox's stores in this test's environment, no override of where offloaded
    ledgers are (:data:`OVERRIDES`), and the S3 credentials (:func:`use_s3_environment`)."""
    monkeypatch.setenv("LEDGERCTL_METADATA_URL", box.metadata_url)
    monkeypatch.setenv("LEDGERCTL_BOOKKEEPER_METADATA_URL", box.bookkeeper_metadata_url)
    for name in OVERRIDES:
        monkeypatch.delenv(name, raising=False)
    use_s3_environment(monkeypatch, box)


@dataclass(frozen=True)
class ReadMessage:
    """One message as a broker reader returned it."""

    ledger_id: int
    entry_id: int
    batch_index: int
    key: str | None
    value: bytes
    properties: dict[str, str]
    publish_time: int
    event_time: int


@dataclass
class OffloadedTopic:
    topic: str  # persistent://tenant/ns/name
    driver: str
    compression: str | None
    ledgers: list[int]
    messages: list[ReadMessage]

    @property
    def short(self) -> str:
        return self.topic.split("://", 1)[1]


def produce(box: Sandbox, topic: str, seed: int) -> None:
    """Two ledgers: 1200 unbatched random 1 KiB values, then 400 keyed LZ4 batches."""
    import pulsar

    rnd = random.Random(seed)
    client = box.client()
    try:
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        for i in range(1200):
            producer.send_async(
                rnd.randbytes(1024), None, properties={"i": str(i)}, event_timestamp=1000 + i
            )
        producer.flush()
        producer.close()
        box.unload(topic)
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            block_if_queue_full=True,
            batching_max_messages=10,
            batching_max_publish_delay_ms=50,
            compression_type=pulsar.CompressionType.LZ4,
        )
        for i in range(400):
            producer.send_async(f"value-{i}-".encode() * 8, None, partition_key=f"key-{i % 13}")
        producer.flush()
        producer.close()
    finally:
        client.close()


def read_all(
    box: Sandbox, topic: str, hiccup: Callable[[str], bool] | None = None
) -> list[ReadMessage]:
    """Every message from the start, through a broker reader. Read again, once, when the
    read timed out and the broker's log says its transaction buffer failed on the topic
    meanwhile (4.0.7 after an unload: "Transaction buffer recover fail", seen in a full
    run): the broker's hiccup, said on the test's output. Any other timeout fails.
    ``hiccup``: the check from before what the caller did to the topic (its log lines
    then count too), else from now."""
    import pulsar

    hiccup = hiccup or box.broker_hiccup()
    try:
        return _read_all(box, topic)
    except pulsar.Timeout:
        if not hiccup(topic):
            raise
        print(f"sandbox: the broker's transaction buffer failed on {topic}: read again")
        return _read_all(box, topic)


def _read_all(box: Sandbox, topic: str) -> list[ReadMessage]:
    import pulsar

    client = box.client()
    out: list[ReadMessage] = []
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=30000)
            mid = msg.message_id()
            out.append(
                ReadMessage(
                    ledger_id=mid.ledger_id(),
                    entry_id=mid.entry_id(),
                    batch_index=mid.batch_index(),
                    key=msg.partition_key() or None,
                    value=msg.data(),
                    properties=dict(msg.properties()),
                    publish_time=msg.publish_timestamp(),
                    event_time=msg.event_timestamp(),
                )
            )
        reader.close()
    finally:
        client.close()
    return out


def build(box: Sandbox, kinds: tuple[str, ...] = tuple(KINDS)) -> dict[str, OffloadedTopic]:
    """The offloaded topics of ``kinds``: produced, offloaded (bookkeeperDeleted), read back.
    The offloads run at once (one per topic), and are waited for together."""
    box.offload_info  # noqa: B018 (fails plainly on a sandbox without offloaders)
    names = {}
    for n, kind in enumerate(kinds):
        namespace, _driver, _compression = KINDS[kind]
        names[kind] = f"persistent://{namespace}/offloaded-{kind}-{RUN}"
        produce(box, names[kind], seed=n)
    started = {kind: box.start_offload(topic) for kind, topic in names.items()}
    topics: dict[str, OffloadedTopic] = {}
    for kind, topic in names.items():
        _namespace, driver, compression = KINDS[kind]
        box.wait_offloaded(topic, started[kind])
        topics[kind] = OffloadedTopic(
            topic, driver, compression, started[kind], read_all(box, topic)
        )
    return topics


def keeping_copies(box: Sandbox, namespace: str, like: str) -> None:
    """Create ``namespace`` (if new) with the offload policies of namespace ``like``, but
    keeping the BookKeeper copies of offloaded ledgers for an hour
    (``managedLedgerOffloadDeletionLagInMillis``)."""
    policies = box.admin("GET", f"/namespaces/{like}/offloadPolicies")
    box.admin("PUT", f"/namespaces/{namespace}", {}, ok=(200, 204, 409))
    box.admin(
        "POST",
        f"/namespaces/{namespace}/offloadPolicies",
        {**policies, "managedLedgerOffloadDeletionLagInMillis": 3_600_000},
    )


def offload_context(box: Sandbox, topic: str) -> dict[int, Any]:
    """ledger id -> its OffloadContext, from the managed ledger's metadata."""
    return {i.ledgerId: i.offloadContext for i in box.ml_info(topic).ledgerInfo}
