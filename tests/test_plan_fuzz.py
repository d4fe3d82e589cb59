"""Hypothesis mutates a real plan (tests/plan_mutations.py): whatever a plan file says,
apply and undo write nothing outside the plan's store, leave nothing behind when they
refuse, undo what they applied, and fail only with a one-line LedgerctlError.

The long run of the same mutations is scripts/fuzz_plans.py (figures in docs/guide.md).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.plan_mutations import Arena, mutate


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


def test_mutations_reach_every_stage(tmp_path: Path) -> None:
    """Over a fixed set of seeds the mutants are refused at load, refused at apply, and
    applied (a fuzz that only ever met the digest would test nothing behind it)."""
    arena = Arena.build(tmp_path)
    stages: set[str] = set()
    for seed in range(300):
        stages.add(arena.run(mutate(arena, random.Random(seed))).stage)
        if stages == {"load", "apply", "applied"}:
            break
    assert stages == {"load", "apply", "applied"}
