"""`ledgerctl verify` on a healthy cluster says nothing alarming: the real broker of
``scripts/sandbox`` (Pulsar 4.0.7) under ordinary traffic, and what it wrote read back.

The module's traffic, in the oracle namespace:

* ``txn``: plain batches around transactional batches (committed, aborted, left open), by
  the official Java client with batching on;
* ``acked``: a subscription that acknowledges messages in transactions (committed,
  aborted, open), which makes the broker's pending-ack store of the subscription;
* ``loaded``: a topic unloaded through the admin API while a producer sends, until a
  ledger is closed with adds in flight (entries stored past its last entry).

Then ``ledgerctl verify --all`` runs as a user runs it (a subprocess, the running bookies)
and exits 0; its information is checked against what the broker did, and the broker's
own records (the coordinator's log, the pending-ack store) against what the coordinator
and the client answer.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.cli_helpers import Result
from tests.support.sandbox_oracle import (
    ledgerctl_env,
    namespace,
    produce,
    short,
    topic_name,
    txn_spec,
)

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]
SUBSCRIPTION = "txn-sub"
#: the transactions of ``txn``: (end, messages), each sent as one batch
TRANSACTIONS = [
    ("commit", [(f"c-{i}", f"committed-{i}".encode()) for i in range(5)]),
    ("abort", [(f"a-{i}", f"aborted-{i}".encode()) for i in range(4)]),
    ("commit", [("c-5", b"committed-5")]),  # a batch of one: the index moves by one anyway
    ("open", [(f"o-{i}", f"open-{i}".encode()) for i in range(3)]),
]
#: the transactions acknowledging ``acked``'s messages: (end, how many)
ACKS = [("commit", 3), ("abort", 2), ("open", 2)]


@dataclass
class Traffic:
    txn: str  # topic names (persistent://...)
    acked: str
    loaded: str
    #: SandboxClient's answers: [{"id": "most:least", "end": E, "message_ids": [...]}]
    produced: list[dict[str, Any]] = field(default_factory=list)
    acks: list[dict[str, Any]] = field(default_factory=list)
    #: (ledger, first, last) of the entries stored past a closed ledger of ``loaded``
    past: tuple[int, int, int] | None = None
    seconds: float = 0.0


def _cli(sandbox: Any, *args: str, ok: tuple[int, ...] = (0,)) -> Result:
    """``ledgerctl ARGS`` in this process, pointed at the sandbox (what each check reads)."""
    from pulsarctl_py.cli import main

    out, err = io.StringIO(), io.StringIO()
    with ledgerctl_env(sandbox), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    assert code in ok, f"ledgerctl {' '.join(args)}: {err.getvalue()}"
    return Result(code, out.getvalue(), err.getvalue())


def _jsonl(done: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in done.out.splitlines() if line.startswith("{")]


def _entries(
    sandbox: Any, topic: str, *args: str, ok: tuple[int, ...] = (0,)
) -> list[dict[str, Any]]:
    """``inspect --topic`` as JSON lines: the entries (not the summary)."""
    done = _cli(sandbox, "inspect", "--topic", topic, "-o", "jsonl", *args, ok=ok)
    return [e for e in _jsonl(done) if "position" in e]


def _under_load(sandbox: Any, topic: str) -> tuple[int, int, int]:
    """Unload ``topic`` while a producer sends, until a ledger of it holds entries past
    its last one: (ledger, first, last)."""
    from pulsarctl_py.ledgers import LedgerSource

    client = sandbox.client()
    acked = [0]
    failed: list[str] = []

    def done(result: Any, _msg_id: Any) -> None:
        import pulsar

        if result == pulsar.Result.Ok:
            acked[0] += 1
        else:
            failed.append(str(result))

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 60
        while acked[0] < count:
            assert time.monotonic() < deadline, f"the producer got {acked[0]} acks: {failed[:3]}"
            time.sleep(0.01)

    try:
        for _attempt in range(5):
            stop = threading.Event()
            producer = client.create_producer(
                topic, batching_enabled=False, send_timeout_millis=0, block_if_queue_full=True
            )

            def send(p: Any = producer, stop: threading.Event = stop) -> None:
                i = 0
                while not stop.is_set():
                    p.send_async(f"load-{i}".encode(), done)
                    i += 1

            sender = threading.Thread(target=send)
            sender.start()
            try:
                wait_for(acked[0] + 1000)  # the producer is in full flow
                sandbox.unload(topic)  # the broker closes the ledger with adds in flight
                wait_for(acked[0] + 200)  # and the producer goes on on the next one
            finally:
                stop.set()
                sender.join()
                producer.flush()
                producer.close()
            with ledgerctl_env(sandbox), LedgerSource.open() as source:
                for li in sandbox.internal_stats(topic)["ledgers"]:
                    past = source.ledger(li["ledgerId"]).past_last
                    if past is not None:
                        return li["ledgerId"], *past
    finally:
        client.close()
    raise AssertionError(f"five unloads of {topic} under load closed no ledger with adds in flight")


@pytest.fixture(scope="module")
def traffic(sandbox: Any) -> Traffic:
    started = time.monotonic()
    namespace(sandbox)
    t = Traffic(topic_name("verify-txn"), topic_name("verify-acked"), topic_name("verify-loaded"))
    client = sandbox.client()
    batched = {"batching_enabled": True, "batching_max_messages": 3}
    try:
        produce(client, t.txn, [(f"p-{i}", f"plain-{i}".encode()) for i in range(3)], **batched)
        produce(client, t.acked, [(f"k-{i}", f"acked-{i}".encode()) for i in range(10)], **batched)
    finally:
        client.close()
    acks = {
        "topic": t.acked,
        "subscription": SUBSCRIPTION,
        "timeout_ms": 3_600_000,
        "transactions": [{"end": end, "count": n} for end, n in ACKS],
    }
    commands = [
        {
            "command": "txn-produce",
            "spec": {**txn_spec(t.txn, TRANSACTIONS), "batching": True, "batch_delay_ms": 200},
        },
        {"command": "txn-ack", "spec": acks},
    ]
    produced, acked = sandbox.java("batch", {"commands": commands})["results"]
    t.produced, t.acks = produced["transactions"], acked["transactions"]
    client = sandbox.client()
    try:
        after = [(f"q-{i}", f"plain-after-{i}".encode()) for i in range(3)]
        produce(client, t.txn, after, **batched)
    finally:
        client.close()
    t.past = _under_load(sandbox, t.loaded)
    t.seconds = time.monotonic() - started
    print(f"sandbox verify traffic: {t.seconds:.1f} s")  # the time this module adds (-s)
    return t


@pytest.fixture(scope="module")
def verified(sandbox: Any, traffic: Traffic) -> dict[str, Any]:
    """``ledgerctl verify --all`` as a user runs it (its own process, the running bookies
    named by the environment): exit 0 on this healthy cluster."""
    done = subprocess.run(
        [*LEDGERCTL, "verify", "--all", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=sandbox.env(),
    )
    doc = json.loads(done.stdout) if done.stdout.startswith("{") else {"findings": []}
    alarms = [f for f in doc["findings"] if f["severity"] != "info"]
    assert done.returncode == 0, (done.stderr, alarms)
    return doc


def _txn_id(text: str) -> tuple[int, int]:
    most, least = text.split(":")
    return int(most), int(least)


def _position(message_id: str) -> tuple[int, int]:
    ledger, entry, _batch, _partition = message_id.split(":")
    return int(ledger), int(entry)


# -- verify --all ------------------------------------------------------------------------------


def test_verify_all_exits_0_on_the_healthy_cluster(verified, traffic) -> None:
    """No error on the session's cluster (exit 0); on this module's topics and the
    transaction stores they made, only what the broker did, as information."""
    assert verified["summary"]["ok"] is True and verified["summary"]["errors"] == 0
    (most,) = {_txn_id(t["id"])[0] for t in traffic.produced + traffic.acks}
    log = f"persistent://pulsar/system/__transaction_log_{most}"
    store = f"{traffic.acked}-{SUBSCRIPTION}__transaction_pending_ack"
    ours = [
        (f["check"], f["severity"], f["topic"])
        for f in verified["findings"]
        if f["topic"] in (traffic.txn, traffic.acked, traffic.loaded, store)
    ]
    # the coordinator's log is the whole session's: whatever else wrote it, nothing wrong
    assert [f for f in verified["findings"] if f["topic"] == log and f["severity"] != "info"] == []
    assert sorted(ours) == sorted(
        [("entry-past-last", "info", traffic.loaded)]
        + [("index-per-entry", "info", traffic.txn)] * 3
    )


def _verify(sandbox: Any, topic: str) -> list[dict[str, Any]]:
    """``verify TOPIC``: exit 0, its findings."""
    return _cli(sandbox, "verify", topic, "-o", "json").json()["findings"]


def test_verify_reads_the_transaction_stores_as_their_records(sandbox, traffic) -> None:
    """The coordinator's log and the pending-ack store hold protobuf records, not Pulsar
    messages: verify called every one of their entries corrupt."""
    (most,) = {_txn_id(t["id"])[0] for t in traffic.produced + traffic.acks}
    for topic in (
        f"pulsar/system/__transaction_log_{most}",
        f"{short('verify-acked')}-{SUBSCRIPTION}__transaction_pending_ack",
    ):
        assert _verify(sandbox, topic) == []


def test_verify_checks_the_index_as_the_broker_assigns_it(sandbox, traffic) -> None:
    """Each transactional batch of more than one message moves the index by one: the
    broker's rule, information for Kafka-on-Pulsar users, not an index gap."""
    assert len({_position(m) for t in traffic.produced for m in t["message_ids"]}) == len(
        TRANSACTIONS
    )  # one batch per transaction
    batches = sorted(
        _position(t["message_ids"][0]) for t in traffic.produced if len(t["message_ids"]) > 1
    )
    found = _verify(sandbox, short("verify-txn"))
    assert sorted((f["ledger_id"], f["entry_id"]) for f in found) == batches
    assert {(f["check"], f["severity"]) for f in found} == {("index-per-entry", "info")}
    for f in found:
        assert f["details"]["index"] == f["details"]["previous"]["index"] + 1
        assert f["details"]["num_messages"] > 1


