"""bench/live.py runs and prints its report (a smoke test: no speed is checked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.cli_helpers import run_bench
from tests.support.fixtures.sandbox import run_script


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


def test_live_bench_on_the_sandbox_prints_the_report(sandbox: Any) -> None:
    """bench/live.py --sandbox at a small size: BookKeeper's Java client writes and reads a
    ledger, ledgerctl's live store reads it from the real bookies, and the offline store
    from a stopped bookie's directories; the bookies run again after."""
    report = run_bench(
        "live.py", "--sandbox", str(sandbox.dir), "--entries", "300", "--runs", "1", timeout=900
    )
    sandbox.reload()  # the bookies were stopped and started again: new pids
    assert report["benchmark"] == "live-sandbox"
    assert report["ledger"]["entries"] == 300 and report["runs"] == 1
    for name in ("java", "live", "offline"):
        spread = report["entries_per_s"][name]
        assert 0 < spread["min"] <= spread["median"] <= spread["max"]
    assert isinstance(report["goal"]["met"], bool) and report["live_vs_java"] > 0
    status = json.loads(run_script("status", str(sandbox.dir)))
    assert all(status["bookies"].values()), status
