"""`orphans --delete` with an offline bookie's directories: the plan also deletes the orphan
ledger's entries in that bookie's indexes, on both index kinds (DbLedgerStorage's RocksDB
``ledgers``/``locations``, Interleaved/Sorted storage's ``.idx`` files) and both metadata
stores (Pulsar's RocksDB store, a real ZooKeeper).

The verify world's orphan is ledger 70 (3 entries, tagged for ``orders``, referenced by
nothing). After apply the bookie no longer lists it while every other ledger reads the same
bytes; undo restores the exact index bytes (RocksDB keys and values, the ``.idx`` file) and
metadata; a change between plan and apply, or a bookie holding its lock, aborts with nothing
written; a failure after any bookie write step leaves a state undo restores.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.errors import MetadataConflict
from pulsarctl_py.plans import (
    PLAN_VERSION,
    Plan,
    apply_plan,
    backup_path,
    document_digest,
    undo_plan,
)
from pulsarctl_py.plans.bookie_index import STEP_PREFIX
from pulsarctl_py.stores.bookie import open_bookie
from pulsarctl_py.stores.bookie.newledger import BookieInUse
from pulsarctl_py.stores.bookie.rocks import ReadOnlyRocksDB, ledger_key, location_key
from pulsarctl_py.stores.metadata import open_metadata_store
from tests.repair.test_repairs import snapshot
from tests.support.cli_helpers import run
from tests.support.demo_world import holding_lock
from tests.support.verify_world import World, build_world

ORPHAN = 70
ORPHAN_ENTRIES = 3
#: the index entries each kind holds of a ledger, as the plan names them
KINDS = {"db": {"ledger-data", "locations"}, "idx": {"index-file"}}


@pytest.fixture(params=["db", "idx"])
def index(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["rocksdb", "zookeeper"])
def world(request: pytest.FixtureRequest, tmp_path: Path, index: str) -> Iterator[World]:
    if request.param == "rocksdb":
        yield build_world(tmp_path / "w", "orphan-ledger", index=index)
        return
    url = request.getfixturevalue("scratch_zk")
    store = open_metadata_store(url, read_only=False)
    try:
        yield build_world(
            tmp_path / "w", "orphan-ledger", store=store, metadata_url=url, index=index
        )
    finally:
        store.close()


def _flags(world: World) -> list[str]:
    return ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]


def index_dump(world: World) -> dict[str, str]:
    """Every index record of the bookie: RocksDB keys and values, .idx files' sha256."""
    current = world.bookie_dir / "current"
    out: dict[str, str] = {}
    for name in ("ledgers", "locations"):
        if (current / name).is_dir():
            db = ReadOnlyRocksDB(current / name)
            try:
                out.update({f"{name}:{k.hex()}": v.hex() for k, v in db.items()})
            finally:
                db.close()
    for path in sorted(current.rglob("*.idx")):
        out[str(path.relative_to(current))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def orphan_records(world: World, index: str) -> set[str]:
    """The records of ``index_dump`` that belong to the orphan ledger."""
    if index == "idx":
        return {f"0/{ORPHAN:x}/{ORPHAN:x}.idx"}
    return {f"ledgers:{ledger_key(ORPHAN).hex()}"} | {
        f"locations:{location_key(ORPHAN, e).hex()}" for e in range(ORPHAN_ENTRIES)
    }


def stored(world: World) -> dict[int, list[bytes]]:
    """Every ledger the bookie lists and its entries' bytes."""
    with open_bookie([world.bookie_dir]) as bookie:
        return {
            lid: [e.data for e in bookie.read_entries(lid, 0, None)] for lid in bookie.ledgers()
        }


def _writable(world: World) -> Any:
    return open_metadata_store(world.metadata_url, read_only=False)


def _plan(capsys: pytest.CaptureFixture[str], world: World, path: Path) -> dict[str, Any]:
    r = run(capsys, "orphans", "--delete", "--min-age", "0", *_flags(world), "--plan", path)
    assert r.code == 0, r.err
    return json.loads(path.read_text())


def _planned(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, index: str = "db"
) -> tuple[World, Path]:
    """A verify world (RocksDB metadata) with ledger 70 orphaned, and its saved plan."""
    world = build_world(tmp_path / "w", "orphan-ledger", index=index)
    plan_path = tmp_path / "plan.json"
    _plan(capsys, world, plan_path)
    return world, plan_path


def test_plan_apply_undo_on_the_bookie_index(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, world: World, index: str
) -> None:
    before_md, before_idx, before_data = (
        snapshot(world.metadata_url),
        index_dump(world),
        stored(world),
    )
    mine = orphan_records(world, index)
    assert mine <= set(before_idx) and ORPHAN in before_data
    plan_path = tmp_path / "plan.json"

    # the plan, readable: decoded index records, no write
    r = run(capsys, "orphans", "--delete", "--min-age", "0", *_flags(world), "-o", "table")
    assert r.code == 0, r.err
    assert "bookie index entr" in r.out and f"ledger {ORPHAN}:" in r.out
    assert "must be stopped" in r.err
    shown = _plan(capsys, world, plan_path)
    assert {c["kind"] for c in shown["bookie"]} == KINDS[index]
    assert {c["ledger_id"] for c in shown["bookie"]} == {ORPHAN}
    for c in shown["bookie"]:
        assert c["action"] == "delete" and Path(c["path"]).is_absolute()
        if c["kind"] != "ledger-data":
            assert c["old"]["entries"] == ORPHAN_ENTRIES
            assert (c["old"]["first_entry"], c["old"]["last_entry"]) == (0, ORPHAN_ENTRIES - 1)
        else:
            assert c["old"]["exists"] is True and c["old"]["master_key"] == "20 bytes"
    assert [c["key"] for c in shown["changes"]] == [f"/ledgers/00/0000/L00{ORPHAN}"]
    assert (snapshot(world.metadata_url), index_dump(world)) == (before_md, before_idx)

    r = run(capsys, "apply", plan_path)
    assert r.code == 0, r.err
    after_idx = index_dump(world)
    assert after_idx == {k: v for k, v in before_idx.items() if k not in mine}
    after_data = stored(world)
    assert ORPHAN not in after_data
    assert after_data == {k: v for k, v in before_data.items() if k != ORPHAN}
    r = run(capsys, "orphans", "--min-age", "0", *_flags(world), "-o", "json")
    assert r.code == 0 and r.json()["orphans"] == []

    r = run(capsys, "undo", plan_path)
    assert r.code == 0, r.err
    assert index_dump(world) == before_idx
    assert snapshot(world.metadata_url) == before_md
    assert stored(world) == before_data
    if index == "idx":  # the exact file, byte for byte
        (c,) = shown["bookie"]
        assert Path(c["path"]).read_bytes() == Plan.load(plan_path).bookie[0].old


def test_a_change_between_plan_and_apply_aborts_with_nothing_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, world: World, index: str
) -> None:
    plan_path = tmp_path / "plan.json"
    shown = _plan(capsys, world, plan_path)
    change = next(c for c in shown["bookie"] if c["kind"] != "ledger-data")
    # the bookie wrote one more entry of the ledger meanwhile (a recovery, say)
    if index == "idx":
        path = Path(change["path"])
        path.write_bytes(path.read_bytes() + (1 << 32 | 4096).to_bytes(8, "big"))
    else:
        from pulsarctl_py.stores.bookie.newledger import writable_rocksdb

        with writable_rocksdb(Path(change["path"])) as db:
            db[location_key(ORPHAN, ORPHAN_ENTRIES)] = (4096).to_bytes(8, "big")
    md, idx = snapshot(world.metadata_url), index_dump(world)
    with _writable(world) as store, pytest.raises(MetadataConflict, match="nothing was written"):
        apply_plan(plan_path, store)
    assert (snapshot(world.metadata_url), index_dump(world)) == (md, idx)
    assert not backup_path(plan_path).exists()
    r = run(capsys, "apply", plan_path)
    assert r.code == 5 and "nothing was written" in r.err and "Traceback" not in r.err


