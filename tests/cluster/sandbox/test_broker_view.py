"""The broker's view beside the stored one, on the sandbox's real broker (Pulsar 4.0.7):
``topic info``, ``verify`` and ``compact --status`` against what the broker answers.

The module's topics (each with a producer connected for the whole module, so that they stay
loaded, as on a live cluster):

* ``live``: a closed ledger and the current one (unloaded in between, while the producer
  and a consumer stay connected; the consumer acknowledges part of what it received):
  a healthy loaded topic, which must be clean;
* ``stale``: the same shape; then its stored ledger list is rewritten behind the loaded
  topic's back, as a write that skipped the live-broker gate would: the first ledger
  dropped from the managed-ledger node with compare-and-set, through ledgerctl's own
  metadata store. The broker keeps serving its list (the oracle: its internal stats)
  until the list is put back;
* ``compacted``: keyed messages compacted by the broker, then ``ledgerctl compact --plan
  --unload`` writes a new compacted ledger (the producer's next message loads the topic
  again) and the plan's CompactedTopicLedger is written to the store
  (compare-and-set, no gate) while the broker has the topic loaded: a compaction it has not
  picked up, until the topic is unloaded.
"""

from __future__ import annotations

import contextlib
import io
import time
from typing import Any

import pytest

from tests.support.cli_helpers import Result
from tests.support.sandbox_oracle import (
    broker_compact,
    ledgerctl_env,
    namespace,
    topic_name,
)


def _cli(sandbox: Any, *args: str, ok: tuple[int, ...] = (0,)) -> Result:
    """``ledgerctl ARGS`` in this process, pointed at the sandbox."""
    from pulsarctl_py.cli import main

    out, err = io.StringIO(), io.StringIO()
    with ledgerctl_env(sandbox), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    assert code in ok, f"ledgerctl {' '.join(args)} exited {code}: {err.getvalue()}"
    return Result(code, out.getvalue(), err.getvalue())


