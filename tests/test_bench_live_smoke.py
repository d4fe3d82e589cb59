"""bench/live.py runs and prints its report (a smoke test: no speed is checked)."""

from __future__ import annotations

from pathlib import Path

from tests.cli_helpers import run_bench


def test_live_bench_quick_prints_the_report(tmp_path: Path) -> None:
    report = run_bench("live.py", "--quick", "--tmp", str(tmp_path), timeout=120)
    assert report["benchmark"] == "live" and report["quick"] is True
    assert report["ledger"]["entries"] == 2000
    for name in ("offline", "live_v3_pipelined", "live_v3_one_in_flight", "live_v2_pipelined"):
        figures = report["reads"][name]
        assert figures["entries"] == 2000
        assert figures["entries_per_s"] > 0 and figures["mb_per_s"] >= 0
    assert isinstance(report["goal"]["met"], bool)
    assert list(tmp_path.iterdir()) == []  # the generated files are removed
