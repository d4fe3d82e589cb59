"""RocksDBMetadataStore: a store written by our writer reads back like ZooKeeper, reads never
change a byte, and a store locked by a running writer (Pulsar) can still be read."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import metadata_record as rec
from pulsarctl_py.decoders.errors import CorruptEntryError, LedgerctlError
from pulsarctl_py.stores.metadata import (
    MetadataConflict,
    MetadataStore,
    MetadataStoreError,
    ReadOnlyStoreError,
    allocate_ledger_id,
    create_metadata_store,
    list_ledgers,
    list_managed_ledgers,
    open_metadata_store,
    read_layout,
    read_managed_ledger,
)
from tests.cluster.zookeeper.test_zookeeper_store import check_ml_tree
from tests.support.fixtures.ml_tree import ml_tree_nodes
from tests.support.fixtures.zookeeper import load_dump, restorable
from tests.support.fixtures.zookeeper_store import STOPPED_DUMP


def write_dump(store: MetadataStore, nodes: list[dict]) -> None:
    """The same replay as the ZooKeeper restore: create, then set ``version`` times."""
    for node in sorted(restorable(nodes), key=lambda n: n["path"].count("/")):
        data = base64.b64decode(node.get("data_b64") or "")
        store.put(node["path"], data, -1)
        for version in range(int(node.get("version", 0))):
            store.put(node["path"], data, version)


@pytest.fixture(scope="module")
def rocks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rocks") / "metadata"
    with create_metadata_store(path) as store:
        write_dump(store, load_dump(STOPPED_DUMP))
        for p, data in ml_tree_nodes():
            store.put(p, data, -1)
    return path


@pytest.fixture
def rocks(rocks_dir: Path) -> Iterator[MetadataStore]:
    with open_metadata_store(f"rocksdb://{rocks_dir}") as store:
        yield store


def snapshot(path: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``path``: size, mtime and content hash."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = Path(root) / name
            st = full.stat()
            digest = hashlib.sha256(full.read_bytes()).hexdigest()
            out[str(full.relative_to(path))] = (st.st_size, st.st_mtime_ns, digest)
    return out


def test_writer_leaves_a_plain_rocksdb_directory(rocks_dir: Path) -> None:
    names = {p.name for p in rocks_dir.iterdir()}
    assert "CURRENT" in names and "rocksdict-config.json" not in names


def test_reads_back_identical_to_zookeeper(rocks: MetadataStore, restored_zk: str) -> None:
    with open_metadata_store(restored_zk) as zk:
        zk_nodes = {p: n for p, n in zk.walk("/ledgers")}
        rocks_nodes = {p: n for p, n in rocks.walk("/ledgers")}
        assert sorted(zk_nodes) == sorted(rocks_nodes)
        for path, zk_node in zk_nodes.items():
            rocks_node = rocks_nodes[path]
            assert zk_node is not None and rocks_node is not None
            assert rocks_node.data == zk_node.data
            assert rocks_node.stat.version == zk_node.stat.version
            assert rocks.children(path) == zk.children(path)
        zk_ledgers, rocks_ledgers = list_ledgers(zk), list_ledgers(rocks)
        assert [r.ledger_id for r in rocks_ledgers] == list(range(9))
        for a, b in zip(zk_ledgers, rocks_ledgers, strict=True):
            assert (a.ledger_id, a.path, a.raw, a.metadata, a.error) == (
                b.ledger_id,
                b.path,
                b.raw,
                b.metadata,
                b.error,
            )
            assert a.stat is not None and b.stat is not None
            assert a.stat.version == b.stat.version
        assert read_layout(zk) == read_layout(rocks)


def test_managed_ledgers_read_like_zookeeper(rocks: MetadataStore, scratch_zk: str) -> None:
    check_ml_tree(rocks)
    with open_metadata_store(scratch_zk, read_only=False) as zk:
        for path, data in ml_tree_nodes():
            zk.put(path, data, -1)
        assert list_managed_ledgers(zk) == list_managed_ledgers(rocks)
        for ref in list_managed_ledgers(rocks):
            a, b = read_managed_ledger(zk, ref.topic), read_managed_ledger(rocks, ref.topic)
            assert a is not None and b is not None
            assert (a.ref, a.info, a.error) == (b.ref, b.info, b.error)
            assert [(c.path, c.info) for c in a.cursors] == [(c.path, c.info) for c in b.cursors]


def test_read_only_operations_change_no_byte(rocks_dir: Path) -> None:
    before = snapshot(rocks_dir)
    with open_metadata_store(f"rocksdb://{rocks_dir}") as store:
        for _path, _node in store.walk("/"):
            pass
        list_ledgers(store)
        list_managed_ledgers(store)
        assert store.exists("/nope") is None
        with pytest.raises(ReadOnlyStoreError):
            store.put("/x", b"")
        with pytest.raises(ReadOnlyStoreError):
            allocate_ledger_id(store)
    assert snapshot(rocks_dir) == before


def test_read_while_a_writer_holds_the_lock(tmp_path: Path) -> None:
    """What happens while Pulsar runs: its LOCK is held and recent writes are only in the WAL."""
    path = tmp_path / "live"
    with create_metadata_store(path) as writer:
        writer.put("/managed-ledgers", b"", -1)
        writer.put("/ledgers/00/0000/L0001", b"x", -1)
        before = snapshot(path)
        with open_metadata_store(f"rocksdb://{path}") as reader:
            assert reader.children("/") == ["ledgers", "managed-ledgers"]
            assert reader.get("/ledgers/00/0000/L0001") is not None
        assert snapshot(path) == before
        with pytest.raises(MetadataStoreError, match="locked") as info:
            open_metadata_store(f"rocksdb://{path}", read_only=False)
        assert "\n" not in str(info.value)
        # a reader sees the state of the moment it opened
        with open_metadata_store(f"rocksdb://{path}") as reader:
            writer.put("/later", b"", -1)
            assert reader.get("/later") is None


def test_writes_compare_and_set_and_transactions(tmp_path: Path) -> None:
    with create_metadata_store(tmp_path / "s") as store:
        _, stat = store.put("/a", b"1", -1)
        assert stat.version == 0
        with pytest.raises(MetadataConflict):
            store.put("/a", b"1", -1)
        with pytest.raises(MetadataConflict):
            store.put("/a", b"2", 5)
        with pytest.raises(MetadataConflict, match="does not exist"):
            store.put("/b", b"2", 3)
        assert store.put("/a", b"2", 0)[1].version == 1
        with pytest.raises(MetadataConflict):
            store.transaction().create("/c", b"").check("/a", 0).commit()
        assert store.get("/c") is None
        stats = store.transaction().set("/a", b"3", 1).create("/a/c", b"c").commit()
        assert [s.version if s else None for s in stats] == [2, 0]
        with pytest.raises(MetadataConflict, match="children"):
            store.delete("/a")
        store.transaction().delete("/a/c", 0).delete("/a", 2).commit()
        assert store.children("/") == []


def test_allocate_ids_with_the_store_wide_counter(tmp_path: Path) -> None:
    with create_metadata_store(tmp_path / "s") as store:
        assert store.sequential_id == 0
        assert [allocate_ledger_id(store) for _ in range(3)] == [0, 1, 2]
        assert store.sequential_id == 3 and store.children("/ledgers/idgen") == []
        path, _ = store.put("/other/seq-", b"", -1, sequential=True)
        assert path == "/other/seq-3"  # the counter is shared by every sequential node
        lm_md = lm.parse(lm.build(lm.LedgerMetadata(1, 1, 1, lm.LedgerState.OPEN, {0: ["b:1"]})))
        store.put(lm.ledger_path(5), lm.build(lm_md), -1)
        assert allocate_ledger_id(store) == 4
        assert allocate_ledger_id(store) == 6  # 5 exists
        store.put("/ledgers/idgen-long", b"", -1)
        assert allocate_ledger_id(store) == (1 << 32) | 7


def test_stale_ephemeral_nodes_are_hidden(tmp_path: Path) -> None:
    with create_metadata_store(tmp_path / "s") as store:
        store.put("/e/mine", b"", -1, ephemeral=True)
        stale = rec.MetaValue(0, 99, 1, 1, True, b"old")
        store.put_raw(b"/e/stale", rec.build(stale))
        assert store.children("/e") == ["mine"]
        assert store.get("/e/stale") is None
        assert store.get("/e/mine") is not None


def test_damaged_value_names_its_path(tmp_path: Path) -> None:
    with create_metadata_store(tmp_path / "s") as store:
        store.put_raw(b"/bad", b"\x00\x00")
        with pytest.raises(CorruptEntryError, match="/bad"):
            store.get("/bad")


def test_opening_errors(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(MetadataStoreError, match="not a directory"):
        open_metadata_store(f"rocksdb://{missing}")
    assert not missing.exists()  # nothing was created while failing
    (tmp_path / "empty").mkdir()
    with pytest.raises(MetadataStoreError, match="CURRENT"):
        open_metadata_store(f"rocksdb://{tmp_path / 'empty'}")
    with create_metadata_store(tmp_path / "full") as store:
        store.put("/x", b"", -1)
    with pytest.raises(MetadataStoreError, match="already holds"):
        create_metadata_store(tmp_path / "full")
    with pytest.raises(LedgerctlError, match="create"):
        open_metadata_store("zk:127.0.0.1:1", create=True)
