"""`ledger meta --dump FILE` and `repair ledger-meta LEDGER --restore FILE` (bookkeeper
shell ledgermetadata -dumptofile / -restorefromfile, as a plan): on the verify world, a
ledger whose metadata znode is deleted gets it back byte for byte."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from pulsarctl_py.decoders import ledger_metadata as lm
from tests.support.cli_helpers import run
from tests.support.demo_env import isolate
from tests.support.verify_world import build_world

LEDGER = 11  # a data ledger of orders


@pytest.fixture(autouse=True)
def _no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)


def test_dump_delete_restore(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pulsarctl_py.stores.metadata import open_metadata_store

    world = build_world(tmp_path / "w")
    flags = ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]
    dump = tmp_path / "l11.bin"
    r = run(capsys, "ledger", "meta", LEDGER, "--dump", dump, *flags, "-o", "json")
    assert r.code == 0, r.err
    before = r.json()
    assert f"written to {dump}" in r.err
    assert stat.S_IMODE(dump.stat().st_mode) == 0o600  # it holds the password
    path = lm.ledger_path(LEDGER)
    store = open_metadata_store(world.metadata_url, read_only=False)
    try:
        node = store.get(path)
        assert node is not None and dump.read_bytes() == node.data
        store.delete(path)
    finally:
        store.close()
    r = run(capsys, "verify", "orders", *flags, "-o", "json")
    assert "ledger-missing-metadata" in [f["check"] for f in r.json()["findings"]]

    plan = tmp_path / "restore.json"
    r = run(
        capsys, "repair", "ledger-meta", LEDGER, "--restore", dump, "--plan", plan, *flags,
        "-o", "json",
    )  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(plan.read_text())
    (change,) = doc["changes"]
    assert change["key"] == path and change["action"] == "create"
    assert doc["repairs"][0]["action"] == "create"
    r = run(capsys, "apply", plan, "--yes")
    assert r.code == 0, r.err
    r = run(capsys, "ledger", "meta", LEDGER, *flags, "-o", "json")
    assert r.code == 0, r.err
    assert r.json()["metadata"] == before["metadata"]
    r = run(capsys, "verify", "orders", *flags, "-o", "json")
    assert r.code == 0 and r.json()["findings"] == []
    # the same again: nothing to change
    r = run(capsys, "repair", "ledger-meta", LEDGER, "--restore", dump, *flags, "-o", "json")
    assert r.code == 0, r.err
    assert r.json()["changes"] == [] and r.json()["repairs"][0]["action"] == "unchanged"


def test_a_file_that_is_not_metadata_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world = build_world(tmp_path / "w")
    flags = ["--metadata-url", world.metadata_url]
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    r = run(capsys, "repair", "ledger-meta", LEDGER, "--restore", other, *flags)
    assert r.code == 2
    assert r.err.startswith(f"ledgerctl: error: {other} is not BookKeeper ledger metadata")
    assert len(r.err.splitlines()) == 1
    # --dump does not overwrite a file that is not a dump
    r = run(capsys, "ledger", "meta", LEDGER, "--dump", other, *flags)
    assert r.code == 2, r.err
    assert other.read_text() == "my notes\n"
    r = run(capsys, "ledger", "meta", 999, "--dump", tmp_path / "none.bin", *flags)
    assert r.code == 1 and "ledger 999 has no metadata" in r.err
    assert not (tmp_path / "none.bin").exists()
