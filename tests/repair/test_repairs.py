"""Repairs as plans, on both metadata stores (Pulsar's RocksDB store and a real ZooKeeper).

Each broken world of tests/support/verify_world.py is repaired by the repair its verify finding
names; after apply, verify no longer reports that finding (only the listed consequences of
the data the repair gives up), undo restores every byte, a change between plan and apply
aborts with nothing written, and a failure after any step of apply leaves a state undo
restores.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.errors import DataError, LedgerctlError, MetadataConflict, PlanConflict
from pulsarctl_py.ledgers import LedgerSource
from pulsarctl_py.plans import (
    STEPS,
    Draft,
    Plan,
    apply_plan,
    backup_path,
    document_digest,
    undo_plan,
)
from pulsarctl_py.repair.compaction_pointer import clear_compaction
from pulsarctl_py.repair.cursors import clamp_cursors, cursor_snapshots, reset_cursor
from pulsarctl_py.repair.from_verify import from_verify
from pulsarctl_py.repair.missing_ledgers import missing_ledgers
from pulsarctl_py.repair.orphans import delete_orphans, find_orphans
from pulsarctl_py.repair.shadow import shadow
from pulsarctl_py.stores.metadata import open_metadata_store
from pulsarctl_py.verify import verify_topics
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, PLAIN, SHADOW, T0, VARIANTS, World, build_world

STORES = ["rocksdb", "zookeeper"]

Build = Callable[[Draft, LedgerSource], Any]


def _lost_ledger(d: Draft, s: LedgerSource) -> None:
    """Drop the lost ledger from the topic (its shadow, which listed it too, is resynced
    in the same plan)."""
    assert missing_ledgers(d, ORDERS, s) == [11]
    assert [r["topic"] for r in d.repairs if r["repair"] == "shadow"] == [SHADOW]


#: the consequences of losing ledger 11: the index jumps over its entries, and the
#: compaction horizon moves on from 11:3 while the compacted ledger says 11:3
LOST_11 = {"index-gap", "compacted-horizon-mismatch"}


def _recreated_ledger(d: Draft, s: LedgerSource) -> None:
    """Ledger 11 lost its metadata, not its entries: its metadata is recreated from them
    (dropping it would lose the data)."""
    assert missing_ledgers(d, ORDERS, s, recreate=True) == []
    (done,) = [r for r in d.repairs if r["repair"] == "missing-ledgers"]
    assert [r["ledger_id"] for r in done["recreated"]] == [11]


#: variant -> (the repair, the checks verify reports after it: what the lost data costs)
CASES: dict[str, tuple[Build, set[str]]] = {
    "ledger-missing-metadata": (_recreated_ledger, set()),
    "ledger-lost": (_lost_ledger, LOST_11),
    # (its metadata stays, referenced by nothing now: an orphan for `orphans --delete`)
    "ledger-missing-storage": (_lost_ledger, LOST_11),
    "cursor-beyond-lac": (lambda d, s: clamp_cursors(d, ORDERS, s), set()),
    "cursor-unknown-ledger": (lambda d, s: clamp_cursors(d, ORDERS, s), set()),
    "cursor-trimmed-ledger": (lambda d, s: clamp_cursors(d, ORDERS, s), set()),
    "compacted-ledger-missing": (lambda d, s: clear_compaction(d, ORDERS, s), set()),
    "shadow-ledger-not-in-source": (lambda d, s: shadow(d, SHADOW, s), set()),
    "shadow-ledger-differs": (lambda d, s: shadow(d, SHADOW, s), set()),
    "orphan-ledger": (lambda d, s: delete_orphans(d, s), set()),
    # the broker rolls back to the znode's position, without properties or acks: that
    # becomes the cursor's state
    "cursor-ledger-missing": (lambda d, s: cursor_snapshots(d, ORDERS, s), set()),
}


@pytest.fixture(params=STORES)
def make_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., World]]:
    """Build a verify world with its metadata in the parametrized store."""
    if request.param == "rocksdb":
        yield lambda variant=None: build_world(tmp_path / "world", variant)
        return
    url = request.getfixturevalue("scratch_zk")

    def zk(variant: str | None = None) -> World:
        store = open_metadata_store(url, read_only=False)
        try:
            return build_world(tmp_path / "world", variant, store=store, metadata_url=url)
        finally:
            store.close()

    yield zk


def snapshot(url: str) -> dict[str, str]:
    """Every node's data hash (not versions: a restore writes new versions); the empty
    parents of ledgerctl's leases and records, which ZooKeeper keeps once a command that
    writes ledgers made them, aside (every lease or record in them counts)."""
    from pulsarctl_py.plans.leases import PARENTS

    store = open_metadata_store(url)
    try:
        return {
            path: hashlib.sha256(node.data).hexdigest()
            for path, node in store.walk("/")
            if node is not None
            and not path.startswith("/zookeeper")
            and not (path in PARENTS and not node.data)
        }
    finally:
        store.close()


def make_plan(world: World, build: Build, path: Path) -> Plan:
    with world.source() as source:
        assert source.metadata is not None
        draft = Draft(source.metadata)
        build(draft, source)
        plan = draft.plan()
    plan.save(path)
    return plan


def checks(world: World, topics: list[str] | None) -> set[str]:
    with world.source() as source:
        return {f.check for f in verify_topics(source, topics)}


def writable(world: World) -> Any:
    return open_metadata_store(world.metadata_url, read_only=False)


# -- every repair, on both stores ----------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(CASES))
def test_repair_fixes_what_verify_reported(
    make_world: Callable[..., World], tmp_path: Path, variant: str
) -> None:
    build, after = CASES[variant]
    world = make_world(variant)
    scope = None if variant == "orphan-ledger" else [ORDERS, SHADOW]
    before_checks = checks(world, scope)
    assert set(VARIANTS[variant]) <= before_checks
    before = snapshot(world.metadata_url)
    plan = make_plan(world, build, tmp_path / "plan.json")
    assert not plan.empty
    for change in plan.changes:  # every key carries its version, hashes and decoded diff
        js = change.to_json()
        if js["action"] == "create":  # a key the plan creates: absent, no version
            assert js["version"] is None and js["old_sha256"] is None and js["new_sha256"]
        else:
            assert js["version"] is not None and js["old_sha256"] and js["diff"]
    assert snapshot(world.metadata_url) == before  # planning writes nothing
    with writable(world) as store:
        apply_plan(tmp_path / "plan.json", store)
    assert checks(world, scope) == after
    assert not (before_checks & checks(world, scope)) - after
    with writable(world) as store:
        undo_plan(tmp_path / "plan.json", store)
    assert snapshot(world.metadata_url) == before
    assert checks(world, scope) == before_checks


def test_missing_ledgers_plan_names_what_is_lost(
    make_world: Callable[..., World], tmp_path: Path
) -> None:
    world = make_world("ledger-lost")
    plan = make_plan(world, CASES["ledger-lost"][0], tmp_path / "p.json")
    u = plan.unreachable.to_json()
    assert u["ledgers"] == [11] and u["entries"] == 4 and u["time_range"] is not None
    moved = {c["cursor"]: (c["from"], c["to"]) for c in u["cursors"]}
    # sub (11:2) and __compaction (11:3) were in ledger 11; durable-sub's cursor ledger says 12:1
    assert moved == {"sub": ("11:2", "12:-1"), "__compaction": ("11:3", "12:-1")}
    ml = next(c for c in plan.changes if c.kind == "managed-ledger")
    assert any(line.startswith("-") and "ledgerId: 11" in line for line in ml.to_json()["diff"])


def test_reset_cursor_with_a_cursor_ledger_moves_the_state_into_the_znode(
    make_world: Callable[..., World], tmp_path: Path
) -> None:
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.decoders.managed_ledger import TopicName

    world = make_world(None)
    before = snapshot(world.metadata_url)
    plan = make_plan(
        world,
        lambda d, s: reset_cursor(d, ORDERS, "durable-sub", s, to=(11, 1)),
        tmp_path / "p.json",
    )
    (cursor_move,) = plan.unreachable.cursors
    # from the cursor ledger's 12:1 back to mark-delete 11:0: 11:1..11:3, 12:0, 12:1 again
    assert cursor_move["from"] == "12:1" and cursor_move["to"] == "11:0"
    assert cursor_move["entries_redelivered"] == 5
    assert cursor_move["cursors_ledger_id"] == {"from": 20, "to": -1}
    with writable(world) as store:
        apply_plan(tmp_path / "p.json", store)
        path = TopicName.parse(ORDERS).cursor_path("durable-sub")
        info = mld.parse_cursor_info(store.get(path).data).message
    assert (info.cursorsLedgerId, info.markDeleteLedgerId, info.markDeleteEntryId) == (-1, 11, 0)
    assert checks(world, [ORDERS]) == set()
    with writable(world) as store:
        undo_plan(tmp_path / "p.json", store)
    assert snapshot(world.metadata_url) == before


@pytest.mark.parametrize(
    ("how", "expected"),
    [({"earliest": True}, (10, -1)), ({"latest": True}, (12, 2)), ({"to": (12, 0)}, (12, -1))],
)
def test_reset_cursor_targets(
    tmp_path: Path, how: dict[str, Any], expected: tuple[int, int]
) -> None:
    world = build_world(tmp_path / "w")
    with world.source() as source:
        assert source.metadata is not None
        assert reset_cursor(Draft(source.metadata), ORDERS, "sub", source, **how) == expected


def test_reset_cursor_refuses_what_is_not_there(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w")
    with world.source() as source:
        assert source.metadata is not None
        draft = Draft(source.metadata)
        with pytest.raises(LedgerctlError, match="not in"):
            reset_cursor(draft, ORDERS, "sub", source, to=(99, 0))
        with pytest.raises(LedgerctlError, match="outside"):
            reset_cursor(draft, ORDERS, "sub", source, to=(10, 9))
        with pytest.raises(LedgerctlError, match="no cursor"):
            reset_cursor(draft, ORDERS, "nope", source, earliest=True)
    with world.source(bookie=False) as source:  # the open ledger's end is unknown
        assert source.metadata is not None
        with pytest.raises(DataError, match="bookie-dir"):
            reset_cursor(Draft(source.metadata), ORDERS, "sub", source, latest=True)


def test_shadow_without_its_source_is_refused(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "shadow-source-missing")
    with world.source() as source:
        assert source.metadata is not None
        with pytest.raises(DataError, match="nothing to resync"):
            shadow(Draft(source.metadata), SHADOW, source)
        with pytest.raises(DataError, match="not a shadow"):
            shadow(Draft(source.metadata), PLAIN, source)


def test_healthy_world_needs_no_repair(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w")
    with world.source() as source:
        assert source.metadata is not None
        draft = Draft(source.metadata)
        for topic in (ORDERS, PLAIN):
            missing_ledgers(draft, topic, source)
            clamp_cursors(draft, topic, source)
            clear_compaction(draft, topic, source)
        shadow(draft, SHADOW, source)
        delete_orphans(draft, source)
        assert draft.plan().empty


# -- compare-and-set, backup, undo -----------------------------------------------------------


def test_a_change_between_plan_and_apply_aborts_with_nothing_written(
    make_world: Callable[..., World], tmp_path: Path
) -> None:
    from pulsarctl_py.decoders.managed_ledger import TopicName

    world = make_world("cursor-beyond-lac")
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES["cursor-beyond-lac"][0], plan_path)
    sub = TopicName.parse(ORDERS).cursor_path("sub")
    with writable(world) as store:  # a broker acknowledges meanwhile
        node = store.get(sub)
        store.put(sub, node.data + b"", node.stat.version)
    changed = snapshot(world.metadata_url)
    with writable(world) as store, pytest.raises(MetadataConflict, match="nothing was written"):
        apply_plan(plan_path, store)
    assert snapshot(world.metadata_url) == changed
    assert not backup_path(plan_path).exists()


def test_a_change_during_apply_aborts_the_transaction(
    make_world: Callable[..., World], tmp_path: Path
) -> None:
    """The preflight check passed, then a key changed: the transaction's CAS refuses."""
    world = make_world("ledger-lost")
    plan_path = tmp_path / "p.json"
    plan = make_plan(world, lambda d, s: missing_ledgers(d, ORDERS, s), plan_path)
    assert len(plan.changes) == 4  # the ML, two cursors, the shadow: one transaction
    last = plan.changes[-1].key
    with writable(world) as store:

        def meddle(step: str) -> None:
            if step == "backup":
                node = store.get(last)
                store.put(last, node.data, node.stat.version)

        before = None
        with pytest.raises(MetadataConflict):
            before = snapshot(world.metadata_url)
            apply_plan(plan_path, store, after_step=meddle)
    assert snapshot(world.metadata_url) == before


