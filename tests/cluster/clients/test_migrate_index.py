"""`migrate index` output read back by the official pulsar-client (issue 11 point 5).

The demo's ``batched`` (batches of 5: uncompressed, LZ4, ZLIB, ZSTD, Snappy) and ``plain``
(single messages, an open last ledger) topics hold entries the official client published
(tests/data/real-client, each with a sidecar saying what was sent) and no broker entry
metadata, like a pre-2.8 KoP topic. After ``migrate index --apply`` the new ledgers are
served by a loopback endpoint (tests/support/harness) to a ``pulsar.Client`` reader, once as a
broker serves old clients (broker entry metadata removed) and once as a broker with
``exposingBrokerEntryMetadataToClientEnabled`` (the 0x0e02 prefix left in).

What must hold, from what was sent rather than from ledgerctl:

* every new entry carries exactly the bytes the client published (after the prefix);
* the reader gets every sent message, in the topic's order, with its key and value, and
  message ids in the new ledgers (same entry ids, the batch index of each message);
* the Python client does not expose a message's broker entry metadata (``Message`` has no
  index accessor in pulsar-client 3.x), so the index is checked on the served bytes: entry
  k's index is the number of messages the reader got up to the end of entry k, minus one;
* ``seek --index N`` finds, for every offset N of the mapping, the message id the reader
  reported for the N-th message.
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pulsar
import pytest

from pulsarctl_py.decoders import bookkeeper
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.stores.bookie import open_bookie
from tests.support.cli_helpers import run
from tests.support.demo_world import demo_flags, make_demo
from tests.support.harness.compacted_endpoint import CompactedEndpoint

CORPUS = Path(__file__).resolve().parents[2] / "data" / "real-client"
#: demo topic -> the real-client scenarios it is made of (pulsarctl_py/demo/builder.PLANS)
TOPICS = {
    "batched": ("batched-none", "batched-lz4", "batched-zlib", "batched-zstd", "batched-snappy"),
    "plain": ("nonbatched-plain",),
}
BEM_MAGIC = b"\x0e\x02"
BEM_HEAD = struct.Struct(">HI")

Sent = tuple[str, bytes]  # (key or "", value)


def _sent(scenarios: tuple[str, ...]) -> dict[bytes, list[Sent]]:
    """Each published entry's exact bytes -> the messages its sidecar says were sent."""
    out: dict[bytes, list[Sent]] = {}
    for scenario in scenarios:
        for data_path in sorted((CORPUS / scenario).glob("*.bin")):
            side = json.loads(data_path.with_suffix(".json").read_text())
            out[data_path.read_bytes()] = [
                (m.get("key") or "", base64.b64decode(m["value_b64"] or ""))
                for m in side["messages"]
            ]
    return out


def _split_bem(data: bytes) -> tuple[api.BrokerEntryMetadata | None, bytes]:
    """The broker entry metadata (parsed with the protobuf class alone) and the rest."""
    if not data.startswith(BEM_MAGIC):
        return None, data
    _, size = BEM_HEAD.unpack_from(data)
    bem = api.BrokerEntryMetadata()
    bem.ParseFromString(data[BEM_HEAD.size : BEM_HEAD.size + size])
    return bem, data[BEM_HEAD.size + size :]


def _read_back(
    topic: str, served: list[tuple[tuple[int, int], bytes]], expose: bool, count: int
) -> list[tuple[str, bytes, tuple[int, int, int]]]:
    """What the official client's reader gets from ``served`` (``count`` messages)."""
    with CompactedEndpoint(served, None, expose_broker_entry_metadata=expose) as endpoint:
        client = pulsar.Client(endpoint.service_url, operation_timeout_seconds=10)
        try:
            reader = client.create_reader(
                f"persistent://public/default/{topic}", pulsar.MessageId.earliest
            )
            got = []
            for _ in range(count):
                m = reader.read_next(timeout_millis=10_000)
                mid = m.message_id()
                position = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
                got.append((m.partition_key(), m.data(), position))
            with pytest.raises(pulsar.Timeout):
                reader.read_next(timeout_millis=500)  # nothing more than was sent
            reader.close()
        finally:
            client.close()
        assert not endpoint.problems, endpoint.problems
    return got


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_official_reader_reads_the_migrated_topic(
    topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = make_demo(tmp_path)
    plan_path = tmp_path / "plan.json"
    flags = demo_flags(demo)
    r = run(capsys, "migrate", "index", topic, "--plan", plan_path, "--apply", "-o", "json", *flags)
    assert r.code == 0, r.err
    record = json.loads(plan_path.read_text())["repairs"][0]
    new_ids = {int(k): v for k, v in record["new_ledgers"].items()}
    mapping = [
        json.loads(line) for line in Path(f"{plan_path}.mapping.jsonl").read_text().splitlines()
    ]
    sent = _sent(TOPICS[topic])

    served: list[tuple[tuple[int, int], bytes]] = []
    expected: list[Sent] = []
    indexes: list[int] = []
    with open_bookie([demo / "bookkeeper"]) as bookie:
        for row in mapping:
            old_ledger, entry_id = map(int, row["old_position"].split(":"))
            ledger_id = new_ids[old_ledger]
            stored = bookie.read_entry(ledger_id, entry_id)
            # a data ledger as the managed ledger writes one: CRC32C (the demo's
            # managedLedgerDigestType is Pulsar's default), like the topic's own ledgers
            layer, _, at = bookkeeper.parse(stored, 0, len(stored), DigestType.CRC32C)
            assert layer.check is not None and layer.check.ok, (ledger_id, entry_id)
            data = bytes(stored[at:])
            bem, published = _split_bem(data)
            assert bem is not None and bem.HasField("index"), (ledger_id, entry_id)
            assert published in sent, f"{ledger_id}:{entry_id} is not what the client sent"
            served.append(((ledger_id, entry_id), data))
            expected.extend(sent.pop(published))
            indexes.append(bem.index)
    assert not sent, "every published entry is in the migrated topic"

    for expose in (False, True):
        got = _read_back(topic, served, expose, len(expected))
        assert [(k, v) for k, v, _ in got] == expected
        assert [(lid, eid) for _, _, (lid, eid, _) in got] == [
            pos for pos, _ in served for _ in range(_count(pos, got))
        ]
        # the index of each entry: the messages the reader got up to its end, minus one
        read = 0
        for (pos, _), index in zip(served, indexes, strict=True):
            read += _count(pos, got)
            assert index == record["first_index"] + read - 1, pos

    # seek --index finds every mapped offset at the message id the reader reported
    for n, (_, _, (lid, eid, batch)) in enumerate(got):
        found = run(
            capsys, "seek", topic, "--index", str(record["first_index"] + n), "-o", "json", *flags
        )
        assert found.code == 0, found.err
        js = found.json()
        assert (js["ledger_id"], js["entry_id"]) == (lid, eid), n
        if batch >= 0:
            assert js["batch_index"] == batch, n
    assert len(got) == record["last_index"] - record["first_index"] + 1


def _count(position: tuple[int, int], got: list[tuple[str, bytes, tuple[int, int, int]]]) -> int:
    return sum(1 for _, _, (lid, eid, _) in got if (lid, eid) == position)
