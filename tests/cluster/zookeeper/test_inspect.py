"""`ledgerctl inspect` on a real bookie's data with its real ZooKeeper tree (acceptance).

The bookie data, the ZooKeeper dump and the manifest were written by Apache BookKeeper's
own code (tests/data/bookkeeper/README.md). The tree is restored into a real ZooKeeper
and, independently, into a RocksDB metadata store; both must give identical output.

No test bookie here (the bookie's files are read offline); it stays beside the sandbox's
tests for the manifest BookKeeper's client wrote and the RocksDB metadata store, which the
sandbox (ZooKeeper only) does not run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pulsarctl_py.stores.metadata import create_metadata_store
from tests.stores.metadata.test_rocksdb import write_dump
from tests.support.cli_helpers import DATA, run
from tests.support.fixtures.zookeeper import load_dump
from tests.support.fixtures.zookeeper_store import STOPPED_DUMP

LIVE = DATA / "bookkeeper" / "live-dbledgerstorage"
BOOKIE = LIVE / "bookie-data"
MANIFEST = json.loads((LIVE / "manifest.json").read_text())
LEDGERS = {item["ledger_id"]: item for item in MANIFEST["ledgers"]}


@pytest.fixture(scope="module")
def rocks_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("live-rocks") / "metadata"
    with create_metadata_store(path) as store:
        write_dump(store, load_dump(STOPPED_DUMP))
    return f"rocksdb://{path}"


def inspect_json(capsys: pytest.CaptureFixture[str], ledger: int, url: str) -> dict:
    result = run(
        capsys,
        "inspect",
        str(ledger),
        "--metadata-url",
        url,
        "--bookie-dir",
        str(BOOKIE),
        "-o",
        "json",
        "--hash",
    )
    assert result.code == 0, result.err
    return result.json()


def payload_sha256(client_file: str) -> str:
    return hashlib.sha256((LIVE / client_file).read_bytes()).hexdigest()


@pytest.mark.parametrize("ledger", sorted(LEDGERS))
def test_every_ledger_reads_exactly_its_manifest(
    capsys: pytest.CaptureFixture[str], restored_zk: str, ledger: int
) -> None:
    expected = LEDGERS[ledger]
    doc = inspect_json(capsys, ledger, restored_zk)
    entries = doc["entries"]
    assert [e["entry_id"] for e in entries] == [e["entry_id"] for e in expected["entries"]]
    for got, want in zip(entries, expected["entries"], strict=True):
        assert got["payload_sha256"] == want["payload_sha256"]
        assert got["digest"]["ok"] is True
        # BookKeeper's client API says MAC where its metadata protobuf says HMAC
        assert got["digest"]["type"] == {"MAC": "HMAC"}.get(
            expected["digest_type"], expected["digest_type"]
        )
        assert got["ledger_id"] == ledger
    (view,) = doc["ledgers"]
    index = expected["bookie_ledger_index"]
    if entries:
        assert view["bookie"]["fenced"] is index["fenced"]
    if expected.get("expected_last_entry_id") is not None:
        assert view["state"] == "CLOSED"
        assert view["lac"] == expected["expected_last_entry_id"]
        assert view["metadata"]["length"] == expected["expected_length"]
    assert doc["summary"]["errors"] == 0


def test_open_fenced_and_explicit_lac_as_bookkeeper_reports(
    capsys: pytest.CaptureFixture[str], restored_zk: str
) -> None:
    open_ledger = inspect_json(capsys, 2, restored_zk)["ledgers"][0]
    assert open_ledger["state"] == "OPEN"
    # the bookie holds entries 0..6; entry 6 carries the writer's LAC 5 (piggybacked)
    assert open_ledger["bookie"]["last_entry_id"] == 6
    assert open_ledger["lac"] == 5
    fenced = inspect_json(capsys, 7, restored_zk)["ledgers"][0]
    assert fenced["bookie"]["fenced"] is True
    explicit = inspect_json(capsys, 8, restored_zk)["ledgers"][0]
    record = bytes.fromhex(LEDGERS[8]["bookie_ledger_index"]["explicit_lac_record_hex"])
    assert explicit["bookie"]["explicit_lac"] == int.from_bytes(record[8:16], "big") == 2
    assert explicit["lac"] == 2


@pytest.mark.parametrize("ledger", sorted(LEDGERS))
def test_zookeeper_and_rocksdb_metadata_give_identical_json(
    capsys: pytest.CaptureFixture[str], restored_zk: str, rocks_url: str, ledger: int
) -> None:
    assert inspect_json(capsys, ledger, restored_zk) == inspect_json(capsys, ledger, rocks_url)


def test_jsonl_is_one_entry_per_line(capsys: pytest.CaptureFixture[str], restored_zk: str) -> None:
    result = run(
        capsys,
        "inspect",
        "0",
        "--metadata-url",
        restored_zk,
        "--bookie-dir",
        str(BOOKIE),
        "-o",
        "jsonl",
    )
    lines = result.out.splitlines()
    assert len(lines) == len(LEDGERS[0]["entries"])
    first = json.loads(lines[0])
    for key in ("ledger_id", "entry_id", "digest", "layers", "messages"):
        assert key in first
    assert set(first["digest"]) >= {"type", "stored", "computed", "ok"}
    # messages in decode's shape
    assert set(first["messages"][0]) >= {
        "key",
        "value",
        "properties",
        "batch_index",
        "null_value",
        "event_time",
        "sequence_id",
    }


def test_read_only(capsys: pytest.CaptureFixture[str], restored_zk: str) -> None:
    def tree_hash(root: Path) -> dict[str, str]:
        return {
            str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }

    before = tree_hash(BOOKIE)
    for ledger in LEDGERS:
        inspect_json(capsys, ledger, restored_zk)
    assert tree_hash(BOOKIE) == before


def test_unreachable_zookeeper_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(
        capsys, "inspect", "0", "--metadata-url", "zk:127.0.0.1:1", "--bookie-dir", str(BOOKIE)
    )
    assert result.code == 3
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
