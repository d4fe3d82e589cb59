"""verify and seek --exact read their entries on an engine and answer as in-process.

The same cases on each engine (the ``engine`` fixture: local, then Spark on the suite's
shared session): every finding of verify and its statistics, and seek's exact scan (the
first entry at or after a time, the regions where time goes backwards, entries read),
must equal the in-process run's. Splits of two entries make every ledger several splits,
so that split boundaries and their order are crossed.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.engines.reads import EngineReads, StoreLocation, slim_entry
from pulsarctl_py.ledgers import LedgerSource
from pulsarctl_py.verify import VerifyStats, verify_topics
from tests.support.cli_helpers import run
from tests.support.demo_world import demo_flags
from tests.support.verify_world import VARIANTS as CHECKS
from tests.support.verify_world import World, build_world

#: worlds whose findings come from the entry scan: corrupt, unreadable, missing entries,
#: index and timestamp order, sizes computed from the stored entries, unverified digests
VARIANTS = ["entry-corrupt", "entry-unreadable", "index-gap", "timestamp-regression"]


def _reads(engine: Any, url: str | None, dirs: list[Path]) -> EngineReads:
    location = StoreLocation(url, tuple(str(d) for d in dirs))
    return EngineReads(engine, location, split_entries=2)


def _verify(world: World, reads: EngineReads | None) -> tuple[list[dict], dict]:
    stats = VerifyStats()
    with world.source() as source:
        found = [f.to_json() for f in verify_topics(source, None, stats=stats, reads=reads)]
    return found, stats.to_json()


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, World]:
    root = tmp_path_factory.mktemp("engine-reads")
    return {v: build_world(root / v, v) for v in VARIANTS}


@pytest.mark.parametrize("variant", VARIANTS)
def test_verify_findings_are_the_same_on_every_engine(engine, worlds, variant):
    world = worlds[variant]
    expected = _verify(world, None)
    # the scan found what the world is broken by, and nothing else
    assert sorted(f["check"] for f in expected[0]) == sorted(CHECKS[variant]), expected
    reads = _reads(engine, world.metadata_url, [world.bookie_dir])
    assert _verify(world, reads) == expected


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pulsarctl_py.demo import create_demo

    return create_demo(tmp_path_factory.mktemp("engine-reads-demo") / "demo").directory


def _seek(demo: Path, reads: EngineReads | None, when: int, rule: str) -> dict[str, Any]:
    from pulsarctl_py.seek import SeekRequest, seek

    request = SeekRequest(topic="seek-times", time_ms=when, rule=rule, exact=True)
    url = f"rocksdb://{demo / 'metadata'}"
    with LedgerSource.open(url, [demo / "bookkeeper"], need_metadata=True) as source:
        return seek(source, request, reads).to_json(explain=True)


@pytest.mark.parametrize("rule", ["broker", "kop"])
def test_seek_exact_is_the_same_on_every_engine(engine, demo, rule):
    from pulsarctl_py.demo.seek_topic import STEP_MS, T0

    # inside the second ledger, where the producer's clock went back
    when = T0 + 9 * STEP_MS + 1
    expected = _seek(demo, None, when, rule)
    exact = expected["exact"]
    assert exact["entries_scanned"] == 30 and exact["first_at_or_after"], exact
    if rule == "kop":  # publish times are what go back
        assert exact["non_monotonic_regions"], exact
    reads = _reads(engine, f"rocksdb://{demo / 'metadata'}", [demo / "bookkeeper"])
    assert _seek(demo, reads, when, rule) == expected


def test_a_slim_entry_pickles_and_keeps_what_verify_reads(demo):
    url = f"rocksdb://{demo / 'metadata'}"
    with LedgerSource.open(url, [demo / "bookkeeper"]) as source:
        from pulsarctl_py.decoders import Depth
        from pulsarctl_py.export import topic_plan

        plan = topic_plan(source, "seek-times", metadata_url=url, bookie_dirs=[])
        view = source.ledger(plan.splits[-1].ledger_id)
        entry = next(source.entries(view, 0, 0, depth=Depth.METADATA))
    slim = pickle.loads(pickle.dumps(slim_entry(entry)))
    assert slim.data == b"" and slim.payload is None
    for name in ("position", "index", "num_messages", "entry_timestamp", "unverified", "ok"):
        assert getattr(slim, name) == getattr(entry, name), name
    assert slim.index is not None and slim.layers[0].fields["payload_size"] > 0


def test_verify_and_seek_cli_on_spark_answer_as_local(spark, demo, capsys):
    from pulsarctl_py.demo.seek_topic import STEP_MS, T0

    local = run(capsys, "verify", "seek-times", "-o", "json", *demo_flags(demo))
    on_spark = run(capsys, "verify", "seek-times", "-o", "json", "--spark", *demo_flags(demo))
    assert local.code == on_spark.code == 0, on_spark.err
    assert on_spark.json() == local.json() and local.json()["findings"]
    when = str(T0 + 9 * STEP_MS + 1)
    seek = ["seek", "seek-times", "--time", when, "--exact", "--rule", "kop", "-o", "json"]
    local = run(capsys, *seek, *demo_flags(demo))
    on_spark = run(capsys, *seek, "--engine", "spark", *demo_flags(demo))
    assert local.code == on_spark.code, on_spark.err
    assert on_spark.json() == local.json() and local.json()["exact"]["non_monotonic_regions"]


def test_auto_weighs_the_entries_the_metadata_lists(spark, worlds):
    from pulsarctl_py.engines.select import ScanReads, listed_entries

    world = worlds["index-gap"]
    location = StoreLocation(world.metadata_url, (str(world.bookie_dir),))
    with world.source() as source:
        # orders: ledgers 10 (5 entries) and 11 (4); 12 is open, its count not recorded
        assert listed_entries(source, ["public/default/orders"]) == 9
        # a partitioned topic counts its partitions: 80 (2 entries); 81 is open
        assert listed_entries(source, ["tenant-b/ns/parts"]) == 2
        every = listed_entries(source, None)
        assert every > 9 + 2
        # the count stops at the first topic that reaches the limit
        assert 1 <= listed_entries(source, None, limit=1) < every
        with ScanReads("auto", lambda _limit: 9, location=location, threshold=10) as reads:
            assert reads is None
        with ScanReads("auto", lambda _limit: 9, location=location, threshold=9) as reads:
            assert reads is not None and reads.name == "spark"
        with ScanReads("local", lambda _limit: 10**9, location=location, threshold=0) as reads:
            assert reads is None


def test_auto_keeps_verify_and_seek_scans_in_process_without_a_threshold(
    worlds, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No local Spark session beats the in-process head scan, so auto without a threshold
    (flag or environment) never counts entries nor starts Spark for verify or seek; with
    the environment's threshold it weighs them as export does."""
    from pulsarctl_py.engines.select import ENV_SPARK_THRESHOLD, ScanReads

    world = worlds["index-gap"]
    location = StoreLocation(world.metadata_url, (str(world.bookie_dir),))
    counted: list[int] = []

    def entries(limit: int) -> int:
        counted.append(limit)
        return 10**9

    monkeypatch.delenv(ENV_SPARK_THRESHOLD, raising=False)
    with ScanReads("auto", entries, location=location) as reads:
        assert reads is None
    assert counted == []
    monkeypatch.setenv(ENV_SPARK_THRESHOLD, str(10**10))
    with ScanReads("auto", entries, location=location) as reads:
        assert reads is None
    assert counted == [10**10]
