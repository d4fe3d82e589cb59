"""bench/scan.py runs and prints the report's keys (a smoke test: no speed is checked)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli_helpers import run_bench


def test_scan_bench_quick_prints_the_report(tmp_path: Path) -> None:
    report = run_bench("scan.py", "--quick", "--tmp", str(tmp_path), timeout=120)
    assert report["benchmark"] == "scan"
    assert report["quick"] is True
    assert {"cpus", "cpu_model", "python"} <= report["machine"].keys()
    ledger = report["ledger"]
    assert ledger["entries"] == 20_000
    assert ledger["messages"] > ledger["entries"]
    assert ledger["digest_type"] == "CRC32C"
    for size in ("large", "small"):
        generated = report["generation"][size]
        assert {"entries", "seconds", "entry_log_files", "entry_log_bytes"} <= generated.keys()
    scans = report["scans"]
    for name in (
        "io_floor",
        "locate_bem",
        "full_decode",
        "store_read_only",
        "python_lower_bound",
    ):
        assert scans[name]["entries"] == 20_000
        assert scans[name]["entries_per_s"] > 0
        assert "vs_io_floor" in scans[name]
    assert scans["full_decode"]["messages_per_s"] > 0
    for scan in ("entry", "full"):
        rss = report["peak_rss"][scan]
        assert rss["entries_small"] == 2_000
        assert rss["entries_large"] == 20_000
        assert rss["peak_rss_mib_small"] > 0 and rss["peak_rss_mib_large"] > 0
        assert "growth" in rss
    targets = report["targets"]
    for name in ("locate_bem_vs_io_floor", "rss_flat"):
        assert {"metric", "target", "measured", "pass"} <= targets[name].keys()
        assert isinstance(targets[name]["pass"], bool)
    assert list(tmp_path.iterdir()) == []  # the generated bookie dirs are removed