def test_apply_refuses_while_the_bookie_holds_its_lock(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world, plan_path = _planned(capsys, tmp_path)
    md, idx = snapshot(world.metadata_url), index_dump(world)
    with holding_lock(world.bookie_dir / "current" / "locations" / "LOCK"):
        with _writable(world) as store, pytest.raises(BookieInUse, match="stop the bookie"):
            apply_plan(plan_path, store)
        r = run(capsys, "apply", plan_path)
        assert r.code == 3 and "stop the bookie" in r.err and "Traceback" not in r.err
    assert (snapshot(world.metadata_url), index_dump(world)) == (md, idx)
    assert not backup_path(plan_path).exists()


def _steps(index: str) -> list[str]:
    return ["backup", "commit", *(STEP_PREFIX + k for k in sorted(KINDS[index])), "record"]


# (the test's own "index" overrides the fixture's, for the world fixture too)
@pytest.mark.parametrize(
    ("index", "step"), [(index, step) for index in sorted(KINDS) for step in _steps(index)]
)
def test_a_failure_after_any_write_step_is_undone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, world: World, index: str, step: str
) -> None:
    md, idx, data = snapshot(world.metadata_url), index_dump(world), stored(world)
    plan_path = tmp_path / "plan.json"
    _plan(capsys, world, plan_path)
    seen: list[str] = []

    class Crash(Exception):
        pass

    def crash(name: str) -> None:
        seen.append(name)
        if name == step:
            raise Crash(name)

    with _writable(world) as store, pytest.raises(Crash):
        apply_plan(plan_path, store, after_step=crash)
    assert seen[-1] == step
    with _writable(world) as store:
        undo_plan(plan_path, store)
    assert (snapshot(world.metadata_url), index_dump(world)) == (md, idx)
    assert stored(world) == data
    with _writable(world) as store:  # again: nothing left to restore
        assert undo_plan(plan_path, store).written == []


