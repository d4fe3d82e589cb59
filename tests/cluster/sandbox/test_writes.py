"""Every write verb against the real cluster of scripts/sandbox, no bookie directory given.

The ledgers ledgerctl writes must be ones the broker loads and BookKeeper's own client
reads: the broker's quorums (ensemble 3, write 2, ack 2), the compactor's CRC32 and empty
password for compacted ledgers, the managed ledger's CRC32C and password for data
ledgers, metadata under BookKeeper's own root; a consumer then reads exactly the expected
messages, also with one bookie stopped. A broker that has the topic loaded stops every write
(without --unload); a bookie killed in the middle of a write leaves nothing referenced.

These writes run while the broker is stopped (the offline path; the live path, --unload with
a consumer connected, is tests/cluster/sandbox/test_live_writes.py). Stopping and starting it costs
about a minute, so the module does it once: :func:`writes` prepares every topic with the
broker running, stops it, runs every write, starts it again and records what happened;
each test then checks one part of that record against what the broker and BookKeeper's own
client read.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.sandbox_oracle import broker_compact

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]

# one broker restart, two bookie restarts and a few thousand messages: minutes, not seconds
pytestmark = pytest.mark.slow


# -- helpers ----------------------------------------------------------------------------------


def _namespace(box: Any, prefix: str) -> str:
    ns = f"public/{prefix}-{uuid.uuid4().hex[:8]}"
    box.admin("PUT", f"/namespaces/{ns}", ok=(204, 409))
    return ns


def _run(box: Any, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """ledgerctl in a directory of its own (the plans --apply saves by default land there)."""
    import tempfile

    environment = box.env(LEDGERCTL_BROKER_CONF=box.state["broker"]["conf"])
    environment.update(env or {})
    environment["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    return subprocess.run(
        [*LEDGERCTL, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=environment,
        stdin=subprocess.DEVNULL,
        cwd=tempfile.mkdtemp(prefix="ledgerctl-sandbox-writes-"),
    )


def _produce(box: Any, topic: str, messages: list[tuple[str, bytes]], **producer: Any) -> None:
    """Send ``messages``; a durable subscription keeps the broker from trimming them."""
    box.admin("PUT", box.topic_path(topic) + "/subscription/keep", ok=(204, 409))
    client = box.client()
    try:
        p = client.create_producer(topic, **producer)
        for key, value in messages:
            p.send_async(value, None, partition_key=key)
        p.flush()
        p.close()
    finally:
        client.close()


def _keyed(prefix: str, n: int, keys: int, tombstone_every: int = 0) -> list[tuple[str, bytes]]:
    out = []
    for i in range(n):
        key = f"{prefix}-k{i % keys}"
        tomb = tombstone_every and i % tombstone_every == tombstone_every - 1
        out.append((key, b"" if tomb else f"{prefix}-v{i}".encode()))
    return out


def _read_compacted(box: Any, topic: str) -> list[tuple[str, bytes, tuple[int, int]]]:
    """What a readCompacted reader receives: key, value, (entry, batch index)."""

    def row(m: Any) -> tuple[str, bytes, tuple[int, int]]:
        mid = m.message_id()
        return (m.partition_key(), m.data(), (mid.entry_id(), mid.batch_index()))

    return box.read_compacted(topic, row)


def _unload_namespace(box: Any, ns: str) -> None:
    """No broker owns the namespace's bundles afterwards (until a client looks one up)."""
    box.admin("PUT", f"/namespaces/{ns}/unload")
    zk = _zk(box)
    try:
        deadline = time.monotonic() + 30
        while zk.get_children(f"/namespace/{ns}") if zk.exists(f"/namespace/{ns}") else []:
            assert time.monotonic() < deadline, "the bundles stayed owned"
            time.sleep(0.1)
    finally:
        zk.stop()


def _zk(box: Any) -> Any:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=box.state["zookeeper"]["address"])
    zk.start(timeout=30)
    return zk


def _bk_read(box: Any, ledger_id: int, password: bytes) -> dict[str, Any]:
    """BookKeeper's own client opens the ledger with ``password`` and reads it."""
    return box.java(
        "bk-read",
        {
            "metadata_service_uri": box.bookkeeper_metadata_url,
            "ledger_id": ledger_id,
            "password": base64.b64encode(password).decode(),
        },
    )


def _ml_password(box: Any) -> bytes:
    return Path(box.password_file).read_bytes().strip()


def _ledgers(box: Any) -> set[int]:
    """Every ledger id with metadata under BookKeeper's root."""
    zk = _zk(box)
    try:
        return _ledgers_zk(zk)
    finally:
        zk.stop()


def _internal(box: Any, topic: str) -> dict[str, Any]:
    return box.internal_stats(topic)


def _ledgers_zk(zk: Any) -> set[int]:
    out: set[int] = set()
    root = "/bookkeeper/ledgers/00"
    if not zk.exists(root):
        return out
    for mid in zk.get_children(root):
        for leaf in zk.get_children(f"{root}/{mid}"):
            if leaf.startswith("L"):
                out.add(int(mid + leaf[1:]))
    return out


def _ledger_path(ledger_id: int) -> str:
    from pulsarctl_py.decoders import ledger_metadata as lm

    return lm.ledger_path(ledger_id, lm.LedgerLayout.HIERARCHICAL, "/bookkeeper/ledgers")


def _strip_entry_metadata(data: bytes) -> bytes:
    if data[:2] == b"\x0e\x02":
        size = int.from_bytes(data[2:6], "big")
        return data[6 + size :]
    return data


# -- one broker-stopped window for every write ---------------------------------------------


#: topic-level persistence policies (ensemble, write, ack quorum) that differ from the
#: sandbox broker's defaults (3, 2, 2)
TOPIC_PERSISTENCE = (2, 2, 1)


