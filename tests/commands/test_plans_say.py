"""Plans say what they do: a bookie-index deletion names the keys it removes, undo does
not repeat the apply's warnings, --from-verify reads verify's JSON lines too, a write on
a terminal is asked for (--yes for scripts) and says which store it went to. On the
verify world (its orphan ledger 70: 3 entries in a stopped bookie's DbLedgerStorage)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_helpers import ledgerctl_script, run
from tests.support.demo_env import isolate
from tests.support.verify_world import World, build_world

ORPHAN = 70


@pytest.fixture(autouse=True)
def _no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path / "w", "orphan-ledger")


def _flags(world: World) -> list[str]:
    return ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]


def test_a_bookie_index_deletion_names_its_keys(
    capsys: pytest.CaptureFixture[str], world: World
) -> None:
    r = run(capsys, "orphans", "--delete", "--min-age", "0", *_flags(world), "-o", "json")
    assert r.code == 0, r.err
    removes = {bc["kind"]: bc["removes"] for bc in r.json()["bookie"]}
    current = world.bookie_dir.resolve() / "current"
    first, last = f"{ORPHAN:016x}{0:016x}", f"{ORPHAN:016x}{2:016x}"
    assert removes["locations"] == {
        "database": str(current / "locations"),
        "count": 3,
        "entries": [[0, 2]],
        "first_key": first,
        "last_key": last,
        "text": f"3 keys (ledger {ORPHAN}, entries 0..2; {first} .. {last}) from "
        f"{current / 'locations'}",
    }
    assert removes["ledger-data"]["keys"] == [f"{ORPHAN:016x}"]
    r = run(capsys, "orphans", "--delete", "--min-age", "0", *_flags(world), "-o", "table")
    assert f"delete 3 keys (ledger {ORPHAN}, entries 0..2; {first} .. {last}) from" in r.out
    assert f"delete key {ORPHAN:016x} (ledger {ORPHAN}) from {current / 'ledgers'}" in r.out


def test_undo_does_not_repeat_the_apply_warnings(
    capsys: pytest.CaptureFixture[str], world: World, tmp_path: Path
) -> None:
    plan = tmp_path / "orphans.json"
    r = run(capsys, "orphans", "--delete", "--min-age", "0", *_flags(world), "--plan", plan)
    assert r.code == 0, r.err
    warnings = json.loads(plan.read_text())["warnings"]
    assert any("indexes drop these ledgers" in w for w in warnings)
    r = run(capsys, "apply", plan, "-o", "table")
    assert r.code == 0, r.err
    assert "indexes drop these ledgers" in r.err
    store = f"store: {world.metadata_url} (ledger metadata under /ledgers); bookie directories "
    assert store + str(world.bookie_dir.resolve() / "current") in r.err
    r = run(capsys, "undo", plan)
    assert r.code == 0, r.err
    assert "warning" not in r.err
    assert store in r.err and "restored: " in r.err


def test_undo_repeats_the_unload_warning_for_the_topics_it_changes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world = build_world(tmp_path / "w", "cursor-beyond-lac")
    plan = tmp_path / "clamp.json"
    r = run(capsys, "repair", "clamp-cursors", "orders", *_flags(world), "--plan", plan)
    assert r.code == 0, r.err
    assert run(capsys, "apply", plan).code == 0
    r = run(capsys, "undo", plan)
    assert r.code == 0, r.err
    (warning,) = [line for line in r.err.splitlines() if line.startswith("warning")]
    assert warning == (
        "warning: the topics this plan changed must not be loaded by a broker for the undo "
        "either (--unload unloads them): persistent://public/default/orders"
    )


def test_from_verify_reads_json_lines_as_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world = build_world(tmp_path / "w", "cursor-beyond-lac")
    plans = {}
    for fmt in ("json", "jsonl"):
        r = run(capsys, "verify", "--all", *_flags(world), "-o", fmt)
        assert r.code == 1, r.err
        report = tmp_path / f"verify.{fmt}"
        report.write_text(r.out)
        r = run(capsys, "repair", "--from-verify", report, *_flags(world), "-o", "json")
        assert r.code == 0, r.err
        plans[fmt] = r.json()["changes"]
    assert plans["json"] and plans["json"] == plans["jsonl"]


def _on_terminal(args: list[str], answer: bytes | None, cwd: Path) -> tuple[int, str]:
    """Run ledgerctl with stdin and stderr on a terminal (stdout piped), typing
    ``answer`` at the prompt; the exit code and what the terminal showed."""
    import pty
    import select
    import time

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [ledgerctl_script(), *args],
        cwd=cwd,
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=follower,
        env={**os.environ, "COLUMNS": "200", "TERM": "xterm", "NO_COLOR": "1"},
    )
    os.close(follower)
    screen = b""
    deadline = time.monotonic() + 60
    answered = answer is None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
        if not answered and b"[y/N]" in screen:
            os.write(leader, answer or b"")
            answered = True
        if proc.poll() is not None and not ready:
            break
    proc.stdout.read() if proc.stdout is not None else None
    code = proc.wait(timeout=60)
    os.close(leader)
    return code, screen.decode(errors="replace")


def test_apply_asks_on_a_terminal(capsys, world: World, tmp_path: Path) -> None:
    plan = tmp_path / "orphans.json"
    r = run(capsys, "orphans", "--delete", "--min-age", "0", *_flags(world), "--plan", plan)
    assert r.code == 0, r.err
    code, screen = _on_terminal(["apply", str(plan)], b"n\n", tmp_path)
    assert code == 1, screen
    assert f"Apply 0 keys and 2 bookie index entries in {world.metadata_url}" not in screen
    assert "Apply 1 key and 2 bookie index entries in" in screen and "[y/N]" in screen
    assert "ledgerctl: error: apply not confirmed: nothing written (later: ledgerctl apply" in (
        screen.replace("\r\n", "\n").replace("\n", " ")
    )
    assert not Path(str(plan) + ".backup.json").exists()
    code, screen = _on_terminal(["apply", str(plan)], b"y\n", tmp_path)
    assert code == 0, screen
    assert "applied: 3 key(s) written" in screen  # the key and the two index entries
    code, screen = _on_terminal(["undo", str(plan), "--yes"], None, tmp_path)
    assert code == 0, screen
    assert "[y/N]" not in screen and "restored: " in screen
