"""bench/listings.py runs and prints its report (a smoke test: no speed is checked)."""

from __future__ import annotations

from tests.support.cli_helpers import run_bench


def test_listings_bench_quick_prints_the_report() -> None:
    report = run_bench("listings.py", "--quick", timeout=300)
    assert report["benchmark"] == "listings" and report["quick"] is True
    assert report["store"]["topics"] == 2_000
    for name in (
        "topic_list",
        "ledger_list",
        "topic_floor",
        "topic_scan",
        "ledger_floor",
        "raw_scan",
    ):
        row = report["measurements"][name]
        assert row["cpu_seconds"]["min"] > 0 and row["peak_rss_mib"] > 0
    assert set(report["ratios"]) == {
        "topic_list/ledger_floor",
        "topic_list/topic_floor",
        "topic_list/topic_scan",
        "ledger_list/ledger_floor",
    }
    assert report["goals"]["topic_list/ledger_floor"]["goal"] == "<= 2.0"