def _set_topic_persistence(box: Any, topic: str) -> None:
    """Topic-level persistence policies, through the admin API; returns once the broker's
    topic policies cache has them (the update is an event in __change_events)."""
    e, w, a = TOPIC_PERSISTENCE
    path = box.topic_path(topic) + "/persistence"
    body = {"bookkeeperEnsemble": e, "bookkeeperWriteQuorum": w, "bookkeeperAckQuorum": a}
    box.admin("POST", path, body)
    deadline = time.monotonic() + 30
    while (box.admin("GET", path) or {}).get("bookkeeperAckQuorum") != a:
        assert time.monotonic() < deadline, f"the broker did not apply the policies of {topic}"
        time.sleep(0.1)


def _prepare_compact(box: Any, ns: str) -> dict[str, Any]:
    """Twin topics with the same messages: the broker compacts ``twin``, ledgerctl ``ours``.
    Not batched, so that positions compare; batched twins (``ours_b``, whose batch
    boundaries depend on timing) compare by the messages kept. The unbatched twins have
    topic-level persistence policies, which the compactor does not use for its ledger."""
    out: dict[str, Any] = {}
    messages = _keyed("c", 400, 37, tombstone_every=9)
    batched = {
        "batching_enabled": True,
        "batching_max_messages": 8,
        "batching_max_publish_delay_ms": 20,
    }
    for suffix, producer in (("", {"batching_enabled": False}), ("_b", batched)):
        ours, twin = f"persistent://{ns}/ours{suffix}", f"persistent://{ns}/twin{suffix}"
        for topic in (ours, twin):
            _produce(box, topic, messages, **producer)
            if not suffix:
                _set_topic_persistence(box, topic)
        broker_compact(box, twin)
        out[f"ours{suffix}"] = ours
        out[f"twin{suffix}"] = twin
        out[f"expected{suffix}"] = _read_compacted(box, twin)
        out[f"twin_ledger{suffix}"] = _internal(box, twin)["compactedLedger"]["ledgerId"]
    return out


