"""`verify` with the metadata in a real ZooKeeper: the same findings, and no znode touched."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pulsarctl_py.stores.metadata import MetadataStore, open_metadata_store
from pulsarctl_py.verify import verify_topics
from tests.support.verify_world import World, build_world


def _zk_world(root: Path, url: str, variant: str | None) -> World:
    store = open_metadata_store(url, read_only=False)
    try:
        return build_world(root, variant, store=store, metadata_url=url)
    finally:
        store.close()


def _tree_digest(url: str) -> dict[str, str]:
    """Every znode's data hash, version and modification time."""
    store: MetadataStore = open_metadata_store(url)
    try:
        out = {}
        for path, node in store.walk("/"):
            if node is not None:
                out[path] = (
                    f"{hashlib.sha256(node.data).hexdigest()} v{node.stat.version} "
                    f"m{node.stat.modified_ms}"
                )
        return out
    finally:
        store.close()


def test_verify_through_zookeeper(scratch_zk: str, tmp_path: Path) -> None:
    scratch = open_metadata_store(scratch_zk, read_only=False)
    try:
        for chroot in ("/healthy", "/broken"):
            scratch.put(chroot, b"", -1)
    finally:
        scratch.close()
    healthy = _zk_world(tmp_path / "healthy", scratch_zk + "/healthy", None)
    before = _tree_digest(healthy.metadata_url)
    files = healthy.digest()
    with healthy.source() as source:
        assert list(verify_topics(source, None)) == []
    assert _tree_digest(healthy.metadata_url) == before
    assert healthy.digest() == files

    broken = _zk_world(tmp_path / "broken", scratch_zk + "/broken", "cursor-beyond-lac")
    with broken.source() as source:
        findings = list(verify_topics(source, None))
    assert [(f.check, f.ledger_id, f.entry_id) for f in findings] == [("cursor-beyond-lac", 11, 9)]
