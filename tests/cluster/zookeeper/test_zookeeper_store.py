"""ZooKeeperStore against a real ZooKeeper: the bookie's tree, CAS writes, id allocation,
timeouts and credentials."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.managed_ledger import TopicName
from pulsarctl_py.stores.metadata import (
    ENV_ZK_AUTH,
    MetadataConflict,
    MetadataStore,
    MetadataStoreError,
    ReadOnlyStoreError,
    allocate_ledger_id,
    create_ledger,
    list_ledgers,
    list_managed_ledgers,
    open_metadata_store,
    read_layout,
    read_ledger,
    read_managed_ledger,
)
from tests.support.fixtures.ml_tree import SPECS, cursor_info, ml_info, ml_tree_nodes
from tests.support.fixtures.zookeeper import ZooKeeperServer, load_dump, restorable
from tests.support.fixtures.zookeeper_store import LIVE, STOPPED_DUMP

MANIFEST = json.loads((LIVE / "manifest.json").read_text())


@pytest.fixture
def restored(restored_zk: str) -> Iterator[MetadataStore]:
    with open_metadata_store(restored_zk) as store:
        yield store


@pytest.fixture
def writable(scratch_zk: str) -> Iterator[MetadataStore]:
    with open_metadata_store(scratch_zk, read_only=False) as store:
        yield store


def test_every_ledger_equals_the_manifest(restored: MetadataStore) -> None:
    records = {r.ledger_id: r for r in list_ledgers(restored)}
    assert sorted(records) == [lg["ledger_id"] for lg in MANIFEST["ledgers"]]
    dump = {n["path"]: n for n in load_dump(STOPPED_DUMP)}
    for expected in MANIFEST["ledgers"]:
        record = records[expected["ledger_id"]]
        md = record.metadata
        assert md is not None and record.error is None
        assert record.path == expected["zk_znode"]
        assert len(record.raw) == expected["zk_znode_len"]
        assert record.raw == base64.b64decode(dump[record.path]["data_b64"])
        assert record.stat is not None and record.stat.version == dump[record.path]["version"]
        assert md.ledger_id == expected["ledger_id"]
        assert md.format_version == 3
        assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (
            expected["ensemble_size"],
            expected["write_quorum_size"],
            expected["ack_quorum_size"],
        )
        assert md.digest_type is DigestType.parse(expected["digest_type"])
        assert md.password == expected["password_utf8"].encode()
        assert {k: v.decode() for k, v in md.custom_metadata.items()} == expected[
            "custom_metadata_utf8"
        ]
        assert md.ensembles == {0: [MANIFEST["bookie_id"]]}
        state = expected["state"].split()[0]  # "CLOSED by recovery ...", "OPEN (handle ...)"
        assert md.state.name == state
        if state == "CLOSED":
            assert md.last_entry_id == expected["expected_last_entry_id"]
            assert md.length == expected["expected_length"]
            assert f"lastEntryId={md.last_entry_id}" in expected["bk_ledgermetadata_toString"]
        else:
            assert (md.last_entry_id, md.length) == (-1, 0)
        tags = md.pulsar()
        if expected["custom_metadata_utf8"]:
            assert tags.kind == "data"
            assert tags.managed_ledger == expected["custom_metadata_utf8"]["pulsar/managed-ledger"]


def test_raw_tree_reads_back_exactly(restored: MetadataStore) -> None:
    for node in restorable(load_dump(STOPPED_DUMP)):
        got = restored.get(node["path"])
        assert got is not None, node["path"]
        assert got.data == base64.b64decode(node["data_b64"])
        assert got.stat.version == node["version"]
        assert len(restored.children(node["path"])) == node["num_children"]
        assert got.stat.num_children == node["num_children"]
    assert restored.get("/ledgers/no-such-node") is None
    assert restored.exists("/ledgers/no-such-node") is None
    assert restored.children("/ledgers/no-such-node") == []


def test_layout_and_single_ledger(restored: MetadataStore) -> None:
    layout = read_layout(restored)
    assert layout is not None and layout.layout is lm.LedgerLayout.HIERARCHICAL
    assert layout.layout_version == 2 and layout.manager_version == 1
    record = read_ledger(restored, 7)
    assert record is not None and record.path == "/ledgers/00/0000/L0007"
    assert read_ledger(restored, 99) is None


def test_read_only_store_refuses_writes(restored: MetadataStore) -> None:
    with pytest.raises(ReadOnlyStoreError):
        restored.put("/ledgers/x", b"")
    with pytest.raises(ReadOnlyStoreError):
        restored.delete("/ledgers/LAYOUT")
    with pytest.raises(ReadOnlyStoreError):
        restored.transaction()
    with pytest.raises(ReadOnlyStoreError):
        allocate_ledger_id(restored)


def test_compare_and_set(writable: MetadataStore) -> None:
    path, stat = writable.put("/a/b", b"one", -1)  # parents are created, as Pulsar does
    assert (path, stat.version) == ("/a/b", 0)
    with pytest.raises(MetadataConflict, match="already exists"):
        writable.put("/a/b", b"again", -1)
    _, stat = writable.put("/a/b", b"two", 0)
    assert stat.version == 1
    with pytest.raises(MetadataConflict, match="version 0"):
        writable.put("/a/b", b"three", 0)
    _, stat = writable.put("/a/b", b"three")  # unconditional
    assert stat.version == 2 and writable.get("/a/b") == (b"three", stat)
    with pytest.raises(MetadataConflict):
        writable.delete("/a/b", 1)
    with pytest.raises(LedgerctlError, match="children"):
        writable.delete("/a")
    writable.delete("/a/b", 2)
    assert writable.get("/a/b") is None
    with pytest.raises(MetadataConflict, match="does not exist"):
        writable.delete("/a/b")


def test_transaction_is_all_or_nothing(writable: MetadataStore) -> None:
    writable.put("/t", b"v0", -1)
    with pytest.raises(MetadataConflict):
        writable.transaction().create("/t/new", b"").check("/t", 5).commit()
    assert writable.get("/t/new") is None
    stats = writable.transaction().check("/t", 0).set("/t", b"v1", 0).create("/t/new", b"").commit()
    assert stats[1] is not None and stats[1].version == 1
    assert writable.get("/t/new") is not None
    writable.transaction().delete("/t/new", 0).commit()
    assert writable.children("/t") == []


def test_allocate_ledger_ids_like_bookkeeper(writable: MetadataStore) -> None:
    first = allocate_ledger_id(writable)
    second = allocate_ledger_id(writable)
    assert second == first + 1
    assert writable.children("/ledgers/idgen") == []  # the sequential node is removed
    # an id whose ledger exists (e.g. after a restore reset the counter) is passed over
    md = lm.parse((LIVE.parent / "offline/ledger-metadata/open-v3.bin").read_bytes())
    create_ledger(writable, second + 1, md)
    assert allocate_ledger_id(writable) == second + 2
    with pytest.raises(MetadataConflict):
        create_ledger(writable, second + 1, md)
    # after the 31-bit switch: (HOB << 32) | low, starting at HOB 1
    writable.put("/ledgers/idgen-long", b"", -1)
    assert allocate_ledger_id(writable) == 1 << 32
    assert allocate_ledger_id(writable) == (1 << 32) | 1
    assert writable.children("/ledgers/idgen-long") == ["HOB-0000000001"]


def test_sequential_and_ephemeral_nodes(writable: MetadataStore) -> None:
    path, stat = writable.put("/seq/n-", b"", -1, ephemeral=True, sequential=True)
    assert path == "/seq/n-0000000000" and stat.ephemeral and stat.owner != 0
    path, _ = writable.put("/seq/n-", b"", -1, sequential=True)
    assert path == "/seq/n-0000000001"


def _load_tree(store: MetadataStore) -> None:
    for path, data in ml_tree_nodes():
        store.put(path, data, -1)


def check_ml_tree(store: MetadataStore) -> None:
    """What every store must return for the tree of ``tests/support/fixtures/ml_tree.py``."""
    refs = list_managed_ledgers(store)
    assert sorted(r.topic.full_name for r in refs) == sorted(
        TopicName.parse(s.topic).full_name for s in SPECS
    )
    for spec in SPECS:
        record = read_managed_ledger(store, spec.topic)
        assert record is not None and record.info is not None and record.error is None
        assert record.info.encoding == spec.encoding
        assert record.info.message == ml_info(spec)
        assert record.ledger_ids == list(spec.ledgers)
        assert record.properties == spec.properties
        assert {c.name: c.info.message for c in record.cursors if c.info} == {
            sub: cursor_info(v) for sub, v in spec.cursors.items()
        }
        for cursor in record.cursors:
            value = spec.cursors[cursor.name]
            assert cursor.state_in == ("znode" if value[0] == -1 else "ledger")
            assert cursor.cursors_ledger_id == value[0]
            assert cursor.mark_delete == (value[1], value[2])
            assert cursor.info is not None and cursor.info.encoding == value[3]
    # the same topic by its managed-ledger name and znode path
    name = TopicName.parse(SPECS[0].topic)
    by_name = read_managed_ledger(store, name.persistence_name, with_cursors=False)
    by_path = read_managed_ledger(store, name.ml_path, with_cursors=False)
    assert by_name is not None and by_path is not None
    assert by_name.info == by_path.info and by_name.cursors == []
    assert read_managed_ledger(store, "persistent://public/default/absent") is None


def test_managed_ledgers_and_cursors(writable: MetadataStore) -> None:
    _load_tree(writable)
    check_ml_tree(writable)


def test_unreachable_zookeeper_fails_fast_in_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: connection refused
    started = time.monotonic()
    with pytest.raises(MetadataStoreError) as info:
        open_metadata_store(f"zk:127.0.0.1:{port}", timeout=1.5)
    assert time.monotonic() - started < 5
    assert "\n" not in str(info.value) and f"127.0.0.1:{port}" in str(info.value)


def test_silent_server_fails_fast() -> None:
    """A peer that accepts TCP and never answers the ZooKeeper handshake."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        accepted: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    accepted.append(server.accept()[0])
                except OSError:
                    pass

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        started = time.monotonic()
        try:
            with pytest.raises(MetadataStoreError, match=r"within 1\.5 s"):
                open_metadata_store(f"zk:127.0.0.1:{port}", timeout=1.5)
            assert time.monotonic() - started < 6
        finally:
            stop.set()
            thread.join()
            for conn in accepted:
                conn.close()


