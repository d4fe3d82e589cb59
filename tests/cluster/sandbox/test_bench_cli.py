"""bench/cli.py --quick runs the commands and prints the report (a smoke test: no speed is
checked, only the report's shape, that every ratio is a positive number, and that every
layout's directory is generated and read by the commands); and its sandbox row, tiny, on
the test session's sandbox (real bookies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.cli_helpers import run_bench

COMMANDS = ("verify", "entry_jsonl", "jsonl", "table")
LOOPS = ("full_decode_loop", "head_scan", "floor", "read_once")
#: on the test bookie's rows, the directory floor too (context: their floor is the
#: protocol read)
LIVE_LOOPS = (*LOOPS, "dir_floor")
RATIOS = (
    "verify/floor",
    "entry_jsonl/floor",
    "jsonl/full_decode_loop",
    "table/jsonl",
    "rss_large/rss_small",
)
#: the rows of the smoke run: every layout once, every digest type once
ROWS = {
    "db/crc32c",
    "db-dirs/dummy",
    "interleaved/crc32",
    "sorted/mac",
    "scan/crc32c",
    "live/crc32c",
}


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def test_cli_bench_quick_prints_the_report(tmp_path: Path) -> None:
    args = ["--quick", "--tmp", str(tmp_path), "--rows", ",".join(sorted(ROWS))]
    report = run_bench("cli.py", *args, timeout=300)
    assert report["benchmark"] == "cli"
    assert report["quick"] is True and report["runs"] == 1
    assert {"cpus", "cpu_model", "python"} <= report["machine"].keys()
    assert len(report["load_average"]["before"]) == len(report["load_average"]["after"]) == 3
    assert report["entries"] == {"large": 2000, "small": 200}
    assert 0 < report["startup"]["cpu_seconds"]["min"]
    assert set(report["rows"]) == set(report["goals"]) == ROWS
    for key, row in report["rows"].items():
        for size in ("large", "small"):
            data = row["data"][size]
            assert data["entries"] == row[size]["entries"] == report["entries"][size]
            assert data["messages"] > data["entries"]
            # a live row serves the files of the db row of its digest type
            assert data["reused"] is key.startswith("live/"), key
        large = row["large"]["measurements"]
        small = row["small"]["measurements"]
        loops = LIVE_LOOPS if key.startswith("live/") else LOOPS
        assert set(large) == {*COMMANDS, *loops}, key
        assert set(small) == set(COMMANDS), key
        for measurements in (large, small):
            for name, item in measurements.items():
                cpu = item["cpu_seconds"]
                assert 0 < cpu["min"] <= cpu["median"] <= cpu["max"], (key, name)
                assert _positive(item["entries_per_cpu_s"]), (key, name)
        for name in COMMANDS:
            assert _positive(large[name]["peak_rss_mib"]) and _positive(small[name]["peak_rss_mib"])
        # one JSON line per entry from inspect, at least one table line per entry
        assert large["entry_jsonl"]["lines"] == large["jsonl"]["lines"] == 2000, key
        assert large["table"]["lines"] >= 2000, key
        # verify: no findings, but the lost index and the unverified DUMMY digests
        lost, dummy = key.startswith("scan/"), key.endswith("/dummy")
        assert large["verify"]["lines"] == lost + dummy, key
        ratios = row["ratios"]
        assert set(ratios) == set(RATIOS)
        for name in RATIOS:
            ratio = ratios[name]
            assert {"metric", "goal", "measured", "pass"} <= ratio.keys(), (key, name)
            assert _positive(ratio["measured"]), (key, name)
            assert isinstance(ratio["pass"], bool), (key, name)
            assert report["goals"][key][name] is ratio["pass"]
        assert set(ratios["rss_large/rss_small"]["per_command"]) == set(COMMANDS)
        if key.startswith("live/"):
            assert set(row["context"]) == {"verify/dir_floor", "entry_jsonl/dir_floor"}
            assert all(_positive(v) for v in row["context"].values()), key
    assert list(tmp_path.iterdir()) == []  # the generated directories are removed


def test_cli_bench_sandbox_row(sandbox: Any, tmp_path: Path) -> None:
    """The sandbox row at 200 entries on the session's sandbox (left running): the ledger
    written to the real bookies by ledgerctl's writer, the commands and the floor run on
    it through the bookie protocol, no broker loading the row's topic; a second run
    reuses the ledger it wrote (--data). The table and the library loops are left to the
    bench (the same code as on the live rows above), to keep this test short."""
    args = ["--layouts", "sandbox", "--sandbox", str(sandbox.dir), "--digests", "crc32c"]
    args += ["--entries", "200", "--runs", "1", "--data", str(tmp_path)]
    only = "verify,entry_jsonl,jsonl,floor"
    report = run_bench("cli.py", *args, "--only", only, timeout=300)
    assert set(report["rows"]) == {"sandbox/crc32c"}
    row = report["rows"]["sandbox/crc32c"]
    for size, count in (("large", 200), ("small", 20)):
        data = row["data"][size]
        assert data["entries"] == count and data["reused"] is False
        assert data["topic"] == f"persistent://public/bench-cli-crc32c/cli-{count}"
        assert data["quorums"] == [3, 2, 2] and len(data["ensemble"]) == 3
    large = row["large"]["measurements"]
    assert set(large) == set(only.split(","))
    assert large["entry_jsonl"]["lines"] == large["jsonl"]["lines"] == 200
    assert large["verify"]["lines"] == 0  # no finding: every digest verified
    assert set(row["ratios"]) == {"verify/floor", "entry_jsonl/floor", "rss_large/rss_small"}
    assert all(_positive(r["measured"]) for r in row["ratios"].values())
    again = run_bench("cli.py", *args, "--only", "floor", timeout=300)
    data = again["rows"]["sandbox/crc32c"]["data"]
    assert data["large"]["reused"] is True and data["small"]["reused"] is True
    assert data["large"]["ledger_id"] == row["data"]["large"]["ledger_id"]