@pytest.mark.parametrize("step", STEPS)
def test_a_failure_after_any_apply_step_is_undone(
    make_world: Callable[..., World], tmp_path: Path, step: str
) -> None:
    world = make_world("ledger-lost")
    before = snapshot(world.metadata_url)
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES["ledger-lost"][0], plan_path)

    class Crash(Exception):
        pass

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    with writable(world) as store, pytest.raises(Crash):
        apply_plan(plan_path, store, after_step=crash)
    assert backup_path(plan_path).exists()
    with writable(world) as store:
        undo_plan(plan_path, store)
    assert snapshot(world.metadata_url) == before
    with writable(world) as store:  # undo again: nothing left to do, nothing changes
        outcome = undo_plan(plan_path, store)
    assert outcome.written == []
    assert snapshot(world.metadata_url) == before


def test_undo_refuses_a_key_changed_after_apply(tmp_path: Path) -> None:
    from pulsarctl_py.decoders.managed_ledger import TopicName

    world = build_world(tmp_path / "w", "cursor-beyond-lac")
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES["cursor-beyond-lac"][0], plan_path)
    with writable(world) as store:
        apply_plan(plan_path, store)
        sub = TopicName.parse(ORDERS).cursor_path("sub")
        node = store.get(sub)
        store.put(sub, node.data + b"\x30\x01", node.stat.version)  # lastActive=1
    changed = snapshot(world.metadata_url)
    with writable(world) as store, pytest.raises(PlanConflict, match="nothing restored") as exc:
        undo_plan(plan_path, store)
    assert exc.value.exit_code == 5
    assert snapshot(world.metadata_url) == changed
    # the refusal says which key and why, and offers a new plan: the cursor's lastActive
    # is the broker's, its position goes back
    (refused,) = exc.value.outcome.to_json()["refused"]
    assert refused["key"] == sub and refused["exit_code"] == 5
    (drift,) = exc.value.rebase.drifts
    assert drift.refused is None and [c.key for c in exc.value.rebase.plan.changes] == [sub]


