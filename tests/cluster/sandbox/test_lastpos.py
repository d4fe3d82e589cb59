"""GetLastMessageId from the real broker (Pulsar 4.0.7) next to ``compact --status``'s answer.

A consumer's ``get_last_message_id()`` (the official Python client; the Java one where the
broker answers an error) with readCompacted and without, against ledgerctl's
``get_last_message_id`` for the released generation (``--as-broker pre-pip-429``, the
default): a batch whose last records were compacted out, single messages, an encrypted batch
(the broker fails), an empty compaction, a topic ending with a transaction marker, and a
topic that grew after its compaction (the answer then comes from the topic, a batch of one
answering batch index 0).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

from tests.support.fixtures.sandbox import SandboxFailed
from tests.support.sandbox_oracle import (
    broker_compact,
    namespace,
    produce,
    short,
    topic_name,
    txn_spec,
)

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]


def _id(message_id: Any) -> str:
    return f"{message_id.ledger_id()}:{message_id.entry_id()}:{message_id.batch_index()}"


def _python_last_message_id(client: Any, topic: str, read_compacted: bool) -> str:
    consumer = client.subscribe(
        topic, f"last-id-{uuid.uuid4().hex[:8]}", is_read_compacted=read_compacted
    )
    try:
        return _id(consumer.get_last_message_id())
    finally:
        consumer.unsubscribe()
        consumer.close()


def _batched(n: int, codec: Any = None) -> dict[str, Any]:
    import pulsar

    return {
        "batching_enabled": True,
        "batching_max_messages": n,
        "batching_max_publish_delay_ms": 1000,
        "compression_type": codec if codec is not None else pulsar.CompressionType.NONE,
    }


def _produce(box: Any, client: Any, scenario: str) -> None:
    import pulsar

    name = scenario
    topic = topic_name(f"lastid-{scenario}")
    if name == "trailing-placeholders":
        # the last batch keeps k5 and k6; its last three records are tombstones: the
        # compacted batch ends with three placeholders (what #18877 fixed)
        produce(client, topic, [(f"k{i}", b"v%d" % i) for i in range(5)], **_batched(5))
        last = [("k5", b"v5"), ("k6", b"v6"), ("k3", b""), ("k4", b""), ("k2", b"")]
        produce(client, topic, last, **_batched(5))
    elif name == "single":
        produce(client, topic, [(f"k{i % 3}", b"v%d" % i) for i in range(7)])
    elif name == "encrypted":
        from tests.cluster.sandbox.test_compaction import _rsa

        public, private = _rsa(box.dir / "oracle-keys")
        reader = pulsar.CryptoKeyReader(str(public), str(private))
        produce(
            client,
            topic,
            [(f"k{i % 2}", b"secret-%d" % i) for i in range(6)],
            encryption_key="oracle",
            crypto_key_reader=reader,
            **_batched(3),
        )
    elif name == "all-deleted":
        messages = [("a", b"1"), ("b", b"2"), ("a", b""), ("b", b"")]
        produce(client, topic, messages, compression_type=pulsar.CompressionType.LZ4)
    elif name == "txn-ends-with-marker":
        produce(client, topic, [("p0", b"plain-0"), ("p1", b"plain-1")])
        box.java(
            "txn-produce",
            txn_spec(topic, [("commit", [("t0", b"committed")]), ("abort", [("t1", b"x")])]),
        )
    elif name == "grew-after-compaction":
        produce(client, topic, [(f"k{i % 3}", b"v%d" % i) for i in range(9)], **_batched(3))
    else:
        raise AssertionError(name)


SCENARIOS = (
    "trailing-placeholders",
    "single",
    "encrypted",
    "all-deleted",
    "txn-ends-with-marker",
    "grew-after-compaction",
)


@pytest.fixture(scope="module")
def compacted(sandbox) -> dict[str, dict[str, Any]]:
    """Each scenario compacted by the broker; then what the broker and ledgerctl answer."""
    namespace(sandbox)
    names = [f"lastid-{n}" for n in SCENARIOS]
    client = sandbox.client()
    try:
        for scenario, name in zip(SCENARIOS, names, strict=True):
            _produce(sandbox, client, scenario)
            sandbox.unload(topic_name(name))
            broker_compact(sandbox, topic_name(name))
        # more after the compaction: one batch of one message, in a closed ledger
        grew = topic_name("lastid-grew-after-compaction")
        produce(client, grew, [("k9", b"after")], **_batched(5))
        sandbox.unload(grew)
        out: dict[str, dict[str, Any]] = {}
        for scenario, name in zip(SCENARIOS, names, strict=True):
            answers: dict[str, Any] = {}
            for read_compacted in (True, False):
                try:
                    answers[read_compacted] = _python_last_message_id(
                        client, topic_name(name), read_compacted
                    )
                except Exception as exc:  # the broker answered an error
                    answers[read_compacted] = f"error: {exc}"
            done = subprocess.run(
                [*LEDGERCTL, "compact", short(name), "--status", "-o", "json"],
                capture_output=True,
                text=True,
                timeout=300,
                env=sandbox.env(),
            )
            out[scenario] = {"broker": answers, "status": done}
    finally:
        client.close()
    return out


def _ledgerctl(result: dict[str, Any]) -> dict[str, Any]:
    done = result["status"]
    assert done.stdout, done.stderr
    return json.loads(done.stdout)["get_last_message_id"]


@pytest.mark.parametrize(
    "scenario",
    [
        "trailing-placeholders",
        "single",
        "all-deleted",
        "txn-ends-with-marker",
        "grew-after-compaction",
    ],
)
def test_get_last_message_id_equals_the_brokers(compacted, scenario):
    result = compacted[scenario]
    ours = _ledgerctl(result)
    assert ours["read_compacted"] == result["broker"][True]
    assert ours["reader"] == result["broker"][False]
    assert ours["unconfirmed"] is None


def test_trailing_placeholders_answer_the_last_live_record(compacted):
    # the #18877 rule: batch index 1 (k6), not 4 (a placeholder)
    ours = _ledgerctl(compacted["trailing-placeholders"])
    assert ours["read_compacted"].endswith(":1")
    assert ours["reader"].endswith(":4")  # a plain reader: the topic's batch, its last index


def test_a_topic_that_grew_answers_from_the_topic(compacted):
    ours = _ledgerctl(compacted["grew-after-compaction"])
    assert ours["read_compacted_from"] == "topic"
    # a batch of one from the topic: batch index 0 (from the compacted ledger it would be -1)
    assert ours["read_compacted"].endswith(":0")


def test_an_encrypted_last_batch_fails_on_the_broker_and_in_ledgerctl(compacted, sandbox):
    result = compacted["encrypted"]
    ours = _ledgerctl(result)
    assert ours["read_compacted"].startswith("error:")
    assert ours["reader"] == result["broker"][False]
    # the Java client says what the broker answered: an error, not an id
    with pytest.raises(SandboxFailed, match="compacted Ledger"):
        sandbox.java(
            "last-message-id",
            {"topic": topic_name("lastid-encrypted"), "read_compacted": True},
        )
    checks = json.loads(result["status"].stdout)["checks"]
    assert any(c["check"] == "last-position-error" for c in checks)
    assert result["status"].returncode == 1
