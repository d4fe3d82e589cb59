"""`seek` on real stores: RocksDB and ZooKeeper metadata, a DbLedgerStorage bookie, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarctl_py.errors import DataError
from pulsarctl_py.seek import SeekRequest, seek
from pulsarctl_py.seek.heads import StoreReader
from pulsarctl_py.seek.probe import read_bound
from pulsarctl_py.stores.metadata import open_metadata_store
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, PLAIN, World, build_world

CONTRACT = {
    "topic",
    "target",
    "rule",
    "position",
    "ledger_id",
    "entry_id",
    "batch_index",
    "end",
    "entry_timestamp",
    "timestamp_source",
    "index",
    "kafka_offset",
    "entries_read",
    "warnings",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("seek-world"))


def _linear(world: World, topic: str) -> list:
    """Every head of the topic in order, read one by one (the reference)."""
    from pulsarctl_py.topics import topic_info

    with world.source() as source:
        info = topic_info(source, topic)
        reader = StoreReader(source)
        out = []
        for li in info.ledgers:
            if li.entries:
                out.extend(reader.stream(li.ledger_id, 0, li.entries - 1))
    return out


def _targets(heads: list) -> list[int]:
    times = sorted({h.timestamp for h in heads})
    return [times[0] - 1, *times, *(t + 1 for t in times), times[-1] + 10_000]


def test_broker_rule_on_rocksdb_matches_a_linear_scan(world: World) -> None:
    heads = _linear(world, ORDERS)
    # 12: the open ledger's entry stored past its LAC counts, as BookKeeper's recovery keeps it
    assert len(heads) == 12 and all(h.broker_timestamp is not None for h in heads)
    with world.source() as source:
        for target in _targets(heads):
            result = seek(source, SeekRequest(topic=ORDERS, time_ms=target, clock_skew_ms=-1))
            expected = next((h for h in heads if h.timestamp >= target), None)
            got = None if result.head is None else result.head.position
            assert got == (None if expected is None else expected.position), target
            assert result.answered
            assert result.entries_read <= read_bound(11, "broker")


def test_close_times_after_the_next_ledger_mislead_the_broker(world: World) -> None:
    """The world's ledgers were closed an hour after their entries (later than ledger 11's
    entries): the close-time narrowing ends the range at 10:4 and the broker's check-last
    reads 11:0, the entry after it. The model answers what the broker does, and warns."""
    heads = _linear(world, ORDERS)
    target = heads[7].timestamp  # 11:2
    with world.source() as source:
        narrowed = seek(source, SeekRequest(topic=ORDERS, time_ms=target))
        plain = seek(source, SeekRequest(topic=ORDERS, time_ms=target, clock_skew_ms=-1))
    assert narrowed.search_range["end"] == "10:4"
    assert [p.head.position for p in narrowed.probes] == ["10:0", "11:0"]
    assert narrowed.head.position == "11:1"
    assert any("before the time" in w for w in narrowed.warnings)
    assert plain.head.position == "11:2" and not plain.warnings


def test_index_and_kop_on_rocksdb(world: World) -> None:
    heads = _linear(world, ORDERS)
    last = heads[-1].index
    with world.source() as source:
        for n in range(last + 1):
            result = seek(source, SeekRequest(topic=ORDERS, index=n))
            holder = next(h for h in heads if h.index >= n)
            assert result.head.position == holder.position
            if holder.num_messages > 1:
                assert result.batch_index == n - holder.base_index
        past = seek(source, SeekRequest(topic=ORDERS, index=last + 1))
        assert not past.answered and past.end
        first = heads[0]
        kop = seek(source, SeekRequest(topic=ORDERS, time_ms=first.publish_time, rule="kop"))
        assert kop.kafka_offset == first.index  # the entry's LAST offset (§13)


def test_plain_topic_without_index(world: World) -> None:
    with world.source() as source:
        result = seek(source, SeekRequest(topic=PLAIN, index=0))
        assert not result.answered and "skip-without-index" in result.findings[0]
        result = seek(source, SeekRequest(topic=PLAIN, time_ms=0))
        assert result.head.position == "40:0"
        assert result.head.timestamp_source == "publish_time"


def test_timestamp_regression_is_found_by_exact(tmp_path: Path) -> None:
    broken = build_world(tmp_path, "timestamp-regression")
    heads = _linear(broken, ORDERS)
    target = heads[6].timestamp  # 11:1 was stamped 10 s early
    with broken.source() as source:
        result = seek(source, SeekRequest(topic=ORDERS, time_ms=target, exact=True))
    assert result.exact is not None
    assert [r["first"] for r in result.exact["non_monotonic_regions"]] == ["11:1"]
    assert any("backwards" in w for w in result.warnings)


def test_a_missing_ledger_leaves_an_answer_only_where_no_probe_needs_it(tmp_path: Path) -> None:
    """The broker's probes on the topic as the broker counts it: before every entry, the
    search reads 10:0 only, so ledger 11 not being in storage changes nothing; a time
    inside ledger 11 makes the search probe it, and then there is no answer."""
    healthy = _linear(build_world(tmp_path / "healthy"), ORDERS)
    broken = build_world(tmp_path / "broken", "ledger-missing-storage")
    with broken.source() as source:
        result = seek(source, SeekRequest(topic=ORDERS, time_ms=0))
        inside = seek(
            source, SeekRequest(topic=ORDERS, time_ms=healthy[6].timestamp, clock_skew_ms=-1)
        )
    assert any("ledger 11 (4 entries) is not read" in w for w in result.warnings)
    assert result.answered and result.head is not None and result.head.position == "10:0"
    assert not inside.answered and inside.head is None
    assert inside.findings[0].startswith("cannot be answered exactly: the answer lies between")
    assert any(t.startswith("entry 11:") for t in inside.extra["not_read"])


def test_a_ledger_missing_inside_the_range_searched_makes_no_exact_answer(tmp_path: Path) -> None:
    """Issue 24 point 6: with the whole topic searched (no close-time narrowing), ledger 11
    missing from storage lies inside the search range: timestamps are only assumed to rise,
    so what it holds could change the answer, which is then "cannot be answered exactly"
    with the range, never a position."""
    broken = build_world(tmp_path / "broken", "ledger-missing-storage")
    with broken.source() as source:
        result = seek(source, SeekRequest(topic=ORDERS, time_ms=0, clock_skew_ms=-1))
    assert not result.answered and result.head is None
    assert result.findings[0].startswith("cannot be answered exactly")
    assert any(t.startswith("ledger 11 (4 entries)") for t in result.extra["not_read"])
    assert set(result.extra["answer_range"]) == {"first", "last"}


def test_seek_through_zookeeper(scratch_zk: str, tmp_path: Path) -> None:
    store = open_metadata_store(scratch_zk, read_only=False)
    try:
        zk_world = build_world(tmp_path, None, store=store, metadata_url=scratch_zk)
    finally:
        store.close()
    heads = _linear(zk_world, ORDERS)
    with zk_world.source() as source:
        for target in _targets(heads)[::3]:
            result = seek(source, SeekRequest(topic=ORDERS, time_ms=target, clock_skew_ms=-1))
            expected = next((h for h in heads if h.timestamp >= target), None)
            assert (result.head and result.head.position) == (expected and expected.position)
        result = seek(source, SeekRequest(topic=ORDERS, index=heads[4].index))
        assert result.head.position == heads[4].position


# -- the CLI ----------------------------------------------------------------------------------


def _args(world: World) -> list[str]:
    return ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]


def test_cli_json_contract(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    heads = _linear(world, ORDERS)
    r = run(
        capsys,
        "seek",
        ORDERS,
        "--time",
        str(heads[3].timestamp),
        "--explain",
        "-o",
        "json",
        *_args(world),
    )
    assert r.code == 0, r.err
    data = r.json()
    assert CONTRACT <= set(data) and "probes" in data
    assert data["target"] == {"kind": "time", "value": heads[3].timestamp}
    assert data["position"] == heads[3].position and data["end"] is False
    assert data["timestamp_source"] == "broker_entry_metadata"
    assert all({"position", "timestamp", "source", "comparison"} <= set(p) for p in data["probes"])
    r = run(capsys, "seek", ORDERS, "--offset", "0", "-o", "json", *_args(world))
    assert r.code == 0 and r.json()["target"]["kind"] == "index"


@pytest.mark.parametrize(
    ("extra", "code", "words"),
    [
        (["--time", "yesterday-ish"], 2, "cannot"),
        (["--time", "1", "--index", "2"], 2, "exactly one target"),
        ([], 2, "exactly one target"),
        (["--index", "100000"], 1, "past the end"),
        (["--position", "10:99"], 1, "does not exist"),
        (["--position", "nonsense"], 2, "position"),
        (["--legacy-offset", "7"], 1, "names no stored entry"),
    ],
)
def test_cli_bad_input(
    world: World, capsys: pytest.CaptureFixture[str], extra: list[str], code: int, words: str
) -> None:
    r = run(capsys, "seek", ORDERS, *extra, "-o", "json", *_args(world))
    assert r.code == code, (r.out, r.err)
    assert "Traceback" not in r.err
    assert words in (r.err + r.out)


def test_cli_unknown_topic(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    r = run(capsys, "seek", "persistent://public/default/nope", "--time", "0", *_args(world))
    assert r.code == 1 and "not found" in r.err and len(r.err.strip().splitlines()) == 1


def test_demo_seek_times_shows_the_broker_skipping_entries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runbook's example: the broker would reset to 14:6, the data at 10:55:30 starts
    at 14:2; without the close-time narrowing (skew -1) the broker gets 14:2."""
    from pulsarctl_py.demo import create_demo

    demo = create_demo(tmp_path / "demo").directory
    monkeypatch.chdir(demo)
    t = "2026-11-21T10:55:30Z"
    r = run(capsys, "seek", "seek-times", "--time", t, "--exact", "--explain", "-o", "json")
    assert r.code == 0, r.err
    data = r.json()
    assert data["position"] == "14:6" and data["exact"]["first_at_or_after"] == "14:2"
    assert data["exact"]["differs"] is True
    assert [(g["first"], g["last"]) for g in data["exact"]["non_monotonic_regions"]] == [
        ("14:3", "14:5")
    ]
    assert data["probes"][0]["phase"] == "check-first"
    r = run(capsys, "seek", "seek-times", "--time", t, "--clock-skew", "-1", "-o", "json")
    assert r.json()["position"] == "14:2"
    r = run(capsys, "seek", "seek-times", "--index", "0", "--skip-without-index", "-o", "json")
    assert (
        r.json()["position"] == "15:0" and r.json()["timestamp_source"] == "broker_entry_metadata"
    )