def test_a_tampered_plan_is_refused(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "cursor-beyond-lac")
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES["cursor-beyond-lac"][0], plan_path)
    doc = json.loads(plan_path.read_text())
    doc["changes"][0]["new_base64"] = "AAAA"
    plan_path.write_text(json.dumps(doc))
    before = snapshot(world.metadata_url)
    with writable(world) as store, pytest.raises(LedgerctlError, match="edited after it was made"):
        apply_plan(plan_path, store)
    # with its digest made again, the value's own sha256 still refuses it
    plan_path.write_text(json.dumps(doc | {"digest": document_digest(doc)}))
    with writable(world) as store, pytest.raises(LedgerctlError, match="sha256"):
        apply_plan(plan_path, store)
    assert snapshot(world.metadata_url) == before


def test_plan_json_round_trip(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "ledger-lost")
    plan = make_plan(world, CASES["ledger-lost"][0], tmp_path / "p.json")
    again = Plan.load(tmp_path / "p.json")
    assert again.to_json()["changes"] == plan.to_json()["changes"]
    assert again.unreachable.to_json()["ledgers"] == [11]


# -- orphans ---------------------------------------------------------------------------------


def test_orphans_keep_what_cannot_be_judged(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "orphan-ledger")
    with world.source() as source:
        assert source.metadata is not None
        found = [o.ledger_id for o in find_orphans(Draft(source.metadata), source)]
        assert found == [70]
        # too young: kept
        young = find_orphans(
            Draft(source.metadata), source, min_age_ms=3_600_000, now_ms=T0 + 60_000
        )
        assert list(young) == []
    # without bookie storage the cursor ledger of orders cannot be read: orders keeps 70
    with world.source(bookie=False) as source:
        assert source.metadata is not None
        assert list(find_orphans(Draft(source.metadata), None)) == []


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_plan_apply_undo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "cursor-beyond-lac")
    url = ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]
    before = snapshot(world.metadata_url)
    plan_path = tmp_path / "plan.json"
    r = run(capsys, "repair", "clamp-cursors", ORDERS, *url, "--plan", plan_path, "-o", "json")
    assert r.code == 0, r.err
    assert "--unload unloads them" in r.err
    shown = r.json()
    assert shown["changes"][0]["key"].endswith("/orders/sub")
    assert json.loads(plan_path.read_text())["changes"] == shown["changes"]
    assert snapshot(world.metadata_url) == before
    r = run(capsys, "apply", plan_path, "-o", "table")
    assert r.code == 0, r.err
    assert "undo with" in r.err
    assert checks(world, [ORDERS]) == set()
    r = run(capsys, "apply", plan_path)  # every key holds the planned value already
    assert r.code == 0 and "already applied" in r.err, r.err
    r = run(capsys, "undo", plan_path)
    assert r.code == 0, r.err
    assert snapshot(world.metadata_url) == before


