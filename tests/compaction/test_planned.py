"""compact --apply as a plan: crash at every step of the write, then undo restores the
exact bytes; the cursor's compare-and-set is against its version read before the compute.

The world is the verify tests' (tests/support/verify_world.py): public/default/orders, compacted
into ledger 30, one stopped DbLedgerStorage bookie (or .idx files), metadata in RocksDB or
ZooKeeper. The crash is a real one: a child process that exits on the spot (no ``finally``,
no cleanup) right after the step.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.stores.metadata import MetadataConflict, open_metadata_store
from tests.compaction.test_run import CURSOR, _args, _world
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, World

ROOT = Path(__file__).resolve().parents[2]

#: every step of the write (compaction.planned) and of the apply (repair.plan)
STEPS = ["creating", "files", "closing", "written", "planned", "backup", "commit", "record"]


def _metadata(url: str) -> dict[str, bytes]:
    """Every node's bytes, but the id generator's (ids are never given twice)."""
    with open_metadata_store(url) as store:
        return {p: n.data for p, n in store.walk("/") if n is not None and "/idgen" not in p}


def _bookie(world: World) -> dict[str, Any]:
    """The bookie's files, each RocksDB index as its keys and values."""
    from pulsarctl_py.stores.bookie.rocks import ReadOnlyRocksDB

    out: dict[str, Any] = {}
    for path in sorted(world.bookie_dir.rglob("*")):
        db = next((d for d in path.parents if d.name in ("ledgers", "locations")), None)
        if db is not None and (db / "CURRENT").exists():
            key = str(db.relative_to(world.bookie_dir))
            if key not in out:
                index = ReadOnlyRocksDB(db)
                try:
                    out[key] = dict(index.items())
                finally:
                    index.close()
        elif path.is_file() and "LOG" not in path.name:
            out[str(path.relative_to(world.bookie_dir))] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
        elif path.is_dir():
            out[str(path.relative_to(world.bookie_dir)) + "/"] = "dir"
    return out


def crash_at(url: str, bookie_dir: str, plan: str, step: str) -> None:
    """compact ORDERS --full --apply --plan PLAN, exiting the process right after ``step``."""
    import os

    from pulsarctl_py import outputs
    from pulsarctl_py.compaction import compact
    from pulsarctl_py.compaction.planned import read_before, write_plan
    from pulsarctl_py.plans import apply_plan
    from pulsarctl_py.plans.writing import PlanFile

    def hook(name: str) -> None:
        if name == step:
            os._exit(17)

    before = read_before(url, ORDERS)
    out = outputs.prepare(plan, outputs.PLAN)
    state: dict[str, Any] = {}
    report = compact(
        ORDERS,
        metadata_url=url,
        bookie_dirs=[bookie_dir],
        full=True,
        spool=True,
        on_state=lambda s: state.update(s=s),
    )
    write_plan(
        before=before,
        report=report,
        state=state["s"],
        plan_file=PlanFile(out, url, ORDERS, [bookie_dir], "a compacted ledger"),
        bookie_dirs=[bookie_dir],
        settings=None,
        options=None,
        delete_old=False,
        after_step=hook,
    )
    with open_metadata_store(url, read_only=False) as store:
        apply_plan(Path(plan), store, after_step=hook)
    os._exit(0)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("store_kind", ["rocksdb", "zookeeper"])
