"""`ledger list --bookie ID`: the ledgers with that bookie in an ensemble (as `bookkeeper
shell listledgers -bookieid`), on the verify world with two of its ledgers moved to
another bookie; a bookie BookKeeper does not know is an error, not an empty list."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pulsarctl_py.decoders import ledger_metadata as lm
from tests.support.cli_helpers import run
from tests.support.demo_env import isolate
from tests.support.verify_world import BOOKIE, build_world

OTHER = "127.0.0.2:3181"


@pytest.fixture(autouse=True)
def _no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)


def test_ledger_list_by_bookie(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pulsarctl_py.stores.metadata import open_metadata_store

    world = build_world(tmp_path / "w")
    flags = ["--metadata-url", world.metadata_url]
    every = [r["ledger_id"] for r in run(capsys, "ledger", "list", *flags, "-o", "json").json()]
    assert len(every) >= 3
    moved = every[:2]
    store = open_metadata_store(world.metadata_url, read_only=False)
    try:
        for lid in moved:
            path = lm.ledger_path(lid)
            node = store.get(path)
            assert node is not None
            md = lm.parse(node.data, lid)
            other = dataclasses.replace(md, ensembles={0: [OTHER]})
            store.put(path, lm.build(other), node.stat.version)
    finally:
        store.close()
    r = run(capsys, "ledger", "list", "--bookie", OTHER, *flags, "-o", "json")
    assert r.code == 0, r.err
    assert [row["ledger_id"] for row in r.json()] == moved
    r = run(capsys, "ledger", "list", "--bookie", BOOKIE, *flags, "-o", "jsonl")
    assert r.code == 0, r.err
    assert len(r.out.splitlines()) == len(every) - 2
    r = run(capsys, "ledger", "list", "--bookie", "127.0.0.9:3181", *flags)
    assert r.code == 1
    assert r.err.startswith("ledgerctl: error: no bookie 127.0.0.9:3181 in any ledger's ensemble")
    assert len(r.err.splitlines()) == 1