def test_cli_from_verify(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "compacted-ledger-missing")
    url = ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]
    r = run(capsys, "verify", "--all", *url, "-o", "json")
    assert r.code == 1
    report = tmp_path / "verify.json"
    report.write_text(r.out)
    plan_path = tmp_path / "plan.json"
    r = run(capsys, "repair", "--from-verify", report, *url, "--plan", plan_path, "--apply")
    assert r.code == 0, r.err
    r = run(capsys, "verify", "--all", *url, "-o", "json")
    assert r.code == 0, r.out
    r = run(capsys, "undo", plan_path, "--metadata-url", world.metadata_url)
    assert r.code == 0
    r = run(capsys, "verify", "--all", *url, "-o", "json")
    assert r.code == 1


def test_cli_orphans(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "orphan-ledger")
    url = ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]
    r = run(capsys, "orphans", *url, "-o", "json")
    assert r.code == 1 and [o["ledger_id"] for o in r.json()["orphans"]] == [70]
    r = run(capsys, "orphans", *url, "--apply")
    assert r.code == 2  # --apply needs --delete
    plan_path = tmp_path / "plan.json"
    r = run(capsys, "orphans", "--delete", *url, "--plan", plan_path, "--apply", "-o", "json")
    assert r.code == 0, r.err
    # stdout is what happened (the plan is in its file): the ledger's metadata deleted
    done = r.json()
    assert done["action"] == "apply" and done["plan"] == str(plan_path)
    # its metadata and its entries in the stopped bookie's index
    assert {w["action"] for w in done["written"]} == {"delete"} and len(done["written"]) == 3
    assert done["ledgers"] == {"written": [], "deleted": [70], "left": []}
    assert json.loads(plan_path.read_text())["changes"][0]["action"] == "delete"
    r = run(capsys, "orphans", *url, "-o", "json")
    assert r.code == 0 and r.json()["orphans"] == []


