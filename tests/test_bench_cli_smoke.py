"""bench/cli.py --quick runs the commands and prints the report (a smoke test: no speed is
checked, only the report's shape and that every ratio is a positive number)."""

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


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def test_cli_bench_quick_prints_the_report(tmp_path: Path) -> None:
    report = run_bench("cli.py", "--quick", "--tmp", str(tmp_path), timeout=120)
    assert report["benchmark"] == "cli"
    assert report["quick"] is True and report["runs"] == 1
    assert {"cpus", "cpu_model", "python"} <= report["machine"].keys()
    assert report["large"]["entries"] == 2000 and report["small"]["entries"] == 200
    for size in ("large", "small"):
        data = report["data"][size]
        assert data["entries"] == report[size]["entries"]
        assert data["messages"] > data["entries"]
        assert data["reused"] is False
    large = report["large"]["measurements"]
    small = report["small"]["measurements"]
    assert set(large) == {"startup", *COMMANDS, *LOOPS}
    assert set(small) == set(COMMANDS)
    for measurements in (large, small):
        for name, item in measurements.items():
            cpu = item["cpu_seconds"]
            assert 0 < cpu["min"] <= cpu["median"] <= cpu["max"], name
            assert _positive(item["entries_per_cpu_s"]), name
    for name in COMMANDS:
        assert _positive(large[name]["peak_rss_mib"]) and _positive(small[name]["peak_rss_mib"])
    # one JSON line per entry from inspect, at least one table line per entry
    assert large["entry_jsonl"]["lines"] == large["jsonl"]["lines"] == 2000
    assert large["table"]["lines"] >= 2000
    assert large["verify"]["lines"] == 0  # the generated topic is healthy: no findings
    ratios = report["ratios"]
    assert set(ratios) == set(RATIOS)
    for name in RATIOS:
        ratio = ratios[name]
        assert {"metric", "goal", "measured", "pass"} <= ratio.keys(), name
        assert _positive(ratio["measured"]), name
        assert isinstance(ratio["pass"], bool), name
    assert set(ratios["rss_large/rss_small"]["per_command"]) == set(COMMANDS)
    assert list(tmp_path.iterdir()) == []  # the generated directories are removed
