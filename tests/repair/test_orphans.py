"""pulsarctl_py.repair.orphans: the listing ``ledgerctl orphans`` renders."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from pulsarctl_py.repair.orphans import list_orphans
from tests.support.verify_world import build_world


def test_list_orphans_opens_the_stores_and_splits_orphans_from_kept(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "orphan-ledger")
    listing = list_orphans(world.metadata_url, [world.bookie_dir])
    assert [o.ledger_id for o in listing.orphans] == [70] and listing.kept == []
    doc = listing.to_json()
    assert list(doc) == ["orphans", "kept", "min_age_ms"]
    assert [o["ledger_id"] for o in doc["orphans"]] == [70] and doc["min_age_ms"] == 0
    # a minimum age older than the ledger (made at T0): kept, with why
    kept = list_orphans(world.metadata_url, [world.bookie_dir], min_age_ms=100 * 365 * 86_400_000)
    assert kept.orphans == [] and [o.ledger_id for o in kept.kept] == [70]
    assert kept.kept[0].kept
    # without bookie storage the cursor ledger of orders cannot be read: orders keeps 70
    assert list_orphans(world.metadata_url, None).orphans == []


def test_a_young_orphan_on_a_shared_store_is_judged_again_once_settled(monkeypatch):
    """On a store a running cluster shares, an orphan younger than SETTLE_MS is judged
    again on fresh reads once it is that old: one a broker referenced meanwhile (its
    compaction moved the cursor) is not listed; one still unreferenced is. Never on a
    store only one process opens, and not when every orphan is older."""
    import contextlib

    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair import orphans

    def orphan(lid: int, age: int, kept: str | None = None) -> orphans.Orphan:
        return orphans.Orphan(
            lid,
            f"/l/{lid}",
            "compacted",
            "CLOSED",
            0,
            0,
            0,
            None,
            None,
            0,
            age,
            "zookeeper-ctime",
            kept,
        )

    looks = [
        [orphan(1, 200), orphan(2, 250), orphan(3, 10**6), orphan(4, 100, "a plan names it")],
        [orphan(2, 3100), orphan(3, 10**6), orphan(4, 3000, "a plan names it"), orphan(5, 50)],
    ]
    calls: list[int] = []
    paused: list[float] = []

    def judge(draft, source, *, min_age_ms=0, now_ms=None):
        calls.append(min_age_ms)
        return iter(looks[len(calls) - 1])

    class Source:
        metadata = object()

    @contextlib.contextmanager
    def opened(*args, **kwargs):
        yield Source()

    monkeypatch.setattr(orphans, "judge_orphans", judge)
    monkeypatch.setattr(orphans, "Draft", lambda store: types.SimpleNamespace(store=store))
    monkeypatch.setattr(orphans, "_pause", paused.append)
    monkeypatch.setattr(LedgerSource, "open", opened)
    monkeypatch.setattr(orphans, "_shared", lambda store: True)
    got = orphans.list_orphans("zk:127.0.0.1:1", None)
    # 1 was referenced meanwhile; 5 appeared after the first look (judged next time)
    assert [o.ledger_id for o in got.orphans] == [2, 3]
    assert [o.ledger_id for o in got.kept] == [4]
    assert len(calls) == 2 and paused == [pytest.approx(2.8)]
    calls.clear()
    monkeypatch.setattr(orphans, "_shared", lambda store: False)  # one process's RocksDB
    got = orphans.list_orphans("rocksdb:/x", None)
    assert [o.ledger_id for o in got.orphans] == [1, 2, 3] and len(calls) == 1
    # a deletion plan judges the same way: what a broker referenced meanwhile is not
    # deleted (the plan's compare-and-set checks the ledger's node, which that does not
    # change)
    calls.clear()
    monkeypatch.setattr(orphans, "_shared", lambda store: True)

    class Plan:
        def __init__(self) -> None:
            self.store = object()
            self.warnings: list[str] = []
            self.repairs: list[dict] = []
            self.deleted: list[str] = []
            self.unreachable = types.SimpleNamespace(
                ledgers=[], size=0, entries=0, entries_unknown=False, add_messages=lambda n: None
            )

        def delete(self, path, kind, why):
            self.deleted.append(path)

    monkeypatch.setattr(orphans, "count_messages", lambda *a, **k: 0)
    monkeypatch.setattr("pulsarctl_py.plans.draft.draft_deletion", lambda *a: False)
    plan = Plan()
    deleted = orphans.delete_orphans(plan, None)
    assert [o.ledger_id for o in deleted] == [2, 3] and plan.deleted == ["/l/2", "/l/3"]
    assert len(calls) == 2
