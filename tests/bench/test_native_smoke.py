"""bench/native.py --quick measures native entry points on the command as typed (a smoke
test: no speed is checked, only the report's shape, that each entry point measured is one
its command called, and that on and off wrote the same lines)."""

from __future__ import annotations

from pathlib import Path

from pulsarctl_py.decoders.speedups import STAND_INS
from tests.support.cli_helpers import run_bench

#: a few cells, to keep the test short: one row's verify and entry lines (one data
#: directory to write), and the compaction (bench/compact.py's input)
CELLS = ("verify@db/crc32c", "entry_jsonl@db/crc32c", "compaction@100")
#: what each cell must call (what the fast paths of docs/performance.md name)
CALLED = {
    "verify@db/crc32c": {"verify_heads", "payload_items"},
    "entry_jsonl@db/crc32c": {"scan_heads", "entry_lines"},
    "compaction@100": {"compact_offer", "compact_keep"},
}


def _stats(item: dict[str, float]) -> bool:
    return 0 < item["min"] <= item["median"] <= item["max"]


def test_native_bench_quick_prints_the_report(tmp_path: Path) -> None:
    args = ["--quick", "--tmp", str(tmp_path), "--cells", ",".join(CELLS)]
    report = run_bench("native.py", *args, timeout=300)
    assert report["benchmark"] == "native" and report["quick"] is True
    assert report["runs"] == 1 and report["entries"] == 500
    assert {"cpus", "cpu_model", "python"} <= report["machine"].keys()
    assert len(report["load_average"]["before"]) == len(report["load_average"]["after"]) == 3
    assert set(report["cells"]) == set(CELLS)
    for cell, called in CALLED.items():
        assert called <= set(report["cells"][cell]), cell
        assert set(report["cells"][cell]) <= STAND_INS.keys(), cell
    measured = {(item["entry_point"], item["cell"]) for item in report["entry_points"]}
    wanted = {(name, cell) for cell, calls in report["cells"].items() for name in calls}
    assert measured == wanted  # every entry point a cell called, and only those
    called = {name for calls in report["cells"].values() for name in calls}
    assert set(report["not_called"]) == STAND_INS.keys() - called
    for item in report["entry_points"]:
        assert {"entry_point", "command", "argv", "layout", "digest", "pays", "calls"} <= set(item)
        assert item["command"] == item["cell"].split("@")[0]
        assert item["calls"] == report["cells"][item["cell"]][item["entry_point"]] > 0
        for clock in ("wall_seconds", "cpu_seconds"):
            figures = item[clock]
            assert _stats(figures["on"]) and _stats(figures["off"]), item["entry_point"]
            ratio = figures["ratio_off_over_on"]
            assert _stats(ratio["paired"]) and ratio["median_over_median"] > 0
        assert isinstance(item["pays"], bool)
    assert list(tmp_path.iterdir()) == []  # the generated data is removed