def test_cli_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    world = build_world(tmp_path / "w")
    url = ["--metadata-url", world.metadata_url]
    r = run(capsys, "repair", "cursor", ORDERS, "sub", *url)
    assert r.code == 2 and "exactly one" in r.err
    r = run(capsys, "repair", "cursor", ORDERS, "sub", "--to", "x:y", *url)
    assert r.code == 2
    r = run(capsys, "repair", "clamp-cursors", "persistent://public/default/nope", *url)
    assert r.code == 1 and "no managed ledger" in r.err
    (tmp_path / "bad.json").write_text("{}")
    r = run(capsys, "apply", tmp_path / "bad.json")
    assert r.code == 2 and "not a ledgerctl plan" in r.err
    r = run(capsys, "repair", "--from-verify", tmp_path / "bad.json", *url)
    assert r.code == 2 and "not verify output" in r.err
    import importlib.util

    if importlib.util.find_spec("pulsarctl_py.seek") is None:
        r = run(capsys, "repair", "cursor", ORDERS, "sub", "--time", "1h", *url)
        assert r.code == 2 and "seek module" in r.err
    r = run(capsys, "repair", "compaction", ORDERS, *url)
    assert r.code == 2
    r = run(capsys, "repair", "--apply", "clamp-cursors", ORDERS, *url)
    assert r.code == 2 and "after the subcommand" in r.err
    for result in (r,):
        assert "Traceback" not in result.err


