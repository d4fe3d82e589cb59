"""A metadata store and BookKeeper's metadata of different clusters are refused
(pulsarctl_py.stores.metadata.cluster), on real stores: the sandbox's Pulsar cluster
(BookKeeper under /bookkeeper/ledgers of its ZooKeeper), the demo data (Pulsar's RocksDB
store, BookKeeper under /ledgers in it), and a bare BookKeeper's tree in the test
ZooKeeper. The right pairs are accepted: the sandbox's, the demo's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.stores.metadata import open_metadata_store
from pulsarctl_py.stores.metadata.base import BookKeeperMetadata
from pulsarctl_py.stores.metadata.cluster import compare
from tests.support.cli_helpers import run
from tests.support.demo_env import demo_root, isolate  # noqa: F401


@pytest.fixture(scope="module")
def topic(sandbox: Any) -> str:
    """A topic of this module in the sandbox: a closed ledger and an open one."""
    name = f"persistent://public/default/cluster-pair-{uuid.uuid4().hex[:8]}"
    client = sandbox.client()
    try:
        producer = client.create_producer(name)
        for i in range(3):
            producer.send(f"m{i}".encode())
        producer.close()
        sandbox.unload(name)
        producer = client.create_producer(name)
        producer.send(b"after the unload")
        producer.close()
    finally:
        client.close()
    return name


def _cli(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    env: dict[str, str],
    *args: str,
) -> Any:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return run(capsys, *args)


def _refused(result: Any, *fragments: str) -> str:
    assert result.code == 2, (result.code, result.err[-800:])
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerctl: error: "), result.err
    assert "are of different clusters" in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert result.out == ""
    return lines[0]


# -- the right pairs -----------------------------------------------------------------------


def test_the_sandboxs_two_stores_agree(sandbox: Any, topic: str) -> None:
    store = open_metadata_store(
        f"{sandbox.metadata_url} bookkeeper={sandbox.bookkeeper_metadata_url}"
    )
    try:
        result = compare(store, store.bookkeeper())
    finally:
        store.close()
    assert result.agreed == 1 and not result.refused, result


def test_the_demos_store_agrees_with_its_ledgers_root(demo_root: Path) -> None:  # noqa: F811
    store = open_metadata_store(f"rocksdb://{demo_root / 'metadata'}")
    try:
        result = compare(store, BookKeeperMetadata(store, "/ledgers"))
    finally:
        store.close()
    assert result.agreed == 1 and result.disagreements == [], result


def test_the_sandbox_with_both_urls_reads(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    sandbox: Any,
    topic: str,
) -> None:
    env = {"LEDGERCTL_BOOKKEEPER_METADATA_URL": sandbox.bookkeeper_metadata_url}
    r = _cli(
        capsys, monkeypatch, tmp_path, env,
        "inspect", "--topic", topic, "--metadata-url", sandbox.metadata_url, "-o", "json",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert len(r.json()["entries"]) == 4


# -- the mixed pairs -------------------------------------------------------------------------


def test_the_demos_metadata_with_the_sandboxs_bookkeeper_is_refused(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    sandbox: Any,
    topic: str,
    demo_root: Path,  # noqa: F811
) -> None:
    """The issue's case: --metadata-url of one cluster, the BookKeeper variable of another
    left in the environment; the ledger listing would have been the other cluster's."""
    env = {"LEDGERCTL_BOOKKEEPER_METADATA_URL": sandbox.bookkeeper_metadata_url}
    url = f"rocksdb://{demo_root / 'metadata'}"
    r = _cli(capsys, monkeypatch, tmp_path, env, "ledger", "list", "--metadata-url", url)
    _refused(
        r,
        f"the metadata store {url} (from --metadata-url)",
        f"{sandbox.bookkeeper_metadata_url} (from LEDGERCTL_BOOKKEEPER_METADATA_URL)",
        "which public/default/persistent/",
    )


def test_the_sandboxs_metadata_with_the_demos_bookkeeper_is_refused(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    sandbox: Any,
    topic: str,
    demo_root: Path,  # noqa: F811
) -> None:
    env = {"LEDGERCTL_METADATA_URL": sandbox.metadata_url}
    r = _cli(
        capsys, monkeypatch, tmp_path, env,
        "inspect", "--topic", topic,
        "--bookkeeper-metadata-url", f"rocksdb://{demo_root / 'metadata'}",
    )  # fmt: skip
    _refused(r, "(from LEDGERCTL_METADATA_URL)", "(from --bookkeeper-metadata-url)")


def test_the_sandboxs_metadata_with_another_zookeepers_bookkeeper_is_refused(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    sandbox: Any,
    topic: str,
    restored_zk: str,
) -> None:
    """A bare BookKeeper (ledgers written by a BookKeeper client, no Pulsar tags) in
    another ZooKeeper."""
    hosts = restored_zk.removeprefix("zk:").split("/", 1)[0]
    other = f"zk+hierarchical://{hosts}/restored-bookie-stopped/ledgers"
    env = {"LEDGERCTL_BOOKKEEPER_METADATA_URL": other}
    r = _cli(
        capsys, monkeypatch, tmp_path, env,
        "topic", "info", topic, "--metadata-url", sandbox.metadata_url, "-o", "json",
    )  # fmt: skip
    _refused(r, other)


def test_a_store_without_topics_with_a_pulsar_bookkeeper_is_refused(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    sandbox: Any,
    topic: str,
    scratch_zk: str,
) -> None:
    """Nothing to compare from Pulsar's side: BookKeeper's newest ledgers name topics this
    store does not hold (``orphans`` would have called all of them orphans)."""
    store = open_metadata_store(scratch_zk, read_only=False)
    try:
        store.put("/managed-ledgers", b"", -1)
    finally:
        store.close()
    env = {"LEDGERCTL_BOOKKEEPER_METADATA_URL": sandbox.bookkeeper_metadata_url}
    r = _cli(capsys, monkeypatch, tmp_path, env, "orphans", "--metadata-url", scratch_zk)
    _refused(r, "a topic this store lacks")
