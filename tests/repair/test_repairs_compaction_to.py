"""`repair compaction TOPIC --to LEDGER` through the plan mechanism, on both stores.

The world (tests/support/verify_world.py): orders is compacted up to 11:3 into ledger 30.
`compact --full --apply` writes a new compacted ledger and points the cursor at it; the
repair points the cursor back to 30 (mark-delete from 30's pulsar/compactedTo) and on to
the new ledger again, each step a plan applied with compare-and-set and undone exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarctl_py.stores.metadata import open_metadata_store
from tests.repair.test_repairs import snapshot
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, World, build_world


def _world(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest, variant=None) -> World:
    if store_kind == "rocksdb":
        return build_world(tmp_path / "w", variant)
    url = request.getfixturevalue("scratch_zk")
    store = open_metadata_store(url, read_only=False)
    try:
        return build_world(tmp_path / "w", variant, store=store, metadata_url=url)
    finally:
        store.close()


def _args(world: World) -> list[str]:
    return ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]


def _status(capsys: pytest.CaptureFixture[str], world: World) -> dict:
    r = run(capsys, "compact", ORDERS, "--status", "-o", "json", *_args(world))
    assert r.code == 0, r.err
    return r.json()


@pytest.mark.parametrize("store_kind", ["rocksdb", "zookeeper"])
def test_repoint_plan_apply_undo(tmp_path, capsys, request, store_kind):
    world = _world(tmp_path, store_kind, request)
    done = run(
        capsys, "compact", ORDERS, "--full", "--apply", "--plan", world.root / "c.json",
        "-o", "json", *_args(world),
    )  # fmt: skip
    assert done.code == 0, done.err
    new_id = done.json()["compacted_ledger"]
    horizon = done.json()["horizon"]
    assert _status(capsys, world)["compacted_ledger"] == new_id
    after_compact = snapshot(world.metadata_url)

    plan = tmp_path / "back.json"
    r = run(capsys, "repair", "compaction", ORDERS, "--to", "30", "--plan", plan, *_args(world))
    assert r.code == 0, r.err
    shown = r.json()
    assert [c["key"].rsplit("/", 1)[-1] for c in shown["changes"]] == ["__compaction"]
    new = shown["changes"][0]["new"]["fields"]
    assert {"name": "CompactedTopicLedger", "value": 30} in new["properties"]
    assert (new["mark_delete_ledger_id"], new["mark_delete_entry_id"]) == (11, 3)
    assert shown["repairs"][0]["horizon"] == "11:3"
    assert shown["repairs"][0]["from_ledger"] == new_id
    assert snapshot(world.metadata_url) == after_compact  # a plan writes nothing

    r = run(capsys, "apply", plan)
    assert r.code == 0, r.err
    st = _status(capsys, world)
    assert st["compacted_ledger"] == 30 and st["horizon"] == "11:3"

    # and forward again to the ledger compact --apply wrote
    plan2 = tmp_path / "fwd.json"
    r = run(
        capsys,
        "repair",
        "compaction",
        ORDERS,
        "--to",
        str(new_id),
        "--plan",
        plan2,
        "--apply",
        *_args(world),
    )
    assert r.code == 0, r.err
    st = _status(capsys, world)
    assert st["compacted_ledger"] == new_id and st["horizon"] == horizon

    assert run(capsys, "undo", plan2).code == 0
    assert run(capsys, "undo", plan).code == 0
    assert snapshot(world.metadata_url) == after_compact


def test_refuses_a_ledger_of_another_topic_or_not_compacted(tmp_path, capsys, request):
    world = _world(tmp_path, "rocksdb", request, "compacted-ledger-wrong-topic")
    before = snapshot(world.metadata_url)
    r = run(capsys, "repair", "compaction", ORDERS, "--to", "30", *_args(world))
    assert r.code == 1 and "not of" in r.err and "refused" in r.err, r.err
    r = run(capsys, "repair", "compaction", ORDERS, "--to", "11", *_args(world))
    assert r.code == 1 and "not a compacted ledger" in r.err
    r = run(capsys, "repair", "compaction", ORDERS, "--to", "999", *_args(world))
    assert r.code == 1 and "no BookKeeper metadata" in r.err
    r = run(capsys, "repair", "compaction", ORDERS, "--to", "30", "--clear", *_args(world))
    assert r.code == 2
    for text in (r.err,):
        assert "Traceback" not in text
    assert snapshot(world.metadata_url) == before
