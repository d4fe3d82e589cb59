"""What `scripts/sandbox` makes for the runbooks' rehearsals, checked against what the
broker stored and serves: keyed, chunked and encrypted messages, transactions, shadow
topics (messages without broker entry metadata: tests/cluster/sandbox/test_rehearsals.py,
the KoP runbook's rehearsal).

Each command runs as an operator runs it (`scripts/sandbox CMD DIR ...`, JSON on stdout);
the stored entries are read with `ledgerctl inspect`, the served ones with the official
Python client.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.sandbox_oracle import RUN

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "sandbox"
LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]


def _script(sandbox, *args: str, ok: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), args[0], str(sandbox.dir), *args[1:]],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == ok, done.stderr
    return done


def _stored(sandbox, topic: str) -> dict[str, dict[str, Any]]:
    """Each stored entry's message metadata and broker entry metadata, by position."""
    done = subprocess.run(
        [*LEDGERCTL, "inspect", "--topic", topic, "--depth", "metadata", "-o", "jsonl"],
        capture_output=True,
        text=True,
        timeout=300,
        env=sandbox.env(),
    )
    assert done.returncode == 0, done.stderr
    out = {}
    for line in done.stdout.splitlines():
        entry = json.loads(line)
        if "position" in entry:
            layers = {la["layer"]: la.get("fields", {}) for la in entry["layers"]}
            out[entry["position"]] = layers
    return out


def _pos(message_id: str) -> str:
    ledger, entry = message_id.split(":")[:2]
    return f"{ledger}:{entry}"


