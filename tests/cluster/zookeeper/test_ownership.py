"""Bundle ownership from the ownership znodes, on a real ZooKeeper (the sandbox's broker
checks the same against its own lookups in tests/cluster/sandbox/test_writes.py)."""

from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.ownership import (
    Bundle,
    TopicOwned,
    owner_of,
    topic_bundle,
    topic_hash,
)
from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic

OWNER = {"nativeUrl": "pulsar://b1:6650", "httpUrl": "http://b1:8080", "disabled": False}


@pytest.fixture
def zk_store(scratch_zk: str):
    store = open_metadata_store(scratch_zk, read_only=False)
    try:
        yield store
    finally:
        store.close()


def _bounds(n: int) -> list[str]:
    step = 0x100000000 // n
    return [f"0x{i * step:08x}" for i in range(n)] + ["0xffffffff"]


def test_the_topic_hash_is_the_crc32_of_its_full_name() -> None:
    # Guava's Hashing.crc32().hashString(name, UTF_8).padToLong(): the unsigned CRC32
    assert topic_hash("persistent://public/default/explore1") == 0x94EB3926
    assert topic_hash("persistent://t/n/é") == zlib.crc32("persistent://t/n/é".encode())


def test_local_policies_boundaries_win_over_the_policies(zk_store) -> None:
    topic = resolve_topic("persistent://t/ns/x")
    h = topic_hash(topic.full_name)
    assert topic_bundle(zk_store, topic) == Bundle("t/ns", 0, 0xFFFFFFFF)
    zk_store.put(
        "/admin/policies/t/ns", json.dumps({"bundles": {"boundaries": _bounds(2)}}).encode()
    )
    two = topic_bundle(zk_store, topic)
    assert two.lower <= h <= two.upper and two.lower in (0, 0x80000000)
    zk_store.put(
        "/admin/local-policies/t/ns", json.dumps({"bundles": {"boundaries": _bounds(16)}}).encode()
    )
    sixteen = topic_bundle(zk_store, topic)
    assert sixteen.lower <= h < sixteen.upper and sixteen.upper - sixteen.lower <= 0x10000000
    assert sixteen.range == f"0x{sixteen.lower:08x}_0x{sixteen.upper:08x}"


@given(st.integers(1, 64), st.text("abcxyz019-_.é", min_size=1, max_size=30))
def test_every_topic_falls_in_exactly_one_bundle(n: int, local: str) -> None:
    class Store:
        def __init__(self) -> None:
            self.data = json.dumps({"bundles": {"boundaries": _bounds(n)}}).encode()

        def get(self, path: str):
            from pulsarctl_py.stores.metadata import Node, Stat

            return Node(self.data, Stat(0, 0, 0)) if "local-policies" in path else None

    topic = resolve_topic(f"persistent://t/ns/{local}")
    bundle = topic_bundle(Store(), topic)  # type: ignore[arg-type]
    h = topic_hash(topic.full_name)
    last = bundle.upper == 0xFFFFFFFF
    assert bundle.lower <= h and (h < bundle.upper or (last and h == bundle.upper))


def test_an_ephemeral_ownership_node_is_a_live_owner(zk_store) -> None:
    topic = resolve_topic("persistent://t/ns/x")
    assert owner_of(zk_store, topic) is None
    bundle = topic_bundle(zk_store, topic)
    zk_store.put(bundle.path, json.dumps(OWNER).encode(), -1, ephemeral=True)
    owner = owner_of(zk_store, topic)
    assert owner is not None and owner.broker == "http://b1:8080" and owner.bundle == bundle
    # another bundle of the namespace owned: not this topic's owner
    zk_store.delete(bundle.path)
    zk_store.put(
        "/admin/local-policies/t/ns", json.dumps({"bundles": {"boundaries": _bounds(4)}}).encode()
    )
    mine = topic_bundle(zk_store, topic)
    lows = [0, 0x40000000, 0x80000000, 0xC0000000]
    highs = [*lows[1:], 0xFFFFFFFF]
    other = next(
        Bundle("t/ns", lo, hi) for lo, hi in zip(lows, highs, strict=True) if lo != mine.lower
    )
    zk_store.put(other.path, json.dumps(OWNER).encode(), -1, ephemeral=True)
    assert owner_of(zk_store, topic) is None


def test_a_persistent_leftover_is_no_owner(zk_store) -> None:
    topic = resolve_topic("persistent://t/ns/x")
    zk_store.put(topic_bundle(zk_store, topic).path, json.dumps(OWNER).encode(), -1)
    assert owner_of(zk_store, topic) is None


def test_the_extensible_load_manager_cannot_be_told(zk_store) -> None:
    data = {
        "webServiceUrl": "http://b1:8080",
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.extensions."
        "ExtensibleLoadManagerImpl",
    }
    zk_store.put("/loadbalance/brokers/b1:8080", json.dumps(data).encode(), -1, ephemeral=True)
    with pytest.raises(TopicOwned, match="extensible load manager"):
        owner_of(zk_store, resolve_topic("persistent://t/ns/x"))


def test_a_rocksdb_store_has_no_live_owner(tmp_path) -> None:
    from pulsarctl_py.stores.metadata import create_metadata_store

    store = create_metadata_store(tmp_path / "md")
    try:
        topic = resolve_topic("persistent://t/ns/x")
        store.put(topic_bundle(store, topic).path, json.dumps(OWNER).encode(), -1, ephemeral=True)
        assert owner_of(store, topic) is None
    finally:
        store.close()
