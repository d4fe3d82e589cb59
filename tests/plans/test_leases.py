"""Nothing deleted on a stale view: leases, written-ledger records, leftovers judged in the
plan's own transaction, and the age a ledger is judged by.

The world is the verify tests' (tests/support/verify_world.py): public/default/orders compacted into
ledger 30, one stopped DbLedgerStorage bookie, metadata in Pulsar's RocksDB store or a
scratch ZooKeeper chroot. The sandbox shows the same on a real broker
(tests/cluster/sandbox/test_writes.py); these are the cases a real broker need not run for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import metadata_record as rec
from pulsarctl_py.plans import leases
from pulsarctl_py.stores.metadata import iter_ledger_paths, open_metadata_store
from tests.compaction.test_run import _args, _world
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, World, build_world

ML = "/managed-ledgers/public/default/persistent/orders"


def _ledgers(world: World) -> set[int]:
    with open_metadata_store(world.metadata_url) as store:
        return {lid for lid, _ in iter_ledger_paths(store)}


def _compact(capsys, world: World, plan: Path, *more: str):
    return run(capsys, "compact", ORDERS, "--full", "--plan", plan, "-o", "json", *more,
               *_args(world))  # fmt: skip


# -- leftovers: judged when the plan is made, deleted in its transaction ----------------------


def test_a_leftover_is_deleted_only_in_the_plans_transaction_and_never_while_a_plan_names_it(
    tmp_path, capsys, request
) -> None:
    world = _world(tmp_path, "rocksdb", "db", request)
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        # new ledger ids above the topic's, as on a cluster that has been running a while
        store.put_raw(rec.SEQUENTIAL_ID_KEY, rec.build_long(100))
    first = _compact(capsys, world, tmp_path / "review.json")
    assert first.code == 0, first.err
    review = first.json()["compacted_ledger"]

    # a plan saved for review names it: another run leaves it, and says why
    second = _compact(capsys, world, tmp_path / "second.json")
    assert second.code == 0, second.err
    second_ledger = second.json()["compacted_ledger"]
    assert f"left compacted ledger {review} " in second.err and "review.json" in second.err
    saved = json.loads((tmp_path / "second.json").read_text())
    assert saved["repairs"][0]["leftovers"]["kept"][0]["ledger_id"] == review
    assert [c["action"] for c in saved["changes"]] == ["set"]  # the cursor only
    assert {review, second_ledger} <= _ledgers(world)

    # the review plan thrown away (moved: nothing names the ledger now): a leftover, whose
    # deletion rides in the plan with a check of the ledger list it was judged on
    (tmp_path / "review.json").rename(tmp_path / "moved.json")
    third = _compact(capsys, world, tmp_path / "third.json")
    assert third.code == 0, third.err
    plan = json.loads((tmp_path / "third.json").read_text())
    actions = {c["key"]: c["action"] for c in plan["changes"]}
    assert actions[ML] == "check"
    assert actions[lm.ledger_path(review, lm.LedgerLayout.HIERARCHICAL)] == "delete"
    assert plan["repairs"][0]["leftovers"]["deleted"] == [review]
    assert review in _ledgers(world)  # a plan only: nothing deleted yet

    # the topic's ledger list changed since: the whole plan fails, the leftover stays
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        node = store.get(ML)
        store.put(ML, node.data, node.stat.version)
    refused = run(capsys, "apply", tmp_path / "third.json")
    assert refused.code == 5 and "changed since the plan was made" in refused.err
    assert review in _ledgers(world)

    applied = _compact(capsys, world, tmp_path / "fourth.json", "--apply")
    assert applied.code == 0, applied.err
    assert f"deleted compacted ledger(s) {review} " in applied.err
    after = _ledgers(world)
    assert review not in after and second_ledger in after  # second.json still names it
    # the record of the ledger the applied plan wrote went with the apply
    with open_metadata_store(world.metadata_url) as store:
        assert store.get(leases.record_path(applied.json()["compacted_ledger"])) is None
        assert store.get(leases.record_path(second_ledger)) is not None
    # the plan saved for review, never applied, after the cursor moved on: its undo deletes
    # its ledger (nothing to restore), as the run that left it said
    undone = run(capsys, "undo", tmp_path / "second.json")
    assert undone.code == 0, undone.err
    assert f"ledger {second_ledger} the plan wrote: deleted" in undone.err
    assert second_ledger not in _ledgers(world)
    assert run(capsys, "undo", tmp_path / "fourth.json").code == 0
    assert review in _ledgers(world)  # undo puts the deleted leftover's metadata back


# -- leases ---------------------------------------------------------------------------------


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


@pytest.mark.parametrize("store_kind", ["rocksdb", "zookeeper"])
def test_a_lease_holds_its_ledgers_until_released_and_a_dead_runs_lease_is_stale(
    tmp_path, request, store_kind
) -> None:
    world = _world(tmp_path, store_kind, "db", request)
    url = world.metadata_url
    lease = leases.Lease(url, "compact", [ORDERS]).take()
    try:
        with open_metadata_store(url) as store:
            node = store.get(lease.path)
            assert node is not None and node.stat.ephemeral is (store_kind == "zookeeper")
            assert leases.Holds(store).why(9_999) is None
        writable = open_metadata_store(url, read_only=False)
        try:
            lease.hold(9_999, tmp_path / "plan.json", writable)
        finally:
            writable.close()
        with open_metadata_store(url) as store:
            why = leases.Holds(store).why(9_999)
            assert why is not None and "being written by the ledgerctl compact run" in why
            info = json.loads(store.get(lease.path).data)
            assert info["ledgers"] == [9_999] and info["pid"] == os.getpid()
            if store_kind == "rocksdb":
                assert info["expires_ms"] > time.time() * 1000
            # a lease of this host whose process is gone holds nothing
            dead = leases.LeaseInfo.from_json("x", store.get(lease.path).data)
            dead.pid = _dead_pid()
            assert dead.stale(int(time.time() * 1000), leases.host_name()) is not None
            expired = leases.LeaseInfo.from_json("x", store.get(lease.path).data)
            expired.expires_ms = 1
            assert expired.stale(int(time.time() * 1000), leases.host_name()) == "expired"
    finally:
        assert lease.release() is None
    with open_metadata_store(url) as store:
        assert store.children(leases.LEASES) == []
        # the record stays (the plan file it names does not exist: it keeps nothing)
        assert leases.Holds(store).why(9_999) is None
        if store_kind == "rocksdb":
            assert store.get(leases.ROOT) is None  # no parent nodes in RocksDB


def test_a_lease_is_never_the_first_thing_written_into_a_wrong_place(tmp_path) -> None:
    from pulsarctl_py.stores.metadata.rocksdb import create_metadata_store

    empty = tmp_path / "empty"
    create_metadata_store(empty).close()
    with pytest.raises(Exception, match="no Pulsar data"):
        leases.Lease(f"rocksdb://{empty}", "compact", [ORDERS]).take()
    with open_metadata_store(f"rocksdb://{empty}") as store:
        assert store.children("/") == []


def test_a_plan_keeps_its_ledgers_until_applied_undone_or_gone(tmp_path: Path) -> None:
    host = leases.host_name()
    plan = tmp_path / "p.json"
    record = leases.WrittenRecord(42, str(plan), host, "compact", 0)
    assert leases.plan_hold(record, host) is None  # no such file
    plan.write_text(json.dumps({"format": leases.PLAN_FORMAT, "written": [{"ledger_id": 42}]}))
    assert "neither applied nor undone" in (leases.plan_hold(record, host) or "")
    backup = tmp_path / ("p.json" + leases.BACKUP_SUFFIX)
    for status, keeps in (("applying", True), ("applied", False), ("undone", False)):
        backup.write_text(json.dumps({"format": leases.BACKUP_FORMAT, "status": status}))
        assert (leases.plan_hold(record, host) is not None) is keeps, status
    backup.unlink()
    plan.write_text(json.dumps({"format": leases.PLAN_FORMAT, "written": [{"ledger_id": 7}]}))
    assert leases.plan_hold(record, host) is None  # another plan at that path now
    elsewhere = leases.WrittenRecord(42, str(plan), "another-host", "compact", 0)
    assert "cannot be checked from here" in (leases.plan_hold(elsewhere, host) or "")


def test_the_plan_formats_leases_reads_are_the_ones_repair_writes() -> None:
    from pulsarctl_py import plans as plan

    assert leases.PLAN_FORMAT == plan.PLAN_FORMAT
    assert leases.BACKUP_FORMAT == plan.BACKUP_FORMAT
    assert leases.BACKUP_SUFFIX == plan.BACKUP_SUFFIX
    assert set(leases.FINISHED) == {plan.APPLIED, plan.UNDONE}


# -- the age a ledger is judged by ----------------------------------------------------------


def _set_ledger_70(world: World, created_ms: int) -> None:
    """Ledger 70 (an orphan of orders) as Pulsar writes its ledgers: no ctime in its
    metadata; its node created at ``created_ms`` (0: the store recorded no time)."""
    path = lm.ledger_path(70, lm.LedgerLayout.HIERARCHICAL)
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        node = store.get(path)
        md = lm.parse(node.data, 70)
        md.ctime = None
        value = rec.MetaValue(node.stat.version, store.instance_id, created_ms, created_ms,
                              False, lm.build(md))  # fmt: skip
        store.put_raw(rec.path_key(path), rec.build(value))


def test_orphans_never_take_a_ledger_of_unknown_age_for_old(tmp_path, capsys) -> None:
    world = build_world(tmp_path / "w", "orphan-ledger")
    url = ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]
    _set_ledger_70(world, 0)
    r = run(capsys, "orphans", *url, "-o", "json")
    assert r.code == 0, r.err
    (kept,) = r.json()["kept"]
    assert kept["ledger_id"] == 70 and kept["age_basis"] == "unknown"
    assert kept["kept"].startswith("of unknown age") and kept["age_ms"] is None
    assert r.json()["orphans"] == []
    plan = tmp_path / "p.json"
    r = run(capsys, "orphans", "--delete", *url, "--plan", plan, "-o", "json")
    assert r.code == 0 and r.json()["changes"] == [], r.err
    # asked for every age, it is an orphan
    r = run(capsys, "orphans", "--min-age", "0", *url, "-o", "json")
    assert r.code == 1 and [o["ledger_id"] for o in r.json()["orphans"]] == [70]

    # the store's own creation time of its node, a minute ago: too young for the default
    _set_ledger_70(world, int(time.time() * 1000) - 60_000)
    r = run(capsys, "orphans", *url, "-o", "json")
    (kept,) = r.json()["kept"]
    assert kept["age_basis"] == "rocksdb-created" and kept["kept"].startswith("too young")
    assert 60_000 <= kept["age_ms"] < 600_000
    r = run(capsys, "orphans", "--min-age", "30s", *url, "-o", "json")
    assert r.code == 1 and [o["ledger_id"] for o in r.json()["orphans"]] == [70]


def test_verify_says_an_orphans_age_and_its_basis(tmp_path: Path) -> None:
    from pulsarctl_py.verify import verify_topics

    world = build_world(tmp_path / "w", "orphan-ledger")
    with world.source() as source:
        (found,) = [f for f in verify_topics(source, None) if f.check == "orphan-ledger"]
    assert found.details["age_basis"] == "ledger-ctime"
    assert found.details["created_ms"] == found.details["ctime"] > 0
    assert "old, from the ledger metadata's ctime" in found.message


# -- what the store holds is input: leases of any shape ----------------------------------


@given(st.binary(max_size=200))
@settings(max_examples=200, deadline=None)
def test_any_lease_value_decodes_to_a_lease_that_holds(data: bytes) -> None:
    """A lease that does not decode still holds (nothing is judged on a guess)."""
    lease = leases.LeaseInfo.from_json("x", data)
    assert isinstance(lease.ledgers, list) and all(isinstance(i, int) for i in lease.ledgers)
    if lease.host == "?":
        assert lease.stale(int(time.time() * 1000), leases.host_name()) is None


@given(
    st.lists(st.integers(0, 2**63 - 1), max_size=5),
    st.lists(st.text(max_size=20), max_size=3),
    st.one_of(st.none(), st.integers(0, 2**62)),
)
@settings(max_examples=100, deadline=None)
def test_a_lease_round_trips(ledgers: list[int], topics: list[str], expires: int | None) -> None:
    lease = leases.LeaseInfo("n", "h", 12, "99", "compact", topics, ledgers, 5, expires)
    again = leases.LeaseInfo.from_json("n", json.dumps(lease.to_json()).encode())
    assert again == lease