def _prepare_broker_fails(box: Any, ns: str) -> dict[str, Any]:
    """An LZ4 topic whose batches compress well: the 4.0.7 broker's own compaction of it
    fails (apache/pulsar#26290, IndexOutOfBoundsException in RawBatchConverter.rebatchMessage).
    Its expected compacted view: each key's latest value, tombstoned keys gone."""
    import pulsar

    topic = f"persistent://{ns}/broker-fails"
    messages = _keyed("f", 200, 13, tombstone_every=11)
    _produce(
        box,
        topic,
        messages,
        batching_enabled=True,
        batching_max_messages=10,
        batching_max_publish_delay_ms=1000,
        compression_type=pulsar.CompressionType.LZ4,
    )
    box.unload(topic)
    path = box.topic_path(topic) + "/compaction"
    box.admin("PUT", path)
    deadline = time.monotonic() + 120
    status = box.admin("GET", path)
    while status["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
        status = box.admin("GET", path)
    latest = dict(messages)
    return {
        "topic": topic,
        "broker_status": status,
        "expected": sorted((k, v) for k, v in latest.items() if v),
    }


def _kept(view: list[tuple[str, bytes, Any]]) -> list[tuple[str, bytes]]:
    """The messages of a compacted view without the placeholders of removed ones (the
    Python client shows those as messages with no key and no value)."""
    return [(k, v) for k, v, _ in view if k or v]


def _prepare_mcompacted(box: Any, ns: str) -> dict[str, Any]:
    topic = f"persistent://{ns}/mcompacted"
    _produce(
        box,
        topic,
        _keyed("m", 120, 11, tombstone_every=7),
        batching_enabled=True,
        batching_max_messages=6,
        batching_max_publish_delay_ms=20,
    )
    broker_compact(box, topic)
    return {"topic": topic, "expected": _read_compacted(box, topic)}


def _prepare_index(
    box: Any, ns: str, source: str = "source", legacy: str = "legacy"
) -> dict[str, Any]:
    """A topic whose ledger carries no broker entry metadata, as KoP < 2.8 wrote it: the
    entries of a produced topic without their 0x0e02 prefix, in a ledger written with the
    cluster's data-ledger settings and listed in the new topic's managed ledger ``name``."""
    from pulsarctl_py.decoders.checksums import DIGESTS, DigestType
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.repair.migrate import data_custom_metadata
    from pulsarctl_py.stores.ledger_writer import LedgerConfig
    from pulsarctl_py.stores.live.writer import write_ledger
    from pulsarctl_py.stores.metadata import open_metadata_store, read_managed_ledger

    source_topic, legacy = f"persistent://{ns}/{source}", f"persistent://{ns}/{legacy}"
    messages = _keyed("i", 60, 60)
    _produce(
        box,
        source_topic,
        messages,
        batching_enabled=True,
        batching_max_messages=4,
        batching_max_publish_delay_ms=20,
    )
    url = f"{box.metadata_url} bookkeeper={box.bookkeeper_metadata_url}"
    bodies = []
    with LedgerSource.open(url, None, need_metadata=True) as src:
        record = read_managed_ledger(src.metadata, source_topic)
        for li in record.info.message.ledgerInfo:
            view = src.ledger(li.ledgerId)
            at = 32 + DIGESTS[view.digest_type].size
            for entry in src.raw_entries(view):
                bodies.append(_strip_entry_metadata(bytes(entry.data[at:])))
    store = open_metadata_store(url, read_only=False)
    try:
        config = LedgerConfig(
            3,
            2,
            2,
            DigestType.CRC32C,
            _ml_password(box),
            data_custom_metadata(f"{ns}/persistent/{legacy.rsplit('/', 1)[-1]}"),
        )
        old = write_ledger(store.bookkeeper(), config, bodies)
        info = mlpb.ManagedLedgerInfo()
        info.ledgerInfo.add(
            ledgerId=old.ledger_id, entries=old.entries, size=old.length, timestamp=1
        )
        ml = f"/managed-ledgers/{ns}/persistent/{legacy.rsplit('/', 1)[-1]}"
        store.put(ml, info.SerializeToString(), -1)
        # a durable subscription at the start, so that the broker keeps the ledgers
        cursor = mlpb.ManagedCursorInfo(
            cursorsLedgerId=-1, markDeleteLedgerId=old.ledger_id, markDeleteEntryId=-1
        )
        store.put(f"{ml}/keep", cursor.SerializeToString(), -1)
    finally:
        store.close()
    return {"topic": legacy, "messages": messages, "old": old.ledger_id, "entries": len(bodies)}


def _prepare_index_policies(box: Any, ns: str, tmp: Path) -> dict[str, Any]:
    """A legacy topic (as :func:`_prepare_index`) with topic-level persistence policies, and
    a twin topic with the same policies whose next ledger the broker writes: the broker's
    quorums for such a topic's data ledgers. A broker configuration naming a topic
    policies service ledgerctl cannot read, for the refusal."""
    out = _prepare_index(box, ns, source="source-tp", legacy="legacy-tp")
    twin = f"persistent://{ns}/twin-tp"
    _produce(box, twin, [("k", b"before")])
    for topic in (out["topic"], twin):
        _set_topic_persistence(box, topic)
    box.unload(twin)
    _produce(box, twin, [("k", b"after")])  # loaded again: a new ledger, with the policies
    out["twin_ledger"] = _internal(box, twin)["ledgers"][-1]["ledgerId"]
    custom = tmp / "broker-custom-topic-policies.conf"
    custom.write_text(
        Path(box.state["broker"]["conf"]).read_text()
        + "topicPoliciesServiceClassName=com.example.TopicPoliciesInADatabase\n"
    )
    out["custom_conf"] = custom
    return out


#: committed, aborted and ongoing transactions among plain messages (the oracle's rules)
TRANSACTIONS: list[tuple[str, list[tuple[str, bytes | None]]]] = [
    ("commit", [("t-k0", b"committed-0"), ("t-k1", b"committed-1")]),
    ("abort", [("t-k0", b"aborted-0"), ("t-k2", b"aborted-2"), ("x-k0", None)]),
    ("commit", [("t-k1", None), ("t-k3", b"committed-3")]),
    ("abort", [("t-k3", None)]),
]


def _prepare_txn(box: Any, ns: str) -> dict[str, Any]:
    """Twin transactional topics: the broker compacts ``twin``, ledgerctl ``ours``."""
    from tests.support.sandbox_oracle import txn_spec

    out: dict[str, Any] = {}
    for name in ("ours", "twin"):
        topic = out[name] = f"persistent://{ns}/txn-{name}"
        _produce(box, topic, _keyed("x", 6, 3), batching_enabled=False)
        box.java("txn-produce", txn_spec(topic, TRANSACTIONS))
        _produce(box, topic, _keyed("y", 6, 3), batching_enabled=False)
        box.unload(topic)
    broker_compact(box, out["twin"])
    out["expected"] = _read_compacted(box, out["twin"])
    return out


def _prepare_owned(box: Any, ns: str) -> dict[str, Any]:
    topic = f"persistent://{ns}/owned"
    _produce(box, topic, _keyed("o", 20, 5))  # the producer's lookup makes the broker own it
    broker_compact(box, topic)
    return {"topic": topic}


def _refusals(box: Any, owned: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Every write verb on a topic the running broker owns."""
    topic = owned["topic"]
    before = (_ledgers(box), _cursors(box, topic))
    results = {}
    for name, args in (
        ("compact", ["compact", topic, "--apply"]),
        (
            "migrate-compacted",
            ["migrate", "compacted", topic, "--format", "pip-429", "--plan", str(tmp / "p")],
        ),
    ):
        results[name] = _run(box, *args)
    after = (_ledgers(box), _cursors(box, topic))
    return {"results": results, "unchanged": before == after, "plan": (tmp / "p").exists()}


def _kill_mid_write(box: Any, ns: str) -> dict[str, Any]:
    """compact --apply of a topic large enough to take a while; the first bookie of the new
    ledger's ensemble is frozen as soon as its metadata appears, then killed."""
    from pulsarctl_py.decoders import ledger_metadata as lm

    topic = f"persistent://{ns}/killed"
    before = _ledgers(box)
    killed: dict[str, Any] = {}

    def kill_when_the_ledger_appears() -> None:
        zk = _zk(box)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and "id" not in killed:
                for lid in _ledgers_zk(zk) - before:
                    data, _ = zk.get(_ledger_path(lid))
                    md = lm.parse(data, lid)
                    if md.state is not lm.LedgerState.OPEN:
                        continue
                    victim = next(b for b in box.bookies if b["id"] == md.ensembles[0][0])
                    os.killpg(victim["pid"], signal.SIGSTOP)  # frozen mid-write ...
                    os.killpg(victim["pid"], signal.SIGKILL)  # ... then killed
                    killed.update(id=victim["id"], ledger=lid)
                    return
                time.sleep(0.002)
        finally:
            zk.stop()

    watcher = threading.Thread(target=kill_when_the_ledger_appears, daemon=True)
    watcher.start()
    try:
        done = _run(box, "compact", topic, "--apply", "--bookie-timeout", "5")
    finally:
        watcher.join(timeout=310)
        killed["done"] = True
    return {"result": done, "killed": dict(killed), "before": before, "after": _ledgers(box)}


# -- nothing deleted on a stale view: leftovers, leases, plans kept for review, ages ---------


def _in_process(box: Any, cwd: Path, *args: Any) -> subprocess.CompletedProcess:
    """ledgerctl in this process (so that a test can stop it at a chosen step)."""
    import contextlib
    import io

    from pulsarctl_py.cli import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in box.env(LEDGERCTL_BROKER_CONF=box.state["broker"]["conf"]).items():
            if name.startswith("LEDGERCTL_"):
                mp.setenv(name, value)
        mp.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _prepare_stale(box: Any, ns: str) -> dict[str, Any]:
    race, review = f"persistent://{ns}/race", f"persistent://{ns}/review"
    _produce(box, race, _keyed("r", 300, 40), batching_enabled=False)
    _produce(box, review, _keyed("v", 120, 15), batching_enabled=False)
    return {
        "race": race,
        "race_values": dict(_keyed("r", 300, 40)),
        "review": review,
        "index": _prepare_index(box, ns, source="legacy-killed-source", legacy="legacy-killed"),
    }


def _race(box: Any, s: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Run B reads and runs phase one; run A's whole compact --apply lands then; B goes on
    to write its ledger while phase two runs, judge leftovers and apply."""
    import pulsarctl_py.compaction.planned as planned  # the sink compact_topic gives run.compact

    real = planned.write_compaction
    seen: dict[str, Any] = {}

    def compute_then_a(*args: Any, **kwargs: Any) -> Any:
        if "a" not in seen:  # B's read and phase one ...
            seen["a"] = _run(  # ... then A, start to end
                box, "compact", s["race"], "--apply", "--plan", str(tmp / "race-a.json"),
                "-o", "json",
            )  # fmt: skip
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planned, "write_compaction", compute_then_a)
        seen["b"] = _in_process(
            box, tmp, "compact", s["race"], "--apply", "--plan", tmp / "race-b.json", "-o", "json"
        )
    seen["ledgers"] = _ledgers(box)
    return seen


def _review_and_writing(box: Any, s: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """P saves a plan for review; W writes its ledger and stops before closing it, while
    Q compacts the same topic with --apply; then the orphans of a ledger nothing names."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.plans import writing as written

    topic, seen = s["review"], {}
    seen["p"] = _run(box, "compact", topic, "--plan", str(tmp / "review.json"), "-o", "json")
    real = written.PlanJournal.closing

    def closing(journal: Any, ledger_id: int, closed: bytes) -> None:
        if "q" not in seen:  # W's ledger is open, its entries written
            seen["w_ledger"] = ledger_id
            seen["q"] = _run(
                box, "compact", topic, "--apply", "--plan", str(tmp / "q.json"), "-o", "json"
            )
            seen["ledgers_during_w"] = _ledgers(box)
        real(journal, ledger_id, closed)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(written.PlanJournal, "closing", closing)
        seen["w"] = _in_process(box, tmp, "compact", topic, "--plan", tmp / "w.json", "-o", "json")
    seen["ledgers_after_w"] = _ledgers(box)
    if seen.get("w_ledger") in seen["ledgers_after_w"]:
        zk = _zk(box)
        try:
            data, _ = zk.get(_ledger_path(seen["w_ledger"]))
        finally:
            zk.stop()
        seen["w_state"] = lm.parse(data, seen["w_ledger"]).state.name
    # the review plan moved away: nothing names its ledger now, only its age keeps it
    (tmp / "review.json").rename(tmp / "review-moved.json")
    seen["orphans"] = _run(box, "orphans", "-o", "json")
    seen["orphans_plan"] = _run(
        box, "orphans", "--delete", "--plan", str(tmp / "orphans.json"), "-o", "json"
    )
    seen["orphans_any_age"] = _run(box, "orphans", "--min-age", "0", "-o", "json")
    seen["undone"] = [
        _run(box, "undo", str(tmp / name)) for name in ("w.json", "review-moved.json")
    ]
    seen["ledgers_after_undo"] = _ledgers(box)
    return seen


#: run as ``python -c``: ledgerctl killed (SIGKILL, no cleanup) just before it closes the
#: first ledger it writes: the ledger is open, its entries written
KILLED_BEFORE_CLOSE = """
import os, signal, sys
from pulsarctl_py.plans import writing as written
def closing(journal, ledger_id, closed):
    os.kill(os.getpid(), signal.SIGKILL)
written.PlanJournal.closing = closing
from pulsarctl_py.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _migrate_killed_then_again(box: Any, s: dict[str, Any], tmp: Path) -> dict[str, Any]:
    topic, plan = s["index"]["topic"], tmp / "killed-index.json"
    seen: dict[str, Any] = {"before": _ledgers(box)}
    environment = box.env(LEDGERCTL_BROKER_CONF=box.state["broker"]["conf"])
    environment["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    seen["killed"] = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_CLOSE, "migrate", "index", topic, "--plan", str(plan)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
        stdin=subprocess.DEVNULL,
        cwd=tmp,
    )
    seen["left"] = [w["ledger_id"] for w in json.loads(plan.read_text())["written"]]
    seen["after_kill"] = _ledgers(box)
    seen["again"] = _run(box, "migrate", "index", topic, "--plan", str(plan), "--apply")
    seen["after"] = _ledgers(box)
    seen["plan"] = json.loads(plan.read_text())
    return seen


@pytest.fixture(scope="module")
def writes(sandbox, tmp_path_factory) -> dict[str, Any]:
    box = sandbox
    tmp = tmp_path_factory.mktemp("writes")
    ns = _namespace(box, "writes")
    record: dict[str, Any] = {"ns": ns}
    record["compact"] = _prepare_compact(box, ns)
    record["mcompacted"] = _prepare_mcompacted(box, ns)
    record["index"] = _prepare_index(box, ns)
    record["index_policies"] = _prepare_index_policies(box, ns, tmp)
    record["txn"] = _prepare_txn(box, ns)
    record["broker_fails"] = _prepare_broker_fails(box, ns)
    record["edges"] = {"topic": f"persistent://{ns}/edges"}
    _produce(box, record["edges"]["topic"], [("a", b"1"), ("b", b"2")])
    # every key deleted after the broker's own compaction: the incremental run keeps nothing
    record["deleted"] = {"topic": f"persistent://{ns}/deleted"}
    _produce(box, record["deleted"]["topic"], [("a", b"1"), ("b", b"2")])
    broker_compact(box, record["deleted"]["topic"])
    # tombstones in a batch (payload_size 0): the C++ client sets no uncompressed_size on a
    # single empty message, which the compactor then does not take for a tombstone
    _produce(
        box,
        record["deleted"]["topic"],
        [("a", b""), ("b", b"")],
        batching_enabled=True,
        batching_max_messages=2,
        batching_max_publish_delay_ms=1000,
    )
    killed = f"persistent://{ns}/killed"
    # 64 MB compacted: the write lasts long enough for the watcher to freeze a bookie in it
    _produce(box, killed, [(f"k{i}", os.urandom(8192)) for i in range(8000)])
    record["killed_cursors"] = _cursors(box, killed)
    record["stale"] = _prepare_stale(box, ns)
    owned_ns = _namespace(box, "owned")
    record["owned"] = _refusals(box, _prepare_owned(box, owned_ns), tmp)

    with box.broker_stopped():
        c = record["compact"]
        c["apply"] = _run(box, "compact", c["ours"], "--apply", "-o", "json")
        c["apply_b"] = _run(box, "compact", c["ours_b"], "--apply", "-o", "json")

        t = record["txn"]
        t["apply"] = _run(box, "compact", t["ours"], "--apply", "-o", "json")

        e = record["edges"]
        e["first"] = _run(box, "compact", e["topic"], "--apply", "-o", "json")
        e["ledgers_after_first"] = _ledgers(box)
        e["again"] = _run(box, "compact", e["topic"], "--apply", "-o", "json")
        e["ledgers_after_again"] = _ledgers(box)

        d = record["deleted"]
        d["apply"] = _run(box, "compact", d["topic"], "--apply", "-o", "json")

        f = record["broker_fails"]
        f["apply"] = _run(box, "compact", f["topic"], "--full", "--apply", "-o", "json")

        m = record["mcompacted"]
        m["to_429"] = _run(
            box,
            "migrate",
            "compacted",
            m["topic"],
            "--format",
            "pip-429",
            "--plan",
            str(tmp / "a.json"),
            "--apply",
        )
        m["pip_ledger"] = _compacted_ledger_of(box, m["topic"])
        m["back"] = _run(
            box,
            "migrate",
            "compacted",
            m["topic"],
            "--format",
            "classic",
            "--plan",
            str(tmp / "b.json"),
            "--apply",
        )

        i = record["index"]
        i["apply"] = _run(
            box, "migrate", "index", i["topic"], "--plan", str(tmp / "index.json"), "--apply"
        )

        ip = record["index_policies"]
        ip["ledgers_before"] = _ledgers(box)
        ip["custom"] = _run(
            box,
            "migrate",
            "index",
            ip["topic"],
            "--plan",
            str(tmp / "index-custom.json"),
            env={"LEDGERCTL_BROKER_CONF": str(ip["custom_conf"])},
        )
        ip["ledgers_after_custom"] = _ledgers(box)
        ip["apply"] = _run(
            box, "migrate", "index", ip["topic"], "--plan", str(tmp / "index-tp.json"), "--apply"
        )
        st = record["stale"]
        st["race_run"] = _race(box, st, tmp)
        st["review_run"] = _review_and_writing(box, st, tmp)
        st["migrate_run"] = _migrate_killed_then_again(box, st, tmp)

        record["killed"] = _kill_mid_write(box, ns)
        if "id" in record["killed"]["killed"]:
            started = time.monotonic()
            box.start_bookie(record["killed"]["killed"]["id"])
            record["killed"]["restart"] = _restarted(box, record["killed"]["killed"]["id"])
            record["killed"]["restart"]["seconds"] = time.monotonic() - started
    return record


def _restarted(box: Any, bookie_id: str) -> dict[str, Any]:
    """What the bookie answers right after ``start --bookie`` returned: a READ_LAC of a
    ledger nobody has, with a 2 s timeout."""
    from pulsarctl_py.stores.live.client import BookieConnection, BookieUnavailable, ClientOptions

    conn = BookieConnection(bookie_id, ClientOptions(timeout=2.0))
    try:
        return {"status": conn.read_lac(2**62 + 11).status}
    except BookieUnavailable as exc:
        return {"status": None, "error": str(exc)}
    finally:
        conn.close()


def _cursors(box: Any, topic: str) -> dict[str, Any]:
    """Each cursor's mark-delete position and properties, as the broker reports them."""
    return {
        name: (c["markDeletePosition"], c.get("properties"))
        for name, c in _internal(box, topic)["cursors"].items()
    }


def _compacted_ledger_of(box: Any, topic: str) -> int | None:
    """The CompactedTopicLedger property of the topic's __compaction cursor (no broker)."""
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.topics import topic_info

    url = f"{box.metadata_url} bookkeeper={box.bookkeeper_metadata_url}"
    with LedgerSource.open(url, None, need_metadata=True, metadata_only=True) as src:
        return topic_info(src, topic).compacted_ledger


# -- the tests ---------------------------------------------------------------------------------


def test_compact_apply_to_the_running_cluster_reads_as_the_brokers_own(sandbox, writes) -> None:
    box, c = sandbox, writes["compact"]
    done = c["apply"]
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    new_id = report["compacted_ledger"]
    assert report["applied"] is True and new_id is not None

    # the broker loads the topic and serves our compacted view as it serves its own: the
    # same messages at the same entries
    got = _read_compacted(box, c["ours"])
    assert [(k, v, pos[0]) for k, v, pos in got] == [(k, v, pos[0]) for k, v, pos in c["expected"]]
    # batched: the same messages kept, rebatched with placeholders as the broker does
    assert c["apply_b"].returncode == 0, c["apply_b"].stderr
    assert _kept(_read_compacted(box, c["ours_b"])) == _kept(c["expected_b"])
    stats = _internal(box, c["ours"])
    assert stats["compactedLedger"]["ledgerId"] == new_id
    assert stats["cursors"]["__compaction"]["properties"]["CompactedTopicLedger"] == new_id

    # BookKeeper's client reads it with the compactor's (empty) password, and it is created
    # as the broker creates its own compacted ledgers: with the broker's default quorums,
    # not the topic-level persistence policies both topics have
    # (AbstractTwoPhaseCompactor.createLedger)
    mine = _bk_read(box, new_id, b"")
    broker = _bk_read(box, c["twin_ledger"], b"")
    for field in ("state", "ensemble_size", "write_quorum_size", "ack_quorum_size"):
        assert mine[field] == broker[field], field
    assert mine["digest_type"] == broker["digest_type"] == "CRC32"
    assert (mine["ensemble_size"], mine["write_quorum_size"], mine["ack_quorum_size"]) == (3, 2, 2)
    assert list(mine["custom_metadata"]) == list(broker["custom_metadata"])
    assert len(mine["entries"]) == report["entries_out"]
    with pytest.raises(Exception, match="wrong password"):
        _bk_read(box, new_id, b"not-the-compactors")

    # one bookie of its ensemble stopped: every entry is still read, by BookKeeper's client
    # and by ledgerctl (the broker itself could not load a topic then: its new ledger
    # needs an ensemble of 3)
    victim = mine["ensembles"]["0"][0]
    with box.bookie_stopped(victim):
        again = _bk_read(box, new_id, b"")
        assert again["entries"] == mine["entries"]
        shown = _run(box, "inspect", str(new_id), "-o", "jsonl")
        assert shown.returncode == 0, shown.stderr
        assert len(shown.stdout.splitlines()) == report["entries_out"]


def test_a_topic_the_broker_cannot_compact_is_compacted_by_ledgerctl_and_served(
    sandbox, writes
) -> None:
    """apache/pulsar#26290: the broker's own compaction of the LZ4 topic fails; ledgerctl's
    (written while the broker was stopped) is the one the broker serves once started."""
    box, f = sandbox, writes["broker_fails"]
    status = f["broker_status"]
    assert status["status"] == "ERROR", status
    assert "IndexOutOfBoundsException" in status["lastError"]
    assert f["apply"].returncode == 0, f["apply"].stderr
    report = json.loads(f["apply"].stdout)
    assert report["applied"] is True and report["broker_compaction_fails_at"] is not None
    stats = _internal(box, f["topic"])
    assert stats["compactedLedger"]["ledgerId"] == report["compacted_ledger"]
    assert stats["cursors"]["__compaction"]["markDeletePosition"] == report["horizon"]
    assert sorted(_kept(_read_compacted(box, f["topic"]))) == f["expected"]


def test_a_transactional_topic_compacts_on_the_running_cluster_as_the_broker_does(
    sandbox, writes
) -> None:
    """Aborted messages and tombstones left out, as the broker's compactor leaves them:
    a readCompacted reader of our compacted ledger gets what it gets from the broker's
    compaction of the twin topic."""
    box, t = sandbox, writes["txn"]
    assert t["apply"].returncode == 0, t["apply"].stderr
    report = json.loads(t["apply"].stdout)
    assert report["applied"] is True and report["aborted_entries"] > 0
    assert report["transactions"]["aborted"] == 2 and report["transactions"]["committed"] == 2
    got = _kept(_read_compacted(box, t["ours"]))
    assert got == _kept(t["expected"])
    values = dict(got)
    assert values["t-k0"] == b"committed-0" and "t-k2" not in values and "t-k1" not in values
    assert _bk_read(box, report["compacted_ledger"], b"")["state"] == "CLOSED"


def test_a_loaded_topic_refuses_every_write_verb_naming_the_broker_and_unload(
    sandbox, writes
) -> None:
    owned = writes["owned"]
    for name, done in owned["results"].items():
        assert done.returncode == 4, (name, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "is loaded by the broker" in lines[0], done.stderr
        assert sandbox.web_url in lines[0] and "--unload" in lines[0]
    assert owned["unchanged"], "a refused write changed the metadata"
    assert not owned["plan"]


def test_nothing_new_since_the_horizon_writes_nothing(writes) -> None:
    e = writes["edges"]
    assert e["first"].returncode == 0, e["first"].stderr
    again = e["again"]
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["applied"] is False and report["compacted_ledger"] is None
    assert any("nothing new since the compaction horizon" in n for n in report["notes"])
    assert e["ledgers_after_again"] == e["ledgers_after_first"]


def test_an_incremental_compaction_that_deletes_every_key_writes_an_empty_ledger(
    sandbox, writes
) -> None:
    box, d = sandbox, writes["deleted"]
    assert d["apply"].returncode == 0, d["apply"].stderr
    report = json.loads(d["apply"].stdout)
    assert report["applied"] is True and report["entries_out"] == 0
    read = _bk_read(box, report["compacted_ledger"], b"")
    assert read["state"] == "CLOSED" and read["last_entry_id"] == -1 and read["entries"] == []
    assert _internal(box, d["topic"])["compactedLedger"]["ledgerId"] == report["compacted_ledger"]
    assert _read_compacted(box, d["topic"]) == []


def test_migrate_compacted_round_trip_on_the_running_cluster(sandbox, writes) -> None:
    box, m = sandbox, writes["mcompacted"]
    assert m["to_429"].returncode == 0, m["to_429"].stderr
    assert m["back"].returncode == 0, m["back"].stderr
    pip = m["pip_ledger"]
    read = _bk_read(box, pip, b"")
    assert (read["ensemble_size"], read["write_quorum_size"], read["ack_quorum_size"]) == (3, 2, 2)
    assert read["digest_type"] == "CRC32" and read["state"] == "CLOSED"
    assert _internal(box, m["topic"])["compactedLedger"]["ledgerId"] not in (pip, None)
    assert _read_compacted(box, m["topic"]) == m["expected"]


def test_migrate_index_takes_the_topics_own_persistence_policies(sandbox, writes):
    """The new data ledgers of a topic with topic-level persistence policies get the
    quorums the broker gives that topic's ledgers (its twin's, rolled by the broker), not
    the namespace's or the broker's defaults; a topic policies service ledgerctl cannot
    read stops the migration before anything is written."""
    box, p = sandbox, writes["index_policies"]
    refused = p["custom"]
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert (
        lines[-1].startswith("ledgerctl: error: ") and "topicPoliciesServiceClassName" in lines[-1]
    )
    assert "Traceback" not in refused.stderr
    assert p["ledgers_after_custom"] == p["ledgers_before"]
    assert not (Path(str(p["custom_conf"])).parent / "index-custom.json").exists()

    assert p["apply"].returncode == 0, p["apply"].stderr
    assert "from the local topic policies of " + p["topic"] in p["apply"].stderr
    new_id = _internal(box, p["topic"])["ledgers"][0]["ledgerId"]
    assert new_id != p["old"]
    mine, broker = _quorums(box, new_id), _quorums(box, p["twin_ledger"])
    assert mine == broker == TOPIC_PERSISTENCE


def _quorums(box: Any, ledger_id: int) -> tuple[int, int, int]:
    """A ledger's ensemble, write and ack quorum, from its metadata in BookKeeper's store."""
    from pulsarctl_py.ledgers import LedgerSource

    url = f"{box.metadata_url} bookkeeper={box.bookkeeper_metadata_url}"
    with LedgerSource.open(url, None, need_metadata=True, metadata_only=True) as src:
        md = src.ledger(ledger_id).metadata
    return md.ensemble_size, md.write_quorum_size, md.ack_quorum_size


def test_migrate_index_on_the_running_cluster(sandbox, writes) -> None:
    """A topic whose ledger carries no broker entry metadata gets ledgers with a
    continuous index, written as the managed ledger writes data ledgers."""
    import pulsar

    box, i = sandbox, writes["index"]
    assert i["apply"].returncode == 0, i["apply"].stderr
    new_id = _internal(box, i["topic"])["ledgers"][0]["ledgerId"]
    assert new_id != i["old"]
    # BookKeeper opens it only with the managed-ledger password, as the broker does
    read = _bk_read(box, new_id, _ml_password(box))
    assert (read["ensemble_size"], read["write_quorum_size"], read["ack_quorum_size"]) == (3, 2, 2)
    assert read["digest_type"] == "CRC32C" and len(read["entries"]) == i["entries"]
    with pytest.raises(Exception, match="wrong password"):
        _bk_read(box, new_id, b"")
    # the broker loads the topic and a reader receives every message, in order
    client = box.client()
    try:
        reader = client.create_reader(i["topic"], pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            msg = reader.read_next(30_000)
            got.append((msg.partition_key(), msg.data()))
        reader.close()
    finally:
        client.close()
    assert got == i["messages"]
    # the index is continuous: the last entry's index is the last message's
    shown = _run(box, "inspect", str(new_id), "-o", "jsonl")
    assert shown.returncode == 0, shown.stderr
    rows = [json.loads(line) for line in shown.stdout.splitlines() if line.startswith("{")]
    indexes = [
        layer["fields"]["index"]
        for row in rows
        for layer in row["layers"]
        if layer["layer"] == "broker-entry-metadata"
    ]
    assert len(indexes) == i["entries"]
    assert indexes[-1] == len(i["messages"]) - 1 and indexes == sorted(indexes)


def test_a_bookie_killed_in_the_middle_of_a_write_leaves_nothing_referenced(
    sandbox, writes
) -> None:
    k = writes["killed"]
    assert "id" in k["killed"], "the write finished before a bookie could be killed"
    done = k["result"]
    assert done.returncode == 3, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ledgerctl: error: ") and "bookie" in last
    # nothing references the ledger: its metadata is gone, the cursor untouched
    assert k["after"] == k["before"]
    assert k["killed"]["ledger"] not in k["after"]
    topic = f"persistent://{writes['ns']}/killed"
    assert _cursors(sandbox, topic) == writes["killed_cursors"]
    assert "__compaction" not in writes["killed_cursors"]
    # restarted after the SIGKILL, it answers as soon as `start --bookie` returns: its port
    # opens at once, but it serves nothing until the dead session's registration znode
    # expires (ZKRegistrationManager waits up to zkTimeout), and `start` waits for that
    restart = k["restart"]
    assert restart["status"] in ("ENOLEDGER", "ENOENTRY"), restart
    assert restart["seconds"] > 5, restart


def test_a_compaction_committed_while_another_computed_survives_it(sandbox, writes) -> None:
    """Run B read the topic before run A committed its compaction: B's apply fails on its
    compare-and-set, and A's compacted ledger, which B's stale view took for a leftover,
    is still there; the restarted broker serves A's compacted view."""
    box, st = sandbox, writes["stale"]
    seen = st["race_run"]
    assert seen["a"].returncode == 0, seen["a"].stderr
    a_ledger = json.loads(seen["a"].stdout)["compacted_ledger"]
    b = seen["b"]
    assert b.returncode == 5, b.stderr  # a failed compare-and-set
    last = b.stderr.strip().splitlines()[-1]
    # the cursor B read (none yet) is not what A left: B's compare-and-set fails
    assert last.startswith("ledgerctl: error: ") and "/race/__compaction: " in last, b.stderr
    assert last.endswith("(the compacted ledger this plan wrote is deleted)")
    assert a_ledger in seen["ledgers"]
    stats = _internal(box, st["race"])  # answers (HTTP 500 when the ledger was deleted)
    assert stats["compactedLedger"]["ledgerId"] == a_ledger
    view = _read_compacted(box, st["race"])
    assert len(view) == 40
    assert {k: v for k, v, _ in view} == st["race_values"]


def test_a_plan_for_review_and_a_ledger_being_written_survive_another_run(sandbox, writes) -> None:
    seen = writes["stale"]["review_run"]
    assert seen["p"].returncode == 0, seen["p"].stderr
    review = json.loads(seen["p"].stdout)["compacted_ledger"]
    writing = seen["w_ledger"]
    q = seen["q"]
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout)["applied"] is True
    # Q judged both unreferenced, and left them, saying why
    assert review in seen["ledgers_during_w"] and writing in seen["ledgers_during_w"]
    assert f"left compacted ledger {review} " in q.stderr and "review.json" in q.stderr
    assert f"left compacted ledger {writing} " in q.stderr
    assert "being written by the ledgerctl compact run" in q.stderr
    # W closed its ledger and saved its plan
    w = seen["w"]
    assert w.returncode == 0, w.stderr
    assert json.loads(w.stdout)["compacted_ledger"] == writing
    assert seen["w_state"] == "CLOSED"
    # undo of both (never applied) deletes their ledgers, and only those
    assert [u.returncode for u in seen["undone"]] == [0, 0], [u.stderr for u in seen["undone"]]
    assert seen["ledgers_after_undo"] == seen["ledgers_after_w"] - {writing, review}


def test_orphans_keep_a_just_written_ledger_by_its_age(writes) -> None:
    """Nothing names the review plan's ledger once its plan is moved away, and BookKeeper
    kept no ctime for it (Pulsar never sets storeSystemtimeAsLedgerCreationTime): its age
    comes from its znode's ctime, and it is too young to be an orphan."""
    seen = writes["stale"]["review_run"]
    review = json.loads(seen["p"].stdout)["compacted_ledger"]
    listed = seen["orphans"]
    assert listed.returncode in (0, 1), listed.stderr
    doc = json.loads(listed.stdout)
    assert review not in {o["ledger_id"] for o in doc["orphans"]}
    (kept,) = [o for o in doc["kept"] if o["ledger_id"] == review]
    assert not kept["ctime"] and kept["age_basis"] == "zookeeper-ctime"
    assert kept["kept"].startswith("too young") and 0 <= kept["age_ms"] < 600_000
    plan = seen["orphans_plan"]
    assert plan.returncode == 0, plan.stderr
    keys = [c["key"] for c in json.loads(plan.stdout)["changes"]]
    assert _ledger_path(review) not in keys
    # with no age asked, the same ledger is an orphan: its age is what kept it
    any_age = json.loads(seen["orphans_any_age"].stdout)
    assert review in {o["ledger_id"] for o in any_age["orphans"]}


def test_migrate_again_with_the_plan_of_a_killed_run_deletes_its_open_ledger(
    sandbox, writes
) -> None:
    from pulsarctl_py.decoders import ledger_metadata as lm

    box, seen = sandbox, writes["stale"]["migrate_run"]
    assert seen["killed"].returncode == -signal.SIGKILL, seen["killed"].stderr
    (left,) = seen["left"]
    assert seen["after_kill"] - seen["before"] == {left}  # the open ledger, leaked
    again = seen["again"]
    assert again.returncode == 0, again.stderr
    assert f"the ledger {left} its earlier run wrote: deleted" in again.stderr
    new = [w["ledger_id"] for w in seen["plan"]["written"]]
    assert left not in new and left not in seen["after"]
    assert seen["after"] - seen["before"] == set(new)
    topic = writes["stale"]["index"]["topic"]
    # the broker loads the migrated topic (and adds a ledger of its own after them)
    assert [li["ledgerId"] for li in _internal(box, topic)["ledgers"]][: len(new)] == new
    zk = _zk(box)
    try:
        data, _ = zk.get(_ledger_path(new[0]))
    finally:
        zk.stop()
    assert lm.parse(data, new[0]).state is lm.LedgerState.CLOSED


# -- the offline writer -----------------------------------------------------------------------


def test_the_offline_writer_places_ledgers_where_the_restarted_bookie_reads_them(
    sandbox,
) -> None:
    """Two ledgers written into a stopped bookie with two ledger directories: each in the
    directory DbLedgerStorage picks (signSafeMod(ledgerId, 2)), registered under
    BookKeeper's own root; the restarted bookie serves both to BookKeeper's client."""
    from pulsarctl_py.decoders.checksums import DigestType
    from pulsarctl_py.plans.writing import LedgerTarget
    from pulsarctl_py.stores.ledger_writer import LedgerConfig
    from pulsarctl_py.stores.metadata import open_metadata_store

    box = sandbox
    bookie = box.bookies[1]
    url = f"{box.metadata_url} bookkeeper={box.bookkeeper_metadata_url}"
    payloads = [f"offline-{i}".encode() * 20 for i in range(25)]
    written = []
    config = LedgerConfig(3, 2, 2, DigestType.CRC32C, _ml_password(box), {"application": b"t"})
    with box.bookie_stopped(bookie["id"]):
        store = open_metadata_store(url, read_only=False)
        try:
            # the directories given in another order than the bookie's: the cookie decides
            target = LedgerTarget(store, bookie_dirs=list(reversed(bookie["ledger_dirs"])))
            for _ in range(2):
                written.append(target.write(config, payloads))
        finally:
            store.close()
        for ledger in written:
            where = Path(ledger.files.current).parent
            assert where == Path(bookie["ledger_dirs"][ledger.ledger_id % 2])
            assert ledger.path.startswith("/bookkeeper/ledgers/")
            assert ledger.ensemble == [bookie["id"]]
        assert {w.ledger_id % 2 for w in written} == {0, 1}
    for ledger in written:
        read = _bk_read(box, ledger.ledger_id, _ml_password(box))
        assert [base64.b64decode(e) for e in read["entries"]] == payloads
        assert read["ensembles"] == {"0": [bookie["id"]]} and read["digest_type"] == "CRC32C"


def test_the_bundle_of_a_topic_is_the_one_the_broker_looks_up(sandbox) -> None:
    import urllib.request

    from pulsarctl_py.ownership import topic_bundle
    from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic

    box = sandbox
    store = open_metadata_store(box.metadata_url)
    try:
        for local in ("a", "orders", "t-partition-3", "x" * 40, "é"):
            topic = resolve_topic(f"persistent://public/default/{local}")
            path = "/lookup/v2/topic/persistent/public/default/" + urllib.parse.quote(local)
            with urllib.request.urlopen(box.web_url + path + "/bundle", timeout=60) as resp:
                assert resp.read().decode() == topic_bundle(store, topic).range, local
    finally:
        store.close()