def test_a_failure_while_undoing_is_finished_by_undoing_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, index: str
) -> None:
    world, plan_path = _planned(capsys, tmp_path, index)
    md, idx = snapshot(world.metadata_url), index_dump(world)
    assert run(capsys, "apply", plan_path).code == 0

    def crash(name: str) -> None:
        if name.startswith(STEP_PREFIX):
            raise RuntimeError(name)

    with _writable(world) as store, pytest.raises(RuntimeError):
        undo_plan(plan_path, store, after_step=crash)
    assert run(capsys, "undo", plan_path).code == 0
    assert (snapshot(world.metadata_url), index_dump(world)) == (md, idx)


def test_repair_from_verify_plans_the_bookie_index_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world = build_world(tmp_path / "w", "orphan-ledger")
    r = run(capsys, "verify", "--all", *_flags(world), "-o", "json")
    report = tmp_path / "verify.json"
    report.write_text(r.out)
    plan_path = tmp_path / "plan.json"
    r = run(capsys, "repair", "--from-verify", report, *_flags(world), "--plan", plan_path)
    assert r.code == 0, r.err
    doc = json.loads(plan_path.read_text())
    assert {c["kind"] for c in doc["bookie"]} == KINDS["db"]
    assert doc["version"] == PLAN_VERSION


def test_a_tampered_bookie_change_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world, plan_path = _planned(capsys, tmp_path, "idx")
    md, idx = snapshot(world.metadata_url), index_dump(world)
    doc = json.loads(plan_path.read_text())
    doc["bookie"][0]["old_base64"] = "AAAA"
    plan_path.write_text(json.dumps(doc))
    r = run(capsys, "apply", plan_path)
    assert r.code == 2 and "edited after it was made" in r.err and "Traceback" not in r.err
    # the digest made again (it is tamper evidence, not security): the checks still hold
    plan_path.write_text(json.dumps(doc | {"digest": document_digest(doc)}))
    r = run(capsys, "apply", plan_path)
    assert r.code == 2 and "sha256" in r.err and "Traceback" not in r.err
    doc["bookie"][0]["path"] = "relative/0.idx"
    plan_path.write_text(json.dumps(doc | {"digest": document_digest(doc)}))
    r = run(capsys, "apply", plan_path)
    assert r.code == 2 and "absolute" in r.err
    assert (snapshot(world.metadata_url), index_dump(world)) == (md, idx)


