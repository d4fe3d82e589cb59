"""`migrate index TOPIC` on the demo's `seek-times` topic (its first two ledgers lack broker
entry metadata; the last two carry an index from 0, as after enabling the interceptor late).

A dry run writes nothing; --plan writes the new ledgers and the plan; after apply `seek
--index` finds every mapped offset at the same entry of the new ledger, `inspect` shows
the new broker entry metadata, the ML `index` property is the last index; undo restores
the exact metadata and lists the new ledgers, which `orphans` then reports.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.stores.metadata import open_metadata_store
from tests.support.cli_helpers import run
from tests.support.demo_world import demo_flags, make_demo

TOPIC = "seek-times"
ML = "/managed-ledgers/public/default/persistent/seek-times"


@pytest.fixture()
def demo(tmp_path: Path) -> Path:
    return make_demo(tmp_path)


def _metadata(root: Path) -> dict[str, bytes]:
    store = open_metadata_store(f"rocksdb://{root / 'metadata'}")
    try:
        return {path: node.data for path, node in store.walk("/") if node is not None}
    finally:
        store.close()


def _bookie(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / "bookkeeper").rglob("*"))
        if p.is_file() and "LOG" not in p.name
    }


def _bookie_content(root: Path) -> dict[str, Any]:
    """The bookie's files, with each RocksDB index as its keys and values (RocksDB rewrites
    its own files when a key is written and deleted again)."""
    from pulsarctl_py.stores.bookie.rocks import ReadOnlyRocksDB

    out: dict[str, Any] = {}
    for p in sorted((root / "bookkeeper").rglob("*")):
        db = next((d for d in p.parents if d.name in ("ledgers", "locations")), None)
        if db is not None and (db / "CURRENT").exists():
            key = str(db.relative_to(root))
            if key not in out:
                index = ReadOnlyRocksDB(db)
                try:
                    out[key] = dict(index.items())
                finally:
                    index.close()
            continue
        if p.is_file() and "LOG" not in p.name:
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _ml_properties(root: Path) -> dict[str, str]:
    from pulsarctl_py.decoders import managed_ledger as mld

    info = mld.parse_ml_info(_metadata(root)[ML]).message
    return {p.key: p.value for p in info.properties}


def test_migrate_index_plan_apply_seek_undo(demo: Path, capsys, tmp_path: Path) -> None:
    before_md, before_bk = _metadata(demo), _bookie(demo)
    before_content = _bookie_content(demo)
    r = run(capsys, "migrate", "index", TOPIC, *demo_flags(demo))
    assert r.code == 0, r.err
    dry = r.json()
    assert dry["first_index"] == 0 and dry["new_ledgers"] == {}
    assert (_metadata(demo), _bookie(demo)) == (before_md, before_bk)
    mapping = dry["mapping"]
    assert sum(m["messages"] for m in mapping) == dry["last_index"] + 1
    # continuous: each entry starts where the previous one ended
    assert all(b["first_index"] == a["index"] + 1 for a, b in itertools.pairwise(mapping))
    assert dry["broker_timestamp_from_publish_time"] == sum(m["old_index"] is None for m in mapping)

    plan = tmp_path / "mig.json"
    r = run(
        capsys,
        "migrate",
        "index",
        TOPIC,
        "--delete-old",
        "--plan",
        plan,
        "-o",
        "json",
        *demo_flags(demo),
    )
    assert r.code == 0, r.err
    shown = r.json()
    record = shown["repairs"][0]
    new_ids = {int(k): v for k, v in record["new_ledgers"].items()}
    assert sorted(new_ids) == record["ledgers"] and len(new_ids) == 4
    actions = sorted(c["action"] for c in shown["changes"])
    assert actions == ["delete"] * 4 + ["set"]  # one ML swap, the old ledgers' metadata
    saved = [json.loads(line) for line in Path(f"{plan}.mapping.jsonl").read_text().splitlines()]
    assert saved == mapping
    planned_md = _metadata(demo)  # the new ledgers' metadata exists now, unreferenced
    assert set(planned_md) - set(before_md) and _bookie(demo) != before_bk

    r = run(capsys, "apply", plan)
    assert r.code == 0, r.err
    assert _ml_properties(demo)["index"] == str(dry["last_index"])
    for row in mapping:
        old_ledger, entry = map(int, row["old_position"].split(":"))
        for target in {row["first_index"], row["index"]}:
            found = run(
                capsys, "seek", TOPIC, "--index", str(target), "-o", "json", *demo_flags(demo)
            )
            assert found.code == 0, found.err
            got = found.json()
            assert (got["ledger_id"], got["entry_id"]) == (new_ids[old_ledger], entry), row
            if row["messages"] > 1:
                assert got["batch_index"] == target - row["first_index"]
    first_new = new_ids[min(new_ids)]
    shown = run(capsys, "inspect", str(first_new), "-o", "json", *demo_flags(demo))
    assert shown.code == 0, shown.err
    bems = [
        layer["fields"]
        for e in shown.json()["entries"]
        for layer in e["layers"]
        if layer["layer"] == "broker-entry-metadata"
    ]
    first_rows = [m for m in mapping if m["old_position"].startswith(f"{min(new_ids)}:")]
    assert [b["index"] for b in bems] == [m["index"] for m in first_rows]
    assert all(b.get("broker_timestamp") for b in bems)
    r = run(capsys, "verify", TOPIC, "-o", "json", *demo_flags(demo))
    checks = {f["check"] for f in r.json()["findings"]}
    assert not checks & {"index-gap", "index-regression", "index-missing"}, checks

    r = run(capsys, "undo", plan)
    assert r.code == 0, r.err
    assert all(str(n) in r.err for n in new_ids.values()) and "deleted" in r.err
    # every byte the plan changed is back, and the ledgers the migration wrote are gone:
    # their metadata, entry logs and index keys (the bookie's own files as they were)
    assert _metadata(demo) == before_md
    assert _bookie_content(demo) == before_content
    assert planned_md != before_md
    r = run(capsys, "orphans", "--min-age", "0", "-o", "json", *demo_flags(demo))
    assert not set(new_ids.values()) & {o["ledger_id"] for o in r.json()["orphans"]}


def test_migrate_index_start_and_bad_input(demo: Path, capsys) -> None:
    r = run(capsys, "migrate", "index", TOPIC, "--start", "1000", *demo_flags(demo))
    assert r.code == 0, r.err
    assert r.json()["first_index"] == 1000 and r.json()["mapping"][0]["index"] == 1000
    r = run(capsys, "migrate", "index", TOPIC, "--start", "-1", *demo_flags(demo))
    assert r.code == 2 and "Traceback" not in r.err
    r = run(capsys, "migrate", "index", "no-such-topic", *demo_flags(demo))
    assert r.code == 1 and "Traceback" not in r.err


def test_migrate_index_keeps_to_the_namespaces_bookie_isolation(
    demo: Path, capsys, tmp_path: Path
) -> None:
    """The namespace's affinity group leaves the demo's (stopped) bookie out: the write is
    refused in one line before anything is written; an unreadable affinity group stops
    the plan (exit 1). tests/cluster/sandbox/test_placement.py writes into a group on the broker."""
    from pulsarctl_py.stores.bookie.layout import discover
    from pulsarctl_py.stores.bookie.newledger import cookie_bookie_id

    bookie = cookie_bookie_id(discover([demo / "bookkeeper"]).ledger_dirs[0])
    policies = {"bookieAffinityGroup": {"bookkeeperAffinityGroupPrimary": "iso"}}
    racks = {"iso": {"10.9.9.9:3181": {}}, "rest": {bookie: {}}}
    store = open_metadata_store(f"rocksdb://{demo / 'metadata'}", read_only=False)
    try:
        store.put("/admin/local-policies/public/default", json.dumps(policies).encode(), -1)
        store.put("/bookies", json.dumps(racks).encode(), -1)
    finally:
        store.close()
    before = _metadata(demo)
    r = run(capsys, "migrate", "index", TOPIC, "--plan", tmp_path / "p.json", *demo_flags(demo))
    assert r.code == 2, r.err
    lines = r.err.strip().splitlines()
    assert (
        lines[-1].startswith("ledgerctl: error: the stopped bookie ") and "Traceback" not in r.err
    )
    assert (
        "isolation group(s) iso (the bookie affinity group of namespace public/default)"
        in lines[-1]
    )
    assert _metadata(demo) == before

    store = open_metadata_store(f"rocksdb://{demo / 'metadata'}", read_only=False)
    try:
        node = store.get("/admin/local-policies/public/default")
        store.put("/admin/local-policies/public/default", b"{not json", node.stat.version)
    finally:
        store.close()
    r = run(capsys, "migrate", "index", TOPIC, "--plan", tmp_path / "q.json", *demo_flags(demo))
    assert r.code == 1 and "affinity group cannot be told" in r.err and "Traceback" not in r.err