def _wait(cond: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _ledgers(sandbox: Any, topic: str) -> list[int]:
    return [li["ledgerId"] for li in sandbox.internal_stats(topic)["ledgers"]]


def _broker_checks(doc: dict[str, Any]) -> list[tuple[str, int | None]]:
    return [(d["check"], d["ledger_id"]) for d in doc["broker"]["differences"] if d["severity"]]


def _rewrite_ledger_list(sandbox: Any, topic: str, drop: int) -> bytes:
    """Drop ledger ``drop`` from the stored list behind the broker's back (compare-and-set
    on the node's version, the way a plan applied with --force-owned writes); the bytes
    that were there."""
    from pulsarctl_py.decoders.managed_ledger import parse_ml_info, rebuild
    from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic

    store = open_metadata_store(sandbox.metadata_url, read_only=False)
    try:
        path = resolve_topic(topic).ml_path
        node = store.get(path)
        decoded = parse_ml_info(node.data)
        message = decoded.message
        kept = [li for li in message.ledgerInfo if li.ledgerId != drop]
        del message.ledgerInfo[:]
        message.ledgerInfo.extend(kept)
        store.transaction().set(path, rebuild(decoded, message), node.stat.version).commit()
        return bytes(node.data)
    finally:
        store.close()


def _put_back(sandbox: Any, topic: str, data: bytes) -> None:
    from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic

    store = open_metadata_store(sandbox.metadata_url, read_only=False)
    try:
        path = resolve_topic(topic).ml_path
        node = store.get(path)
        store.transaction().set(path, data, node.stat.version).commit()
    finally:
        store.close()


def _write_behind_back(sandbox: Any, plan_path: Any) -> None:
    """Write a plan's changes to the store with compare-and-set on each key's planned
    version, without asking the brokers (what ``apply`` refuses while a broker has the
    topic loaded)."""
    import base64
    import json

    from pulsarctl_py.stores.metadata import open_metadata_store

    doc = json.loads(plan_path.read_text())
    assert doc["changes"], "the compaction plan changes nothing"
    store = open_metadata_store(sandbox.metadata_url, read_only=False)
    try:
        txn = store.transaction()
        for change in doc["changes"]:
            if change["action"] == "set":
                txn.set(change["key"], base64.b64decode(change["new_base64"]), change["version"])
            else:
                assert change["action"] == "check", change
        txn.commit()
    finally:
        store.close()


@pytest.fixture(scope="module")
def world(sandbox: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    namespace(sandbox)
    started = time.monotonic()
    topics = {n: topic_name(f"bview-{n}") for n in ("live", "stale", "compacted")}
    client = sandbox.client()
    producers = {n: client.create_producer(t, batching_enabled=False) for n, t in topics.items()}
    consumer = client.subscribe(topics["live"], "live-sub")
    seen: dict[str, Any] = {"topics": topics, "client": client}
    try:
        for name in ("live", "stale"):
            for i in range(5):
                producers[name].send(b"before-%d" % i)
            sandbox.unload(topics[name])  # the producer reconnects: a new current ledger
            for i in range(5):
                producers[name].send(b"after-%d" % i)
        for _ in range(6):
            consumer.acknowledge(consumer.receive(30_000))
        for i in range(12):
            producers["compacted"].send(b"v%d" % i, partition_key=f"k{i % 3}")
        broker_compact(sandbox, topics["compacted"])
        seen["compacted_by_broker"] = sandbox.internal_stats(topics["compacted"])[
            "compactedLedger"
        ]["ledgerId"]
        for i in range(3):  # more since the broker's horizon: ledgerctl has work to do
            producers["compacted"].send(b"w%d" % i, partition_key=f"k{i}")
        # a compaction written behind the loaded topic's back: ledgerctl's plan (its
        # compacted ledger written to the bookies), its changes then written straight to the
        # store with compare-and-set, as a write that skipped the live-broker gate would
        plan = tmp_path_factory.mktemp("bview") / "plan.json"
        _cli(sandbox, "compact", topics["compacted"], "--plan", str(plan), "--unload")
        producers["compacted"].send(b"reload", partition_key="k9")  # loaded again
        _write_behind_back(sandbox, plan)
        seen["setup_seconds"] = round(time.monotonic() - started, 1)
        yield seen
    finally:
        consumer.close()
        client.close()


def test_a_healthy_loaded_topic_with_a_producer_and_a_consumer_is_clean(sandbox, world):
    topic = world["topics"]["live"]
    info = _cli(sandbox, "topic", "info", topic, "-o", "json").json()
    broker = info["broker"]
    assert broker["asked"] and broker["loaded"], broker
    assert broker["url"] == sandbox.web_url
    # what the broker shows is what it answers
    stats = sandbox.internal_stats(topic)
    assert [li["ledgerId"] for li in broker["stats"]["ledgers"]] == _ledgers(sandbox, topic)
    assert "live-sub" in broker["stats"]["cursors"]
    assert broker["stats"]["state"] == stats["state"]
    assert broker["compaction"]["status"] in ("NOT_RUN", "SUCCESS")
    assert _broker_checks(info) == []
    done = _cli(sandbox, "verify", topic, "-o", "json")
    doc = done.json()
    assert not [f for f in doc["findings"] if f["check"].startswith("broker-")], doc["findings"]
    assert [v["topic"] for v in doc["broker"]["loaded"]] == [topic]
    assert "1 loaded topic(s) compared" in done.err


def test_a_broker_serving_a_stale_ledger_list_is_a_finding(sandbox, world):
    topic = world["topics"]["stale"]
    first, current = _ledgers(sandbox, topic)
    before = _rewrite_ledger_list(sandbox, topic, first)
    try:
        # the broker still serves its own list (the oracle)
        assert _ledgers(sandbox, topic) == [first, current]
        info = _cli(sandbox, "topic", "info", topic, "-o", "json").json()
        assert [li["ledger_id"] for li in info["ledgers"]] == [current]
        assert _broker_checks(info) == [("broker-ledger-not-stored", first)]
        done = _cli(sandbox, "verify", topic, "-o", "json", ok=(1,))
        found = [f for f in done.json()["findings"] if f["check"].startswith("broker-")]
        assert [(f["severity"], f["check"], f["ledger_id"]) for f in found] == [
            ("error", "broker-ledger-not-stored", first)
        ]
        assert found[0]["hint"] and "unload" in found[0]["hint"]
        table = _cli(sandbox, "topic", "info", topic, "-o", "tree")
        assert "broker-ledger-not-stored" in table.err
    finally:
        _put_back(sandbox, topic, before)
    info = _cli(sandbox, "topic", "info", topic, "-o", "json").json()
    assert _broker_checks(info) == []


def test_a_compaction_the_broker_has_not_picked_up(sandbox, world):
    topic = world["topics"]["compacted"]
    old = world["compacted_by_broker"]
    info = _cli(sandbox, "topic", "info", topic, "-o", "json").json()
    stored = info["compaction"]["compacted_ledger"]
    assert stored != old
    # the broker serves its own compaction still (the oracle)
    assert sandbox.internal_stats(topic)["compactedLedger"]["ledgerId"] == old
    assert ("broker-compaction-stale", stored) in _broker_checks(info)
    stale = next(
        d for d in info["broker"]["differences"] if d["check"] == "broker-compaction-stale"
    )
    assert stale["details"] == {"stored": stored, "broker": old}
    done = _cli(sandbox, "verify", topic, "-o", "json", ok=(1,))
    assert "broker-compaction-stale" in {f["check"] for f in done.json()["findings"]}
    status = _cli(sandbox, "compact", topic, "--status", "-o", "json", ok=(1,)).json()
    assert status["broker"]["compacted_ledger"] == old
    assert "broker-compaction-stale" in {c["check"] for c in status["checks"]}
    # unloaded, the broker reads the stored compaction: nothing differs any more
    sandbox.unload(topic)
    _wait(
        lambda: sandbox.internal_stats(topic)["compactedLedger"]["ledgerId"] == stored,
        "the broker to load the stored compaction",
    )
    info = _cli(sandbox, "topic", "info", topic, "-o", "json").json()
    assert _broker_checks(info) == []


def test_compact_status_has_the_brokers_answers(sandbox, world):
    import pulsar  # noqa: F401 - the official client is the oracle

    topic = world["topics"]["compacted"]
    sandbox.unload(topic)  # whatever the test before left: the broker reads what is stored
    sandbox.internal_stats(topic)  # loaded again (the producer reconnects too)
    done = _cli(sandbox, "compact", topic, "--status", "-o", "json")
    status = done.json()
    broker = status["broker"]
    assert broker["loaded"] and broker["compaction"]["status"] in ("SUCCESS", "NOT_RUN")
    assert broker["compacted_ledger"] == status["compacted_ledger"]
    asked = broker["get_last_message_id"]
    client = world["client"]
    reader = client.subscribe(topic, "bview-last-id", is_read_compacted=True)
    try:
        oracle = reader.get_last_message_id()
    finally:
        reader.unsubscribe()
        reader.close()
    expected = f"{oracle.ledger_id()}:{oracle.entry_id()}:{oracle.batch_index()}"
    assert asked["read_compacted"]["answer"] == expected
    assert asked["predicted"] == status["get_last_message_id"]["read_compacted"]
    assert asked["agrees"] is True
    assert not [c for c in status["checks"] if c["check"].startswith("broker-")]
    shown = _cli(sandbox, "compact", topic, "--status", "-o", "table")
    assert f"GetLastMessageId (read compacted) {expected}, as predicted" in shown.err


def test_without_a_broker_to_ask_it_says_so_and_works_from_storage(sandbox, world):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as s:
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    topic = world["topics"]["live"]
    done = _cli(sandbox, "verify", topic, "--admin-url", closed, "-o", "json")
    assert done.json()["broker"]["asked"] is False
    assert "broker: not asked" in done.err and closed in done.err
    info = _cli(sandbox, "topic", "info", topic, "--admin-url", closed, "-o", "json").json()
    assert info["broker"]["asked"] is False and info["broker"]["stats"] is None