def test_the_indexes_stay_locked_from_the_check_to_the_last_write(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Between apply's check and its writes nobody (a starting bookie) can open the index."""
    from pulsarctl_py.stores.bookie.newledger import writable_rocksdb

    world, plan_path = _planned(capsys, tmp_path)
    tried: list[str] = []

    def intrude(step: str) -> None:
        if step in ("backup", "commit"):
            with pytest.raises(BookieInUse, match="cannot open"):
                with writable_rocksdb(world.bookie_dir / "current" / "locations"):
                    pass
            tried.append(step)

    with _writable(world) as store:
        apply_plan(plan_path, store, after_step=intrude)
    assert tried == ["backup", "commit"]
    assert ORPHAN not in stored(world)


def test_apply_and_undo_refuse_a_bookie_registered_as_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """.idx storage has no RocksDB lock: the bookie's registration under
    /ledgers/available (its id from the cookie) says it runs."""
    world = build_world(tmp_path / "w", "orphan-ledger", index="idx")
    bookie_id = "bookie-1.example:3181"
    (world.bookie_dir / "current" / "VERSION").write_text(f'4\nbookieHost: "{bookie_id}"\n')
    plan_path = tmp_path / "plan.json"
    _plan(capsys, world, plan_path)
    running = f"/ledgers/available/{bookie_id}"

    def register(up: bool) -> None:
        with _writable(world) as store:
            if up:
                if store.exists("/ledgers/available") is None:
                    store.put("/ledgers/available", b"")
                store.put(running, b"")
            else:
                store.delete(running, store.exists(running).version)

    register(True)
    md, idx = snapshot(world.metadata_url), index_dump(world)
    r = run(capsys, "apply", plan_path)
    assert r.code == 3 and "registered as running" in r.err and "Traceback" not in r.err
    assert (snapshot(world.metadata_url), index_dump(world)) == (md, idx)
    register(False)
    assert run(capsys, "apply", plan_path).code == 0
    register(True)
    md, idx = snapshot(world.metadata_url), index_dump(world)
    r = run(capsys, "undo", plan_path)
    assert r.code == 3 and "registered as running" in r.err
    assert (snapshot(world.metadata_url), index_dump(world)) == (md, idx)
    register(False)
    assert run(capsys, "undo", plan_path).code == 0
    assert ORPHAN in stored(world)


def test_a_ledger_in_the_journal_tail_is_named_in_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from pulsarctl_py.stores.bookie import JournalWriter

    world = build_world(tmp_path / "w", "orphan-ledger")
    with open_bookie([world.bookie_dir]) as bookie:
        entry = bookie.read_entry(ORPHAN, ORPHAN_ENTRIES - 1)
    with JournalWriter(world.bookie_dir / "current" / "1.txn") as journal:
        journal.add_entry(entry)  # no lastMark: the whole journal is the tail
    r = run(capsys, "orphans", "--delete", "--min-age", "0", *_flags(world), "-o", "json")
    assert r.code == 0, r.err
    assert any(
        f"ledger(s) {ORPHAN} have records in the bookie's journal" in w
        for w in r.json()["warnings"]
    )
    r = run(
        capsys,
        "orphans",
        "--delete",
        "--min-age",
        "0",
        *_flags(build_world(tmp_path / "v", "orphan-ledger")),
        "-o",
        "json",
    )
    assert not any("journal" in w for w in r.json()["warnings"])


def test_plans_of_older_formats_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Versions 1 and 2 were not bound to a store and had no digest: refused, whatever
    they hold, with the way out (make the plan again)."""
    _, plan_path = _planned(capsys, tmp_path)
    doc = json.loads(plan_path.read_text())
    assert doc["version"] == PLAN_VERSION and Plan.load(plan_path).bookie
    for version in (1, 2):
        plan_path.write_text(json.dumps(doc | {"version": version}))
        r = run(capsys, "apply", plan_path)
        assert r.code == 2 and "older ledgerctl" in r.err and "make the plan again" in r.err
