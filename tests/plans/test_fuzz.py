"""Hypothesis mutates a real plan (tests/support/plan_mutations.py): whatever a plan file says,
apply and undo write nothing outside the plan's store, leave nothing behind when they
refuse, undo what they applied, and fail only with a one-line LedgerctlError.

The long run of the same mutations is scripts/fuzz_plans.py (figures in docs/guide.md).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.plan_mutations import Arena, bad_references, mutate, point_cursor, point_list


@pytest.fixture(scope="module", params=["db", "idx"])
def arena(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Arena:
    return Arena.build(tmp_path_factory.mktemp(f"arena-{request.param}"), index=request.param)


def test_the_unmutated_plan_applies_and_undoes(arena: Arena) -> None:
    """The mutations start from a plan that works (so the fuzz reaches apply and undo)."""
    assert arena.run(arena.plan_doc).stage == "applied"


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_mutated_plan_never_writes_outside_its_store(arena: Arena, seed: int) -> None:
    arena.run(mutate(arena, random.Random(seed)))


@pytest.fixture(scope="module")
def fixed_arena(tmp_path_factory: pytest.TempPathFactory) -> Arena:
    """An arena of its own for the tests of fixed mutants (every run leaves it as it was)."""
    return Arena.build(tmp_path_factory.mktemp("arena-fixed"))


def test_mutations_reach_every_stage(fixed_arena: Arena) -> None:
    """Over a fixed set of seeds the mutants are refused at load, refused at apply, and
    applied (a fuzz that only ever met the digest would test nothing behind it)."""
    arena = fixed_arena
    stages: set[str] = set()
    for seed in range(300):
        stages.add(arena.run(mutate(arena, random.Random(seed))).stage)
        if stages == {"load", "apply", "applied"}:
            break
    assert stages == {"load", "apply", "applied"}


#: (how the plan is edited, the ledger named, whether the plan may then apply): orders'
#: compaction at its own compacted ledger 30 and its list at a ledger it lists (12) apply;
#: a ledger that does not exist, the orphan the same plan deletes (70), another
#: application's (60), its cursor ledger (20), a compacted ledger (30) and a partition's
#: data ledger (80) in the list are refused
POINTED = [
    ("compacted", 30, True),
    ("compacted", 999, False),
    ("compacted", 70, False),
    ("compacted", 60, False),
    ("cursor-ledger", 20, False),
    ("list", 12, True),
    ("list", 2**40, False),
    ("list", 30, False),
    ("list", 80, False),
]


def test_a_plan_pointed_at_a_ledger_applies_only_when_it_is_the_topics(
    fixed_arena: Arena,
) -> None:
    """The mutations that point a cursor or orders' ledger list at a ledger (the digest
    made again), one by one: refused at apply unless the ledger is the topic's, and an
    applied one leaves no reference the store does not hold (Arena.run checks it)."""
    arena = fixed_arena
    assert arena.bad_before == set() == bad_references(arena.world.metadata_url)
    for how, ledger, applies in POINTED:
        doc = point_cursor(arena, ledger, how) if how != "list" else point_list(arena, ledger)
        outcome = arena.run(doc)
        assert outcome.stage == ("applied" if applies else "apply"), (how, ledger, outcome)
        if not applies:
            assert str(ledger) in (outcome.error or "") and "refused" in (outcome.error or "")
