"""Write verbs on the running sandbox, no broker stopped, a consumer connected: refused while
the broker has the topic loaded (exit 4, naming the broker and --unload), and with
--unload applied in the window after the unload; the real broker then serves exactly the
expected result (what a consumer receives, a readCompacted reader reads, and the broker's
internal stats).

The sandbox runs with transactions and topic policies on; the connected consumer loads the
topic again within milliseconds of each unload (ledgerctl rebases what the unload rewrote,
writes with compare-and-set, and unloads again a broker that loaded the old state).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.sandbox_oracle import run_ledgerctl as _run


def _wait(cond: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _mark_delete(box: Any, topic: str, sub: str) -> str:
    return box.internal_stats(topic)["cursors"][sub]["markDeletePosition"]


def _settled_version(box: Any, path: str, quiet: float = 1.5, timeout: float = 60) -> int:
    """The node's version once it has not changed for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    seen = _version(box, path)
    while True:
        time.sleep(quiet)
        now = _version(box, path)
        if now == seen:
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} still changes after {timeout:.0f} s")
        seen = now


def _version(box: Any, path: str) -> int:
    from pulsarctl_py.stores.metadata import open_metadata_store

    with open_metadata_store(box.metadata_url) as store:
        node = store.get(path)
        assert node is not None, path
        return node.stat.version


def _refused(done: subprocess.CompletedProcess, box: Any) -> None:
    """Exit 4, one error line naming the broker and --unload."""
    assert done.returncode == 4, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ledgerctl: error:")]
    assert len(errors) == 1, done.stderr
    assert box.web_url in errors[0] and "--unload" in errors[0], errors[0]
    assert "Traceback" not in done.stderr


def _receive_run(consumer: Any, expected: list[bytes], stale: int = 10) -> list[bytes]:
    """Receive until the last messages are ``expected`` in order. Up to ``stale`` messages the
    client had queued before an unload may come first: the client hands them out until it
    notices the closed connection (a full run once got m4..m9 from the queue, then m0..)."""
    out: list[bytes] = []
    while out[-len(expected) :] != expected:
        assert len(out) < len(expected) + stale, out
        out.append(consumer.receive(60_000).data())
    return out


@pytest.fixture(scope="module")
def ns(sandbox: Any) -> str:
    name = f"public/live-{uuid.uuid4().hex[:8]}"
    sandbox.admin("PUT", f"/namespaces/{name}", ok=(204, 409))
    return name


@pytest.fixture
def work() -> Path:
    return Path(tempfile.mkdtemp(prefix="ledgerctl-live-writes-"))


