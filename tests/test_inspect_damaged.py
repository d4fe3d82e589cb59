"""`inspect` over a ledger with an unreadable entry in the middle: the entry is reported
as a problem, the entries after it are still read, and the exit status is 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulsarctl_py.demo import create_demo
from pulsarctl_py.stores.bookie import open_bookie
from tests.support.cli_helpers import run


@pytest.fixture
def damaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, int]:
    """A demo whose first ledger with 3+ entries has entry 1's id overwritten in its log."""
    create_demo(tmp_path / "demo")
    monkeypatch.chdir(tmp_path / "demo")
    monkeypatch.delenv("LEDGERCTL_METADATA_URL", raising=False)
    monkeypatch.delenv("LEDGERCTL_BOOKIE_DIRS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))
    with open_bookie(tmp_path / "demo" / "bookkeeper") as store:
        ledger_id, locations = next(
            (lid, locs)
            for lid in store.ledgers()
            if len(locs := list(store.iter_locations(lid))) >= 3
        )
    entry_id, location = locations[1]
    raw = bytearray(location.path.read_bytes())
    raw[location.offset + 15] ^= 0xFF  # the low byte of the entry id in the record
    location.path.write_bytes(bytes(raw))
    return ledger_id, entry_id, len(locations)


def test_inspect_goes_on_after_an_unreadable_entry(
    capsys: pytest.CaptureFixture[str], damaged: tuple[int, int, int]
) -> None:
    ledger_id, bad, count = damaged
    result = run(capsys, "inspect", str(ledger_id), "-o", "json")
    assert result.code == 1
    doc = result.json()
    entries = doc["entries"]
    assert [e["entry_id"] for e in entries] == list(range(count))
    broken = entries[bad]
    assert broken["ok"] is False and broken["layers"] == [] and broken["messages"] == []
    (problem,) = broken["problems"]
    assert problem["severity"] == "error"
    assert f"expected ledger {ledger_id} entry {bad}" in problem["message"]
    assert all(e["ok"] for e in entries if e["entry_id"] != bad)
    assert doc["summary"]["errors"] == 1


def test_filters_keep_the_unreadable_entry(
    capsys: pytest.CaptureFixture[str], damaged: tuple[int, int, int]
) -> None:
    ledger_id, bad, _count = damaged
    result = run(capsys, "inspect", str(ledger_id), "--key", "no-such-key", "-o", "jsonl")
    assert result.code == 1
    lines = [json.loads(line) for line in result.out.splitlines()]
    assert [(d["entry_id"], d["ok"]) for d in lines] == [(bad, False)]
