"""bench/tiered.py runs on the session sandbox and prints its report (a smoke test: no
speed is checked; both sides read every entry of the same ledgers)."""

from __future__ import annotations

from typing import Any

from tests.support.cli_helpers import run_bench


def test_tiered_bench_prints_the_report(offload_sandbox: Any) -> None:
    report = run_bench(
        "tiered.py",
        "--sandbox",
        str(offload_sandbox.dir),
        "--entries",
        "50",
        "--runs",
        "1",
        timeout=300,
    )
    assert report["benchmark"] == "tiered" and report["entries"] == 50
    assert set(report["results"]) == {"filesystem", "s3"}
    for kind, result in report["results"].items():
        assert result["bookies"]["entries"] == result["tiered"]["entries"] == 50, kind
        assert result["tiered"]["entries_per_s"]["median"] > 0
        assert result["tiered_over_bookies"] > 0
