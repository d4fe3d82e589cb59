"""`migrate index` on both metadata stores: the verify world's tenant-b/ns/plain has ledger 40
(3 entries, no broker entry metadata), an open empty ledger 41, and cursor c at 40:2.

The plan swaps both ledgers for copies in one compare-and-set, moves the cursor to the same
entry of the copy, and undo restores every byte the plan changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.stores.metadata import open_metadata_store
from tests.repair.test_repairs import snapshot
from tests.support.cli_helpers import run
from tests.support.verify_world import PLAIN, World, build_world

CURSOR = "/managed-ledgers/tenant-b/ns/persistent/plain/c"


def _world(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> World:
    if store_kind == "rocksdb":
        return build_world(tmp_path / "w")
    url = request.getfixturevalue("scratch_zk")
    store = open_metadata_store(url, read_only=False)
    try:
        return build_world(tmp_path / "w", store=store, metadata_url=url)
    finally:
        store.close()


def _cursor(world: World) -> tuple[int, int]:
    store = open_metadata_store(world.metadata_url)
    try:
        node = store.get(CURSOR)
        assert node is not None
        msg = mld.parse_cursor_info(node.data).message
        return msg.markDeleteLedgerId, msg.markDeleteEntryId
    finally:
        store.close()


@pytest.mark.parametrize("store_kind", ["rocksdb", "zookeeper"])
def test_migrate_index_moves_cursors_and_undoes(tmp_path, capsys, request, store_kind):
    world = _world(tmp_path, store_kind, request)
    flags = ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]
    plan = tmp_path / "plan.json"
    before = snapshot(world.metadata_url)
    r = run(capsys, "migrate", "index", PLAIN, "--plan", plan, "-o", "json", *flags)
    assert r.code == 0, r.err
    record = r.json()["repairs"][0]
    new_ids = {int(k): v for k, v in record["new_ledgers"].items()}
    assert sorted(new_ids) == [40, 41]
    assert record["first_index"] == 0 and record["last_index"] >= 2
    keys = sorted(c["key"] for c in r.json()["changes"])
    assert keys == [CURSOR.rsplit("/", 1)[0], CURSOR]
    planned = snapshot(world.metadata_url)

    assert run(capsys, "apply", plan).code == 0
    assert _cursor(world) == (new_ids[40], 2)
    mapping = [json.loads(line) for line in Path(f"{plan}.mapping.jsonl").read_text().splitlines()]
    assert [m["old_position"] for m in mapping] == ["40:0", "40:1", "40:2"]
    for m in mapping:
        for i in range(m["first_index"], m["index"] + 1):
            found = run(capsys, "seek", PLAIN, "--index", str(i), "-o", "json", *flags)
            assert found.code == 0, found.err
            got = found.json()
            assert (got["ledger_id"], got["entry_id"]) == (new_ids[40], int(m["old_position"][3:]))
    r = run(capsys, "undo", plan)
    assert r.code == 0, r.err
    # the metadata as before the migration: the new ledgers it wrote are deleted too (the
    # id generator's node stays: ids are never given twice, as in BookKeeper)
    after = {k: v for k, v in snapshot(world.metadata_url).items() if "/idgen" not in k}
    assert after == before != planned
    assert _cursor(world) == (40, 2)
