"""bench/seek.py runs and prints its report (a smoke test: no speed is checked, reads are)."""

from __future__ import annotations

from pulsarctl_py.seek.probe import READ_SLACK
from tests.support.cli_helpers import run_bench


def test_seek_bench_quick_prints_the_report() -> None:
    report = run_bench("seek.py", "--quick", "--targets", "5", timeout=300)
    assert report["benchmark"] == "seek" and report["quick"] is True
    assert [r["entries"] for r in report["sizes"]] == [10**3, 10**4, 10**5]
    for size in report["sizes"]:
        assert size["linear_scan"]["reads"] == size["entries"]
        for rule, bound in (
            ("broker_narrowed", READ_SLACK["broker"]),
            ("broker_whole_topic", READ_SLACK["broker"]),
            ("kop", READ_SLACK["kop"]),
            ("index", READ_SLACK["index"]),
            ("compacted", READ_SLACK["compacted"]),
        ):
            row = size[rule]
            assert row["max_reads_over_ceil_log2_range"] <= bound == row["bound_over_ceil_log2"]
            assert row["reads_max"] <= row["ceil_log2_range_max"] + bound
            assert row["within_bound"] is True
    assert report["targets"]["reads_within_rule_bounds"]["pass"] is True
