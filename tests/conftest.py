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
from tests.support.fixtures.sandbox import (  # noqa: E402, F401
    REUSE_ENV,
    offload_sandbox,
    sandbox,
)
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


@pytest.fixture(scope="session")
def offload_world(offload_sandbox):  # noqa: F811
    """Topics offloaded by the sandbox's real offloaders (filesystem BLOCK and RECORD, S3),
    their BookKeeper copies deleted, with what a broker reader returned for each."""
    from tests.support.offload_world import build

    return build(offload_sandbox)


def pytest_collection_modifyitems(items):
    # every test that uses the sandbox carries the marker, so `-m sandbox` selects them
    for item in items:
        if "sandbox" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.sandbox)
    # the runbooks' rehearsals act on the whole shared cluster as an operator would (a
    # broker restarted without its interceptors, `orphans --delete --min-age 0` of every
    # orphan, offloads): they run last, after the modules that expect the cluster as set up
    items.sort(key=lambda item: item.nodeid.startswith(LAST))


#: runs after every other test (see pytest_collection_modifyitems)
LAST = "tests/cluster/sandbox/test_rehearsals.py"


#: the suite runs on two pytest-xdist workers (pyproject's addopts): the tests of one real
#: component's folder share a worker, so that the component (a session fixture) is started
#: once, and go first, as the longest units of work; any other module goes whole to a
#: worker, so that a module fixture is built once
SHARED_WORKER = ("tests/cluster/sandbox/", "tests/cluster/spark/", "tests/cluster/zookeeper/")
#: modules outside tests/cluster/sandbox/ that use the session sandbox: in its unit of work,
#: so that no further cluster starts
WITH_SANDBOX = ("tests/bench/test_tiered.py",)
#: the sandbox's modules are two units of work, each with a cluster of its own, one on each
#: worker: as one unit they took 18 minutes alone and 24 beside the other worker's tests
#: (the suite's budget is 20). These go to the second cluster: the rehearsals and the
#: writes that restart the broker and bookies, and what only needs a cluster; the first
#: keeps every module of the session's built worlds (sandbox_world, offload_world) and
#: ``verify --all`` on the cluster they fill
SANDBOX_SECOND = tuple(
    f"tests/cluster/sandbox/{name}.py"
    for name in (
        "test_rehearsals", "test_writes", "test_judgments", "test_bench_live",
        "test_live_writes", "test_subscription_ops", "test_placement", "test_undo_moved_on",
        "test_seek", "test_index", "test_broker_view", "test_cluster_pairs",
        "test_broker_admin", "test_bench_write",
    )
)  # fmt: skip
SANDBOX_SECOND_UNIT = "tests/cluster/sandbox/ (second cluster)"


def pytest_xdist_make_scheduler(config, log):
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(OrderedDict):
        def __setitem__(self, scope, nodeids):
            super().__setitem__(scope, nodeids)
            for first in reversed((SHARED_WORKER[0], SANDBOX_SECOND_UNIT, *SHARED_WORKER[1:])):
                if first in self:
                    self.move_to_end(first, last=False)

    class ByComponent(LoadScopeScheduling):
        """``--dist loadfile``, with each folder of ``SHARED_WORKER`` one unit of work.

        (pytest-xdist's ``loadgroup`` reads ``xdist_group`` marks through ``Item._nodeid``,
        which pytest 9.2 no longer reads: the marks group nothing.)"""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            self.workqueue = LongestFirst()

        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            if path.startswith(SANDBOX_SECOND) and not os.environ.get(REUSE_ENV):
                # a sandbox started by hand is one cluster: its tests stay one unit
                return SANDBOX_SECOND_UNIT
            if path.startswith(WITH_SANDBOX):
                return SHARED_WORKER[0]
            return next((f for f in SHARED_WORKER if path.startswith(f)), path)

    return ByComponent(config, log)