def test_compacted_rule_reads_the_compacted_ledger(world: World) -> None:
    """Ledger 30 holds copies of 10:1 and 11:3; the rule is publish_time >= T there."""
    heads = {h.position: h for h in _linear(world, ORDERS)}
    with world.source() as source:
        for target, expected in (
            (0, "30:0"),
            (heads["10:1"].publish_time, "30:0"),
            (heads["10:1"].publish_time + 1, "30:1"),
            (heads["11:3"].publish_time, "30:1"),
        ):
            result = seek(source, SeekRequest(topic=ORDERS, time_ms=target, rule="compacted"))
            assert result.head.position == expected, target
        assert result.head.original == (11, 3)
        after = seek(
            source,
            SeekRequest(topic=ORDERS, time_ms=heads["11:3"].publish_time + 1, rule="compacted"),
        )
        assert after.end and after.head is None
        with pytest.raises(DataError, match="no compacted ledger"):
            seek(source, SeekRequest(topic=PLAIN, time_ms=0, rule="compacted"))


# -- bookie storage kinds: entry logs scanned without an index, a journal, DbLedgerStorage ------

BK = Path(__file__).resolve().parent.parent / "data" / "bookkeeper"


@pytest.mark.parametrize(
    ("bookie_dir", "ledger", "position", "publish_time"),
    [
        (BK / "offline" / "entrylog" / "ledgers", 3, "3:1", 1795258183648),
        (BK / "offline" / "journal" / "journal", 10, "10:2", 1795258183684),
        (BK / "live-dbledgerstorage" / "bookie-data", 1, "1:3", 1795258183648),
    ],
)
def test_position_on_every_storage_kind(
    bookie_dir: Path,
    ledger: int,
    position: str,
    publish_time: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LEDGERCTL_METADATA_URL", raising=False)
    r = run(
        capsys,
        "seek",
        "--ledger",
        str(ledger),
        "--position",
        position,
        "--bookie-dir",
        str(bookie_dir),
        "-o",
        "json",
    )
    assert r.code == 0, r.err
    data = r.json()
    assert data["position"] == position and data["publish_time"] == publish_time
    assert data["entries_read"] == 1 and data["messages"]


def test_ledger_time_search_on_dbledgerstorage_finds_a_backwards_region(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ledger 6 of the live bookie holds real-client entries from two captures: publish
    times go back after 6:2."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LEDGERCTL_METADATA_URL", raising=False)
    bookie = BK / "live-dbledgerstorage" / "bookie-data"
    r = run(
        capsys,
        "seek",
        "--ledger",
        "6",
        "--time",
        "1795258183700",
        "--exact",
        "--bookie-dir",
        str(bookie),
        "-o",
        "json",
    )
    assert r.code == 0, r.err
    data = r.json()
    assert data["exact"]["non_monotonic_regions"][0]["after"] == "6:2"
    assert data["exact"]["first_at_or_after"] == "6:2"
    # entries that are not Pulsar entries are unreadable heads: a finding, exit 1
    r = run(
        capsys,
        "seek",
        "--ledger",
        "4",
        "--time",
        "1795258183690",
        "--bookie-dir",
        str(BK / "offline" / "entrylog" / "ledgers"),
        "-o",
        "json",
    )
    assert r.code == 1 and r.json()["findings"]