def test_verify_says_what_a_ledger_closed_under_load_holds_past_its_end(sandbox, traffic) -> None:
    ledger, first, last = traffic.past
    (found,) = _verify(sandbox, short("verify-loaded"))
    assert (found["check"], found["severity"]) == ("entry-past-last", "info")
    assert (found["ledger_id"], found["entry_id"]) == (ledger, first)
    assert found["details"]["last_stored"] == last


# -- the transaction stores, read as what they are -------------------------------------------


def test_the_coordinators_log_holds_what_the_coordinator_answers(sandbox, traffic) -> None:
    """Every transaction of the module as the coordinator logged it (NEW, the partitions
    and subscriptions it touched, its status updates), and the open ones as the
    coordinator's admin API describes them."""
    txns = [(_txn_id(t["id"]), t["end"], "produced") for t in traffic.produced]
    txns += [(_txn_id(t["id"]), t["end"], "acked") for t in traffic.acks]
    (most,) = {tid[0] for tid, _, _ in txns}
    records: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for entry in _entries(sandbox, f"pulsar/system/__transaction_log_{most}"):
        assert entry["ok"] and entry["messages"] == [], entry
        (layer,) = [x for x in entry["layers"] if x["layer"] == "transaction-log"]
        r = layer["fields"]
        records.setdefault((r["txnid_most_bits"], r["txnid_least_bits"]), []).append(r)
    final = {"commit": "COMMITTED", "abort": "ABORTED"}
    for tid, end, kind in txns:
        ops = records[tid]
        assert ops[0]["metadata_op"] == "NEW" and ops[0]["timeout_ms"] == 3_600_000
        touched = [
            (
                r["metadata_op"],
                tuple(r.get("partitions", [])),
                tuple((s["topic"], s["subscription"]) for s in r.get("subscriptions", [])),
            )
            for r in ops
            if r["metadata_op"] in ("ADD_PARTITION", "ADD_SUBSCRIPTION")
        ]
        if kind == "produced":
            assert touched == [("ADD_PARTITION", (traffic.txn,), ())]
        else:
            assert touched == [("ADD_SUBSCRIPTION", (), ((traffic.acked, SUBSCRIPTION),))]
        statuses = [r["new_status"] for r in ops if r["metadata_op"] == "UPDATE"]
        if end == "open":
            assert statuses == []
            url = f"{sandbox.web_url}/admin/v3/transactions/transactionMetadata/{tid[0]}/{tid[1]}"
            with urllib.request.urlopen(url, timeout=60) as resp:
                answer = json.loads(resp.read())
            assert answer["status"] == "OPEN"
            if kind == "produced":
                assert set(answer["producedPartitions"]) == {traffic.txn}
            else:
                assert answer["ackedPartitions"] == {traffic.acked: {SUBSCRIPTION: {}}}
        else:
            assert statuses == [final[end][:-2] + "ING", final[end]]


