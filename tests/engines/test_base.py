"""The engine boundary: plans from metadata, splits that pickle, the local engine's reduction."""

from __future__ import annotations

import functools
import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.engines import LocalEngine, Split, build_scan_plan
from pulsarctl_py.engines.base import KIND_COMPACTED, KIND_TOPIC


def test_plan_orders_compacted_first_then_the_tail_after_the_horizon():
    ledgers = [(3, 10, 1000), (5, 7, 700), (9, None, None)]
    plan = build_scan_plan(
        "persistent://t/n/x",
        ledgers,
        bookie_dirs=["b"],
        metadata_url="rocksdb://m",
        after=(3, 5),
        compacted=(8, 4, 400),
        split_entries=3,
    )
    kinds = [(s.kind, s.ledger_id, s.first_entry, s.last_entry) for s in plan.splits]
    assert kinds == [
        (KIND_COMPACTED, 8, 0, 2),
        (KIND_COMPACTED, 8, 3, 3),
        (KIND_TOPIC, 3, 6, 8),
        (KIND_TOPIC, 3, 9, 9),
        (KIND_TOPIC, 5, 0, 2),
        (KIND_TOPIC, 5, 3, 5),
        (KIND_TOPIC, 5, 6, 6),
    ]
    assert [s.ordinal for s in plan.splits] == list(range(len(plan.splits)))
    assert plan.entries == 4 + 4 + 7
    assert not plan.exact and "ledger 9" in plan.notes[0]
    assert pickle.loads(pickle.dumps(plan.splits[0])) == plan.splits[0]


def test_plan_stops_at_upto():
    plan = build_scan_plan("t", [(1, 10, 100), (2, 10, 100)], upto=(1, 4))
    assert [(s.ledger_id, s.first_entry, s.last_entry) for s in plan.splits] == [(1, 0, 4)]
    assert plan.bytes == 50


def _records(split: Split, seed: int):
    rnd = random.Random(seed * 1000 + split.ordinal)
    for entry in range(split.first_entry, split.last_entry + 1):
        key = b"k%d" % rnd.randrange(40)
        rank = split.ledger_id.to_bytes(8, "big") + entry.to_bytes(8, "big")
        yield key, rank, rnd.random() < 0.2


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), memory=st.sampled_from([None, 1, 600, 10**6]))
def test_latest_per_key_equals_a_dict_and_spill_changes_nothing(seed, memory):
    plan = build_scan_plan("t", [(1, 30, None), (4, 25, None)], split_entries=7)
    fn = functools.partial(_records, seed=seed)
    expected: dict[bytes, tuple[bytes, bool]] = {}
    for split in plan.splits:
        for key, rank, tomb in fn(split):
            if key not in expected or rank > expected[key][0]:
                expected[key] = (rank, tomb)
    engine = LocalEngine()
    with engine.latest_per_key(plan, fn, memory=memory) as table:
        assert table.spilled == (memory is not None and memory <= 600)
        assert len(table) == len(expected)
        assert table.live == sum(1 for _, t in expected.values() if not t)
        assert [(k, r, t) for k, r, t in table.items()] == sorted(
            (k, r, t) for k, (r, t) in expected.items()
        )
        for key, (rank, tomb) in expected.items():
            assert table.get(key) == (rank, tomb)
            assert table.keeps(key, rank) == (not tomb)
        assert table.get(b"absent") is None


def test_map_splits_keeps_plan_order_and_passes_winners():
    plan = build_scan_plan("t", [(1, 5, 50), (2, 5, 50)], split_entries=2)
    engine = LocalEngine()
    got = list(engine.map_splits(plan, lambda s: [s.ordinal]))
    assert got == list(range(len(plan.splits)))
    with engine.latest_per_key(plan, lambda s: [(b"k", bytes([s.ordinal]), False)]) as table:
        kept = list(
            engine.map_splits(plan, lambda s, w: [w.keeps(b"k", bytes([s.ordinal]))], table)
        )
    assert kept == [False] * (len(plan.splits) - 1) + [True]


def _first_wins_unless_tombstoned(state, rank, tomb):
    # an order-dependent rule: a key keeps its first value until a tombstone clears it
    if state is None or state[1]:
        return (rank, tomb)
    return (rank, True) if tomb else state


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), memory=st.sampled_from([None, 1, 900]))
def test_fold_runs_in_plan_order_with_or_without_spill(seed, memory):
    plan = build_scan_plan("t", [(1, 30, None), (4, 25, None)], split_entries=7)
    fn = functools.partial(_records, seed=seed)
    expected: dict[bytes, tuple[bytes, bool]] = {}
    for split in plan.splits:
        for key, rank, tomb in fn(split):
            expected[key] = _first_wins_unless_tombstoned(expected.get(key), rank, tomb)
    with LocalEngine().latest_per_key(
        plan, fn, memory=memory, fold=_first_wins_unless_tombstoned
    ) as table:
        assert sorted(expected.items()) == [(k, (r, t)) for k, r, t in table.items()]
        assert all(table.get(k) == v for k, v in expected.items())


def _entries_slowly(split: Split):
    # later splits finish first, so that completion order is not plan order
    import time

    time.sleep(0.01 * (split.ordinal % 3 == 0))
    for entry in range(split.first_entry, split.last_entry + 1):
        yield split.ledger_id, entry


def _fails_at_five(split: Split):
    from pulsarctl_py.errors import DataError

    if split.ordinal == 5:
        raise DataError(f"split {split.ordinal} is damaged")
    yield split.ordinal


def test_map_splits_gives_plan_order_and_one_line_errors_on_every_engine(engine):
    from pulsarctl_py.errors import DataError

    plan = build_scan_plan("t", [(1, 40, None), (2, 9, None)], split_entries=3)
    if engine.name == "spark":
        engine.wave = 2  # many waves, two in flight
    expected = [(1, e) for e in range(40)] + [(2, e) for e in range(9)]
    assert list(engine.map_splits(plan, _entries_slowly)) == expected
    got = []
    with pytest.raises(DataError, match=r"^split 5 is damaged$"):
        for item in engine.map_splits(plan, _fails_at_five):
            got.append(item)
    assert got == list(range(len(got))) and len(got) <= 5
    # the engine still runs plans after a failed one
    assert list(engine.map_splits(plan, _entries_slowly)) == expected