@pytest.fixture(scope="module")
def made(sandbox) -> dict[str, Any]:
    """The four commands at once (each starts a JVM: side by side they take half the time)."""
    kinds = ("keyed", "chunked", "encrypted", "txn", "compressed")
    names = {k: f"traffic-{k}-{RUN}" for k in kinds}
    commands = {
        "keyed": ["produce", names["keyed"], "--count", "4", "--keys", "2"],
        "chunked": ["produce", names["chunked"], "--count", "2", "--chunked"],
        "encrypted": ["produce", names["encrypted"], "--count", "2", "--keys", "1", "--encrypted"],
        "txn": ["txn", names["txn"], "--commit", "1", "--abort", "1", "--open", "1"],
        # as bench/java/CompactProducer.java makes a topic (the #26290 runbook's rehearsal)
        "compressed": [
            *("produce", names["compressed"], "--count", "20", "--keys", "3", "--seed", "7"),
            *("--tombstones", "20", "--values", "text", "--batch", "5", "--compression", "LZ4"),
        ],
    }
    running = {
        kind: subprocess.Popen(
            [sys.executable, str(SCRIPT), args[0], str(sandbox.dir), *args[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for kind, args in commands.items()
    }
    out: dict[str, Any] = {"names": names}
    for kind, proc in running.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{commands[kind]}: {stderr}"
        out[kind] = json.loads(stdout)
        out[kind + "-stdout"] = stdout
    return out


def test_compressed_batches_are_cut_by_count_with_the_benchs_keys_and_read_back(
    sandbox, made, tmp_path
):
    got, topic = made["compressed"], made["names"]["compressed"]
    stored = _stored(sandbox, topic)
    assert len(stored) == 4, stored
    for layers in stored.values():
        fields = layers["message-metadata"]
        assert fields["compression"] == "LZ4" and fields["num_messages_in_batch"] == 5
    # the keys java.util.Random(7) draws, as the bench's producer draws them
    java = tmp_path / "Draw.java"
    java.write_text(
        "public class Draw { public static void main(String[] a) {"
        " java.util.Random r = new java.util.Random(7);"
        " for (int i = 0; i < 20; i++) { int k = r.nextInt(3); boolean t = r.nextDouble() < 0.2;"
        ' System.out.println("k" + k + (t ? " tombstone" : "")); } } }'
    )
    drawn = subprocess.run(
        ["java", str(java)], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split("\n")[:20]
    assert got["keys"] == [d.split()[0] for d in drawn]
    read = json.loads(_script(sandbox, "consume", topic, "reader", "--all").stdout)
    assert read["count"] == 20 and read["keys"] == got["keys"] and read["distinct_keys"] == 3
    tombstones = sum(d.endswith("tombstone") for d in drawn)
    assert tombstones > 0 and read["empty_values"] == tombstones


def test_keyed_messages_are_stored_with_their_keys(sandbox, made):
    got = made["keyed"]
    assert got["topic"] == f"persistent://public/default/{made['names']['keyed']}"
    assert got["keys"] == ["key-0", "key-1", "key-0", "key-1"]
    stored = _stored(sandbox, made["names"]["keyed"])
    keys = [stored[_pos(m)]["message-metadata"].get("partition_key") for m in got["message_ids"]]
    assert keys == got["keys"]


def test_chunked_messages_are_stored_in_chunks_and_served_whole(sandbox, made):
    got = made["chunked"]
    stored = _stored(sandbox, made["names"]["chunked"])
    for first, last in zip(got["first_chunk_ids"], got["message_ids"], strict=True):
        ledger, a = map(int, _pos(first).split(":"))
        _, b = map(int, _pos(last).split(":"))
        chunks = [stored[f"{ledger}:{e}"]["message-metadata"] for e in range(a, b + 1)]
        assert [c["chunk_id"] for c in chunks] == list(range(len(chunks)))
        assert len(chunks) > 1 and {c["num_chunks_from_msg"] for c in chunks} == {len(chunks)}
        assert max(stored[f"{ledger}:{e}"]["bookie-entry"]["payload_size"] for e in (a, b)) < (
            got["chunk_bytes"] + 200
        )
    client = sandbox.client()
    try:
        consumer = client.subscribe(
            f"persistent://public/default/{made['names']['chunked']}",
            "check",
            initial_position=_earliest(),
        )
        values = [consumer.receive(30_000).data() for _ in got["message_ids"]]
    finally:
        client.close()
    name = made["names"]["chunked"]
    assert [v[: len(name) + 2] for v in values] == [f"{name}-{i}".encode() for i in range(2)]
    assert all(len(v) > got["chunk_bytes"] for v in values)


def test_encrypted_messages_need_the_private_key_which_is_never_printed(sandbox, made):
    got = made["encrypted"]
    key = got["encryption_key"]
    assert "BEGIN" not in made["encrypted-stdout"]
    for path in (key["public_key"], key["private_key"]):
        assert Path(path).parent == sandbox.dir / "secrets"
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    stored = _stored(sandbox, made["names"]["encrypted"])
    for m in got["message_ids"]:
        names = [k["key"] for k in stored[_pos(m)]["message-metadata"]["encryption_keys"]]
        assert names == [key["name"]]
    import pulsar

    client = sandbox.client()
    try:
        consumer = client.subscribe(
            f"persistent://public/default/{made['names']['encrypted']}",
            "check",
            initial_position=_earliest(),
            crypto_key_reader=pulsar.CryptoKeyReader(key["public_key"], key["private_key"]),
        )
        values = [consumer.receive(30_000).data() for _ in got["message_ids"]]
    finally:
        client.close()
    name = made["names"]["encrypted"]
    assert values == [f"{name}-{i}".encode() for i in range(2)]


def test_transactions_end_as_asked(sandbox, made):
    got = made["txn"]
    assert [t["end"] for t in got["transactions"]] == ["commit", "abort", "open"]
    stored = _stored(sandbox, made["names"]["txn"])
    markers = [f["message-metadata"].get("marker_type") for f in stored.values()]
    # commit (21) and abort (22) markers; the open transaction has none
    assert [m for m in markers if m] == [21, 22]
    # the coordinator still holds the open one (an ended one is gone from it: 404)
    for t in got["transactions"]:
        most, least = t["id"].split(":")
        url = f"{sandbox.web_url}/admin/v3/transactions/transactionMetadata/{most}/{least}"
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                status = json.loads(resp.read())["status"]
        except urllib.error.HTTPError as err:
            status = err.code
        assert status == ("OPEN" if t["end"] == "open" else 404), (t, status)


def test_a_shadow_topic_is_made_through_the_admin_api(sandbox, made):
    source = made["keyed"]["topic"]
    shadow = f"{source}-shadow"
    got = json.loads(_script(sandbox, "shadow", source, shadow).stdout)
    assert got == {"source": source, "shadow": shadow}
    path = sandbox.topic_path(source)
    assert sandbox.admin("GET", path + "/shadowTopics") == [shadow]
    props = sandbox.admin("GET", sandbox.topic_path(shadow) + "/properties")
    assert props["PULSAR.SHADOW_SOURCE"] == source


def test_wrong_requests_are_one_line_errors(sandbox):
    done = _script(sandbox, "produce", f"traffic-bad-{RUN}", "--chunked", "--batching", ok=1)
    assert done.stderr.startswith("sandbox: error:") and done.stderr.count("\n") == 1
    done = _script(sandbox, "shadow", f"no-such-source-{RUN}", f"s-{RUN}", ok=1)
    assert "does not exist" in done.stderr


def _earliest() -> Any:
    import pulsar

    return pulsar.InitialPosition.Earliest
