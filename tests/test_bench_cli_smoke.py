"""bench/cli.py --quick runs the commands and prints the report (a smoke test: no speed is
checked, only the report's shape, that every ratio is a positive number, and that every
layout's directory is generated and read by the commands)."""

from __future__ import annotations

from pathlib import Path

from tests.cli_helpers import run_bench

COMMANDS = ("verify", "entry_jsonl", "jsonl", "table")
LOOPS = ("full_decode_loop", "head_scan", "floor", "read_once")
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
        assert set(large) == {*COMMANDS, *LOOPS}, key
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
    assert list(tmp_path.iterdir()) == []  # the generated directories are removed
