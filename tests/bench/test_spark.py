"""bench/spark.py runs (--quick: one tiny topic, the local engine and one Spark session)
and prints its report; its crossover arithmetic is checked on given totals. No speed is
checked."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.support.cli_helpers import run_bench

BENCH = Path(__file__).resolve().parents[2] / "bench" / "spark.py"


def _bench_module():
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_spark", BENCH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH.parent))


def test_crossover_interpolates_where_spark_starts_to_win() -> None:
    bench = _bench_module()
    crossover, extrapolated = bench.crossover, bench.extrapolated
    # local 1 s per 1,000 entries; Spark 10 s to start, then 0.5 s per 1,000
    sizes = [1_000, 10_000, 40_000]
    local = [n / 1000 for n in sizes]
    spark = [10 + n / 2000 for n in sizes]
    assert crossover(sizes, local, spark) == 20_000
    assert crossover(sizes, [s + 100 for s in spark], spark) == 1_000  # wins everywhere
    assert crossover(sizes, local, [s + 100 for s in spark]) is None  # never wins
    # past the sizes measured: with 100 s more start-up, the lines through the two largest
    # sizes cross 105 s / 0.5 ms per entry = 210,000 entries after 10,000
    assert crossover(sizes[:2], local[:2], spark[:2]) is None
    assert extrapolated(sizes[:2], local[:2], [s + 100 for s in spark[:2]]) == 220_000
    assert extrapolated(sizes, spark, local) is None  # Spark slower per entry


def test_spark_bench_quick_prints_the_report() -> None:
    from pulsarctl_py.spark.session import java_executable

    if java_executable() is None:
        pytest.skip("no Java: the README's commands install openjdk-17-jre-headless")
    report = run_bench("spark.py", "--quick", timeout=300)
    assert report["benchmark"] == "spark-export"
    messages = report["inputs"]["messages"]
    assert messages == report["inputs"]["entries"] * 10 > 0
    assert set(report["runs"]) == {"local", "spark_local_2"}
    for run in report["runs"].values():
        assert run["rows"] == messages
        assert run["export_s"] > 0 and len(run["load_average"]) == 3
        assert run["cpu_s"]["driver"] >= 0
    spark = report["runs"]["spark_local_2"]
    assert spark["startup_s"] > 0 and spark["cpu_s"]["python_workers"]
    assert report["spark_2_vs_local"] > 0 and "crossover_entries" in report
    (compaction,) = report["compaction"]["runs"].values()
    assert compaction["kept"] > 0 and len(compaction["report_sha256"]) == 64
