"""Objects a real Pulsar broker's S3 offloader wrote (tests/data/offload, see its
PROVENANCE.md): read from a real S3 server, every message compared with what a broker
reader returned; the tests' writer reproduces them byte for byte; mutated, they never
escape as anything but one line."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders.entry import DecodeOptions, Outer, decode_entry
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from pulsarctl_py.stores.tiered.jcloud import (
    JcloudLedger,
    OffloadedEntry,
    data_key,
    index_key,
    parse_index,
    uuid_of,
)
from pulsarctl_py.stores.tiered.s3 import (
    S3Location,
    S3Objects,
    list_offload_objects,
    open_ledger,
)
from tests.stores.tiered.test_jcloud import fuzz_read
from tests.support.jcloud_writer import MemoryObjects, write_ledger

DATA = Path(__file__).resolve().parents[2] / "data" / "offload"
GOLDEN = ["s3", "s3-blocks"]


class Golden:
    """One offloaded ledger as the broker left it."""

    def __init__(self, name: str) -> None:
        self.dir = DATA / name
        self.info = json.loads((self.dir / "ledger-info.json").read_text())
        self.ledger_id = int(self.info["ledgerId"])
        ctx = self.info["offloadContext"]
        self.uuid = uuid_of(int(ctx["uidMsb"]), int(ctx["uidLsb"]))
        self.driver = ctx["driverMetadata"]["name"]
        self.properties = {p["key"]: p["value"] for p in ctx["driverMetadata"]["properties"]}
        self.data = (self.dir / data_key(self.uuid, self.ledger_id)).read_bytes()
        self.index = (self.dir / index_key(self.uuid, self.ledger_id)).read_bytes()
        self.messages = [
            m
            for m in json.loads((self.dir / "broker-reader.json").read_text())
            if m["ledger_id"] == self.ledger_id
        ]

    def metadata(self, key: str) -> dict[str, str]:
        return json.loads((self.dir / f"{key}.metadata.json").read_text())

    def objects(self) -> list[tuple[str, bytes, dict[str, str]]]:
        return [
            (key, body, self.metadata(key))
            for key, body in (
                (data_key(self.uuid, self.ledger_id), self.data),
                (index_key(self.uuid, self.ledger_id), self.index),
            )
        ]

    def memory(self, data: bytes | None = None, index: bytes | None = None) -> MemoryObjects:
        objects = MemoryObjects()
        for key, body, meta in self.objects():
            if key.endswith("-index"):
                body = body if index is None else index
            else:
                body = body if data is None else data
            objects.objects[key] = (body, meta)
        return objects


GOLDENS = {name: Golden(name) for name in GOLDEN}


def messages_read(ledger: JcloudLedger) -> list[dict[str, Any]]:
    """Every message of the ledger as ledgerctl's decoders see it, in the reader's shape."""
    options = DecodeOptions(outer=Outer.PULSAR_ENTRY)
    out = []
    for item in ledger.read_entries():
        assert isinstance(item, OffloadedEntry), item
        entry = decode_entry(item.data, options, (item.ledger_id, item.entry_id))
        assert not entry.problems, entry.problems  # checksums verified as for bookie data
        for m in entry.messages:
            out.append(
                {
                    "ledger_id": item.ledger_id,
                    "entry_id": item.entry_id,
                    "batch_index": m.batch_index,
                    "key": m.key,
                    "properties": dict(m.properties),
                    "value_b64": base64.b64encode(bytes(m.value or b"")).decode(),
                    "publish_time": m.publish_time,
                }
            )
    return out


@pytest.fixture(scope="module")
def golden_bucket(s3_endpoint: str) -> str:
    """The golden objects put, with their user metadata, in a bucket of a real S3 server."""
    client = S3Objects(S3Location("golden", s3_endpoint)).client
    client.create_bucket(Bucket="golden")
    for golden in GOLDENS.values():
        for key, body, meta in golden.objects():
            client.put_object(Bucket="golden", Key=key, Body=body, Metadata=meta)
    return s3_endpoint


@pytest.mark.parametrize("name", GOLDEN)
def test_every_message_matches_the_broker_reader(name: str, golden_bucket: str) -> None:
    golden = GOLDENS[name]
    assert golden.info["offloadContext"]["bookkeeperDeleted"]  # read only from S3 by the broker
    info = json_format.ParseDict(golden.info, mlpb.ManagedLedgerInfo.LedgerInfo())
    ledger = open_ledger(
        info.ledgerId, info.offloadContext, endpoint=golden_bucket, bucket="golden"
    )
    assert (ledger.uuid, ledger.ledger_id) == (golden.uuid, golden.ledger_id)
    assert messages_read(ledger) == golden.messages
    md = ledger.metadata
    assert md.last_entry_id == int(golden.info["entries"]) - 1
    assert md.length == int(golden.info["size"])
    assert md.pulsar().managed_ledger == golden.metadata(ledger.data_key)["managedledgername"]


def test_driver_metadata_as_the_broker_wrote_it() -> None:
    golden = GOLDENS["s3"]
    location = S3Location.from_driver_metadata(golden.driver, golden.properties)
    assert location.bucket == "offload" and location.region == "us-east-1"
    assert location.endpoint == golden.properties["serviceEndpoint"]


def test_listing_finds_the_golden_offloads(golden_bucket: str) -> None:
    listing = list_offload_objects(S3Objects(S3Location("golden", golden_bucket)))
    assert {(g.uuid, g.ledger_id) for g in listing.groups.values() if g.complete} == {
        (g.uuid, g.ledger_id) for g in GOLDENS.values()
    }


@pytest.mark.parametrize("name, block_size", [("s3", 64 << 20), ("s3-blocks", 300)])
def test_writer_reproduces_the_broker_byte_for_byte(name: str, block_size: int) -> None:
    golden = GOLDENS[name]
    index = parse_index(golden.index, data_size=len(golden.data))
    entries = [
        item.data  # type: ignore[union-attr]
        for item in JcloudLedger(golden.memory(), golden.ledger_id, golden.uuid).read_entries()
    ]
    data, built_index, blocks = write_ledger(entries, block_size, index.metadata_bytes)
    assert data == golden.data
    assert built_index == golden.index
    assert blocks == index.entries


def test_multi_block_random_access_reads_only_the_block_needed() -> None:
    golden = GOLDENS["s3-blocks"]
    objects = golden.memory()
    ledger = JcloudLedger(objects, golden.ledger_id, golden.uuid, window=64)
    assert len(ledger.index.entries) == 5
    objects.reads.clear()
    item = ledger.read_entry(7)
    start = ledger.index.entries[4].block_offset
    assert item.location.part_id == 5
    assert all(offset >= start for _, offset, _ in objects.reads)


@given(
    target=st.sampled_from(["data", "index"]),
    name=st.sampled_from(GOLDEN),
    flips=st.lists(st.tuples(st.integers(0, 10**5), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.none() | st.integers(0, 10**5),
)
def test_fuzz_mutated_real_objects(
    target: str, name: str, flips: list[tuple[int, int]], cut: int | None
) -> None:
    golden = GOLDENS[name]
    blob = bytearray(golden.data if target == "data" else golden.index)
    for at, value in flips:
        blob[at % len(blob)] = value
    if cut is not None:
        blob = blob[: cut % (len(blob) + 1)]
    objects = (
        golden.memory(data=bytes(blob)) if target == "data" else golden.memory(index=bytes(blob))
    )
    fuzz_read(JcloudLedger(objects, golden.ledger_id, golden.uuid), None)