def test_the_pending_ack_store_holds_the_consumers_acknowledgements(sandbox, traffic) -> None:
    store = f"{short('verify-acked')}-{SUBSCRIPTION}__transaction_pending_ack"
    records = []
    for entry in _entries(sandbox, store):
        assert entry["ok"] and entry["messages"] == [], entry
        (layer,) = [x for x in entry["layers"] if x["layer"] == "pending-ack"]
        records.append(layer["fields"])
    want = []
    for t in traffic.acks:
        most, least = _txn_id(t["id"])
        for message_id in t["message_ids"]:
            want.append(("ACK", most, least, _position(message_id)))
        if t["end"] != "open":
            want.append(({"commit": "COMMIT", "abort": "ABORT"}[t["end"]], most, least, None))
    got = []
    for r in records:
        acked = [(m["ledger_id"], m["entry_id"]) for m in r.get("pending_ack_metadata", [])]
        assert len(acked) <= 1, r  # one message per acknowledgement
        op, most, least = r["pending_ack_op"], r["txnid_most_bits"], r["txnid_least_bits"]
        got.append((op, most, least, acked[0] if acked else None))
    assert got == want


# -- the index of transactional batches ----------------------------------------------------------


def test_transactional_batches_move_the_broker_index_by_one(sandbox, traffic) -> None:
    rows = []
    for entry in _entries(sandbox, short("verify-txn"), "--depth", "metadata"):
        layers = {x["layer"]: x.get("fields", {}) for x in entry["layers"]}
        md = layers["message-metadata"]
        rows.append(
            (
                layers["broker-entry-metadata"]["index"],
                md.get("num_messages_in_batch", 1),
                "txnid_most_bits" in md,
            )
        )
    # as AppendIndexMetadataInterceptor counts: one per transactional entry (a marker
    # included), the batch size otherwise
    for (before, _, _), (index, count, txn) in itertools.pairwise(rows):
        assert index == before + (1 if txn else count), rows
    assert sum(1 for _, count, txn in rows if txn and count > 1) == 3


