"""A ledger list the real broker stores out of ledger-id order, read as the broker reads it.

A 4.0 broker writes each offloaded ledger's new offload context from a ``java.util.HashMap``
copy of its ledger map (``ManagedLedgerImpl.tryTransformLedgerInfo`` ->
``buildManagedLedgerInfo(Map)``), so the list is stored in hash-bucket order (ledger id
modulo the table size) until the broker writes it again from its sorted map: a rollover,
or the deletion of the BookKeeper copies. With the copies kept
(``managedLedgerOffloadDeletionLagInMillis`` of an hour here) it stays that way. The broker
sorts the list when it loads the topic (``ManagedLedgerImpl.ledgers`` is a sorted map).

This module's topic has two ledgers with data, the second one's id lower than the first's
modulo the table size: stored after the offload, the second is listed before the first.
`verify` says so as information (exit 0), and `topic info`, `inspect --topic` and `seek`
give what a broker reader gets.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from tests.support.cli_helpers import run
from tests.support.offload_world import RUN, ReadMessage, keeping_copies, read_all

NS = "public/ledger-order"


def java_hashmap_order(ids: list[int]) -> list[int]:
    """The order a ``new HashMap<>(sortedMap)`` of Long keys ``ids`` iterates in: its table
    is sized for the map (``HashMap.putMapEntries``: the power of two >= n / 0.75 + 1), each
    key in bucket ``spread(Long.hashCode) & (size - 1)``, a bucket in insertion order."""
    size = 1
    while size < int(len(ids) / 0.75 + 1.0):
        size *= 2

    def bucket(v: int) -> int:
        h = (v ^ (v >> 32)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (size - 1)

    return sorted(sorted(ids), key=bucket)


class Topic:
    def __init__(self, topic: str, stored: list[int], messages: list[ReadMessage]) -> None:
        self.topic = topic
        self.stored = stored  # the ledger ids as the metadata store holds them
        self.messages = messages  # what a broker reader returns

    @property
    def short(self) -> str:
        return self.topic.split("://", 1)[1]


def _produce(client: Any, topic: str, tag: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        producer.send(f"{tag}-{i}".encode(), partition_key=f"k{i % 3}")
        time.sleep(0.002)  # a publish time of its own for each message (seek --time)
    producer.close()


@pytest.fixture(scope="module")
def unordered(offload_sandbox: Any) -> Topic:
    box = offload_sandbox
    keeping_copies(box, NS, like="public/offload-record")
    topic = f"persistent://{NS}/unordered-{RUN}"
    client = box.client()
    try:
        _produce(client, topic, "first")
        box.unload(topic)
        first = box.internal_stats(topic)["ledgers"][0]["ledgerId"]
        # until the topic's new (empty) current ledger lands in a lower bucket of the
        # 8-bucket table the offload's HashMap of 3 or 4 ledgers has; an empty ledger is
        # dropped when the topic loads again
        for _ in range(40):
            current = box.internal_stats(topic)["ledgers"][-1]["ledgerId"]
            if current % 8 < first % 8:
                break
            if first % 8 == 0:  # nothing lands lower: the next ledger with data is first
                _produce(client, topic, "first")
                first = current
            box.unload(topic)
        else:
            pytest.fail("no ledger id in a lower bucket after 40 new ledgers")
        _produce(client, topic, "second")
    finally:
        client.close()
    box.unload(topic)
    ledgers = [li["ledgerId"] for li in box.internal_stats(topic)["ledgers"]]
    assert len(ledgers) in (3, 4) and ledgers[-2] == current, ledgers
    body = {"ledgerId": ledgers[-1], "entryId": 0, "partitionIndex": -1}
    box.admin("PUT", box.topic_path(topic) + "/offload", body)
    deadline = time.monotonic() + 120
    while True:
        status = box.admin("GET", box.topic_path(topic) + "/offload")
        assert status["status"] != "ERROR", status
        if status["status"] == "SUCCESS":
            ctx = {li.ledgerId: li.offloadContext for li in box.ml_info(topic).ledgerInfo}
            if all(ctx[lid].complete for lid in ledgers[:-1]):
                assert not any(ctx[lid].bookkeeperDeleted for lid in ledgers[:-1])
                break
        assert time.monotonic() < deadline, f"offload of {topic} not complete: {status}"
        time.sleep(0.2)
    stored = [li.ledgerId for li in box.ml_info(topic).ledgerInfo]
    # the broker's doing: stored in its HashMap's order, served sorted
    assert stored == java_hashmap_order(ledgers) != ledgers, (stored, ledgers)
    assert [li["ledgerId"] for li in box.internal_stats(topic)["ledgers"]] == ledgers
    return Topic(topic, stored, read_all(box, topic))


@pytest.fixture
def env(offload_sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERCTL_METADATA_URL", offload_sandbox.metadata_url)
    monkeypatch.setenv("LEDGERCTL_BOOKKEEPER_METADATA_URL", offload_sandbox.bookkeeper_metadata_url)
    for name in ("LEDGERCTL_OFFLOAD_URL", "LEDGERCTL_PREFER", "LEDGERCTL_BOOKIE_DIRS"):
        monkeypatch.delenv(name, raising=False)


def test_verify_says_it_as_information(unordered: Topic, env: None, capsys: Any) -> None:
    """`verify` on the topic exits 0: the out-of-order list is an info finding with the
    stored order, nothing else (the broker that has the topic loaded agrees with it)."""
    result = run(capsys, "verify", unordered.short, "-o", "json")
    assert result.code == 0, (result.out, result.err)
    findings = json.loads(result.out)["findings"]
    assert [(f["severity"], f["check"]) for f in findings] == [("info", "ledger-list-unordered")]
    assert findings[0]["details"]["stored_ledger_ids"] == unordered.stored


def test_reads_agree_with_a_broker_reader(
    offload_sandbox: Any, unordered: Topic, env: None, capsys: Any
) -> None:
    """`topic info` lists the ledgers as the broker's internal stats do (the last one
    open), `inspect --topic` returns every message the broker reader did, in its order,
    and `seek` lands where the reader's messages say."""
    box, msgs = offload_sandbox, unordered.messages
    assert len(msgs) == 6 * (len(unordered.stored) - 1)
    assert msgs[0].ledger_id != msgs[-1].ledger_id
    broker = [li["ledgerId"] for li in box.internal_stats(unordered.topic)["ledgers"]]
    info = run(capsys, "topic", "info", unordered.short, "-o", "json")
    assert info.code == 0, info.err
    shown = json.loads(info.out)
    assert [li["ledger_id"] for li in shown["ledgers"]] == broker
    assert [li["open"] for li in shown["ledgers"]] == [False] * (len(broker) - 1) + [True]
    assert shown["stored_ledger_ids"] == unordered.stored
    assert shown["entries"] == len(msgs)

    got = run(capsys, "inspect", "--topic", unordered.short, "-o", "jsonl")
    assert got.code == 0, got.err
    inspected = [
        (m["message_id"], m["key"], base64.b64decode(m["value"]), m["publish_time"])
        for line in got.out.splitlines()
        for m in json.loads(line)["messages"]
    ]
    assert inspected == [
        (f"{m.ledger_id}:{m.entry_id}", m.key, m.value, m.publish_time) for m in msgs
    ]

    for n in (0, 3, len(msgs) - 6, len(msgs) - 1):
        m = msgs[n]
        # the reader's first message at or after m's publish time: m, times being distinct
        at_time = next(x for x in msgs if x.publish_time >= m.publish_time)
        for how, value, want in (("--index", n, m), ("--time", m.publish_time, at_time)):
            seek = run(capsys, "seek", unordered.short, how, value, "-o", "json")
            assert seek.code == 0, seek.err
            answer = json.loads(seek.out)["position"]
            assert answer == f"{want.ledger_id}:{want.entry_id}", (how, value)