def test_moving_a_cursor_keeps_the_acks_after_its_new_position(tmp_path: Path) -> None:
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.decoders.managed_ledger import TopicName

    world = build_world(tmp_path / "w", "cursor-trimmed-ledger")  # sub at 5:3
    sub = TopicName.parse(ORDERS).cursor_path("sub")
    with writable(world) as store:
        node = store.get(sub)
        info = mld.parse_cursor_info(node.data).message
        for lower, upper in (((5, 0), (5, 2)), ((10, 1), (10, 3))):
            r = info.individualDeletedMessages.add()
            r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId = lower
            r.upperEndpoint.ledgerId, r.upperEndpoint.entryId = upper
        store.put(sub, mld.build_info(info), node.stat.version)
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES["cursor-trimmed-ledger"][0], plan_path)
    with writable(world) as store:
        apply_plan(plan_path, store)
        info = mld.parse_cursor_info(store.get(sub).data).message
    assert (info.markDeleteLedgerId, info.markDeleteEntryId) == (10, -1)
    kept = [
        (
            (r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId),
            (r.upperEndpoint.ledgerId, r.upperEndpoint.entryId),
        )
        for r in info.individualDeletedMessages
    ]
    assert kept == [((10, 1), (10, 3))]


@pytest.mark.parametrize(
    ("offset_ms", "expected"),
    [(0, (10, -1)), (10**9, (12, 2))],  # before every entry; after the last one
)
def test_reset_cursor_by_time_uses_the_broker_rule(
    tmp_path: Path, offset_ms: int, expected: tuple[int, int]
) -> None:
    pytest.importorskip("pulsarctl_py.seek", reason="--time needs the seek module")
    world = build_world(tmp_path / "w")
    with world.source() as source:
        assert source.metadata is not None
        draft = Draft(source.metadata)
        got = reset_cursor(draft, ORDERS, "durable-sub", source, time_ms=T0 + offset_ms)
        assert got == expected
        assert "broker rule" in draft.repairs[-1]["target"]


@pytest.mark.parametrize("variant", sorted(CASES))
def test_from_verify_repairs_what_verify_reported(tmp_path: Path, variant: str) -> None:
    """verify --all, then one plan for its findings: applied, verify no longer reports them;
    what it reports instead is only the cost of data that was lost."""
    world = build_world(tmp_path / "w", variant)
    with world.source() as source:
        report = {"findings": [f.to_json() for f in verify_topics(source, None)]}
    assert {f["check"] for f in report["findings"]} == set(VARIANTS[variant])
    (tmp_path / "verify.json").write_text(json.dumps(report))
    with world.source() as source:
        assert source.metadata is not None
        draft = Draft(source.metadata)
        unhandled = from_verify(draft, report, source)
        draft.plan().save(tmp_path / "p.json")
    assert unhandled == []
    with writable(world) as store:
        apply_plan(tmp_path / "p.json", store)
    after = checks(world, None)
    assert not after & set(VARIANTS[variant])
    # a ledger dropped for lack of stored entries keeps its metadata, a ledger only the
    # shadow listed too: both are orphans now, for `orphans --delete`
    extra = set()
    if variant in ("ledger-missing-storage", "shadow-ledger-not-in-source"):
        extra = {"orphan-ledger"}
    assert after <= CASES[variant][1] | extra


def test_undo_refuses_a_damaged_backup(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "cursor-beyond-lac")
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES["cursor-beyond-lac"][0], plan_path)
    with writable(world) as store:
        apply_plan(plan_path, store)
    applied = snapshot(world.metadata_url)
    for bad in (
        "[1]",
        '{"values": [1]}',
        '{"values": [{"key": "/x", "base64": "AA==", "sha256": "0"}]}',
    ):
        backup_path(plan_path).write_text(bad)
        with writable(world) as store, pytest.raises(LedgerctlError):
            undo_plan(plan_path, store)
    assert snapshot(world.metadata_url) == applied


def test_apply_refuses_a_store_another_process_holds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Pulsar holds its RocksDB store's lock while it runs: apply says so (exit 3)."""
    world = build_world(tmp_path / "w", "cursor-beyond-lac")
    plan_path = tmp_path / "p.json"
    make_plan(world, CASES["cursor-beyond-lac"][0], plan_path)
    before = snapshot(world.metadata_url)
    with writable(world):  # the lock is taken
        r = run(capsys, "apply", plan_path)
    assert r.code == 3 and "locked" in r.err and r.err.count("\n") <= 3
    assert snapshot(world.metadata_url) == before
    assert not backup_path(plan_path).exists()


