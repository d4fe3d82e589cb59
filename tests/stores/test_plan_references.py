"""Apply and undo say what they did, on the demo's RocksDB metadata store."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarctl_py.decoders import managed_ledger as mld
from tests.cli_helpers import run
from tests.demo_env import demo, demo_root
from tests.stores.test_repair import snapshot

#: the shared demo fixtures this module's tests use
FIXTURES = (demo, demo_root)
PLAIN = "persistent://public/default/plain"


@pytest.fixture(scope="module")
def demo_url(demo_root: Path) -> str:
    return f"rocksdb://{demo_root / 'metadata'}"


# -- undo says what it did ----------------------------------------------------------------------


def test_undo_after_an_apply_that_changed_nothing_restores_nothing(
    capsys: pytest.CaptureFixture[str], demo: Path, demo_url: str
) -> None:
    """Two plans of the same reset: the second one's apply finds it done and writes
    nothing, so its undo restores nothing (it used to take back the first one's write
    and say 'restored: 1 key(s) written')."""
    before = snapshot(demo_url)
    first, second = demo / "reset-1.json", demo / "reset-2.json"
    for plan in (first, second):
        r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--earliest", "--plan", plan)
        assert r.code == 0, r.err
    assert run(capsys, "apply", first).code == 0
    applied = snapshot(demo_url)
    assert applied != before
    r = run(capsys, "apply", second, "-o", "json")
    assert r.code == 0 and "already applied" in r.err, r.err
    assert r.json()["written"] == [] and r.json()["note"] == "already applied"
    r = run(capsys, "undo", second, "-o", "json")
    assert r.code == 0, r.err
    assert "nothing restored: its apply changed nothing" in r.err, r.err
    assert "key(s) written" not in r.err
    outcome = r.json()
    key = mld.TopicName.parse(PLAIN).cursor_path("sub-1")
    assert outcome["written"] == [] and [u["key"] for u in outcome["unchanged"]] == [key]
    assert snapshot(demo_url) == applied
    r = run(capsys, "undo", first)
    assert r.code == 0 and "restored: 1 key(s) written, 0 unchanged" in r.err, r.err
    assert snapshot(demo_url) == before
    r = run(capsys, "undo", first, "-o", "json")
    assert r.code == 0 and "nothing restored: already undone" in r.err, r.err
    assert r.json()["written"] == []
    # the record of an apply that changed nothing is history: the plan file may be reused
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--earliest", "--plan", second)
    assert r.code == 0, r.err
    assert not Path(f"{second}.backup.json").exists()
