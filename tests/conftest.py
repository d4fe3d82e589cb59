"""Shared pytest setup.

Hypothesis runs derandomized and without an example database by default, so that CI
runs are deterministic and fast; HYPOTHESIS_PROFILE=dev explores more and remembers
failing examples.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# the shared Spark session and the engine-parametrized fixture of the behaviour suite
# the real Pulsar cluster of scripts/sandbox, and the data the official clients put in it
from tests.support.fixtures.sandbox import sandbox  # noqa: E402, F401
from tests.support.fixtures.spark import engine, spark  # noqa: E402, F401

# one real ZooKeeper per session (and per test where a test disturbs it), for every test
# that asks for the zk_* fixtures, wherever its module lives
from tests.support.fixtures.zookeeper_store import (  # noqa: E402, F401
    private_zk_server,
    restored_zk,
    scratch_zk,
    zk_connect,
    zk_server,
)


@pytest.fixture(scope="session")
def sandbox_world(sandbox):  # noqa: F811
    from tests.support.sandbox_world import build_world

    return build_world(sandbox)


def pytest_collection_modifyitems(items):
    # every test that uses the sandbox carries the marker, so `-m sandbox` selects them
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "sandbox" in names:
            item.add_marker(pytest.mark.sandbox)
        # the suite runs on two pytest-xdist workers (pyproject's addopts, --dist loadgroup):
        # the tests of one costly session fixture share a worker, so that the cluster, the
        # Spark session or the ZooKeeper server is started once
        # (any other test goes with its module, so that a module fixture is built once)
        group = next(
            (g for g in ("sandbox", "spark", "engine", "zk_server") if g in names),
            item.nodeid.split("::")[0],
        )
        item.add_marker(pytest.mark.xdist_group(group))
