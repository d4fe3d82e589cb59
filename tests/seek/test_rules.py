"""`seek` against linear references, the OpFindNewest model, KoP's quirks and the read budget.

Topics here are generated in memory (:class:`MemoryReader` counts reads like a store); the
store-backed and CLI tests are in tests/seek/test_driver.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.errors import LedgerctlError, NotFoundError
from pulsarctl_py.seek.exact import exact_scan
from pulsarctl_py.seek.heads import CachedReader, Head
from pulsarctl_py.seek.index import seek_compacted, seek_index, seek_position
from pulsarctl_py.seek.legacy import decode_legacy_offset, encode_legacy_offset, seek_legacy
from pulsarctl_py.seek.probe import (
    READ_SLACK,
    FlatTopic,
    Prober,
    SeekLedger,
    ceil_log2,
    find_position_range,
    op_find_newest,
    read_bound,
)
from pulsarctl_py.seek.rules import DEFAULT_CLOCK_SKEW_MS, seek_time_broker, seek_time_kop


class MemoryReader:
    """Heads of a generated topic; counts every read."""

    def __init__(self, heads: dict[tuple[int, int], Head]) -> None:
        self.heads = heads
        self.reads = 0
        self.read_positions: list[tuple[int, int]] = []

    def head(self, ledger_id: int, entry_id: int) -> Head:
        self.reads += 1
        self.read_positions.append((ledger_id, entry_id))
        return self.heads[(ledger_id, entry_id)]


@dataclass
class World:
    ledgers: list[SeekLedger]
    heads: dict[tuple[int, int], Head]

    @property
    def flat(self) -> FlatTopic:
        return FlatTopic(self.ledgers)

    def order(self) -> list[Head]:
        flat = self.flat
        return [self.heads[flat.position(i)] for i in range(flat.n)]

    def reader(self) -> tuple[MemoryReader, CachedReader]:
        inner = MemoryReader(self.heads)
        return inner, CachedReader(inner)


def make_world(
    splits: list[int],
    steps: list[int],
    bem: list[bool],
    *,
    t0: int = 1_700_000_000_000,
    close_delay: int = 5,
    batch: list[int] | None = None,
    open_last: bool = False,
    missing: set[int] = frozenset(),  # type: ignore[assignment]
) -> World:
    """Ledgers 100, 101, ... holding ``splits`` entries, times rising by ``steps``."""
    heads: dict[tuple[int, int], Head] = {}
    ledgers = []
    ts = t0
    k = 0
    index = -1
    for n, (count, with_bem) in enumerate(zip(splits, bem, strict=True)):
        lid = 100 + n
        for e in range(count):
            ts += steps[k % len(steps)]
            msgs = batch[k % len(batch)] if batch else 1
            k += 1
            index += msgs
            heads[(lid, e)] = Head(
                lid,
                e,
                publish_time=ts,
                broker_timestamp=ts if with_bem else None,
                index=index if with_bem else None,
                num_messages=msgs,
                batched=batch is not None,
            )
        is_open = open_last and n == len(splits) - 1
        close = None if is_open else ts + 1 + close_delay
        if close is not None:
            ts = close  # the next ledger's entries come after this one was closed
        ledgers.append(SeekLedger(lid, count, close, "gone" if lid in missing else None))
    return World(ledgers, heads)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    nledgers = draw(st.integers(1, 6))
    splits = draw(st.lists(st.integers(0, 40), min_size=nledgers, max_size=nledgers))
    steps = draw(st.lists(st.sampled_from([0, 0, 1, 7, 30_000, 90_000]), min_size=1, max_size=8))
    bem = draw(st.lists(st.booleans(), min_size=nledgers, max_size=nledgers))
    batch = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    open_last = draw(st.booleans())
    close_delay = draw(st.integers(0, DEFAULT_CLOCK_SKEW_MS - 2))
    return make_world(splits, steps, bem, batch=batch, open_last=open_last, close_delay=close_delay)


def _target(draw_world: World, data: st.DataObject) -> int:
    times = [h.timestamp for h in draw_world.order()]
    if not times:
        return data.draw(st.integers(0, 2**40))
    choice = data.draw(st.sampled_from(["exact", "between", "before", "after"]))
    if choice == "exact":
        return data.draw(st.sampled_from(times))
    if choice == "before":
        return min(times) - data.draw(st.integers(0, 100_000))
    if choice == "after":
        return max(times) + data.draw(st.integers(1, 100_000))
    return data.draw(st.integers(min(times), max(times)))


# -- the broker rule ----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(worlds(), st.data(), st.sampled_from([-1, 0, 1000, DEFAULT_CLOCK_SKEW_MS]))
def test_broker_rule_matches_the_linear_reference(world: World, data, skew: int) -> None:
    target = _target(world, data)
    order = world.order()
    inner, reader = world.reader()
    result, _ = seek_time_broker(world.flat, reader, target, skew)
    if not order:
        assert result.findings and result.head is None
        return
    expected = next((h for h in order if h.timestamp >= target), None)
    if expected is None:
        assert result.end and result.head is None
    else:
        assert not result.end
        assert (result.head.ledger_id, result.head.entry_id) == (
            expected.ledger_id,
            expected.entry_id,
        )
        assert result.head.timestamp_source == (
            "broker_entry_metadata" if expected.broker_timestamp is not None else "publish_time"
        )
    assert not result.findings
    assert not any("backwards" in w for w in result.warnings)
    assert inner.reads <= read_bound(max(result.search_range["entries"], 1), "broker")
    assert len(set(inner.read_positions)) == inner.reads  # no entry read twice


@settings(max_examples=300, deadline=None)
@given(worlds(), st.data(), st.sampled_from([-1, 0, 1000, DEFAULT_CLOCK_SKEW_MS]))
def test_broker_reads_its_probes_and_the_answer_at_most_log2_plus_three(
    world: World, data, skew: int
) -> None:
    """The broker rule reads the entries OpFindNewest probes and the answer entry, nothing
    else, each once: at most ceil(log2 M) + 3 for a range of M entries (the smallest case
    needing the + 3 is test_eight_entries_need_six_reads_all_of_them_forced)."""
    target = _target(world, data)
    inner, reader = world.reader()
    result, prober = seek_time_broker(world.flat, reader, target, skew)
    if not world.flat.n:
        assert inner.reads == 0
        return
    probed = {(p.head.ledger_id, p.head.entry_id) for p in prober.probes}
    answer = set() if result.head is None else {(result.head.ledger_id, result.head.entry_id)}
    assert set(inner.read_positions) == probed | answer
    assert inner.reads <= read_bound(max(result.search_range["entries"], 1), "broker")


def _pattern_world(matches: list[bool]) -> World:
    """One ledger whose entries match ``timestamp < 50`` exactly where ``matches`` says."""
    heads = {
        (100, e): Head(100, e, publish_time=0 if m else 100, index=e) for e, m in enumerate(matches)
    }
    return World([SeekLedger(100, len(matches), None)], heads)


def test_eight_entries_need_six_reads_all_of_them_forced() -> None:
    """The smallest topic where the broker's answer takes more than ceil(log2 N) + 2 reads:
    8 entries, T between the third and the fourth. OpFindNewest reads 0 (match), 7 (its
    check-last: offset 8 clamped to the last entry; no match), then mid 4 (no), 1, 2 (match)
    and 3 (no): 6 entries, ceil(log2 8) + 2 = 5. No procedure giving the broker's answer
    for every input reads fewer: changing any one of those six timestamps changes the
    broker's answer, so each must be read."""
    world = make_world([8], [10], [False], t0=0)  # timestamps 10, 20, ..., 80
    inner, reader = world.reader()
    result, prober = seek_time_broker(world.flat, reader, 35, -1)
    assert [p.head.entry_id for p in prober.probes] == [0, 7, 4, 1, 2, 3]
    assert result.head.entry_id == 3  # the newest entry before 35 is 2 (30)
    assert inner.reads == 6 == ceil_log2(8) + 3
    for flipped in sorted({p.head.entry_id for p in prober.probes}):
        other = make_world([8], [10], [False], t0=0)
        head = other.heads[(100, flipped)]
        head.publish_time = 100 if head.publish_time < 35 else 0
        again, _ = seek_time_broker(other.flat, other.reader()[1], 35, -1)
        assert again.to_json()["position"] != "100:3", flipped  # None: after the last entry


