"""Outcomes of apply and undo, and undo after the store moved on, on a real ZooKeeper.

A plan is applied (``repair missing-ledgers``: the topic ``orders`` drops ledger 11, its
cursors and its shadow follow), then the broker's work is done by hand the way a broker
that loads the topic does it: it rolls a new ledger into the list, persists a cursor.
``undo`` is then refused (exit 5, nothing written) with what changed per key and a new
plan that puts the backed-up state back over the current versions, keeping what the
broker added; that plan applies (compare-and-set, its own backup) and undoes like any
other. A key both the plan and the broker changed is refused with the reason, and no
plan is offered. (tests/cluster/sandbox/test_undo_moved_on.py shows the same on the real
broker.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.errors import PlanConflict
from pulsarctl_py.plans import Plan, apply_plan, backup_path, undo_plan
from pulsarctl_py.plans.rebase import UndoMovedOn
from pulsarctl_py.stores.metadata import open_metadata_store
from tests.repair.test_repairs import CASES, make_plan, snapshot, writable
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, World, build_world

ML = mld.TopicName.parse(ORDERS).ml_path
SUB = mld.TopicName.parse(ORDERS).cursor_path("sub")


def _applied(url: str, tmp_path: Path, variant: str) -> tuple[World, Path]:
    """The world ``variant`` in ZooKeeper with the plan dropping ledger 11 applied."""
    with open_metadata_store(url, read_only=False) as store:
        world = build_world(tmp_path / "w", variant, store=store, metadata_url=url)
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES[variant][0], plan_path)
    with writable(world) as store:
        apply_plan(plan_path, store)
    return world, plan_path


@pytest.fixture
def applied(scratch_zk: str, tmp_path: Path) -> Iterator[tuple[World, Path]]:
    """Ledger 11 (its metadata kept, its data gone) dropped by the applied plan."""
    yield _applied(scratch_zk, tmp_path, "ledger-missing-storage")


def _ledgers(world: World) -> list[int]:
    with open_metadata_store(world.metadata_url) as store:
        node = store.get(ML)
        assert node is not None
        return [li.ledgerId for li in mld.parse_ml_info(node.data).message.ledgerInfo]


def _broker_writes(world: World, key: str, edit: Callable[[object], None]) -> None:
    """What a broker that loaded the topic writes: ``edit`` of the decoded value."""
    with writable(world) as store:
        node = store.get(key)
        parse = mld.parse_ml_info if key == ML else mld.parse_cursor_info
        decoded = parse(node.data)
        edit(decoded.message)
        store.put(key, mld.rebuild(decoded, decoded.message), node.stat.version)


def _roll(info: object, ledger_id: int = 90) -> None:
    """The broker closed the last ledger (3 entries) and rolled to a new one."""
    info.ledgerInfo[-1].entries, info.ledgerInfo[-1].size = 3, 300  # type: ignore[attr-defined]
    info.ledgerInfo.add(ledgerId=ledger_id, timestamp=0)  # type: ignore[attr-defined]


def test_apply_outcome_says_what_happened(scratch_zk: str, tmp_path: Path) -> None:
    with open_metadata_store(scratch_zk, read_only=False) as store:
        world = build_world(
            tmp_path / "w", "ledger-missing-storage", store=store, metadata_url=scratch_zk
        )
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES["ledger-missing-storage"][0], plan_path)
    with writable(world) as store:
        done = apply_plan(plan_path, store).to_json()
        again = apply_plan(plan_path, store).to_json()
    assert [w["key"] for w in done["written"]][:1] == [ML] and len(done["written"]) == 4
    assert done["backup"] == str(backup_path(plan_path)) and done["refused"] == []
    # ledger 11 is referenced by nothing now, its metadata kept: undo brings it back
    assert done["ledgers"] == {"written": [], "deleted": [], "left": [11]}
    assert done["already_applied"] is False and done["rebase"] is None
    assert again["already_applied"] is True and again["written"] == []
    assert len(again["unchanged"]) == 4


def test_undo_after_the_broker_rolled_a_ledger_offers_a_plan_that_keeps_it(
    applied: tuple[World, Path], tmp_path: Path
) -> None:
    world, plan_path = applied
    assert _ledgers(world) == [10, 12]
    _broker_writes(world, ML, _roll)
    _broker_writes(world, SUB, lambda c: setattr(c, "lastActive", 123))  # type: ignore[arg-type]
    moved = snapshot(world.metadata_url)
    with writable(world) as store, pytest.raises(UndoMovedOn) as exc:
        undo_plan(plan_path, store)
    assert isinstance(exc.value, PlanConflict) and exc.value.exit_code == 5
    assert snapshot(world.metadata_url) == moved  # nothing written
    rebase = exc.value.rebase
    (drift,) = [d for d in rebase.drifts if d.change.key == ML]
    assert drift.refused is None
    shown = drift.to_json()
    # what changed since the apply (the broker's), and what the new plan does
    assert any(
        "ledgerId: 90" in line and line.startswith("+") for line in shown["changed_since_apply"]
    )
    assert any("ledgerId: 11" in line and line.startswith("+") for line in shown["new_plan_diff"])
    assert any("keeps ledger(s) 90" in n for n in drift.notes)
    outcome = exc.value.outcome.to_json()
    assert {r["key"] for r in outcome["refused"]} == {ML, SUB}
    assert outcome["rebase"]["keys"][0]["key"] in (ML, SUB)
    # the new plan: every key of the plan put back, over its current version
    new = rebase.plan
    assert new is not None and {c.key for c in new.changes} == {
        c.key for c in Plan.load(plan_path).changes
    }
    new_path = tmp_path / "rebase.json"
    new.save(new_path)
    with writable(world) as store:
        done = apply_plan(new_path, store)
    assert done.refused == [] and len(done.keys_written) == 4
    # the backed-up list, with the broker's ledger 90 and its count of ledger 12
    assert _ledgers(world) == [10, 11, 12, 90]
    with open_metadata_store(world.metadata_url) as store:
        info = mld.parse_ml_info(store.get(ML).data).message
        sub = mld.parse_cursor_info(store.get(SUB).data).message
    assert info.ledgerInfo[2].entries == 3
    assert sub.lastActive == 123 and (sub.markDeleteLedgerId, sub.markDeleteEntryId) == (11, 2)
    # the new plan is undone like any other
    with writable(world) as store:
        undo_plan(new_path, store)
    assert snapshot(world.metadata_url) == moved


def test_a_broker_ledger_before_the_restored_last_is_refused(applied: tuple[World, Path]) -> None:
    world, plan_path = applied
    _broker_writes(world, ML, lambda info: _roll(info, 5))
    with writable(world) as store, pytest.raises(UndoMovedOn) as exc:
        undo_plan(plan_path, store)
    assert exc.value.rebase.plan is None
    (drift,) = exc.value.rebase.refused
    assert "added ledger(s) 5 since the apply, before ledger 12" in (drift.refused or "")
    assert "cannot be put back" in str(exc.value)


def test_a_cursor_moved_by_the_plan_and_the_broker_is_refused_with_why(
    capsys: pytest.CaptureFixture[str], applied: tuple[World, Path], tmp_path: Path
) -> None:
    world, plan_path = applied

    def ack(c: object) -> None:  # consumers acknowledged one more entry
        c.markDeleteEntryId += 1  # type: ignore[attr-defined]

    _broker_writes(world, SUB, ack)
    moved = snapshot(world.metadata_url)
    new_path = tmp_path / "rebase.json"
    r = run(capsys, "undo", plan_path, "--plan", new_path, "-o", "json")
    assert r.code == 5, r.err
    assert snapshot(world.metadata_url) == moved and not new_path.exists()
    doc = r.json()
    (refused,) = [x for x in doc["refused"] if x["key"] == SUB]
    assert "the broker moved the cursor since the apply" in refused["reason"]
    assert doc["rebase"]["new_plan"] is None
    assert "cannot be put back" in r.err and r.err.strip().splitlines()[-1].startswith(
        "ledgerctl: error: undo refused, nothing restored"
    )


def test_cli_undo_saves_the_new_plan_and_apply_says_what_happened(
    capsys: pytest.CaptureFixture[str], applied: tuple[World, Path], tmp_path: Path
) -> None:
    world, plan_path = applied
    _broker_writes(world, ML, _roll)
    new_path = tmp_path / "rebase.json"
    r = run(capsys, "undo", plan_path, "--plan", new_path, "-o", "json")
    assert r.code == 5, r.err
    doc = r.json()
    assert doc["action"] == "undo" and doc["rebase"]["new_plan_file"] == str(new_path)
    assert [x["key"] for x in doc["refused"]] == [ML]
    assert "changed since the apply" in r.err and f"ledgerctl apply {new_path}" in r.err
    saved = json.loads(new_path.read_text())
    assert saved["repairs"][0]["repair"] == "undo-after-the-store-moved-on"
    r = run(capsys, "apply", new_path, "-o", "json")
    assert r.code == 0, r.err
    done = r.json()
    assert done["action"] == "apply" and len(done["written"]) == 4 and done["refused"] == []
    assert done["ledgers"]["left"] == []  # nothing dropped: ledger 11 comes back
    assert _ledgers(world) == [10, 11, 12, 90]
    # the original plan: its undo finds the store put back, nothing to write
    r = run(capsys, "undo", plan_path, "-o", "json")
    assert r.code == 0 and r.json()["note"] == "put back already", r.err
    assert r.json()["written"] == [] and "nothing restored" in r.err


def test_a_ledger_without_metadata_is_not_put_back(scratch_zk: str, tmp_path: Path) -> None:
    """Ledger 11 has no BookKeeper metadata (lost whole): the plan that put it back would
    be refused by apply, so the undo says so instead of offering it."""
    world, plan_path = _applied(scratch_zk, tmp_path, "ledger-lost")
    _broker_writes(world, ML, _roll)
    with writable(world) as store, pytest.raises(UndoMovedOn) as exc:
        undo_plan(plan_path, store)
    assert exc.value.rebase.plan is None
    (drift,) = exc.value.rebase.refused
    assert "ledger 11, which has no BookKeeper metadata" in (drift.refused or ""), drift.refused
    assert "apply would refuse the plan that puts it back" in (drift.refused or "")


def test_a_refusal_by_the_live_owner_is_an_outcome_too(
    capsys: pytest.CaptureFixture[str], scratch_zk: str, tmp_path: Path
) -> None:
    """A live broker owns the topic's bundle and cannot be asked whether it has the topic
    loaded: apply -o json says so in the outcome (the refusal with why, its exit code 4),
    nothing written."""
    from pulsarctl_py.ownership import topic_bundle
    from pulsarctl_py.stores.metadata import resolve_topic

    with open_metadata_store(scratch_zk, read_only=False) as store:
        world = build_world(
            tmp_path / "w", "ledger-missing-storage", store=store, metadata_url=scratch_zk
        )
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES["ledger-missing-storage"][0], plan_path)
    before = _topics(world)
    owner = {"nativeUrl": "pulsar://b1:6650", "httpUrl": "http://b1:8080", "disabled": False}
    with writable(world) as store:  # the ephemeral node lives as long as this session
        bundle = topic_bundle(store, resolve_topic(ORDERS))
        store.put(bundle.path, json.dumps(owner).encode(), -1, ephemeral=True)
        r = run(capsys, "apply", plan_path, "-o", "json")
    assert r.code == 4, r.err
    doc = r.json()
    assert doc["action"] == "apply" and doc["written"] == [] and doc["backup"] is None
    (refused,) = doc["refused"]
    assert "cannot ask the brokers whether" in refused["reason"]
    assert "http://b1:8080" in refused["reason"] and refused["exit_code"] == 4
    assert _topics(world) == before


def _topics(world: World) -> dict[str, str]:
    return {k: v for k, v in snapshot(world.metadata_url).items() if k.startswith("/managed")}
