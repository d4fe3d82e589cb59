"""bench/write.py runs against the session's sandbox and prints its report (a smoke test:
no speed is checked; BookKeeper's own benchmark is left out to keep it short)."""

from __future__ import annotations

from tests.support.cli_helpers import run_bench


def test_write_bench_writes_and_reports(sandbox) -> None:
    report = run_bench(
        "write.py",
        "--sandbox",
        str(sandbox.dir),
        "--entries",
        "500",
        "--rounds",
        "1",
        "--no-bookkeeper",
        timeout=300,
    )
    assert report["entries"] == 500 and len(report["rounds"]) == 1
    ours = report["rounds"][0]["ledgerctl"]
    assert ours["entries"] == 500 and ours["entries_per_s"] > 0
    assert "ensemble 3, write quorum 2, ack quorum 2, CRC32 digest" in ours["settings"]
    assert "ratio" not in report