def test_a_narrowed_range_of_one_entry_can_take_three_reads() -> None:
    """Ledger 100 (one entry) closed long after T, so the range is 100:0 alone; the
    check-last reads 101:0, the entry after it, which is before T against the close times:
    the broker answers it, and the cursor reads 101:1, read to be shown. Three reads for a
    range of one entry: ceil(log2 1) + 3; the position alone needs the first two."""
    heads = {
        (100, 0): Head(100, 0, publish_time=10),
        (101, 0): Head(101, 0, publish_time=20),
        (101, 1): Head(101, 1, publish_time=60),
    }
    world = World([SeekLedger(100, 1, 10_000), SeekLedger(101, 2, 20_000)], heads)
    inner, reader = world.reader()
    result, prober = seek_time_broker(world.flat, reader, 50, 0)
    assert result.search_range["entries"] == 1
    assert [p.head.position for p in prober.probes] == ["100:0", "101:0"]
    assert result.head.position == "101:1"
    assert inner.reads == 3 == read_bound(1, "broker")


def test_under_eight_entries_every_timestamp_order_fits_log2_plus_two() -> None:
    """Every match pattern (timestamps in or out of order) of one ledger of N < 8 entries:
    the broker rule needs at most ceil(log2 N) + 2 reads; at N = 8 it needs + 3."""
    worst = {}
    for n in range(1, 9):
        for bits in itertools.product([True, False], repeat=n):
            world = _pattern_world(list(bits))
            inner, reader = world.reader()
            seek_time_broker(world.flat, reader, 50, -1)
            worst[n] = max(worst.get(n, 0), inner.reads - ceil_log2(n))
    assert max(worst[n] for n in range(1, 8)) == 2
    assert worst[8] == 3 == READ_SLACK["broker"]


