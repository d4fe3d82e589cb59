"""Shared pytest setup.

Hypothesis runs derandomized and without an example database by default, so that CI
runs are deterministic and fast; HYPOTHESIS_PROFILE=dev explores more and remembers
failing examples.
"""

from __future__ import annotations

import os

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
from tests.fixtures.spark import engine, spark  # noqa: E402, F401
