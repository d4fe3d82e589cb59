"""A ZooKeeper chroot without Pulsar data (a forgotten or wrong chroot) is an error with
the paths looked at, never "no topics, ok" (issue 7, point 1). Real ZooKeeper."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_helpers import run
from tests.support.demo_env import isolate


@pytest.fixture(autouse=True)
def _no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def cluster_under_pulsar(scratch_zk: str) -> str:
    """A chroot whose Pulsar data lives one level down, under /pulsar (its own chroot)."""
    from kazoo.client import KazooClient

    connect, _, chroot = scratch_zk[len("zk:") :].partition("/")
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30)
    try:
        client.ensure_path(f"/{chroot}/pulsar/managed-ledgers")
        client.ensure_path(f"/{chroot}/pulsar/ledgers")
    finally:
        client.stop()
        client.close()
    return scratch_zk


@pytest.mark.parametrize("args", [["verify", "--all"], ["topic", "list"], ["ledger", "list"]])
def test_the_chroot_above_the_data_is_an_error(
    capsys: pytest.CaptureFixture[str], cluster_under_pulsar: str, args: list[str]
) -> None:
    result = run(capsys, *args, "--metadata-url", cluster_under_pulsar, "-o", "json")
    assert result.code == 1, result.err
    assert result.out == ""
    (line,) = result.err.strip().splitlines()
    assert f"no Pulsar data in {cluster_under_pulsar}" in line
    assert "/managed-ledgers" in line and "its root holds /pulsar" in line
    assert "chroot" in line


def test_the_right_chroot_lists_nothing_without_error(
    capsys: pytest.CaptureFixture[str], cluster_under_pulsar: str
) -> None:
    """The same cluster with the chroot given: Pulsar data, no topics yet, exit 0."""
    url = cluster_under_pulsar + "/pulsar"
    result = run(capsys, "topic", "list", "--metadata-url", url, "-o", "json")
    assert result.code == 0, result.err
    assert result.json() == []
