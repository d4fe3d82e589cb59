"""``topic info`` of a partitioned topic's base name: every partition the partitioned-topic
metadata declares, a row each and the sum; a declared partition without a managed ledger is
a finding (exit 1), never left out in silence.

On a copy of the demo whose ``orders`` (3 partitions) declares a fourth that was never
created, with a subscription ``sub`` at the start of every partition (backlog: all of its
entries) and none on the last."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli_helpers import run
from tests.support.demo_env import demo_root, isolate  # noqa: F401 (fixtures)

BASE = "persistent://public/default/orders"


@pytest.fixture(scope="module")
def partitioned(demo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.stores.metadata import open_metadata_store, read_managed_ledger

    root = tmp_path_factory.mktemp("partitioned") / "demo"
    shutil.copytree(demo_root, root)
    with open_metadata_store(f"rocksdb://{root / 'metadata'}", read_only=False) as store:
        meta = "/admin/partitioned-topics/public/default/persistent/orders"
        node = store.get(meta)
        assert node is not None and json.loads(bytes(node.data)) == {"partitions": 3}
        store.put(meta, json.dumps({"partitions": 4}).encode(), node.stat.version)
        for index in (0, 1):
            name = mld.TopicName.parse(f"{BASE}-partition-{index}")
            record = read_managed_ledger(store, name)
            assert record is not None and record.info is not None
            first = record.info.message.ledgerInfo[0].ledgerId
            store.put(name.cursor_path("sub"), mld.cursor_at(None, (first, -1), []), -1)
    return root


@pytest.fixture
def in_partitioned(partitioned: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(partitioned)
    return partitioned


def test_json_has_each_partition_the_total_and_the_missing_one(
    capsys: pytest.CaptureFixture[str], in_partitioned: Path
) -> None:
    result = run(capsys, "topic", "info", "orders", "-o", "json")
    assert result.code == 1, result.err
    doc = result.json()
    parts = doc["partitions"]
    assert [p["topic"] for p in parts] == [f"{BASE}-partition-{i}" for i in range(3)]
    assert doc["partitions_declared"] == 4
    assert doc["missing_partitions"] == [f"{BASE}-partition-3"]
    total = doc["total"]
    # each partition read as `topic info PARTITION` reads it, and the sums of them
    for i, part in enumerate(parts):
        one = run(capsys, "topic", "info", f"orders-partition-{i}", "-o", "json").json()
        assert (part["entries"], part["size"], part["ledgers"]) == (
            one["entries"],
            one["size"],
            one["ledgers"],
        )
    assert total["entries"] == sum(p["entries"] for p in parts) > 0
    assert total["size"] == sum(p["size"] for p in parts) > 0
    assert total["ledgers"] == sum(len(p["ledgers"]) for p in parts)
    assert total["entries_exact"] is False  # a partition is missing
    subs = {s["name"]: s for s in total["subscriptions"]}
    # sub: every entry of partitions 0 and 1; the missing partition makes the sum inexact
    assert subs["sub"]["backlog"] == parts[0]["entries"] + parts[1]["entries"]
    assert subs["sub"]["partitions"] == 2 and subs["sub"]["backlog_exact"] is False
    assert "partition-3 is declared" in " ".join(doc["findings"])
    assert "finding" in result.err and "orders-partition-3" in result.err


def test_table_has_a_row_per_partition_and_the_total(
    capsys: pytest.CaptureFixture[str], in_partitioned: Path
) -> None:
    result = run(capsys, "topic", "info", "orders", "-o", "table")
    assert result.code == 1
    lines = result.out.splitlines()
    for i in range(4):
        assert any(f"orders-partition-{i}" in line for line in lines), result.out
    missing = next(line for line in lines if "orders-partition-3" in line)
    assert "missing" in missing
    total = next(line for line in lines if "total" in line)
    doc = run(capsys, "topic", "info", "orders", "-o", "json").json()
    cells = [c.strip() for c in total.split("│") if c.strip()]
    assert cells[1:4] == [
        str(doc["total"]["ledgers"]),
        f"{doc['total']['entries']}+",
        f"{doc['total']['size']}+",
    ]
    assert "backlog sub" in result.out


def test_a_topic_with_every_partition_is_no_finding(
    capsys: pytest.CaptureFixture[str],
    demo_root: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(demo_root)
    result = run(capsys, "topic", "info", "orders", "-o", "json")
    assert result.code == 0, result.err
    doc = result.json()
    assert doc["partitions_declared"] == len(doc["partitions"]) == 3
    assert doc["missing_partitions"] == [] and doc["findings"] == []
    assert doc["total"]["entries_exact"] is True