def test_a_stalled_server_times_out_every_call(private_zk_server: ZooKeeperServer) -> None:
    """A server that stops answering mid-session (here: SIGSTOP) gives an error, not a hang."""
    zk = private_zk_server
    store = open_metadata_store(f"zk:{zk.connect_string}", timeout=1.5)
    try:
        assert store.children("/") == ["zookeeper"]
        assert zk.process is not None
        os.kill(zk.process.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(MetadataStoreError) as info:
                store.get("/zookeeper")
            assert time.monotonic() - started < 5
            assert "\n" not in str(info.value)
        finally:
            os.kill(zk.process.pid, signal.SIGCONT)
    finally:
        store.close()


def test_digest_credentials_come_from_the_environment(
    scratch_zk: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kazoo.client import KazooClient
    from kazoo.security import make_digest_acl

    hosts_and_chroot = scratch_zk[len("zk:") :]
    client = KazooClient(hosts=hosts_and_chroot, auth_data=[("digest", "ops:hunter2")])
    client.start(timeout=30)
    try:
        client.create("/secret", b"s", acl=[make_digest_acl("ops", "hunter2", all=True)])
    finally:
        client.stop()
        client.close()

    monkeypatch.delenv(ENV_ZK_AUTH, raising=False)
    with open_metadata_store(scratch_zk) as store:
        with pytest.raises(MetadataStoreError, match="not authorized") as info:
            store.get("/secret")
        assert "hunter2" not in str(info.value)
    monkeypatch.setenv(ENV_ZK_AUTH, "ops:hunter2")
    with open_metadata_store(scratch_zk) as store:
        node = store.get("/secret")
        assert node is not None and node.data == b"s"
        assert "hunter2" not in repr(store) and "hunter2" not in store.url


def test_missing_chroot_is_an_error(zk_connect: str) -> None:
    with pytest.raises(MetadataStoreError, match="chroot /no-such-chroot does not exist"):
        open_metadata_store(f"zk:{zk_connect}/no-such-chroot")