# -- entries past a closed ledger's last entry ---------------------------------------------------


def test_entries_past_the_last_are_no_messages_of_any_command(sandbox, traffic, tmp_path) -> None:
    """What a reader of the topic gets is what export and inspect give, without the
    entries stored past the closed ledger's last one."""
    import pulsar

    ledger, first, last = traffic.past
    end = tuple(map(int, sandbox.internal_stats(traffic.loaded)["lastConfirmedEntry"].split(":")))
    client = sandbox.client()
    try:
        reader = client.create_reader(traffic.loaded, pulsar.MessageId.earliest)
        served: list[tuple[int, int]] = []
        while not served or served[-1] != end:  # up to the topic's last entry
            m = reader.read_next(timeout_millis=30_000).message_id()
            served.append((m.ledger_id(), m.entry_id()))
        reader.close()
    finally:
        client.close()
    assert served and not [p for p in served if p[0] == ledger and p[1] >= first]
    to = tmp_path / "loaded.jsonl"
    done = _cli(sandbox, "export", short("verify-loaded"), "--to", str(to), "-o", "json", ok=(0, 1))
    summary = done.json()
    assert summary["entries_past_last"] == last - first + 1
    rows = [json.loads(line) for line in to.read_text().splitlines()]
    assert [(r["ledger_id"], r["entry_id"]) for r in rows] == served
    # (export and inspect count what they skip as incomplete: exit 1, said on stderr)
    inspected = _entries(sandbox, short("verify-loaded"), "--depth", "entry", ok=(0, 1))
    assert [tuple(map(int, e["position"].split(":"))) for e in inspected] == served
    asked = _cli(sandbox, "inspect", f"{ledger}:{first}", ok=(1,))
    assert asked.out == "" and f"stored past ledger {ledger}'s last entry" in asked.err
