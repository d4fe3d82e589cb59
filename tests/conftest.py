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
from tests.fixtures.sandbox import sandbox  # noqa: E402, F401
from tests.fixtures.spark import engine, spark  # noqa: E402, F401


@pytest.fixture(scope="session")
def sandbox_world(sandbox):  # noqa: F811
    from tests.sandbox_world import build_world

    return build_world(sandbox)


def pytest_collection_modifyitems(items):
    # every test that uses the sandbox carries the marker, so `-m sandbox` selects them
    for item in items:
        if "sandbox" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.sandbox)
