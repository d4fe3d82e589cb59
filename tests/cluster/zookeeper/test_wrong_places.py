"""A store that is the wrong place answers with an error, never "nothing here, ok":
orphans and bookie list on an empty chroot, verify --all and orphans on a chroot holding
only BookKeeper's metadata, verify --all on a cluster without a topic. Real ZooKeeper."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_helpers import run
from tests.support.demo_env import isolate


@pytest.fixture(autouse=True)
def _no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)


def _tree(url: str, nodes: dict[str, bytes]) -> None:
    from kazoo.client import KazooClient

    connect, _, chroot = url[len("zk:") :].partition("/")
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30)
    try:
        for path, data in nodes.items():
            client.ensure_path(f"/{chroot}{path}")
            if data:
                client.set(f"/{chroot}{path}", data)
    finally:
        client.stop()
        client.close()


LAYOUT = b"2\norg.apache.pulsar.metadata.bookkeeper.PulsarLedgerManagerFactory:1"


@pytest.mark.parametrize(
    "args", [["orphans"], ["orphans", "--delete"], ["bookie", "list"], ["verify", "--all"]]
)
def test_an_empty_chroot_is_an_error(
    capsys: pytest.CaptureFixture[str], scratch_zk: str, args: list[str]
) -> None:
    result = run(capsys, *args, "--metadata-url", scratch_zk, "-o", "json")
    # no Pulsar data: a finding (1); no BookKeeper metadata where it is looked for: the
    # store BookKeeper keeps is not there (3)
    assert result.code == (3 if args == ["bookie", "list"] else 1), result.err
    assert result.out == ""
    (line,) = result.err.strip().splitlines()
    assert line.startswith(("ledgerctl: error: no ", "ledgerctl: error: BookKeeper's metadata"))
    assert scratch_zk in line and "chroot" in line


@pytest.mark.parametrize(
    "args", [["orphans"], ["orphans", "--delete"], ["verify", "--all"], ["topic", "list"]]
)
def test_bookkeeper_metadata_alone_holds_no_topic(
    capsys: pytest.CaptureFixture[str], scratch_zk: str, args: list[str]
) -> None:
    """A chroot with BookKeeper's /ledgers and no Pulsar data: questions about topics
    are asked in the wrong place (an orphan listing would call every ledger orphaned)."""
    _tree(scratch_zk, {"/ledgers/available": b"", "/ledgers/LAYOUT": LAYOUT})
    result = run(capsys, *args, "--metadata-url", scratch_zk, "-o", "json")
    assert result.code == 1, result.err
    assert result.out == ""
    (line,) = result.err.strip().splitlines()
    assert f"no Pulsar topic metadata in {scratch_zk}" in line
    assert "/managed-ledgers" in line


def test_bookie_list_of_bookkeeper_metadata_is_an_answer(
    capsys: pytest.CaptureFixture[str], scratch_zk: str
) -> None:
    """The right place with no bookie registered: an empty list is the answer."""
    _tree(scratch_zk, {"/ledgers/available": b"", "/ledgers/LAYOUT": LAYOUT})
    result = run(capsys, "bookie", "list", "--metadata-url", scratch_zk, "-o", "json")
    assert result.code == 0, result.err
    assert result.json() == []


def test_verify_all_that_checked_nothing_is_not_ok(
    capsys: pytest.CaptureFixture[str], scratch_zk: str
) -> None:
    _tree(scratch_zk, {"/managed-ledgers": b"", "/ledgers/LAYOUT": LAYOUT})
    for output in ("json", "table"):
        result = run(capsys, "verify", "--all", "--metadata-url", scratch_zk, "-o", output)
        assert result.code == 1, result.err
        assert result.out == ""
        (line,) = result.err.strip().splitlines()
        assert line == (
            f"ledgerctl: error: nothing to verify: {scratch_zk} holds no topic (no managed "
            "ledger under /managed-ledgers)"
        )