def test_a_crash_after_any_step_is_undone_to_the_exact_bytes(
    tmp_path, capsys, request, store_kind, step
) -> None:
    world = _world(tmp_path, store_kind, "db", request)
    before_md, before_bk = _metadata(world.metadata_url), _bookie(world)
    plan = tmp_path / "plan.json"
    code = (
        "from tests.compaction.test_planned import crash_at; "
        f"crash_at({world.metadata_url!r}, {str(world.bookie_dir)!r}, {str(plan)!r}, {step!r})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 17, done.stderr
    assert plan.exists()  # saved before the first thing was created
    if step in ("commit", "record"):
        assert _metadata(world.metadata_url)[CURSOR] != before_md[CURSOR]
    undone = run(capsys, "undo", plan)
    assert undone.code == 0, undone.err
    assert _metadata(world.metadata_url) == before_md
    assert _bookie(world) == before_bk


@pytest.mark.parametrize("index", ["db", "idx"])
def test_plan_then_apply_then_undo_and_the_report_names_the_plan(
    tmp_path, capsys, request, index
) -> None:
    world = _world(tmp_path, "rocksdb", index, request)
    before_md, before_bk = _metadata(world.metadata_url), _bookie(world)
    plan = tmp_path / "plan.json"
    made = run(capsys, "compact", ORDERS, "--full", "--plan", plan, "-o", "json", *_args(world))
    assert made.code == 0, made.err
    report = made.json()
    assert report["applied"] is False and report["plan_file"] == str(plan)
    saved = json.loads(plan.read_text())
    assert [c["key"] for c in saved["changes"]] == [CURSOR]
    assert saved["topics"] == [ORDERS]
    assert [w["ledger_id"] for w in saved["written"]] == [report["compacted_ledger"]]
    assert _metadata(world.metadata_url)[CURSOR] == before_md[CURSOR]  # not applied

    applied = run(capsys, "apply", plan)
    assert applied.code == 0, applied.err
    status = run(capsys, "compact", ORDERS, "--status", "-o", "json", *_args(world))
    assert status.json()["compacted_ledger"] == report["compacted_ledger"]

    undone = run(capsys, "undo", plan)
    assert undone.code == 0, undone.err
    assert f"ledger {report['compacted_ledger']} the plan wrote: deleted" in undone.err
    assert _metadata(world.metadata_url) == before_md
    assert _bookie(world) == before_bk


def test_a_cursor_changed_during_the_compute_fails_the_apply_and_leaves_nothing(
    tmp_path, request
) -> None:
    from pulsarctl_py import outputs
    from pulsarctl_py.compaction import compact
    from pulsarctl_py.compaction.planned import apply_written_plan, read_before, write_plan
    from pulsarctl_py.plans.writing import PlanFile

    world = _world(tmp_path, "zookeeper", "db", request)
    before = read_before(world.metadata_url, ORDERS)  # read before the compute ...
    state: dict[str, Any] = {}
    report = compact(
        ORDERS,
        metadata_url=world.metadata_url,
        bookie_dirs=[str(world.bookie_dir)],
        full=True,
        spool=True,
        on_state=lambda s: state.update(s=s),
    )
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        node = store.get(CURSOR)
        store.put(CURSOR, node.data, node.stat.version)  # ... a broker committed meanwhile
    changed_md, before_bk = _metadata(world.metadata_url), _bookie(world)
    plan_path = tmp_path / "plan.json"
    plan_file = PlanFile(
        outputs.prepare(plan_path, outputs.PLAN),
        world.metadata_url,
        ORDERS,
        [str(world.bookie_dir)],
        "a compacted ledger",
    )
    plan, _ = write_plan(
        before=before,
        report=report,
        state=state["s"],
        plan_file=plan_file,
        bookie_dirs=[str(world.bookie_dir)],
        settings=None,
        options=None,
        delete_old=False,
    )
    with pytest.raises(MetadataConflict, match="the compacted ledger this plan wrote is deleted"):
        apply_written_plan(plan, plan_path, force=False)
    assert _metadata(world.metadata_url) == changed_md
    assert _bookie(world) == before_bk


def test_a_rerun_deletes_what_a_stopped_run_left(tmp_path, capsys, request) -> None:
    """Run again with the same --plan FILE after a crash: the ledger the stopped run wrote
    is deleted before the new one is written (and `undo FILE` would have done the same)."""
    world = _world(tmp_path, "rocksdb", "db", request)
    plan = tmp_path / "plan.json"
    code = (
        "from tests.compaction.test_planned import crash_at; "
        f"crash_at({world.metadata_url!r}, {str(world.bookie_dir)!r}, {str(plan)!r}, 'written')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=300)
    assert done.returncode == 17
    left = json.loads(plan.read_text())["written"][0]["ledger_id"]
    assert left in _metadata_ledgers(world)
    again = run(
        capsys, "compact", ORDERS, "--full", "--apply", "--plan", plan, "-o", "json",
        *_args(world),
    )  # fmt: skip
    assert again.code == 0, again.err
    assert f"the ledger {left} its earlier run wrote: deleted" in again.err
    new = again.json()["compacted_ledger"]
    assert left not in _metadata_ledgers(world) and new != left
    # what the apply did, in the report: the __compaction cursor set, the new ledger in
    outcome = again.json()["outcome"]
    assert outcome["action"] == "apply" and outcome["refused"] == [], outcome
    assert [w["key"].rsplit("/", 1)[-1] for w in outcome["written"]] == ["__compaction"]
    assert outcome["ledgers"]["written"] == [new]
    assert new in _metadata_ledgers(world)
    # a plan that may have been applied is not written over
    refused = run(capsys, "compact", ORDERS, "--full", "--apply", "--plan", plan, *_args(world))
    assert refused.code == 2 and "it is a plan that was applied" in refused.err


def _metadata_ledgers(world: World) -> set[int]:
    from pulsarctl_py.stores.metadata import iter_ledger_paths

    with open_metadata_store(world.metadata_url) as store:
        return {lid for lid, _ in iter_ledger_paths(store)}


def test_an_incremental_compaction_over_a_lost_compacted_ledger_is_refused(
    tmp_path, capsys, request
) -> None:
    """Ledger 30's metadata is gone: the broker could not open it either, and compacting
    only what follows the horizon would drop every key before it. The fix is --full."""
    from pulsarctl_py.decoders import ledger_metadata as lm

    world = _world(tmp_path, "rocksdb", "db", request)
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        path = lm.ledger_path(30, lm.LedgerLayout.HIERARCHICAL)
        store.delete(path, store.get(path).stat.version)
    before_md, before_bk = _metadata(world.metadata_url), _bookie(world)
    plan = tmp_path / "plan.json"
    refused = run(capsys, "compact", ORDERS, "--apply", "--plan", plan, *_args(world))
    assert refused.code == 1, refused.err
    assert "has no BookKeeper metadata" in refused.err and "--full" in refused.err
    assert (_metadata(world.metadata_url), _bookie(world)) == (before_md, before_bk)
    assert not plan.exists()
    full = run(capsys, "compact", ORDERS, "--full", "--apply", "--plan", plan, *_args(world))
    assert full.code == 0, full.err


def test_nothing_new_since_the_horizon_writes_nothing(tmp_path, capsys, request) -> None:
    world = _world(tmp_path, "rocksdb", "db", request)
    first = run(
        capsys, "compact", ORDERS, "--full", "--apply", "--plan", tmp_path / "1.json",
        "-o", "json", *_args(world),
    )  # fmt: skip
    assert first.code == 0, first.err
    before_md, before_bk = _metadata(world.metadata_url), _bookie(world)
    again = run(
        capsys, "compact", ORDERS, "--apply", "--plan", tmp_path / "2.json", "-o", "json",
        *_args(world),
    )  # fmt: skip
    assert again.code == 0, again.err
    assert again.json()["applied"] is False
    assert any("nothing new since the compaction horizon" in n for n in again.json()["notes"])
    assert (_metadata(world.metadata_url), _bookie(world)) == (before_md, before_bk)
    assert not (tmp_path / "2.json").exists()


def test_a_compaction_plan_is_bound_applied_once_and_its_edits_detected(
    tmp_path, capsys, request
) -> None:
    """The plan-safety rules hold for compaction plans: another store with the same
    versions is refused, a second apply says "already applied", a hand edit is detected;
    an undo before the apply deletes only the ledger the plan wrote (the cursor was never
    changed), so nothing stays behind."""
    world = _world(tmp_path / "a", "rocksdb", "db", request)
    other = _world(tmp_path / "b", "rocksdb", "db", request)
    before_md, before_bk = _metadata(world.metadata_url), _bookie(world)
    plan = tmp_path / "plan.json"
    made = run(capsys, "compact", ORDERS, "--full", "--plan", plan, "-o", "json", *_args(world))
    assert made.code == 0, made.err
    new = made.json()["compacted_ledger"]

    # another store, built the same way (the same versions): refused, nothing written there
    other_md, other_bk = _metadata(other.metadata_url), _bookie(other)
    refused = run(capsys, "apply", plan, "--metadata-url", other.metadata_url)
    assert refused.code == 2 and "made for" in refused.err, refused.err
    assert (_metadata(other.metadata_url), _bookie(other)) == (other_md, other_bk)

    # a hand edit is detected, by apply and by undo
    edited = tmp_path / "edited.json"
    doc = json.loads(plan.read_text())
    doc["topics"] = ["persistent://public/default/elsewhere"]
    edited.write_text(json.dumps(doc))
    for verb in ("apply", "undo"):
        r = run(capsys, verb, edited)
        assert r.code == 2 and "edited after it was made" in r.err, (verb, r.err)

    applied = run(capsys, "apply", plan)
    assert applied.code == 0, applied.err
    after = _metadata(world.metadata_url)
    again = run(capsys, "apply", plan)
    assert again.code == 0 and "already applied" in again.err, again.err
    assert _metadata(world.metadata_url) == after
    assert run(capsys, "undo", plan).code == 0
    assert new not in _metadata_ledgers(world)
    assert (_metadata(world.metadata_url), _bookie(world)) == (before_md, before_bk)


def test_undo_of_a_compaction_plan_never_applied_deletes_only_its_ledger(
    tmp_path, capsys, request
) -> None:
    world = _world(tmp_path, "rocksdb", "db", request)
    before_md, before_bk = _metadata(world.metadata_url), _bookie(world)
    plan = tmp_path / "plan.json"
    made = run(capsys, "compact", ORDERS, "--full", "--plan", plan, "-o", "json", *_args(world))
    assert made.code == 0, made.err
    new = made.json()["compacted_ledger"]
    assert new in _metadata_ledgers(world)
    undone = run(capsys, "undo", plan)
    assert undone.code == 0, undone.err
    assert f"ledger {new} the plan wrote: deleted" in undone.err
    assert (_metadata(world.metadata_url), _bookie(world)) == (before_md, before_bk)
