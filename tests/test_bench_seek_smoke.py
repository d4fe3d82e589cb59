"""bench/seek.py runs and prints its report (a smoke test: no speed is checked, reads are)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "seek.py"


def test_seek_bench_quick_prints_the_report() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--targets", "5"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["benchmark"] == "seek" and report["quick"] is True
    assert [r["entries"] for r in report["sizes"]] == [10**3, 10**4, 10**5]
    for size in report["sizes"]:
        assert size["linear_scan"]["reads"] == size["entries"]
        for rule in ("broker_narrowed", "broker_whole_topic"):
            assert size[rule]["max_over_log2_range_plus_2"] <= 1
        assert size["index"]["reads_max"] <= size["index"]["log2_n_plus_2"] + 1
    assert report["targets"]["reads_within_log2_range_plus_3"]["pass"] is True