def test_a_resynced_shadow_never_gets_the_sources_terminated_position(tmp_path: Path) -> None:
    """Pulsar 4.0.7 ShadowManagedLedgerImpl keeps the source's terminatedPosition in memory
    (the shadow's last confirmed entry) and never writes it into the shadow's znode: the
    resync neither copies it nor keeps one found there."""
    from pulsarctl_py.decoders.managed_ledger import TopicName
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

    world = build_world(tmp_path / "w", "shadow-ledger-differs")
    store = open_metadata_store(world.metadata_url, read_only=False)
    try:
        for topic in (ORDERS, SHADOW):
            path = TopicName.parse(topic).ml_path
            data, stat = store.get(path)
            info = mlpb.ManagedLedgerInfo.FromString(data)
            info.terminatedPosition.ledgerId, info.terminatedPosition.entryId = 12, 1
            store.transaction().set(path, info.SerializeToString(), stat.version).commit()
    finally:
        store.close()
    with world.source() as source:
        assert source.metadata is not None
        draft = Draft(source.metadata)
        assert shadow(draft, SHADOW, source)
        plan = draft.plan()
    (change,) = [c for c in plan.changes if c.key.endswith("orders-shadow")]
    resynced = mlpb.ManagedLedgerInfo.FromString(change.new)
    assert not resynced.HasField("terminatedPosition")


def test_a_lost_cursor_ledger_rolls_back_as_the_broker_does(tmp_path: Path) -> None:
    """Pulsar 4.0.7 ManagedCursorImpl.recoverFromLedger: a cursor ledger that cannot be
    opened or read makes the broker initialize the cursor at getRollbackPosition (the znode's
    mark-delete, clamped to the topic's first position) with empty properties and no
    individual acknowledgements, the cursor properties kept; the repair writes that."""
    from pulsarctl_py.decoders.managed_ledger import TopicName
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

    world = build_world(tmp_path / "w", "cursor-ledger-missing")
    path = TopicName.parse(ORDERS).ml_path + "/durable-sub"
    store = open_metadata_store(world.metadata_url, read_only=False)
    try:
        data, stat = store.get(path)
        info = mlpb.ManagedCursorInfo.FromString(data)
        info.properties.add(name="p", value=7)
        info.cursorProperties.add(name="c", value="kept")
        acked = info.individualDeletedMessages.add()
        acked.lowerEndpoint.ledgerId, acked.lowerEndpoint.entryId = 11, 1
        acked.upperEndpoint.ledgerId, acked.upperEndpoint.entryId = 11, 2
        store.transaction().set(path, info.SerializeToString(), stat.version).commit()
    finally:
        store.close()
    with world.source() as source:
        assert source.metadata is not None
        draft = Draft(source.metadata)
        assert cursor_snapshots(draft, ORDERS, source) == ["durable-sub"]
        plan = draft.plan()
    (change,) = [c for c in plan.changes if c.key.endswith("/durable-sub")]
    state = mlpb.ManagedCursorInfo.FromString(change.new)
    assert state.cursorsLedgerId == -1
    assert (state.markDeleteLedgerId, state.markDeleteEntryId) == (11, 0)
    assert list(state.properties) == [] and list(state.individualDeletedMessages) == []
    assert [(p.name, p.value) for p in state.cursorProperties] == [("c", "kept")]


def test_a_plan_writes_a_ledger_list_as_the_broker_would(tmp_path: Path) -> None:
    """A topic whose ledger list is stored out of id order (as a 4.0 broker's offload
    leaves it): repairs find nothing to do, and a plan that rewrites the list writes it
    sorted, as the broker does, while its compare-and-set expects the stored bytes."""
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.repair.topic_state import load_topic, set_topic

    world = build_world(tmp_path / "w", "ledger-list-unordered")
    path = mld.TopicName.parse(PLAIN).ml_path
    with world.source() as source:
        assert source.metadata is not None
        node = source.metadata.get(path)
        assert node is not None
        assert mld.parse_ml_info(node.data).stored_ledger_ids == [41, 40]
        draft = Draft(source.metadata)
        missing_ledgers(draft, PLAIN, source)
        clamp_cursors(draft, PLAIN, source)
        assert draft.plan().empty
        topic = load_topic(draft, PLAIN)
        assert topic.ids == [40, 41]
        set_topic(draft, topic, topic.info, "the list as read")
        (change,) = draft.plan().changes
    assert (change.key, change.old, change.version) == (path, node.data, node.stat.version)
    assert change.new is not None
    written = mld.parse_ml_info(change.new)
    assert written.stored_ledger_ids is None
    assert written.message == mld.parse_ml_info(node.data).message
