"""Compaction against the real broker of ``scripts/sandbox`` (Pulsar 4.0.7): the broker's own
compaction (admin REST) of a topic, next to ``ledgerctl compact`` of the same topic.

Each scenario is a topic of its own in ``public/oracle``, produced by the official clients,
unloaded (its ledger closed, so that both see the same entries), computed by ledgerctl and
then compacted by the broker. The comparisons: the compacted ledger's entries byte for byte
(message ids with their partition field, no broker entry metadata prefix, placeholders,
recompressed batches, checksums), the horizon, ``pulsar/compactedTo``, and ``compact --status
--deep`` on the broker's ledger; where the broker's compaction fails (apache/pulsar#26290),
that ledgerctl names the batch and the exception's write position.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.fixtures.sandbox import SandboxFailed
from tests.support.sandbox_oracle import (
    broker_compact,
    decompressed,
    framed_view,
    ledgerctl_env,
    namespace,
    produce,
    short,
    stored_compaction,
    topic_name,
    txn_spec,
)

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]

TRANSACTIONS = [
    ("commit", [("t-k0", b"committed-0"), ("t-k1", b"committed-1")]),
    ("abort", [("t-k0", b"aborted-0"), ("t-k2", b"aborted-2"), ("plain-k0", None)]),
    ("commit", [("t-k1", None), ("t-k3", b"committed-3")]),
    ("abort", [("t-k3", None)]),
]


@dataclass
class Scenario:
    name: str
    ours: Any = None  # the CompactionReport
    entries: list[bytes] = field(default_factory=list)  # ledgerctl's compacted entries
    keep_chunks: list[bytes] = field(default_factory=list)  # with keep_chunks=True
    stored: Any = None  # StoredCompaction, or None when the broker's compaction failed
    broker_error: str | None = None


def _keyed(
    prefix: str, n: int, keys: int, tombstone_every: int = 0, noise: int = 0
) -> list[tuple[str, bytes]]:
    """Keyed messages, every ``tombstone_every``-th one a tombstone; ``noise`` random bytes
    after each value keep batches from compressing well (a well compressed batch is where
    the 4.0.7 broker's compaction fails, apache/pulsar#26290)."""
    rng = random.Random(prefix)
    out = []
    for i in range(n):
        key = f"{prefix}-k{i % keys}"
        tomb = tombstone_every and i % tombstone_every == tombstone_every - 1
        value = f"{prefix}-value-{i}".encode() + rng.randbytes(noise)
        out.append((key, b"" if tomb else value))
    return out


def _batched(codec: Any) -> dict[str, Any]:
    # batches cut by their count, not by time: the same batches on every run
    return {
        "batching_enabled": True,
        "batching_max_messages": 10,
        "batching_max_publish_delay_ms": 1000,
        "compression_type": codec,
    }


def _produce_scenario(box: Any, client: Any, name: str) -> None:
    import pulsar

    topic = topic_name(name)
    codecs = {
        "batched-none": pulsar.CompressionType.NONE,
        "batched-lz4": pulsar.CompressionType.LZ4,
        "batched-zlib": pulsar.CompressionType.ZLib,
        "batched-zstd": pulsar.CompressionType.ZSTD,
    }
    if name in codecs:
        # two ledgers; keyed batches with tombstones in them, values that do not compress
        # (so that the 4.0.7 broker's own compaction succeeds, checked below)
        messages = _keyed("b", 200, 13, tombstone_every=11, noise=48)
        produce(client, topic, messages[:100], **_batched(codecs[name]))
        box.unload(topic)
        produce(client, topic, messages[100:], **_batched(codecs[name]))
    elif name == "single":
        produce(client, topic, _keyed("s", 60, 7, tombstone_every=5), batching_enabled=False)
    elif name == "chunked":
        big = bytes((i * 31 + 7) % 251 for i in range(6 * 1024 * 1024))
        messages = [("c-0", b"small-before"), ("c-1", big), ("c-2", b"small-after")]
        produce(client, topic, messages, chunking_enabled=True, batching_enabled=False)
    elif name == "encrypted":
        keys = box.dir / "oracle-keys"
        public, private = _rsa(keys)
        reader = pulsar.CryptoKeyReader(str(public), str(private))
        produce(
            client,
            topic,
            _keyed("e", 20, 4),
            encryption_key="oracle",
            crypto_key_reader=reader,
            batching_enabled=True,
            batching_max_messages=5,
            batching_max_publish_delay_ms=1000,
        )
    elif name == "all-deleted":
        # compressed, so that an empty value carries uncompressed_size 0: a tombstone
        messages = [("a", b"1"), ("b", b"2"), ("a", b""), ("b", b"")]
        produce(
            client,
            topic,
            messages,
            batching_enabled=False,
            compression_type=pulsar.CompressionType.LZ4,
        )
    elif name.startswith("txn"):
        produce(client, topic, _keyed("plain", 6, 3))
        txns = list(TRANSACTIONS)
        if name == "txn-ongoing":
            txns.append(("open", [("t-k4", b"ongoing-4")]))
        box.java("txn-produce", txn_spec(topic, txns))
        if name != "txn-ends-with-marker":
            produce(client, topic, _keyed("after", 6, 3))
        if name == "txn-ongoing":
            box.java("txn-produce", txn_spec(topic, [("commit", [("t-k5", b"after-ongoing")])]))
    elif name == "snappy-broker-fails":
        # the batch the 4.0.7 broker's compaction throws on (IndexOutOfBoundsException)
        messages = _keyed("r1-snappy", 200, 13, tombstone_every=11)
        produce(client, topic, messages[:100], **_batched(pulsar.CompressionType.SNAPPY))
        box.unload(topic)
        produce(client, topic, messages[100:], **_batched(pulsar.CompressionType.SNAPPY))
    else:
        raise AssertionError(name)


def _rsa(directory: Any) -> tuple[Any, Any]:
    from tests.support.sandbox_world import _rsa_keys

    public, private = directory / "world-public.pem", directory / "world-private.pem"
    if not public.exists():
        public, private = _rsa_keys(directory)
    return public, private


SCENARIOS = (
    "batched-none",
    "batched-lz4",
    "batched-zlib",
    "batched-zstd",
    "single",
    "chunked",
    "encrypted",
    "all-deleted",
    "txn",
    "txn-ends-with-marker",
    "txn-ongoing",
    "snappy-broker-fails",
)


def _compute(name: str, **options: Any) -> tuple[Any, list[bytes]]:
    from pulsarctl_py.compaction import CompactionOptions
    from pulsarctl_py.compaction.run import compact, read_spool

    report = compact(short(name), full=True, spool=True, options=CompactionOptions(**options))
    try:
        entries = [] if report.spool is None else [e.data for e in read_spool(report.spool)]
    finally:
        if report.spool is not None:
            report.spool.unlink(missing_ok=True)
    return report, entries


@pytest.fixture(scope="module")
def oracle(sandbox) -> dict[str, Scenario]:
    """Every scenario produced, computed by ledgerctl and compacted by the broker."""
    namespace(sandbox)
    client = sandbox.client()
    out: dict[str, Scenario] = {}
    try:
        for name in SCENARIOS:
            _produce_scenario(sandbox, client, name)
            sandbox.unload(topic_name(name))
    finally:
        client.close()
    for name in SCENARIOS:
        scenario = out[name] = Scenario(name)
        with ledgerctl_env(sandbox):
            scenario.ours, scenario.entries = _compute(name)
            if name == "chunked":
                _, scenario.keep_chunks = _compute(name, keep_chunks=True)
        try:
            broker_compact(sandbox, topic_name(name))
        except SandboxFailed as exc:
            scenario.broker_error = str(exc)
            continue
        scenario.stored = stored_compaction(sandbox, topic_name(name))
    return out


BYTE_FOR_BYTE = (
    "batched-none",
    "batched-zlib",
    "single",
    "chunked",
    "encrypted",
    "all-deleted",
    "txn",
    "txn-ends-with-marker",
    "txn-ongoing",
)


@pytest.mark.parametrize("name", BYTE_FOR_BYTE)
def test_compaction_equals_the_brokers_byte_for_byte(oracle, name):
    s = oracle[name]
    assert s.broker_error is None, s.broker_error
    assert s.entries == s.stored.entries
    assert s.ours.to_json()["horizon"] == s.stored.horizon
    # pulsar/compactedTo: the MessageIdData of phase one's "to"
    to = s.stored.metadata.custom_metadata["pulsar/compactedTo"]
    from pulsarctl_py.proto import pulsar_api_pb2 as api

    stored_to = api.MessageIdData.FromString(to)
    ours_to = s.ours.compacted_to or s.ours.horizon
    assert (stored_to.ledgerId, stored_to.entryId) == tuple(ours_to)
    assert s.ours.stats.broker_failure_at is None


@pytest.mark.parametrize("name", ["batched-lz4", "batched-zstd"])
def test_compaction_equals_the_brokers_once_decompressed(oracle, name):
    # the broker's LZ4 and ZSTD encoders are aircompressor's, whose bytes differ from
    # liblz4's and libzstd's: the same ids, metadata and batches, other compressed bytes
    s = oracle[name]
    assert s.broker_error is None, s.broker_error
    assert decompressed(s.entries) == decompressed(s.stored.entries)
    assert framed_view(s.entries) == framed_view(s.stored.entries)
    assert s.ours.to_json()["horizon"] == s.stored.horizon
    assert s.ours.stats.broker_failure_at is None


def test_chunked_messages_compact_as_the_broker_compacts_them(oracle, sandbox):
    """The broker keeps only the last chunk of a key's latest chunked message: ledgerctl's
    default too (byte for byte, BYTE_FOR_BYTE), with the message counted as cut. A
    compacted reader of the broker's compaction (the official client) drops that chunk,
    whose first one it never gets: the key's value is lost to it. --keep-chunks keeps the
    leading chunk as well."""
    import pulsar

    from pulsarctl_py.decoders import DecodeOptions, Outer, decode_entry

    def metadata(framed: bytes) -> Any:
        return decode_entry(framed, DecodeOptions(outer=Outer.COMPACTED)).metadata

    s = oracle["chunked"]
    assert s.broker_error is None, s.broker_error
    stored = [metadata(e) for e in s.stored.entries]
    assert [md.partition_key for md in stored] == ["c-0", "c-1", "c-2"]
    assert (stored[1].chunk_id, stored[1].num_chunks_from_msg) == (1, 2)  # the last chunk
    report = s.ours.to_json()
    assert report["chunked_messages_cut"] == 1 and report["chunks_kept"] == 0
    assert any("--keep-chunks" in w for w in report["warnings"])
    client = sandbox.client()
    try:
        reader = client.create_reader(
            topic_name("chunked"), pulsar.MessageId.earliest, is_read_compacted=True
        )
        got = []
        while reader.has_message_available():
            try:
                m = reader.read_next(5000)
            except pulsar.Timeout:
                break  # the dropped chunk was the last message available
            got.append((m.partition_key(), len(m.data())))
        reader.close()
    finally:
        client.close()
    assert got == [("c-0", len(b"small-before")), ("c-2", len(b"small-after"))]
    # --keep-chunks: the leading chunk kept as well, so that readers reassemble the message
    assert [s.keep_chunks[0], *s.keep_chunks[2:]] == s.entries
    leading = metadata(s.keep_chunks[1])
    assert (leading.partition_key, leading.chunk_id, leading.num_chunks_from_msg) == ("c-1", 0, 2)


def test_transactions_compact_as_the_broker_compacts_them(oracle):
    s = oracle["txn"]
    rows = framed_view(s.entries)
    values = {key: value for _l, _e, _b, key, value, _p in rows}
    # aborted values and tombstones ignored; the committed tombstone of t-k1 deleted it
    assert values["t-k0"] == b"committed-0" and values["t-k3"] == b"committed-3"
    assert "t-k1" not in values and "t-k2" not in values
    assert values["plain-k0"] == b"plain-value-3"
    txns = s.ours.to_json()["transactions"]
    assert txns["committed"] == 2 and txns["aborted"] == 2 and not txns["ongoing"]


def _topic_end(sandbox, name: str) -> str:
    """The topic's last entry, from the broker's internal stats."""
    ledgers = sandbox.internal_stats(topic_name(name))["ledgers"]
    ends = [(li["ledgerId"], li["entries"] - 1) for li in ledgers if li["entries"] > 0]
    return "{}:{}".format(*max(ends))


def test_the_horizon_stops_before_markers_and_ongoing_transactions(oracle, sandbox):
    ends = oracle["txn-ends-with-marker"]
    # the topic ends with an abort marker (after its aborted entry): the broker's horizon
    # is the last entry it dispatches, before them
    assert ends.stored.horizon == ends.ours.to_json()["horizon"]
    assert ends.stored.horizon != _topic_end(sandbox, "txn-ends-with-marker")
    ongoing = oracle["txn-ongoing"]
    assert ongoing.stored.horizon == ongoing.ours.to_json()["horizon"]
    assert ongoing.stored.horizon != _topic_end(sandbox, "txn-ongoing")
    assert len(ongoing.ours.to_json()["transactions"]["ongoing"]) == 1
    keys = {r[3] for r in framed_view(ongoing.entries)}
    assert "t-k4" not in keys and "t-k5" not in keys  # after the max read position


def test_an_empty_compaction_is_an_empty_ledger_for_both(oracle):
    s = oracle["all-deleted"]
    assert s.entries == [] and s.stored.entries == []
    assert s.stored.metadata.is_closed and s.stored.metadata.last_entry_id == -1


def _cli(sandbox, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*LEDGERCTL, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=sandbox.env(),
    )


@pytest.mark.parametrize(
    "name",
    [
        "batched-lz4",
        "batched-zstd",
        "single",
        "chunked",
        "all-deleted",
        "txn",
        "txn-ends-with-marker",
        "txn-ongoing",
    ],
)
def test_status_deep_is_clean_on_the_brokers_compaction(oracle, sandbox, name):
    assert oracle[name].broker_error is None
    done = _cli(sandbox, "compact", short(name), "--status", "--deep", "-o", "json")
    assert done.returncode == 0, done.stderr + done.stdout
    status = json.loads(done.stdout)
    assert status["horizon"] == oracle[name].stored.horizon
    problems = [c for c in status["checks"] if c["severity"] != "info"]
    assert problems == []
    if name == "all-deleted":
        # an empty compacted ledger is what the broker writes: info, not an error
        assert [c["check"] for c in status["checks"]] == ["compacted-ledger-empty"]


def test_the_broker_fails_where_ledgerctl_says_it_would(oracle):
    s = oracle["snappy-broker-fails"]
    at = s.ours.to_json()["broker_compaction_fails_at"]
    assert at is not None, "ledgerctl did not foresee the broker's failure"
    assert s.broker_error is not None and "IndexOutOfBoundsException" in s.broker_error
    for name in BYTE_FOR_BYTE:
        assert oracle[name].ours.to_json()["broker_compaction_fails_at"] is None


def test_the_failure_position_is_the_brokers_dstindex(sandbox):
    """Random keyed batched topics: ledgerctl foresees each failure of the broker's
    compaction and the write position in its exception, and no other."""
    import pulsar

    import pulsarctl_py.compaction.core as core
    from pulsarctl_py.compaction import rebatch_buffer

    namespace(sandbox)
    rng = random.Random(26290)
    codecs = [
        pulsar.CompressionType.SNAPPY,
        pulsar.CompressionType.LZ4,
        pulsar.CompressionType.ZSTD,
        pulsar.CompressionType.ZLib,
    ]
    client = sandbox.client()
    names = []
    try:
        for t in range(6):
            name = f"random-batches-{t}"
            names.append(name)
            producer = client.create_producer(
                topic_name(name),
                batching_enabled=True,
                batching_max_messages=rng.randint(2, 40),
                batching_max_publish_delay_ms=1000,
                compression_type=codecs[t % 4],
            )
            keylen, nkeys = rng.randint(1, 40), rng.randint(2, 30)
            for _ in range(rng.randint(40, 160)):
                key = (f"k{rng.randrange(nkeys)}-").ljust(keylen, "x")
                value = b"" if rng.random() < 0.1 else b"v" * rng.randint(1, 60)
                producer.send_async(value, None, partition_key=key)
            producer.flush()
            producer.close()
            sandbox.unload(topic_name(name))
    finally:
        client.close()
    first: list[int] = []
    real = rebatch_buffer.rebatch_failure

    def spy(received: int, plain: bytes) -> int | None:
        found = real(received, plain)
        if found is not None and not first:
            first.append(found)
        return found

    failures = 0
    for name in names:
        first.clear()
        core.rebatch_failure = spy
        try:
            with ledgerctl_env(sandbox):
                report, _ = _compute(name)
        finally:
            core.rebatch_failure = real
        foreseen = report.to_json()["broker_compaction_fails_at"]
        try:
            broker_compact(sandbox, topic_name(name))
            error = None
        except SandboxFailed as exc:
            error = str(exc)
        assert (foreseen is not None) == (error is not None), (name, foreseen, error)
        if error is not None:
            failures += 1
            assert f"dstIndex: {first[0]}" in error, (name, first, error)
    assert failures  # the seed gives both outcomes
    assert failures < len(names)