def test_kop_and_index_reach_log2_plus_three_first_at_thirteen_entries() -> None:
    """KoP's OpFindNewestEntry and ManagedLedger.asyncFindPosition search every entry with
    max = N - 1: up to 12 entries every pattern fits ceil(log2 N) + 2; 13 entries with
    times in order need 7 reads (0, 12, 6, 2, 3, 4, 5)."""
    worst: dict[str, dict[int, int]] = {"kop": {}, "index": {}}
    for n in range(1, 13):
        for bits in itertools.product([True, False], repeat=n):
            world = _pattern_world(list(bits))
            inner, reader = world.reader()
            seek_time_kop(world.flat, reader, 50)  # publish_time <= 50
            worst["kop"][n] = max(worst["kop"].get(n, 0), inner.reads - ceil_log2(n))
            for h in world.heads.values():  # matches: index < 50
                h.index = 0 if h.publish_time == 0 else 100
            inner, reader = world.reader()
            seek_index(world.flat, reader, 50)
            worst["index"][n] = max(worst["index"].get(n, 0), inner.reads - ceil_log2(n))
    assert max(worst["kop"].values()) == 2 and max(worst["index"].values()) == 2
    world = make_world([13], [10], [True], t0=0)  # times 10 .. 130, indexes 0 .. 12
    inner, reader = world.reader()
    result, prober = seek_time_kop(world.flat, reader, 65)
    assert [p.head.entry_id for p in prober.probes] == [0, 12, 6, 2, 3, 4, 5]
    assert result.kafka_offset == 6 and inner.reads == 7 == read_bound(13, "kop")
    inner, reader = world.reader()
    result, _ = seek_index(world.flat, reader, 6)
    assert result.head.position == "100:6" and inner.reads == 7 == read_bound(13, "index")


@settings(max_examples=200, deadline=None)
@given(worlds(), st.data())
def test_kop_reads_at_most_log2_plus_three(world: World, data) -> None:
    target = _target(world, data)
    inner, reader = world.reader()
    seek_time_kop(world.flat, reader, target, skip_without_index=True)
    assert inner.reads <= read_bound(max(world.flat.n, 1), "kop")
    assert len(set(inner.read_positions)) == inner.reads


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0, 0, 1, 10]), min_size=1, max_size=300), st.data())
def test_compacted_reads_at_most_log2_plus_one(steps: list[int], data) -> None:
    """A plain lower bound: ceil(log2 (N + 1)) probes, the answer always among them."""
    world = make_world([len(steps)], steps, [False], t0=0)
    times = [h.publish_time for h in world.order()]
    target = data.draw(st.integers(min(times) - 1, max(times) + 1))
    inner, reader = world.reader()
    result, _ = seek_compacted(100, len(steps), reader, target)
    expected = next((h for h in world.order() if h.publish_time >= target), None)
    assert (result.head and result.head.position) == (expected and expected.position)
    assert inner.reads <= read_bound(len(steps), "compacted")


