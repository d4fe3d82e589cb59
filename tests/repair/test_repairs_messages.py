"""What a plan makes unreachable counts messages, from the entries' num_messages, where
the entries can be read; where they cannot, the count says it is a lower bound."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, build_world


def _url(world) -> list[str]:
    return ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]


def _messages_in(capsys, world, ledger: int) -> int:
    r = run(capsys, "inspect", str(ledger), "-o", "json", *_url(world))
    assert r.code == 0, r.err
    entries = r.json()["entries"]
    assert entries and all(e["ok"] for e in entries)
    return sum(len(e["messages"]) for e in entries)


def test_orphan_delete_counts_messages(capsys, tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "orphan-ledger")
    r = run(capsys, "orphans", "--delete", "--min-age", "0", "-o", "json", *_url(world))
    assert r.code == 0, r.err
    u = r.json()["unreachable"]
    assert u["ledgers"] == [70]
    assert u["messages"] == _messages_in(capsys, world, 70) and not u["messages_unknown"]


def test_missing_storage_messages_are_unknown(capsys, tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "ledger-missing-storage")
    r = run(capsys, "repair", "missing-ledgers", ORDERS, "-o", "json", *_url(world))
    assert r.code == 0, r.err
    u = r.json()["unreachable"]
    assert u["ledgers"] == [11] and u["entries"] == 4
    assert u["messages"] is None and u["messages_unknown"] is True
