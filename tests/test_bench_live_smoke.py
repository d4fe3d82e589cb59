"""bench/live.py runs and prints its report (a smoke test: no speed is checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "live.py"


def test_live_bench_quick_prints_the_report(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--tmp", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["benchmark"] == "live" and report["quick"] is True
    assert report["ledger"]["entries"] == 2000
    for name in ("offline", "live_v3_pipelined", "live_v3_one_in_flight", "live_v2_pipelined"):
        figures = report["reads"][name]
        assert figures["entries"] == 2000
        assert figures["entries_per_s"] > 0 and figures["mb_per_s"] >= 0
    assert isinstance(report["goal"]["met"], bool)
    assert list(tmp_path.iterdir()) == []  # the generated files are removed