def test_cursor_repair_apply_and_undo_with_a_consumer_connected(
    sandbox: Any, ns: str, work: Path
) -> None:
    """repair cursor --apply: refused while loaded; with --unload the consumer receives
    everything again from the reset position. A plan saved with --unload and applied later
    (the unload rewrites the cursor: rebased), then undone (rebased again), each with the
    consumer connected: the broker serves each position."""
    from pulsarctl_py.stores.metadata import resolve_topic

    box = sandbox
    topic = f"persistent://{ns}/cursor"
    cursor_path = resolve_topic(topic).cursor_path("sub")
    client = box.client()
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        ids = [producer.send(f"m{i}".encode()) for i in range(10)]
        ledger = ids[0].ledger_id()
        assert {m.ledger_id() for m in ids} == {ledger}
        for _ in range(4):
            consumer.acknowledge(consumer.receive(60_000))
        _wait(lambda: _mark_delete(box, topic, "sub") == f"{ledger}:3", "the acks")
        # the broker writes the cursor's node after the acks too (its cursor ledger, made
        # on the first persisted mark-delete): once it has stopped, ledgerctl's refusal
        # must leave the node as it is (a full run once read it in between)
        before = _settled_version(box, cursor_path)

        refused = _run(box, work, "repair", "cursor", topic, "sub", "--to", f"{ledger}:0",
                       "--apply", "--yes", "--plan", "p0.json")  # fmt: skip
        _refused(refused, box)
        assert _version(box, cursor_path) == before  # nothing written
        assert _mark_delete(box, topic, "sub") == f"{ledger}:3"

        done = _run(box, work, "repair", "cursor", topic, "sub", "--to", f"{ledger}:0",
                    "--apply", "--yes", "--unload", "--plan", "p1.json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "unloaded " + topic in done.stderr
        # the broker delivers everything from the reset position to the connected consumer
        _receive_run(consumer, [f"m{i}".encode() for i in range(10)])
        for m in ids:
            consumer.acknowledge(m)
        _wait(lambda: _mark_delete(box, topic, "sub") == f"{ledger}:9", "the acks")

        # a plan saved now (--unload: made after the unload), applied later
        planned = _run(box, work, "repair", "cursor", topic, "sub", "--to", f"{ledger}:5",
                       "--unload", "--plan", "p2.json")  # fmt: skip
        assert planned.returncode == 0, planned.stderr
        _wait(lambda: box.internal_stats(topic)["cursors"].get("sub"), "the consumer's reload")
        refused = _run(box, work, "apply", "p2.json", "--yes")
        _refused(refused, box)
        applied = _run(box, work, "apply", "p2.json", "--yes", "--unload")
        assert applied.returncode == 0, applied.stderr
        assert "rebased onto what the broker rewrote" in applied.stderr
        _receive_run(consumer, [f"m{i}".encode() for i in range(5, 10)])
        assert _mark_delete(box, topic, "sub") == f"{ledger}:4"

        undone = _run(box, work, "undo", "p2.json", "--yes", "--unload")
        assert undone.returncode == 0, undone.stderr
        _wait(lambda: _mark_delete(box, topic, "sub") == f"{ledger}:9", "the undo served")
    finally:
        client.close()


def _keyed(n: int, keys: int) -> list[tuple[str, bytes]]:
    return [(f"k{i % keys}", f"v{i}".encode()) for i in range(n)]


def _read_compacted(box: Any, topic: str) -> dict[str, bytes]:
    out = box.read_compacted(topic, lambda m: (m.partition_key(), m.data()))
    keys = [k for k, _ in out]
    assert len(keys) == len(set(keys)), out  # compacted: one message per key
    return dict(out)


def test_compact_and_migrate_compacted_with_a_consumer_connected(
    sandbox: Any, ns: str, work: Path
) -> None:
    """compact --apply and migrate compacted --apply: refused while loaded, applied with
    --unload while a consumer is connected; the broker serves the new compacted ledger
    and a readCompacted reader reads the last value of each key."""
    box = sandbox
    topic = f"persistent://{ns}/compacted"
    messages = _keyed(40, 6)
    expected = dict(messages)
    client = box.client()
    try:
        consumer = client.subscribe(topic, "live")
        producer = client.create_producer(topic)
        for key, value in messages:
            producer.send(value, partition_key=key)

        _refused(_run(box, work, "compact", topic, "--apply"), box)
        done = _run(box, work, "compact", topic, "--apply", "--unload", "-o", "json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["applied"] is True
        _wait(lambda: box.internal_stats(topic).get("compactedLedger"), "a reload")
        served = box.internal_stats(topic)["compactedLedger"]["ledgerId"]
        assert served == report["compacted_ledger"]
        assert _read_compacted(box, topic) == expected

        refused = _run(box, work, "migrate", "compacted", topic, "--format", "pip-429",
                       "--apply", "--yes", "--plan", "m0.json")  # fmt: skip
        _refused(refused, box)
        migrated = _run(box, work, "migrate", "compacted", topic, "--format", "pip-429",
                        "--apply", "--yes", "--unload", "--plan", "m1.json")  # fmt: skip
        assert migrated.returncode == 0, migrated.stderr
        new = json.loads((work / "m1.json").read_text())["written"][0]["ledger_id"]
        _wait(
            lambda: (box.internal_stats(topic).get("compactedLedger") or {}).get("ledgerId") == new,
            "the broker serving the migrated compacted ledger",
        )
        assert _read_compacted(box, topic) == expected
        # the consumer stayed connected throughout and still receives new messages
        producer.send(b"after", partition_key="k-after")
        got = [consumer.receive(60_000).data() for _ in range(len(messages) + 1)]
        assert got[-1] == b"after"
    finally:
        client.close()


def test_missing_ledgers_repair_with_a_consumer_connected(
    sandbox: Any, ns: str, work: Path
) -> None:
    """repair missing-ledgers --apply --unload: the topic lists ledger X between its two
    data ledgers, an id BookKeeper gave out but that holds nothing and has no metadata;
    the consumer reads the first ledger and stops at X. With the consumer connected, the
    repair unloads the topic, plans, and applies (each reload the consumer makes adds a
    ledger to the list: rebased when it holds nothing); the broker then serves the list
    without X and the consumer receives the second ledger."""
    import pulsar

    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic
    from pulsarctl_py.stores.metadata.ledgers import allocate_ledger_id

    box = sandbox
    topic = f"persistent://{ns}/lost"
    ml_path = resolve_topic(topic).ml_path
    url = f"{box.metadata_url} bookkeeper={box.bookkeeper_metadata_url}"
    client = box.client()
    try:
        first = client.create_producer(topic)
        a = [first.send(f"a{i}".encode()) for i in range(5)]
        first.close()
        box.unload(topic)
        with open_metadata_store(url, read_only=False) as store:
            lost = allocate_ledger_id(store)  # given out, never created: nothing holds it
        second = client.create_producer(topic)
        b = [second.send(f"b{i}".encode()) for i in range(5)]
        second.close()
        box.unload(topic)
        assert a[0].ledger_id() < lost < b[0].ledger_id()
        with open_metadata_store(url, read_only=False) as store:
            node = store.get(ml_path)
            assert node is not None
            decoded = mld.parse_ml_info(node.data)
            ledgers = list(decoded.message.ledgerInfo)
            del decoded.message.ledgerInfo[:]
            for lg in ledgers:
                decoded.message.ledgerInfo.add().CopyFrom(lg)
                if lg.ledgerId == a[0].ledger_id():
                    decoded.message.ledgerInfo.add(ledgerId=lost, entries=5, size=250, timestamp=1)
            txn = store.transaction()
            txn.set(ml_path, mld.rebuild(decoded, decoded.message), node.stat.version)
            txn.commit()

        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        got = [consumer.receive(60_000) for _ in range(5)]
        assert [m.data() for m in got] == [f"a{i}".encode() for i in range(5)]
        for m in got:
            consumer.acknowledge(m)

        _refused(_run(box, work, "repair", "missing-ledgers", topic, "--apply", "--yes"), box)
        done = _run(box, work, "repair", "missing-ledgers", topic, "--apply", "--yes",
                    "--unload", "--plan", "lost.json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        plan = json.loads((work / "lost.json").read_text())
        # X; and, when the consumer's reload raced the plan's reads, the empty ledger that
        # reload dropped (gone from BookKeeper already): never a ledger with data
        dropped = plan["unreachable"]["ledgers"]
        assert lost in dropped and not {a[0].ledger_id(), b[0].ledger_id()} & set(dropped)
        # the consumer, connected throughout, goes on with the second ledger
        rest = [consumer.receive(60_000).data() for _ in range(5)]
        assert rest == [f"b{i}".encode() for i in range(5)]
        served = [lg["ledgerId"] for lg in box.internal_stats(topic)["ledgers"]]
        assert lost not in served and a[0].ledger_id() in served and b[0].ledger_id() in served
    finally:
        client.close()
        box.admin("DELETE", box.topic_path(topic) + "?force=true")


def test_a_broker_that_loaded_the_old_state_is_unloaded_again(
    sandbox: Any, ns: str, work: Path
) -> None:
    """The race --unload guards against, made to happen: the consumer's broker has the
    topic loaded (the cursor at L:3 in its memory) when the plan's cursor is written. The
    check after the write sees the broker serve the old position, unloads it again, and the
    broker then serves the written one to the connected consumer."""
    from pulsarctl_py import livewrite
    from pulsarctl_py.plans import apply_plan
    from pulsarctl_py.plans.document import Plan
    from pulsarctl_py.stores.metadata import open_metadata_store

    box = sandbox
    topic = f"persistent://{ns}/stale"
    client = box.client()
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        ids = [producer.send(f"m{i}".encode()) for i in range(6)]
        ledger = ids[0].ledger_id()
        for _ in range(4):
            consumer.acknowledge(consumer.receive(60_000))
        _wait(lambda: _mark_delete(box, topic, "sub") == f"{ledger}:3", "the acks")
        planned = _run(box, work, "repair", "cursor", topic, "sub", "--to", f"{ledger}:0",
                       "--unload", "--plan", "stale.json")  # fmt: skip
        assert planned.returncode == 0, planned.stderr
        _wait(lambda: "sub" in box.internal_stats(topic)["cursors"], "the consumer's reload")
        assert _mark_delete(box, topic, "sub") == f"{ledger}:3"
        said: list[str] = []
        url = f"{box.metadata_url} bookkeeper={box.bookkeeper_metadata_url}"
        with open_metadata_store(url, read_only=False) as store:
            apply_plan(work / "stale.json", store)  # behind the loaded broker's back
            assert _mark_delete(box, topic, "sub") == f"{ledger}:3"  # it serves the old
            livewrite.check_after(
                store, Plan.load(work / "stale.json"), livewrite.LiveFlags(True), said.append, False
            )
        assert any("serves the old mark-delete position of sub" in s for s in said), said
        _wait(lambda: _mark_delete(box, topic, "sub") == f"{ledger}:-1", "the written position")
        # m0..m3 were acknowledged: the broker delivers them again only from the written
        # position (m4 and m5 may come first: they were in the consumer's queue)
        got = [consumer.receive(60_000).data() for _ in range(6)]
        assert {f"m{i}".encode() for i in range(4)} <= set(got), got
    finally:
        client.close()
