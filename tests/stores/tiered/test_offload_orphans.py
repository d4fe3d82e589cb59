"""``orphans --offloaded`` on copies of real offloads (tests/data): what no managed ledger
references is listed, what one references never is, and nothing is judged on a partial
view (a managed ledger that does not decode, a store that does not answer)."""

from __future__ import annotations

import shutil
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from tests.stores.tiered.test_verify import FS_DIR, FS_EXPECTED, S3_INFO, _fs_info
from tests.support.cli_helpers import run
from tests.support.verify_world import bookkeeper_root_nodes, write_tree

LEDGER = int(FS_DIR.name.split("-", 1)[0])
TOPIC = FS_EXPECTED["topic"]
ML = mld.TopicName.parse(TOPIC).persistence_name


def _store(root: Path, topics: dict[str, list[Any]], raw: dict[str, bytes] | None = None) -> str:
    from pulsarctl_py.stores.metadata import create_metadata_store

    nodes = bookkeeper_root_nodes()
    for topic, infos in topics.items():
        info = mlpb.ManagedLedgerInfo()
        info.ledgerInfo.extend(infos)
        nodes[mld.TopicName.parse(topic).ml_path] = mld.build_info(info)
    nodes.update(raw or {})
    store = create_metadata_store(root / "metadata")
    try:
        write_tree(store, nodes)
    finally:
        store.close()
    return f"rocksdb://{root / 'metadata'}"


def _copy(root: Path, managed_ledger: str, ledger: int, uid: str) -> Path:
    target = root / "offload" / managed_ledger / f"{ledger}-{uid}"
    shutil.copytree(FS_DIR, target)
    return target


def _listing(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> Any:
    result = run(capsys, "orphans", "--offloaded", "--metadata-url", url, "-o", "json", *args)
    assert "Traceback" not in result.err
    return result


def test_filesystem_leftovers_listed_referenced_never(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    referenced = _fs_info(tmp_path)  # complete, bookkeeperDeleted: the golden copy
    interrupted = _fs_info(tmp_path, ledgerId=LEDGER + 1, complete=False, bookkeeperDeleted=False)
    interrupted_lost = _fs_info(tmp_path, ledgerId=LEDGER + 2, complete=False)
    url = _store(tmp_path, {TOPIC: [referenced, interrupted, interrupted_lost]})
    uid = FS_DIR.name.split("-", 1)[1]
    _copy(tmp_path, ML, LEDGER, uid)
    retried = str(uuidlib.uuid4())  # an older attempt at the referenced ledger
    stray = _copy(tmp_path, ML, LEDGER, retried)
    cut = _copy(tmp_path, ML, LEDGER + 1, uid)
    (cut / "index").unlink()  # the offload stopped before its index
    _copy(tmp_path, ML, LEDGER + 2, uid)
    other = _copy(tmp_path, "public/default/persistent/not-here", 7, str(uuidlib.uuid4()))

    result = _listing(capsys, url, "--min-age", "0")
    assert result.code == 1, result.err
    doc = result.json()
    listed = {(o["uuid"], o["ledger_id"]): o for o in doc["offload_orphans"]}
    assert set(listed) == {(retried, LEDGER), (uid, LEDGER + 1)}
    assert listed[(retried, LEDGER)]["paths"] == [str(stray)]
    assert listed[(retried, LEDGER)]["why"] == "no managed ledger names this offload"
    assert "interrupted offload" in listed[(uid, LEDGER + 1)]["why"]
    kept = {(o["uuid"], o["ledger_id"]): o["kept"] for o in doc["kept"]}
    # an interrupted context whose BookKeeper copy is marked deleted: maybe the only copy
    assert "only copy" in kept[(uid, LEDGER + 2)]
    # a managed ledger this store does not hold: another cluster's, not judged
    assert "not in this metadata store" in kept[(other.name.split("-", 1)[1], 7)]
    # the referenced offload: never listed, nor kept
    assert (uid, LEDGER) not in listed and (uid, LEDGER) not in kept

    # fresh leftovers are kept under the default --min-age
    fresh = _listing(capsys, url)
    assert fresh.code == 0 and not fresh.json()["offload_orphans"]
    assert {(retried, LEDGER), (uid, LEDGER + 1)} <= {
        (o["uuid"], o["ledger_id"]) for o in fresh.json()["kept"]
    }


def test_a_managed_ledger_that_does_not_decode_judges_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = mld.TopicName.parse("persistent://public/default/broken").ml_path
    url = _store(tmp_path, {TOPIC: [_fs_info(tmp_path)]}, {broken: b"\xff\xfe not protobuf"})
    _copy(tmp_path, ML, LEDGER, str(uuidlib.uuid4()))
    result = _listing(capsys, url, "--min-age", "0")
    assert result.code == 1 and not result.out
    assert result.err.startswith("ledgerctl: error:") and "no offload is judged" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_an_unreachable_bucket_judges_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], s3_endpoint: str
) -> None:
    from google.protobuf import json_format

    li = json_format.ParseDict(S3_INFO, mlpb.ManagedLedgerInfo.LedgerInfo())
    for p in li.offloadContext.driverMetadata.properties:
        if p.key == "serviceEndpoint":
            p.value = "http://127.0.0.1:9"
    url = _store(tmp_path, {"persistent://public/default/golden-blocks": [li]})
    result = _listing(capsys, url, "--min-age", "0")
    assert result.code == 3 and not result.out
    assert result.err.startswith("ledgerctl: error:") and "127.0.0.1:9" in result.err


def test_no_offload_location_is_said_not_called_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = mlpb.ManagedLedgerInfo.LedgerInfo(ledgerId=3, entries=1, size=10)
    url = _store(tmp_path, {TOPIC: [plain]})
    result = _listing(capsys, url, "--min-age", "0")
    assert result.code == 2 and not result.out
    assert "no offload location to list" in result.err