def _opfindnewest_as_written(
    n: int, start: int, count: int, matches: Callable[[int], bool]
) -> tuple[int | None, list[int]]:
    """A second, literal transcription of apache/pulsar OpFindNewest (states checkFirst,
    checkLast, searching) over entries 0..n-1, with ManagedLedgerImpl.getPositionAfterN
    (start excluded: the entry ``k`` after ``start``, clamped to the last entry)."""
    read: list[int] = []
    last = n - 1
    state, lo, hi, mid, matched, position = "checkFirst", 0, count, 0, None, start
    while True:
        read.append(position)
        ok = matches(position)
        if state == "checkFirst":
            if not ok:
                return None, read
            matched, state = position, "checkLast"
            position = min(start + hi, last)
        elif state == "checkLast":
            if ok:
                return position, read
            state = "searching"
            mid = lo + max((hi - lo) // 2, 1)
            position = min(start + mid, last)
        else:
            if ok:
                matched, lo = position, mid
            else:
                hi = mid - 1
            mid = lo + max((hi - lo) // 2, 1)
            if hi <= lo:
                return matched, read
            position = min(start + mid, last)


def test_the_model_probes_as_opfindnewest_is_written() -> None:
    """Every match pattern of up to 7 entries, every range: same probes, same answer."""
    for n in range(1, 8):
        for bits in itertools.product([True, False], repeat=n):
            world = _pattern_world(list(bits))
            for start in range(n):
                for end in range(start, n):
                    prober = Prober(world.flat, world.reader()[0])
                    got = op_find_newest(
                        prober, start, end - start + 1, lambda h: (h.publish_time == 0, "")
                    )
                    want, read = _opfindnewest_as_written(
                        n, start, end - start + 1, lambda i, b=bits: b[i]
                    )
                    assert (got, [p.head.entry_id for p in prober.probes]) == (want, read)


def test_probe_order_is_opfindnewest() -> None:
    """Traced by hand from OpFindNewest: check first, check last, then mid = min + max((max -
    min) / 2, 1) while max > min."""
    world = make_world([10], [10], [False], t0=0)  # timestamps 10, 20, ..., 100
    _inner, reader = world.reader()
    result, prober = seek_time_broker(world.flat, reader, 75, -1)
    assert [p.head.entry_id for p in prober.probes] == [0, 9, 5, 7, 6]
    assert [p.phase for p in prober.probes] == [
        "check-first",
        "check-last",
        "search",
        "search",
        "search",
    ]
    assert result.head.entry_id == 7  # the newest entry < 75 is 6 (70): the cursor reads 7
    assert [p.matched for p in prober.probes] == [True, False, True, False, True]


def test_strict_less_than_lands_on_an_exact_hit() -> None:
    world = make_world([5], [10], [False], t0=0)
    _, reader = world.reader()
    result, _ = seek_time_broker(world.flat, reader, 30, -1)
    assert result.head.entry_id == 2 and result.head.timestamp == 30


def test_equal_timestamps_start_at_the_first_of_them() -> None:
    world = make_world([8], [10, 0, 0, 0, 10], [True], t0=0)
    times = [h.timestamp for h in world.order()]
    _, reader = world.reader()
    target = times[1]
    result, _ = seek_time_broker(world.flat, reader, target, -1)
    assert result.head.entry_id == times.index(target)


def test_find_position_range_follows_the_broker() -> None:
    ledgers = [
        SeekLedger(1, 10, 1000),
        SeekLedger(2, 10, 1500),
        SeekLedger(3, 10, 3000),
        SeekLedger(4, 10, 4000),
    ]
    assert find_position_range(ledgers, 2000, 0) == ((2, 9), (3, 9))
    assert find_position_range(ledgers, 2000, -1) == (None, None)
    assert find_position_range(ledgers, 2000, 600) == ((1, 9), (3, 9))
    ledgers.append(SeekLedger(5, 3, None))
    assert find_position_range(ledgers, 5000, 0) == ((4, 9), None)  # open: no end


# -- non-monotonic timestamps: the model shows what the broker does -------------------------------


def _backwards_world() -> World:
    """Two ledgers; a producer clock set back by 10 minutes in the middle of the second."""
    world = make_world([10, 10], [1000], [False, False], t0=0, close_delay=0)
    for e in range(3, 7):
        h = world.heads[(101, e)]
        h.publish_time -= 600_000
    return world


def test_backwards_time_misleads_the_binary_search_and_exact_finds_the_truth() -> None:
    world = _backwards_world()
    _, reader = world.reader()
    # 101:0..2 are 11001..13001, 101:3..6 ten minutes early, 101:7.. 18001..
    result, prober = seek_time_broker(world.flat, reader, 12_500, -1)
    assert [p.head.position for p in prober.probes] == [
        "100:0",
        "101:9",
        "101:0",
        "101:5",
        "101:7",
        "101:6",
    ]
    assert result.head.position == "101:7"  # the broker skips 101:2 .. 101:6
    assert len(result.warnings) == 1 and "backwards" in result.warnings[0]
    truth = exact_scan(iter(world.order()), 12_500)
    assert truth["first_at_or_after"] == "101:2"
    assert [(r["first"], r["last"]) for r in truth["non_monotonic_regions"]] == [("101:3", "101:6")]


def test_skewed_first_entry_of_the_narrowed_range_resets_to_earliest() -> None:
    """apache/pulsar#23910: the narrowed range's first entry is not before T, so OpFindNewest
    finds nothing and the broker resets the cursor to the first entry of the topic."""
    world = make_world([5, 5, 5], [1000], [False, False, False], t0=0, close_delay=0)
    # ledger 101 closed at 10001; its last entry was published by a clock 5 minutes ahead
    world.heads[(101, 4)].publish_time += 300_000
    _, reader = world.reader()
    result, prober = seek_time_broker(world.flat, reader, 12_000, 0)
    assert result.search_range["start"] == "101:4"
    assert result.search_range["narrowed_by_close_time"]
    assert prober.probes[0].matched is False
    assert result.head.position == "100:0"
    assert any("first position of the managed ledger, 100:0" in w for w in result.warnings)
    # with the narrowing off (the documented workaround, skew -1) it is not fooled so
    result2, _ = seek_time_broker(world.flat, world.reader()[1], 12_000, -1)
    assert result2.head.position != "100:0"


def test_contradicting_probes_are_warned() -> None:
    world = make_world([16], [1000], [True], t0=0)
    world.heads[(100, 8)].broker_timestamp = 0  # probed: mid of 16
    _, reader = world.reader()
    result, prober = seek_time_broker(world.flat, reader, 12_500, -1)
    assert any(p.head.entry_id == 8 for p in prober.probes)
    assert any("backwards" in w for w in result.warnings)


def test_a_missing_ledger_in_the_range_leaves_no_answer_but_its_range() -> None:
    """issue 24: seek answered confidently around a ledger missing from storage. 101's
    times (60..100) are not read: the first stored entry >= 75 is 102:0 (110), but the
    answer may be inside 101, so there is none, only where it lies."""
    world = make_world([5, 5, 5], [10], [False] * 3, t0=0, missing={101})
    _, reader = world.reader()
    result, _ = seek_time_broker(world.flat, reader, 75, -1)
    assert result.head is None and not result.answered
    assert result.to_json()["position"] is None
    assert result.extra["answer_range"] == {"first": "100:4", "last": "102:4"}
    assert result.findings[0].startswith(
        "cannot be answered exactly: the answer lies between 100:4 and 102:4"
    )
    assert result.extra["not_read"] and all("gone" in t for t in result.extra["not_read"])
    # a missing ledger no probe needs changes nothing: the broker reads the same entries
    # (narrowed by close times, the search starts in ledger 101)
    world = make_world([5, 5, 5], [10], [False] * 3, t0=0, missing={100})
    result, prober = seek_time_broker(world.flat, world.reader()[1], 135, 0)
    assert result.answered, result.findings
    assert result.head is not None and result.head.timestamp >= 135
    assert all(p.head.ledger_id != 100 for p in prober.probes)


def test_unreadable_probe_is_a_finding_and_leaves_no_answer() -> None:
    world = make_world([16], [10], [False], t0=0)
    world.heads[(100, 8)] = Head(100, 8, error="checksum mismatch")
    _, reader = world.reader()
    result, _ = seek_time_broker(world.flat, reader, 95, -1)
    assert result.findings and "100:8" in result.findings[0]
    assert result.head is None and result.extra["not_read"] == ["entry 100:8: checksum mismatch"]


def test_empty_topic_is_a_finding_that_says_what_the_broker_does() -> None:
    world = make_world([0, 0], [10], [False, False])
    result, _ = seek_time_broker(world.flat, world.reader()[1], 5, -1)
    assert result.head is None
    assert result.findings == [
        "the topic has no entries: a reset by time leaves the cursor at the end "
        "(100:0 or the next valid position), with nothing to read"
    ]
    result, _ = seek_time_broker(FlatTopic([]), world.reader()[1], 5, -1)
    assert "lists no ledger: the broker fails a reset by time" in result.findings[0]
    gone = make_world([3], [10], [False], missing={100})
    result, _ = seek_time_broker(gone.flat, gone.reader()[1], 5, -1)
    assert "every ledger holding one is missing" in result.findings[0]


def test_nothing_before_the_time_resets_to_entry_zero_of_the_first_listed_ledger() -> None:
    """PersistentSubscription.resetCursor(long): no position found -> the cursor's
    getFirstPosition(), entry 0 of the first ledger of the managed ledger, even when that
    ledger is not in the storage at hand (the broker still lists it)."""
    world = make_world([5, 5, 5], [10], [False] * 3, t0=0, missing={100})
    inner, reader = world.reader()
    result, prober = seek_time_broker(world.flat, reader, 5, -1)
    # the broker's check-first: 100:0, which is not in storage (not read)
    assert [p.head.position for p in prober.probes] == ["100:0"]
    assert prober.probes[0].head.error == "ledger 100: gone"
    # issue 24: "answer 100:0" when nothing of ledger 100 was read; its entries may be
    # before the time, so there is no answer, only where it lies
    assert result.head is None and result.to_json()["position"] is None
    assert result.findings[0].startswith("cannot be answered exactly: the answer lies between")
    assert any("resets to 100:0" in w and "unread ledger" in w for w in result.warnings)
    assert inner.reads == 0  # ledger 100 is not in storage: nothing of it is read
    # an empty first ledger: asyncResetCursor moves on to the next valid position
    world = make_world([0, 5, 5], [10], [False] * 3, t0=0)
    result, _ = seek_time_broker(world.flat, world.reader()[1], 5, -1)
    assert result.head.position == "101:0" and not result.warnings


# -- KoP ---------------------------------------------------------------------------------------


def _kop_world() -> World:
    # three entries of 3 messages each: indexes 2, 5, 8; publish times 10, 20, 30
    return make_world([3], [10], [True], t0=0, batch=[3])


def test_kop_answers_the_last_offset_of_an_entry_published_at_t() -> None:
    result, _ = seek_time_kop(_kop_world().flat, _kop_world().reader()[1], 20)
    assert result.kafka_offset == 5  # not 3: the entry's last offset (§13)
    assert result.head.position == "100:1" and result.batch_index == 2


@pytest.mark.parametrize("batched", [True, False])
def test_a_one_message_batch_is_answered_with_its_batch_index(batched: bool) -> None:
    """An entry with num_messages_in_batch is a batch even of one message: its message is
    L:E:0, as the client's BatchMessageIdImpl names it; a plain entry's is L:E."""
    world = make_world([3], [10], [True], t0=0, batch=[1] if batched else None)
    by_index, _ = seek_index(world.flat, world.reader()[1], 1)
    by_time, _ = seek_time_kop(world.flat, world.reader()[1], 20)
    for result in (by_index, by_time):
        assert result.head.position == "100:1"
        assert result.batch_index == (0 if batched else None)
        assert result.to_json()["position"] == ("100:1:0" if batched else "100:1")


def test_kop_answers_index_plus_one_when_the_entry_is_older() -> None:
    result, _ = seek_time_kop(_kop_world().flat, _kop_world().reader()[1], 25)
    assert result.kafka_offset == 6
    assert result.head.position == "100:2" and result.batch_index == 0


def test_kop_before_the_first_entry_skips_its_first_messages() -> None:
    result, _ = seek_time_kop(_kop_world().flat, _kop_world().reader()[1], 1)
    assert result.kafka_offset == 2  # the first entry's LAST offset: offsets 0, 1 are skipped


def test_kop_after_the_last_entry_is_the_log_end_offset() -> None:
    result, _ = seek_time_kop(_kop_world().flat, _kop_world().reader()[1], 99)
    assert result.kafka_offset == 9 == result.extra["log_end_offset"]
    assert result.end and result.head is None


def test_kop_uses_publish_time_not_broker_timestamp() -> None:
    world = _kop_world()
    for h in world.heads.values():
        h.broker_timestamp = 1_000_000
    result, _ = seek_time_kop(world.flat, world.reader()[1], 20)
    assert result.kafka_offset == 5


def test_kop_entry_without_index() -> None:
    world = make_world([2, 2], [10], [False, True], t0=0)
    result, _ = seek_time_kop(world.flat, world.reader()[1], 5)
    assert result.findings and "skip-without-index" in result.findings[0]
    result, _ = seek_time_kop(world.flat, world.reader()[1], 5, skip_without_index=True)
    assert not result.findings and result.kafka_offset == 0


def test_kop_without_any_index_answers_zero_as_kop_does() -> None:
    """KafkaRequestHandler.fetchOffsetByTimestamp: a current offset (the index generator,
    -1 when neither the 'index' property nor the last entry gives one) below 0 answers
    max(0, current)."""
    world = make_world([3], [10], [False], t0=0)
    result, _ = seek_time_kop(world.flat, world.reader()[1], 25)
    assert result.kafka_offset == 0 and result.extra["log_end_offset"] == 0
    assert not result.findings and "current index is -1" in result.warnings[0]


def test_kop_takes_the_current_index_from_the_index_property() -> None:
    """ManagedLedgerInterceptorImpl recovers the index generator from the managed ledger's
    'index' property when the last entry carries none."""
    world = make_world([3, 2], [10], [True, False], t0=0)  # indexes 0, 1, 2, then none
    result, _ = seek_time_kop(world.flat, world.reader()[1], 15, ml_index=2)
    assert result.extra["log_end_offset"] == 3
    assert result.kafka_offset == 1 and result.head.position == "100:1"


# -- index ----------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(worlds(), st.data())
def test_index_matches_the_linear_reference(world: World, data) -> None:
    # broker entry metadata from some ledger on (an interceptor enabled later)
    first_bem = data.draw(st.integers(0, len(world.ledgers)))
    index = -1
    for k, lg in enumerate(world.ledgers):
        for e in range(lg.entries):
            h = world.heads[(lg.ledger_id, e)]
            if k >= first_bem:
                index += h.num_messages
                h.index = index
            else:
                h.index = None
    order = world.order()
    last = max((h.index for h in order if h.index is not None), default=-1)
    target = data.draw(st.integers(0, last + 3))
    inner, reader = world.reader()
    result, _ = seek_index(world.flat, reader, target, skip_without_index=True)
    expected = next((h for h in order if h.index is not None and h.index >= target), None)
    if expected is None:
        assert result.findings and (result.end or not order)
    else:
        assert result.head.position == expected.position
        assert not result.findings
        batch = target - expected.base_index
        assert result.batch_index == (batch if expected.batched else None)
    if order:
        assert inner.reads <= read_bound(len(order), "index")


def test_index_without_skip_stops_at_entries_without_metadata() -> None:
    world = make_world([4, 4], [10], [False, True], t0=0)
    result, _ = seek_index(world.flat, world.reader()[1], 2)
    assert result.findings and "skip-without-index" in result.findings[0]


def test_negative_index_is_bad_input() -> None:
    world = make_world([4], [10], [True], t0=0)
    with pytest.raises(LedgerctlError):
        seek_index(world.flat, world.reader()[1], -1)


# -- legacy offsets and positions -----------------------------------------------------------------


def test_legacy_offsets_use_kops_bit_layouts() -> None:
    """streamnative/kop MessageIdUtils: before Sep 2019 ``ledgerId << 28 | entryId``; from
    then to Jan 2021 LEDGER_BITS 20, ENTRY_BITS 32, BATCH_BITS 12, ``(ledgerId << 44 |
    entryId << 12) + batchIndex``, decoded with ``offset >>> 44``, ``(offset &
    0x0FFF_FFFF_FFFF) >>> 12`` and ``offset & 0xFFF``. Numbers worked out by hand."""
    assert encode_legacy_offset(5, 7, 3, "ledger-entry-batch") == 87_960_930_250_755
    assert decode_legacy_offset(87_960_930_250_755, "ledger-entry-batch") == (5, 7, 3)
    # the largest entry id (32 bits) and batch index (12 bits) stay inside their fields
    top = (5 << 44) + (0xFFFF_FFFF << 12) + 0xFFF
    assert decode_legacy_offset(top, "ledger-entry-batch") == (5, 2**32 - 1, 4095)
    assert encode_legacy_offset(5, 7, None, "ledger-entry") == 1_342_177_287
    assert decode_legacy_offset(1_342_177_287, "ledger-entry") == (5, 7, None)
    assert decode_legacy_offset((5 << 28) | (2**28 - 1), "ledger-entry") == (5, 2**28 - 1, None)


@given(st.integers(0, 2**19 - 1), st.integers(0, 2**32 - 1), st.integers(0, 4095))
def test_legacy_offsets_round_trip(ledger: int, entry: int, batch: int) -> None:
    off = encode_legacy_offset(ledger, entry, batch, "ledger-entry-batch")
    assert decode_legacy_offset(off, "ledger-entry-batch") == (ledger, entry, batch)
    off = encode_legacy_offset(ledger, entry % 2**28, None, "ledger-entry")
    assert decode_legacy_offset(off, "ledger-entry") == (ledger, entry % 2**28, None)


def test_legacy_offsets_are_java_longs_past_ledger_2_19() -> None:
    """KoP computed ``ledgerId << 44`` in a Java long: negative from ledger 2^19 (bit 63),
    and from 2^20 the ledger's high bits are shifted out; KoP decoded with ``>>>``. Numbers
    worked out by hand: 2^19 << 44 = 2^63, which a long holds as -2^63."""
    assert encode_legacy_offset(2**19, 0, 0, "ledger-entry-batch") == -(2**63)
    assert decode_legacy_offset(-(2**63), "ledger-entry-batch") == (2**19, 0, 0)
    assert (
        encode_legacy_offset(2**19 + 3, 7, 2, "ledger-entry-batch")
        == -(2**63) + (3 << 44) + (7 << 12) + 2
    )
    # 2^20 + 5 wraps onto 5
    assert encode_legacy_offset(2**20 + 5, 7, 3, "ledger-entry-batch") == 87_960_930_250_755
    assert encode_legacy_offset(2**35, 1, None, "ledger-entry") == -(2**63) + 1
    assert decode_legacy_offset(-(2**63) + 1, "ledger-entry") == (2**35, 1, None)


@given(st.integers(0, 2**40), st.integers(0, 2**32 - 1), st.integers(0, 4095))
def test_legacy_offsets_round_trip_modulo_the_ledger_bits(ledger, entry, batch) -> None:
    off = encode_legacy_offset(ledger, entry, batch, "ledger-entry-batch")
    assert -(2**63) <= off < 2**63
    assert decode_legacy_offset(off, "ledger-entry-batch") == (ledger % 2**20, entry, batch)


def test_a_negative_legacy_offset_finds_its_ledger_past_2_19() -> None:
    from pulsarctl_py.seek.probe import FlatTopic, SeekLedger

    big = 2**19 + 17  # the offset is negative
    wrapped = 2**20 + 4  # the offset names ledger 4
    flat = FlatTopic([SeekLedger(3, 2, 1), SeekLedger(big, 3, 2), SeekLedger(wrapped, 2, None)])

    class Reader:
        reads = 0

        def head(self, ledger_id: int, entry_id: int) -> Head:
            self.reads += 1
            return Head(ledger_id, entry_id, publish_time=1, num_messages=4)

    off = encode_legacy_offset(big, 2, 1, "ledger-entry-batch")
    assert off < 0
    result, _ = seek_legacy(flat, Reader(), off, "ledger-entry-batch")
    assert result.head.position == f"{big}:2" and result.batch_index == 1
    result, _ = seek_legacy(
        flat, Reader(), encode_legacy_offset(wrapped, 1, 0, "ledger-entry-batch")
    )
    assert result.head.position == f"{wrapped}:1"


def test_legacy_offset_names_a_stored_entry() -> None:
    world = make_world([4], [10], [False], t0=0, batch=[3])
    off = encode_legacy_offset(100, 2, 1, "ledger-entry-batch")
    result, _ = seek_legacy(world.flat, world.reader()[1], off)
    assert result.head.position == "100:2" and result.batch_index == 1
    assert result.extra["era"] == "ledger-entry-batch"
    off = encode_legacy_offset(100, 3, None, "ledger-entry")
    result, _ = seek_legacy(world.flat, world.reader()[1], off)
    assert result.head.position == "100:3" and result.extra["era"] == "ledger-entry"
    result, _ = seek_legacy(world.flat, world.reader()[1], 12345)
    assert result.findings


def test_position_that_does_not_exist() -> None:
    world = make_world([4], [10], [False], t0=0)
    with pytest.raises(NotFoundError):
        seek_position(world.flat, world.reader()[1], 100, 9, None)
    result, _ = seek_position(world.flat, world.reader()[1], 100, 3, None)
    assert result.head.position == "100:3" and result.entries_read == 1


def _heads_reader(heads: dict) -> object:
    class Reader:
        reads = 0

        def head(self, ledger_id: int, entry_id: int) -> Head:
            self.reads += 1
            return heads[(ledger_id, entry_id)]

    return Reader()


def test_metadata_without_an_index_stops_kop_whatever_skip_says() -> None:
    """streamnative/kop MessageMetadataUtils.peekOffset: only an entry with no broker entry
    metadata at all is NoBrokerEntryMetadata (skipped with skipMessagesWithoutIndex); one
    whose metadata lacks the index makes the getter throw, a MetadataCorruptedException:
    FindEntryByOffset answers false for it and LIST_OFFSETS fails, skip or not."""
    from pulsarctl_py.seek.probe import FlatTopic, SeekLedger

    heads = {
        (7, 0): Head(7, 0, publish_time=10, broker_timestamp=10, has_bem=True),  # no index
        (7, 1): Head(7, 1, publish_time=20, broker_timestamp=20, index=5, has_bem=True),
        (7, 2): Head(7, 2, publish_time=30, broker_timestamp=30, index=6, has_bem=True),
    }
    flat = FlatTopic([SeekLedger(7, 3, None)])
    for skip in (False, True):
        result, _ = seek_index(flat, _heads_reader(heads), 6, skip_without_index=skip)
        assert result.findings and "without an index" in result.findings[0]
        result, _ = seek_time_kop(flat, _heads_reader(heads), 5, skip_without_index=skip)
        assert result.findings and "without an index" in result.findings[0]
    # the same entry without any broker entry metadata is skipped when told to
    heads[(7, 0)] = Head(7, 0, publish_time=10)
    result, _ = seek_index(flat, _heads_reader(heads), 6, skip_without_index=True)
    assert not result.findings and result.head.position == "7:2"
