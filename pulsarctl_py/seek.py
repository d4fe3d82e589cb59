"""Find entries by time, continuous index or offset, with the broker's and KoP's own rules.

Everything works on a *flat* view of a topic: its ledgers in managed-ledger order, the
empty ones left out, entry ``i`` of the topic being the ``i``-th entry as the broker
counts them (a ledger the storage at hand does not hold keeps its place; its entries are
not read). A search answers only from entries it read: when a probe or the answer entry
could not be read, there is no answer, only where it lies and what was not read; the
linear ``--exact`` scan says the same of everything it could not read. Entries are read
one at a time through a :class:`HeadReader` (entry heads only: broker entry metadata and
message metadata, no payload decoding), which counts its reads; :func:`seek` decides which
entries to read.

The rules, with where they come from (formats.md §13, §15; upstream sources named there):

* ``broker`` (a subscription reset by time, ``PersistentSubscription.resetCursor(long)``):
  ``PersistentMessageFinder`` narrows the search range by ledger close timestamps
  (``getFindPositionRange``: start = last entry of the latest ledger closed at or before
  ``T - skew``, end = last entry of the first ledger closed after ``T + skew``, an open
  ledger (close timestamp 0) clears the end and stops; a negative skew turns it off).
  ``ManagedCursorImpl.asyncFindNewestMatching`` counts the range's entries ``M`` (both
  ends included; no start: the first position of the managed ledger; no end: the last
  entry), then ``OpFindNewest`` looks for the newest entry whose timestamp is
  **strictly** before ``T``. Its probes, as offsets from the range's first entry: 0 (no
  match: no position), then ``M`` (one past the range, clamped to the last entry of the
  topic; a match: that one), then, from ``min = 0, max = M``, ``mid = min + max((max -
  min) / 2, 1)`` (a match: ``min = mid``, else ``max = mid - 1``) until ``max <= min``; the
  answer is the last matching probe. The entry timestamp is the broker entry metadata's
  ``broker_timestamp`` when present, else ``publish_time``. The cursor then reads from
  the entry after the one found. When none is found the broker resets to
  ``ManagedCursorImpl.getFirstPosition()``: entry 0 of the first ledger the managed
  ledger lists (moved on to the next valid position when that ledger holds no entry); a
  managed ledger without ledgers fails the reset. The skew defaults to the broker's
  ``managedLedgerCursorResetLedgerCloseTimestampMaxClockSkewMillis`` = 60000
  (apache/pulsar ``ServiceConfiguration.java``).
* ``kop`` (Kafka LIST_OFFSETS by timestamp, streamnative/kop ``OffsetFinder`` and
  ``KafkaRequestHandler.fetchOffsetByTimestamp``): KoP's copy of the same search,
  ``OpFindNewestEntry``, over every entry (``max = entries - 1``, so the check-last is the
  last entry; no close-time narrowing) for the newest entry with ``publish_time <= T``
  (publish time only, never broker_timestamp); none: the first entry (its check-first miss
  returns the start position). The Kafka offset is that entry's stored ``index`` (its
  *last* offset) when its publish time is ``>= T``, else ``index + 1``; when KoP's current
  index (the managed ledger's ``index`` property, then the last entry's) is below 0, 0.
* ``compacted``: the compacted ledger's first entry with ``publish_time >= T``.
* ``--index N``: the entry holding continuous index N (``index - num_messages + 1 <= N <=
  index``); entries without broker entry metadata count as older than everything with
  ``skip_without_index`` (KoP's ``skipMessagesWithoutIndex``), else they stop the search.
* ``--legacy-offset``: pre-2.8 KoP offsets in their two eras (formats.md §13).

When timestamps go backwards the binary search gives an answer that is not the first
entry at or after ``T`` (apache/pulsar#23910). Probes that contradict each other are
reported as warnings; :func:`exact_scan` reads every entry head (streamed) and gives the
true first entry at or after ``T`` and the regions where time goes backwards.

Reads. The ``broker``, ``kop`` and ``--index`` searches read exactly the entries the
broker (or KoP) probes, each once, plus the answer entry when no probe read it; that is
what makes their answers exact on timestamps that go backwards, and no procedure can do
it with fewer reads: flipping the outcome of any one probe changes the answer (a match
moves every later probe above it, a miss every later probe below it), so an entry left
unread leaves two inputs with different answers undistinguished. Those probes take up to
``ceil(log2 N) + 3`` reads (N: entries of the range searched), one more than a plain
binary search, because ``max`` starts one past the range and ``mid`` leans low. Smallest
cases: the broker rule on 8 entries (T between the third and the fourth: entries 0, 7,
4, 1, 2, 3, six reads against ``ceil(log2 8) + 2 = 5``), KoP's and the index search on
13; counting the read that shows the answer entry, a narrowed broker range of one entry
can take three. ``compacted`` (a plain lower bound) reads at most ``ceil(log2 N) + 1``.
:data:`READ_SLACK` holds these bounds; docs/performance.md has the measurements.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pulsarctl_py.coverage import LISTED
from pulsarctl_py.errors import DataError, LedgerctlError, NotFoundError, StoreUnavailable
from pulsarctl_py.positions import format_position
from pulsarctl_py.timeparse import format_time_ms

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource, LedgerView

#: apache/pulsar ServiceConfiguration.java:
#: managedLedgerCursorResetLedgerCloseTimestampMaxClockSkewMillis = 60000
DEFAULT_CLOCK_SKEW_MS = 60_000
RULES = ("broker", "kop", "compacted")
ERAS = ("auto", "ledger-entry", "ledger-entry-batch")
#: KoP before Sep 2019: offset = ledgerId << 28 | entryId
ERA1_ENTRY_BITS = 28
#: KoP Sep 2019 - Jan 2021: offset = ledgerId << 44 | entryId << 12 | batchIndex
ERA2_LEDGER_SHIFT = 44
ERA2_BATCH_BITS = 12
_LONG = 2**64


def _java_long(value: int) -> int:
    """``value`` as a Java ``long`` holds it (two's complement, 64 bits)."""
    value %= _LONG
    return value - _LONG if value >= 2**63 else value


# -- entry heads -------------------------------------------------------------------------


@dataclass(slots=True)
class Head:
    """What a seek needs of one entry: its times, its index, its message count."""

    ledger_id: int
    entry_id: int
    publish_time: int | None = None
    broker_timestamp: int | None = None
    index: int | None = None
    num_messages: int = 1
    error: str | None = None
    original: tuple[int, int] | None = None  # compacted ledger: the topic position
    #: the entry is a batch (its metadata has num_messages_in_batch, even of 1): its
    #: messages are L:E:B, as the client's BatchMessageIdImpl names them; else L:E
    batched: bool = False
    #: broker entry metadata present (with or without an index): KoP tells the two apart
    has_bem: bool = False
    #: not an entry read but entries not read from here on (a ledger or a range of entries
    #: the storage does not hold): ``error`` says which
    gap: bool = False

    @property
    def timestamp(self) -> int | None:
        """The broker's entry timestamp: broker_timestamp if present, else publish_time."""
        return self.broker_timestamp if self.broker_timestamp is not None else self.publish_time

    @property
    def timestamp_source(self) -> str | None:
        if self.broker_timestamp is not None:
            return "broker_entry_metadata"
        return "publish_time" if self.publish_time is not None else None

    @property
    def base_index(self) -> int | None:
        return None if self.index is None else self.index - self.num_messages + 1

    @property
    def position(self) -> str:
        return format_position(self.ledger_id, self.entry_id)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "position": self.position,
            "publish_time": self.publish_time,
            "broker_timestamp": self.broker_timestamp,
            "entry_timestamp": self.timestamp,
            "timestamp_source": self.timestamp_source,
            "index": self.index,
            "base_index": self.base_index,
            "num_messages": self.num_messages,
            "batched": self.batched,
        }
        if self.original is not None:
            out["original_position"] = format_position(*self.original)
        if self.error is not None:
            out["error"] = self.error
        return out


class HeadReader(Protocol):
    """Reads one entry head; ``reads`` counts the entries read from storage."""

    reads: int

    def head(self, ledger_id: int, entry_id: int) -> Head: ...


class CachedReader:
    """A reader that reads each entry once (OpFindNewest may probe one entry twice)."""

    def __init__(self, inner: HeadReader) -> None:
        self.inner = inner
        self._cache: dict[tuple[int, int], Head] = {}

    @property
    def reads(self) -> int:
        return self.inner.reads

    def head(self, ledger_id: int, entry_id: int) -> Head:
        key = (ledger_id, entry_id)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self.inner.head(ledger_id, entry_id)
        return found


def head_of_entry(entry: Any, ledger_id: int, entry_id: int) -> Head:
    """A :class:`Head` from an entry decoded at ``Depth.METADATA`` or deeper."""
    if entry.unreadable or entry.metadata is None:
        errors = [p.message for p in entry.problems if p.severity == "error"]
        reason = entry.unreadable or (errors[0] if errors else "no message metadata")
        return Head(ledger_id, entry_id, error=reason)
    bem = entry.broker_entry_metadata
    original = entry.message_position if entry.original_id is not None else None
    head = Head(
        ledger_id,
        entry_id,
        publish_time=entry.publish_time,
        broker_timestamp=bem.broker_timestamp
        if bem is not None and bem.HasField("broker_timestamp")
        else None,
        index=entry.index,
        num_messages=entry.num_messages,
        original=original,
        batched=entry.batched,
        has_bem=bem is not None,
    )
    bad = [p for p in entry.problems if p.severity == "error"]
    if bad:
        head.error = f"{bad[0].layer}: {bad[0].message}"
    return head


class StoreReader:
    """Entry heads from a :class:`LedgerSource`: one stored entry read per head."""

    def __init__(self, source: LedgerSource) -> None:
        self.source = source
        self.reads = 0
        self._views: dict[int, LedgerView] = {}

    def view(self, ledger_id: int) -> LedgerView:
        view = self._views.get(ledger_id)
        if view is None:
            view = self._views[ledger_id] = self.source.ledger(ledger_id)
        return view

    def _options(self, view: LedgerView) -> Any:
        from pulsarctl_py.decoders import DecodeOptions, Depth, Outer

        return DecodeOptions(
            outer=Outer.BOOKIE_ENTRY,
            digest_type=view.digest_type,
            password=view.password,
            depth=Depth.METADATA,
        )

    def head(self, ledger_id: int, entry_id: int) -> Head:
        from pulsarctl_py.decoders import decode_entry

        if self.source.bookie is None:
            raise LedgerctlError(
                "seek reads entries: pass --bookie-dir, or set LEDGERCTL_BOOKIE_DIRS / "
                "bookie_dirs in ledgerctl.toml"
            )
        # a store that cannot be reached is no answer about the data: it goes up (exit 3)
        try:
            view = self.view(ledger_id)
        except StoreUnavailable:
            raise
        except LedgerctlError as exc:
            return Head(ledger_id, entry_id, error=exc.one_line())
        self.reads += 1
        try:
            data = self.source.bookie.read_entry(ledger_id, entry_id)
        except StoreUnavailable:
            raise
        except LedgerctlError as exc:
            return Head(ledger_id, entry_id, error=exc.one_line())
        entry = decode_entry(data, self._options(view), (ledger_id, entry_id))
        return head_of_entry(entry, ledger_id, entry_id)

    def stream(self, ledger_id: int, first: int, last: int) -> Iterator[Head]:
        """Every head of ``[first, last]`` in order, read sequentially (for --exact)."""
        from pulsarctl_py.decoders import Depth

        view = self.view(ledger_id)
        for entry in self.source.entries(view, first, last, depth=Depth.METADATA, keep_going=True):
            self.reads += 1
            pos = entry.position or (ledger_id, -1)
            yield head_of_entry(entry, pos[0], pos[1])


# -- the topic as a flat list of entries ------------------------------------------------------


@dataclass(slots=True)
class SeekLedger:
    """One ledger of the topic as the managed ledger lists it."""

    ledger_id: int
    entries: int
    close_ms: int | None  # None: open (the znode's 0)
    #: why storage cannot give its entries: they keep their places, and are not read
    missing: str | None = None

    @property
    def uncounted(self) -> bool:
        """Missing and its entry count unknown: where the topic's entries after it are is
        not known either."""
        return self.missing is not None and self.entries <= 0


class FlatTopic:
    """The topic's entries numbered 0..n-1 across ledgers, in order, as the broker counts
    them: the ledgers the storage does not hold keep their places (their entries are not
    read)."""

    def __init__(self, ledgers: Sequence[SeekLedger]) -> None:
        self.ledgers = list(ledgers)
        self.used = [lg for lg in self.ledgers if lg.entries > 0]
        self.starts: list[int] = []
        total = 0
        for lg in self.used:
            self.starts.append(total)
            total += lg.entries
        self.n = total

    @property
    def readable(self) -> bool:
        """Whether any entry can be read at all."""
        return any(lg.missing is None for lg in self.used)

    def ledger_at(self, i: int) -> SeekLedger:
        return self.used[bisect.bisect_right(self.starts, i) - 1]

    def position(self, i: int) -> tuple[int, int]:
        k = bisect.bisect_right(self.starts, i) - 1
        return self.used[k].ledger_id, i - self.starts[k]

    def index_of(self, ledger_id: int, entry_id: int) -> int | None:
        for k, lg in enumerate(self.used):
            if lg.ledger_id == ledger_id:
                return self.starts[k] + entry_id if 0 <= entry_id < lg.entries else None
        return None

    def first_at_or_after(self, ledger_id: int, entry_id: int) -> int:
        """Flat index of the first entry at or after ``(ledger_id, entry_id)`` (n: none)."""
        for k, lg in enumerate(self.used):
            if lg.ledger_id > ledger_id or (lg.ledger_id == ledger_id and entry_id < lg.entries):
                return self.starts[k] + (max(entry_id, 0) if lg.ledger_id == ledger_id else 0)
        return self.n

    def last_at_or_before(self, ledger_id: int, entry_id: int) -> int:
        """Flat index of the last entry at or before ``(ledger_id, entry_id)`` (-1: none)."""
        best = -1
        for k, lg in enumerate(self.used):
            if lg.ledger_id < ledger_id:
                best = self.starts[k] + lg.entries - 1
            elif lg.ledger_id == ledger_id and entry_id >= 0:
                best = self.starts[k] + min(entry_id, lg.entries - 1)
        return best


# -- probes and the OpFindNewest model ---------------------------------------------------------


@dataclass(slots=True)
class Probe:
    phase: str  # check-first, check-last, search, ...
    head: Head
    comparison: str
    matched: bool
    index: int = -1  # the entry's flat index

    def to_json(self) -> dict[str, Any]:
        h = self.head
        return {
            "phase": self.phase,
            "position": h.position,
            "timestamp": h.timestamp,
            "publish_time": h.publish_time,
            "source": h.timestamp_source,
            "index": h.index,
            "comparison": self.comparison,
            "matched": self.matched,
            "error": h.error,
        }


Predicate = Callable[[Head], tuple[bool, str]]


class Prober:
    """Reads flat entries through a reader, keeping every probe for --explain."""

    def __init__(self, flat: FlatTopic, reader: HeadReader) -> None:
        self.flat = flat
        self.reader = reader
        self.probes: list[Probe] = []
        self.unreadable: list[Head] = []

    def head(self, i: int) -> Head:
        ledger = self.flat.ledger_at(i)
        if ledger.missing is not None:  # not in the storage at hand: nothing to read
            ledger_id, entry_id = self.flat.position(i)
            return Head(ledger_id, entry_id, error=f"ledger {ledger_id}: {ledger.missing}")
        return self.reader.head(*self.flat.position(i))

    def test(self, i: int, pred: Predicate, phase: str) -> tuple[Head, bool]:
        head = self.head(i)
        if head.error is not None:
            self.unreadable.append(head)
            self.probes.append(Probe(phase, head, "unreadable: counted as no match", False, i))
            return head, False
        matched, text = pred(head)
        self.probes.append(Probe(phase, head, text, matched, i))
        return head, matched


def op_find_newest(prober: Prober, start: int, count: int, pred: Predicate) -> int | None:
    """apache/pulsar ``OpFindNewest`` over flat indices: the newest matching entry.

    ``start`` is the first entry of the range, ``count`` the ``max`` the broker passes
    (the entries of the range for a cursor reset, entries - 1 for KoP). Positions past the
    last entry end the search as ``hasMoreEntries`` does; the check-last position is
    clamped to the last entry as the newest broker does.
    """
    n = prober.flat.n
    last_entry = n - 1
    if start > last_entry or start < 0:
        return None

    def after(k: int) -> int:
        return min(start + k, n)

    lo, hi = 0, count
    _, ok = prober.test(start, pred, "check-first")
    if not ok:
        return None
    last_matched = start
    search = min(after(hi), last_entry)
    _, ok = prober.test(search, pred, "check-last")
    if ok:
        return search
    mid = lo + max((hi - lo) // 2, 1)
    while True:
        pos = after(mid)
        if pos > last_entry:
            return last_matched
        _, ok = prober.test(pos, pred, "search")
        if ok:
            last_matched = pos
            lo = mid
        else:
            hi = mid - 1
        mid = lo + max((hi - lo) // 2, 1)
        if hi <= lo:
            return last_matched


def find_position_range(
    ledgers: Sequence[SeekLedger], target: int, skew: int
) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """``PersistentMessageFinder.getFindPositionRange``: (start, end) by ledger close times."""
    if skew < 0:
        return None, None
    low, high = target - skew, target + skew
    start = end = None
    for lg in ledgers:
        if not lg.close_ms:  # open: the znode says 0
            end = None
            break
        if lg.close_ms <= low:
            start = (lg.ledger_id, lg.entries - 1)
        elif lg.close_ms > high:
            end = (lg.ledger_id, lg.entries - 1)
            break
    return start, end


# -- results ---------------------------------------------------------------------------------


@dataclass(slots=True)
class SeekResult:
    topic: str | None
    target_kind: str
    target_value: Any
    rule: str | None
    head: Head | None = None  # the entry at the answer (None: after the last entry / none)
    batch_index: int | None = None
    end: bool = False
    kafka_offset: int | None = None
    entries_read: int = 0
    probes: list[Probe] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # why the target cannot be answered
    exact: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    search_range: dict[str, Any] | None = None
    #: flat indices of the first and last entry the search covers (None: one entry)
    span: tuple[int, int] | None = None
    #: the range searched, when narrower than ``span`` (the broker's close-time narrowing)
    searched: tuple[int, int] | None = None

    @property
    def answered(self) -> bool:
        return not self.findings

    def to_json(self, explain: bool = False) -> dict[str, Any]:
        h = self.head
        out: dict[str, Any] = {
            "topic": self.topic,
            "target": {"kind": self.target_kind, "value": self.target_value},
            "rule": self.rule,
            "position": None
            if h is None
            else format_position(h.ledger_id, h.entry_id, self.batch_index),
            "ledger_id": None if h is None else h.ledger_id,
            "entry_id": None if h is None else h.entry_id,
            "batch_index": self.batch_index,
            "end": self.end,
            "entry_timestamp": None if h is None else h.timestamp,
            "timestamp_source": None if h is None else h.timestamp_source,
            "publish_time": None if h is None else h.publish_time,
            "index": None if h is None else h.index,
            "kafka_offset": self.kafka_offset,
            "entries_read": self.entries_read,
            "warnings": list(self.warnings),
            "findings": list(self.findings),
        }
        if self.search_range is not None:
            out["search_range"] = self.search_range
        if self.exact is not None:
            out["exact"] = self.exact
        if h is not None and h.original is not None:
            out["original_position"] = format_position(*h.original)
        out.update(self.extra)
        if explain:
            out["probes"] = [p.to_json() for p in self.probes]
        return out


def _contradictions(probes: Sequence[Probe], key: Callable[[Head], int | None]) -> list[str]:
    """Probes whose timestamps go down while positions go up."""
    seen: dict[tuple[int, int], Head] = {}
    for p in probes:
        if p.head.error is None and key(p.head) is not None:
            seen[(p.head.ledger_id, p.head.entry_id)] = p.head
    ordered = [seen[k] for k in sorted(seen)]
    out = []
    highest: Head | None = None
    for h in ordered:
        if highest is not None and key(h) < key(highest) and not out:  # type: ignore[operator]
            out.append(
                f"timestamps go backwards between {highest.position} "
                f"({format_time_ms(key(highest))}) and {h.position} ({format_time_ms(key(h))}): "
                "the binary search assumes they do not, so its "
                "answer may not be the first entry at or after the time; run with --exact"
            )
        if highest is None or key(h) > key(highest):  # type: ignore[operator]
            highest = h
    return out


def _finish(result: SeekResult, prober: Prober) -> None:
    """Keep the probes and the read count; every unreadable probe is a finding, and a
    search that could not read what it needed has no answer (:func:`_unanswered`)."""
    result.probes = prober.probes
    result.entries_read = prober.reader.reads
    for head in prober.unreadable:
        result.findings.append(
            f"entry {head.position} could not be read ({head.error}); a broker would fail "
            "the search there"
        )
    _unanswered(result, prober.flat, prober.unreadable)


def _answer_at(result: SeekResult, prober: Prober, i: int) -> None:
    flat = prober.flat
    if i >= flat.n:
        result.end = True
        return
    result.head = prober.head(i)


def _no_entries(flat: FlatTopic) -> str:
    """Why a reset by time has nothing to land on, and what the broker does then."""
    if not flat.ledgers:
        return (
            "the managed ledger lists no ledger: the broker fails a reset by time "
            "(getFirstPosition() is null)"
        )
    if not any(lg.entries > 0 for lg in flat.ledgers):
        return (
            "the topic has no entries: a reset by time leaves the cursor at the end "
            f"({flat.ledgers[0].ledger_id}:0 or the next valid position), with nothing to read"
        )
    return "no entry of the topic is in the given storage: every ledger holding one is missing"


def _reset_to_first_position(result: SeekResult, prober: Prober, narrowed: bool) -> None:
    """No entry matched: ``PersistentSubscription.resetCursor(long)`` resets to
    ``ManagedCursorImpl.getFirstPosition()``, entry 0 of the first ledger the managed
    ledger lists, and ``asyncResetCursor`` moves an invalid position on to the next valid
    one (entry 0 of the next ledger with entries). Ledgers missing from storage count, as
    they do for the broker."""
    flat = prober.flat
    first = next(lg for lg in flat.ledgers if lg.entries > 0)  # flat.n > 0 here
    where = format_position(first.ledger_id, 0)
    why = (
        f"the first entry of the narrowed range {result.search_range['start']} is not before "  # type: ignore[index]
        "the time"
        if narrowed
        else "no entry is before the time"
    )
    if first.missing is not None:
        # the broker resets there when none of its entries is before the time either:
        # they were not read, so that is not known: no answer (the probes' findings)
        prober.unreadable.append(
            Head(first.ledger_id, 0, error=f"ledger {first.ledger_id}: {first.missing}")
        )
        result.warnings.append(
            f"{why} among the entries read: the broker resets to {where}, the first position "
            f"of the managed ledger, if no entry of its unread ledger is either"
        )
        return
    _answer_at(result, prober, flat.index_of(first.ledger_id, 0))  # type: ignore[arg-type]
    if narrowed:
        result.warnings.append(
            f"{why}: the broker resets to the first position of the managed ledger, {where}"
        )


# -- the rules --------------------------------------------------------------------------------


def seek_time_broker(
    flat: FlatTopic, reader: HeadReader, target: int, skew: int = DEFAULT_CLOCK_SKEW_MS
) -> tuple[SeekResult, Prober]:
    """Where a subscription reset to ``target`` reads first (formats.md §15)."""
    result = SeekResult(None, "time", target, "broker")
    prober = Prober(flat, reader)
    if flat.n == 0 or not flat.readable:
        result.findings.append(_no_entries(flat))
        return result, prober
    start_pos, end_pos = find_position_range(flat.ledgers, target, skew)
    start = 0 if start_pos is None else flat.first_at_or_after(*start_pos)
    end = flat.n - 1 if end_pos is None else min(flat.last_at_or_before(*end_pos), flat.n - 1)
    count = end - start + 1 if start <= end else 0
    result.span = (start, min(end + 2, flat.n - 1))  # the answer: up to check-last's next
    result.searched = (start, end)
    result.search_range = {
        "start": format_position(*flat.position(start)) if start < flat.n else None,
        "end": format_position(*flat.position(end)) if 0 <= end < flat.n else None,
        "entries": max(count, 0),
        "narrowed_by_close_time": start_pos is not None or end_pos is not None,
        "clock_skew_ms": skew,
    }

    def pred(h: Head) -> tuple[bool, str]:
        ts = h.timestamp
        ok = ts is not None and ts < target
        return ok, f"{format_time_ms(ts)} {'<' if ok else '>='} {format_time_ms(target)}"

    found = op_find_newest(prober, start, count, pred) if count > 0 else None
    if found is None:
        _reset_to_first_position(result, prober, start_pos is not None)
    else:
        _answer_at(result, prober, found + 1)
    result.warnings.extend(_contradictions(prober.probes, lambda h: h.timestamp))
    if found is not None and result.head is not None and result.head.error is None:
        ts = result.head.timestamp
        if ts is not None and ts < target:
            result.warnings.append(
                f"the entry the cursor would read first, {result.head.position}, has timestamp "
                f"{format_time_ms(ts)}, before the time: timestamps are not in order here"
            )
    _finish(result, prober)
    return result, prober


def seek_time_kop(
    flat: FlatTopic,
    reader: HeadReader,
    target: int,
    *,
    skip_without_index: bool = False,
    ml_index: int | None = None,
) -> tuple[SeekResult, Prober]:
    """KoP's LIST_OFFSETS by timestamp (formats.md §13).

    KoP's current offset is the broker's index generator
    (``ManagedLedgerInterceptorImpl.getIndex()``): recovered from the managed ledger's
    ``index`` property (``ml_index``), then from the last entry's broker entry metadata
    when it has an index; -1 when neither. Below 0, KoP answers ``max(0, index)``."""
    result = SeekResult(None, "time", target, "kop", span=(0, flat.n - 1))
    prober = Prober(flat, reader)
    if flat.n == 0:
        result.findings.append("the topic has no entries")
        return result, prober

    def pred(h: Head) -> tuple[bool, str]:
        ts = h.publish_time
        ok = ts is not None and ts <= target
        shown = f"{format_time_ms(ts)} {'<=' if ok else '>'} {format_time_ms(target)}"
        return ok, f"publish_time {shown}"

    found = op_find_newest(prober, 0, flat.n - 1, pred)
    p = 0 if found is None else found
    last = prober.head(flat.n - 1)
    current = last.index if last.index is not None else ml_index
    if current is None or current < 0:
        # KafkaRequestHandler.fetchOffsetByTimestamp: a current offset below 0 answers
        # max(0, current) without reading the entry found
        result.extra["log_end_offset"] = 0
        result.kafka_offset = 0
        result.head = prober.head(p)
        why = "" if ml_index is not None else " and the managed ledger no 'index' property"
        result.warnings.append(
            f"the last entry {last.position} has no continuous index{why}: KoP's current "
            f"index is {-1 if current is None else current} and LIST_OFFSETS answers 0 (with "
            "the AppendIndexMetadataInterceptor KoP 2.8+ needs; without it KoP fails)"
        )
        _finish(result, prober)
        return result, prober
    result.extra["log_end_offset"] = current + 1
    head = prober.head(p)
    if head.index is None and head.has_bem:
        # streamnative/kop MessageMetadataUtils.peekOffset: the index getter throws on
        # metadata without one; a MetadataCorruptedException, not NoBrokerEntryMetadata,
        # so getOffsetOfPosition fails whatever skipMessagesWithoutIndex says
        result.findings.append(
            f"entry {head.position} has broker entry metadata without an index: KoP fails "
            "there (MetadataCorruptedException), whatever skipMessagesWithoutIndex says"
        )
        result.head = head
    elif head.index is None:
        if skip_without_index:
            result.kafka_offset = 0
            result.head = head
            result.warnings.append(
                f"entry {head.position} has no index; skipMessagesWithoutIndex makes it offset 0"
            )
        else:
            result.findings.append(
                f"entry {head.position} has no broker entry metadata index: KoP fails here "
                "(pass --skip-without-index for skipMessagesWithoutIndex=true)"
            )
            result.head = head
    else:
        pub = head.publish_time or 0
        offset = head.index if pub >= target else head.index + 1
        result.kafka_offset = offset
        if offset == head.index:
            result.head = head
            result.batch_index = head.num_messages - 1 if head.batched else None
            if head.num_messages > 1:
                result.warnings.append(
                    "KoP answers the entry's last offset, not its first: ListOffsets by "
                    "time returns the stored index of the entry, which is the offset of its "
                    "last message"
                )
        else:
            _answer_at(result, prober, p + 1)
            if result.head is not None and result.head.batched:
                result.batch_index = 0
    _finish(result, prober)
    return result, prober


def seek_index(
    flat: FlatTopic, reader: HeadReader, target: int, *, skip_without_index: bool = False
) -> tuple[SeekResult, Prober]:
    """The entry holding continuous index ``target`` (KoP: ``entryIndex < offset``)."""
    result = SeekResult(None, "index", target, None, span=(0, flat.n - 1))
    prober = Prober(flat, reader)
    if flat.n == 0:
        result.findings.append("the topic has no entries")
        return result, prober
    if target < 0:
        raise LedgerctlError(f"index {target} is negative")
    no_index: list[Head] = []

    def pred(h: Head) -> tuple[bool, str]:
        if h.index is None:
            if skip_without_index and not h.has_bem:
                return True, "no index: skipped as older (skipMessagesWithoutIndex)"
            no_index.append(h)
            if h.has_bem:
                # KoP FindEntryByOffset: the index getter throws, a MetadataCorruptedException
                # the predicate answers false for, whatever skipMessagesWithoutIndex says
                return False, "broker entry metadata without an index (corrupt for KoP)"
            return False, "no index"
        ok = h.index < target
        return ok, f"index {h.index} {'<' if ok else '>='} {target}"

    found = op_find_newest(prober, 0, flat.n - 1, pred)
    if no_index and no_index[0].has_bem:
        result.findings.append(
            f"entry {no_index[0].position} has broker entry metadata without an index: KoP "
            "reads it as corrupt and the search stops there, whatever skipMessagesWithoutIndex "
            "says"
        )
    elif no_index:
        result.findings.append(
            f"entry {no_index[0].position} has no broker entry metadata index; pass "
            "--skip-without-index to treat such entries as older than every index"
        )
    answer = 0 if found is None else found + 1
    if not no_index:
        _answer_at(result, prober, answer)
    head = result.head
    if no_index:
        pass  # the search stopped: no answer, the finding says where
    elif result.end:
        last = prober.head(flat.n - 1)
        result.findings.append(
            f"index {target} is past the end: the last entry {last.position} ends at index "
            f"{last.index}"
        )
    elif head is not None and head.index is not None:
        base = head.base_index
        if base is not None and base > target:
            result.findings.append(
                f"index {target} is not stored: the first entry holding an index "
                f"({head.position}) starts at {base}"
            )
        elif base is not None:
            result.batch_index = target - base if head.batched else None
    result.warnings.extend(_contradictions(prober.probes, lambda h: h.index))
    _finish(result, prober)
    return result, prober


def seek_compacted(
    ledger_id: int, entries: int, reader: HeadReader, target: int
) -> tuple[SeekResult, Prober]:
    """The compacted ledger's first entry with ``publish_time >= target`` (lower bound)."""
    flat = FlatTopic([SeekLedger(ledger_id, entries, None)])
    result = SeekResult(None, "time", target, "compacted")
    prober = Prober(flat, reader)
    lo, hi = 0, flat.n  # the answer is in [lo, hi]

    def pred(h: Head) -> tuple[bool, str]:
        ts = h.publish_time
        ok = ts is not None and ts >= target
        shown = f"{format_time_ms(ts)} {'>=' if ok else '<'} {format_time_ms(target)}"
        return ok, f"publish_time {shown}"

    while lo < hi:
        mid = (lo + hi) // 2
        _, ok = prober.test(mid, pred, "search")
        if ok:
            hi = mid
        else:
            lo = mid + 1
    _answer_at(result, prober, lo)
    result.extra["compacted_ledger_id"] = ledger_id
    result.warnings.extend(_contradictions(prober.probes, lambda h: h.publish_time))
    _finish(result, prober)
    return result, prober


def decode_legacy_offset(offset: int, era: str) -> tuple[int, int, int | None]:
    """A pre-2.8 KoP offset as ``(ledger, entry, batch index)`` in one era (formats.md §13).

    KoP computed offsets in a Java ``long`` (streamnative/kop ``MessageIdUtils``): from ledger
    2^19 on (era two; 2^35 in era one) the offset is negative, and from 2^20 (2^36) the
    ledger id's high bits are shifted out. Decoding is KoP's, with unsigned shifts
    (``offset >>> 44``): the ledger returned is the ledger id modulo 2^20 (2^36), which
    :func:`seek_legacy` matches against the topic's ledgers."""
    if not -(2**63) <= offset < 2**63:
        raise LedgerctlError(f"legacy offset {offset} is not a 64-bit offset")
    u = offset % _LONG  # the bits of the Java long, for >>>
    if era == "ledger-entry":
        return u >> ERA1_ENTRY_BITS, u & ((1 << ERA1_ENTRY_BITS) - 1), None
    if era == "ledger-entry-batch":
        entry = (u & ((1 << ERA2_LEDGER_SHIFT) - 1)) >> ERA2_BATCH_BITS
        return u >> ERA2_LEDGER_SHIFT, entry, u & ((1 << ERA2_BATCH_BITS) - 1)
    raise LedgerctlError(f"unknown era {era!r}: one of {', '.join(ERAS[1:])}")


def encode_legacy_offset(ledger_id: int, entry_id: int, batch: int | None, era: str) -> int:
    """The offset KoP gave a position in ``era``, as its Java ``long`` arithmetic gives it:
    negative from ledger 2^19 (2^35 in era one), the ledger's high bits lost from 2^20."""
    if era == "ledger-entry":
        return _java_long((ledger_id << ERA1_ENTRY_BITS) | entry_id)
    return _java_long(
        ((ledger_id << ERA2_LEDGER_SHIFT) | (entry_id << ERA2_BATCH_BITS)) + (batch or 0)
    )


def _ledger_bits(era: str) -> int:
    """How many bits of the ledger id an offset of ``era`` keeps."""
    return 64 - (ERA1_ENTRY_BITS if era == "ledger-entry" else ERA2_LEDGER_SHIFT)


def seek_legacy(
    flat: FlatTopic, reader: HeadReader, offset: int, era: str = "auto"
) -> tuple[SeekResult, Prober]:
    result = SeekResult(None, "legacy-offset", offset, None)
    prober = Prober(flat, reader)
    eras = [era] if era != "auto" else ["ledger-entry-batch", "ledger-entry"]
    candidates = []
    for name in eras:
        low, entry, batch = decode_legacy_offset(offset, name)
        # the topic's ledgers whose id the offset's bits name (ids past 2^20 wrapped)
        modulus = 1 << _ledger_bits(name)
        ledgers = [lg.ledger_id for lg in flat.ledgers if lg.ledger_id % modulus == low]
        if len(ledgers) > 1:
            result.warnings.append(
                f"{name}: the offset names ledger {low} modulo 2^{_ledger_bits(name)}, which "
                f"fits ledgers {', '.join(map(str, ledgers))}: the first holding the entry"
            )
        found = [(lid, flat.index_of(lid, entry)) for lid in ledgers]
        held = [(lid, i) for lid, i in found if i is not None]
        ledger, i = held[0] if held else ((ledgers[0], None) if ledgers else (low, None))
        candidates.append((name, ledger, entry, batch, i))
    result.extra["decoded"] = [
        {"era": name, "position": format_position(ledger, entry, batch), "exists": i is not None}
        for name, ledger, entry, batch, i in candidates
    ]
    existing = [c for c in candidates if c[4] is not None]
    if not existing:
        shown = ", ".join(f"{c[0]}: {format_position(c[1], c[2], c[3])}" for c in candidates)
        result.findings.append(f"legacy offset {offset} names no stored entry ({shown})")
        return result, prober
    if len(existing) > 1:
        result.warnings.append(
            "the offset names an entry in both eras; showing ledger-entry-batch "
            "(pass --era to choose)"
        )
    name, ledger, entry, batch, i = existing[0]
    result.extra["era"] = name
    result.head = prober.head(i)  # type: ignore[arg-type]
    result.batch_index = batch
    if result.head.error is not None:
        result.findings.append(
            f"entry {result.head.position} could not be read: {result.head.error}"
        )
        result.head = result.batch_index = None  # never a position that was not read
    elif batch is not None and batch >= result.head.num_messages:
        result.findings.append(
            f"batch index {batch} is past the entry's {result.head.num_messages} messages"
        )
    result.entries_read = reader.reads
    return result, prober


def seek_position(
    flat: FlatTopic, reader: HeadReader, ledger_id: int, entry_id: int, batch: int | None
) -> tuple[SeekResult, Prober]:
    value = format_position(ledger_id, entry_id, batch)
    result = SeekResult(None, "position", value, None)
    prober = Prober(flat, reader)
    i = flat.index_of(ledger_id, entry_id)
    if i is None:
        raise NotFoundError(f"position {value} does not exist in this topic")
    result.head = prober.head(i)
    result.batch_index = batch
    if result.head.error is not None:
        result.findings.append(f"entry {value} could not be read: {result.head.error}")
        result.head = result.batch_index = None  # never a position that was not read
    elif batch is not None and batch >= result.head.num_messages:
        raise NotFoundError(
            f"position {value}: the entry holds {result.head.num_messages} message(s)"
        )
    result.entries_read = reader.reads
    return result, prober


# -- the exact answer, by a linear scan ----------------------------------------------------------


def exact_scan(
    heads: Iterator[Head], target: int, key: Callable[[Head], int | None] | None = None
) -> dict[str, Any]:
    """Read every head in order: the first entry with timestamp >= target, and the regions
    where the timestamp goes backwards (streamed; keeps only the regions)."""
    key = key or (lambda h: h.timestamp)
    first: Head | None = None
    regions: list[dict[str, Any]] = []
    highest: Head | None = None
    open_region: dict[str, Any] | None = None
    scanned = 0
    unreadable = 0
    not_read: list[str] = []  # what was not read (the first LISTED of it)
    unread_first: Head | None = None  # the first thing not read before ``first``
    for h in heads:
        if h.error is not None:
            if not h.gap:
                scanned += 1
                unreadable += 1
            if len(not_read) < LISTED:
                not_read.append(h.error if h.gap else f"entry {h.position}: {h.error}")
            if first is None and unread_first is None:
                unread_first = h
            open_region = None  # no region runs across what was not read
            continue
        scanned += 1
        ts = key(h)
        if ts is None:
            continue
        if first is None and ts >= target:
            first = h
        if highest is not None and ts < key(highest):  # type: ignore[operator]
            if open_region is None:
                open_region = {
                    "after": highest.position,
                    "after_timestamp": key(highest),
                    "first": h.position,
                    "last": h.position,
                    "lowest_timestamp": ts,
                    "entries": 0,
                }
                regions.append(open_region)
            open_region["last"] = h.position
            open_region["entries"] += 1
            open_region["lowest_timestamp"] = min(open_region["lowest_timestamp"], ts)
        else:
            open_region = None
            highest = h
    answered = unread_first is None
    return {
        "first_at_or_after": None if first is None or not answered else first.position,
        "first_timestamp": None if first is None or not answered else key(first),
        "entries_scanned": scanned,
        "unreadable": unreadable,
        "complete": not not_read,
        "not_read": not_read,
        "non_monotonic_regions": regions,
        "_head": first if answered else None,
        # the first entry at or after the time lies from here to ``_head``'s (or after)
        "_unread_first": unread_first,
        "_seen_first": first,
    }


def linear_broker_reference(timestamps: Sequence[int], target: int) -> int:
    """For monotone timestamps: flat index of the first entry >= target (n: none)."""
    for i, ts in enumerate(timestamps):
        if ts >= target:
            return i
    return len(timestamps)


#: Entry reads over ceil(log2 N) a search can take, the answer entry included (N: entries
#: of the range searched); every one of them is needed for the exact answer (module doc).
READ_SLACK = {"broker": 3, "kop": 3, "index": 3, "compacted": 1}


def ceil_log2(entries: int) -> int:
    """ceil(log2 N), 0 for N <= 1."""
    return (entries - 1).bit_length() if entries > 1 else 0


def read_bound(entries: int, rule: str) -> int:
    """The most entries a ``rule`` search over ``entries`` entries reads (:data:`READ_SLACK`)."""
    return ceil_log2(entries) + READ_SLACK[rule]


# -- entry point on stores ---------------------------------------------------------------------


@dataclass(slots=True)
class SeekRequest:
    topic: str | None = None
    ledger_id: int | None = None
    time_ms: int | None = None
    index: int | None = None
    legacy_offset: int | None = None
    position: tuple[int, int, int | None] | None = None
    rule: str = "broker"
    clock_skew_ms: int = DEFAULT_CLOCK_SKEW_MS
    skip_without_index: bool = False
    era: str = "auto"
    exact: bool = False

    def kind(self) -> str:
        given = [
            k
            for k, v in (
                ("time", self.time_ms),
                ("index", self.index),
                ("legacy-offset", self.legacy_offset),
                ("position", self.position),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise LedgerctlError(
                "give exactly one target: --time, --index (--offset), --legacy-offset or "
                f"--position ({'none' if not given else ', '.join(given)} given)"
            )
        return given[0]


def topic_ledgers(
    source: LedgerSource, request: SeekRequest
) -> tuple[str | None, list[SeekLedger], Any]:
    """The ledgers to search, with missing ones marked, and the topic info (or None)."""
    if request.ledger_id is not None:
        if source.bookie is not None:  # a bookie that cannot be reached: exit 3, no answer
            source.bookie.last_entry_id(request.ledger_id)
        view = source.ledger(request.ledger_id)
        lac = view.lac
        entries = 0 if lac is None else lac + 1
        # one ledger alone: no managed-ledger close time to narrow the search by
        row = SeekLedger(request.ledger_id, entries, None)
        if view.storage_error is not None:
            row.missing = view.storage_error
        return None, [row], None
    from pulsarctl_py.topics import topic_info

    if request.topic is None:
        raise LedgerctlError("give a topic, or --ledger L")
    info = topic_info(source, request.topic)
    rows = []
    for li in info.ledgers:
        row = SeekLedger(li.ledger_id, li.entries or 0, li.timestamp)
        if li.offloaded:
            row.missing = "offloaded to tiered storage"
        elif source.bookie is not None:
            # a bookie that cannot be reached raises here (exit 3): no answer at all
            stored = source.bookie.last_entry_id(li.ledger_id)
            if li.entries and stored is None:
                row.missing = "not in the given bookie storage"
        if li.entries is None:
            row.missing = li.problem or "its entry count is unknown"
        rows.append(row)
    return info.topic, rows, info


def seek(source: LedgerSource, request: SeekRequest, reads: Any = None) -> SeekResult:
    """Answer one seek request on real stores.

    ``reads`` (an :class:`pulsarctl_py.engines.reads.EngineReads`) runs the --exact scan
    on its engine; the answer is the same.
    """
    kind = request.kind()
    if request.rule not in RULES:
        raise LedgerctlError(f"unknown rule {request.rule!r}: one of {', '.join(RULES)}")
    if source.bookie is None:
        raise LedgerctlError(
            "seek reads entries: pass --bookie-dir, or set LEDGERCTL_BOOKIE_DIRS / "
            "bookie_dirs in ledgerctl.toml"
        )
    topic, ledgers, info = topic_ledgers(source, request)
    store_reader = StoreReader(source)
    reader = CachedReader(store_reader)
    warnings = [
        f"ledger {lg.ledger_id} ({lg.entries} entries) is not read: {lg.missing} (its entries "
        "keep their places; a search that needs one of them has no answer)"
        for lg in ledgers
        if lg.missing is not None
    ]
    flat = FlatTopic(ledgers)
    if kind == "time" and request.rule == "compacted":
        if info is None or info.compacted_ledger is None:
            raise DataError(f"{topic or 'the ledger'} has no compacted ledger (no compaction ran)")
        cview = store_reader.view(info.compacted_ledger)
        centries = 0 if cview.lac is None else cview.lac + 1
        result, _ = seek_compacted(info.compacted_ledger, centries, reader, request.time_ms)  # type: ignore[arg-type]
    elif kind == "time" and request.rule == "kop":
        result, _ = seek_time_kop(
            flat,
            reader,
            request.time_ms,  # type: ignore[arg-type]
            skip_without_index=request.skip_without_index,
            ml_index=None if info is None else info.index,
        )
    elif kind == "time":
        result, _ = seek_time_broker(flat, reader, request.time_ms, request.clock_skew_ms)  # type: ignore[arg-type]
    elif kind == "index":
        result, _ = seek_index(
            flat,
            reader,
            request.index,
            skip_without_index=request.skip_without_index,  # type: ignore[arg-type]
        )
    elif kind == "legacy-offset":
        result, _ = seek_legacy(flat, reader, request.legacy_offset, request.era)  # type: ignore[arg-type]
    else:
        ledger_id, entry_id, batch = request.position  # type: ignore[misc]
        result, _ = seek_position(flat, reader, ledger_id, entry_id, batch)
    result.topic = topic
    result.warnings[:0] = warnings
    if request.exact and kind == "time":
        _exact(result, flat, store_reader, request, reads)
    result.entries_read = store_reader.reads
    if result.head is not None and kind in ("position", "legacy-offset"):
        result.extra["messages"] = _messages(source, store_reader, result.head, result.batch_index)
    return result


def _unanswered(result: SeekResult, flat: FlatTopic, unreadable: Sequence[Head]) -> None:
    """A search that could not read what it needed has no answer: never a position that
    was not read, nor one an entry not read could change. The probes are the broker's (or
    KoP's) own, on the topic as the broker counts it; a ledger the storage does not hold,
    inside the range searched, could hold the answer whatever the probes found (timestamps
    and indexes are only assumed to rise), so it makes the answer inexact too. Else it says
    so, with where the answer lies (``answer_range``: between the newest probe read that
    matched and the oldest read that did not) and what was not read (``not_read``)."""
    not_read = [f"entry {head.position}: {head.error}" for head in unreadable]
    searched = result.searched or result.span
    if searched is not None and flat.n:
        lo, hi = searched
        for k, lg in enumerate(flat.used):
            first, last = flat.starts[k], flat.starts[k] + lg.entries - 1
            if lg.missing is not None and first <= hi and last >= lo:
                not_read.append(f"ledger {lg.ledger_id} ({lg.entries} entries): {lg.missing}")
    answer = result.head
    if answer is not None and answer.error is not None and answer not in unreadable:
        not_read.append(f"entry {answer.position}: {answer.error}")
    if result.end and flat.used:
        # "after the last entry": unless a ledger after it, whose entry count is not known
        # (an open ledger the storage holds nothing of), holds entries
        after = flat.ledgers[flat.ledgers.index(flat.used[-1]) + 1 :]
        not_read += [
            f"ledger {lg.ledger_id} (entries unknown): {lg.missing}" for lg in after if lg.uncounted
        ]
    if not not_read:
        return
    result.head = None
    result.batch_index = result.kafka_offset = None
    result.end = False
    result.extra["not_read"] = not_read
    if result.span is None or flat.n == 0:  # one entry asked for: the findings say why
        return
    lo, hi = result.span
    matched = [p.index for p in result.probes if p.matched and p.index >= 0]
    if matched:
        lo = max(matched)
    after = [p.index for p in result.probes if not p.matched and p.head.error is None]
    after = [i for i in after if i > lo]
    if after:
        hi = min(after)
    first, last = (format_position(*flat.position(max(0, min(i, flat.n - 1)))) for i in (lo, hi))
    result.extra["answer_range"] = {"first": first, "last": last}
    shown = "; ".join(not_read[:3]) + (
        f"; and {len(not_read) - 3} more" if len(not_read) > 3 else ""
    )
    result.findings.insert(
        0,
        f"cannot be answered exactly: the answer lies between {first} and {last} (or just "
        f"after it), and what was not read could change it: {shown}",
    )


def _exact(
    result: SeekResult,
    flat: FlatTopic,
    reader: StoreReader,
    request: SeekRequest,
    reads: Any = None,
) -> None:
    """The linear scan: the true first entry at or after the time, next to the rule's answer."""
    if request.rule == "compacted":
        return

    readable = [lg for lg in flat.used if lg.missing is None]

    def heads() -> Iterator[Head]:
        if reads is not None:
            ranges = [(lg.ledger_id, 0, lg.entries - 1) for lg in readable]
            for head in reads.heads(reader.source.bookie, ranges):
                reader.reads += 1
                yield head
            return
        for lg in readable:
            yield from reader.stream(lg.ledger_id, 0, lg.entries - 1)

    key = (lambda h: h.publish_time) if request.rule == "kop" else (lambda h: h.timestamp)
    found = exact_scan(with_gaps(heads(), flat), request.time_ms, key)  # type: ignore[arg-type]
    first = found.pop("_head")
    unread, seen = found.pop("_unread_first"), found.pop("_seen_first")
    result.exact = found
    if found["non_monotonic_regions"]:
        regions = found["non_monotonic_regions"]
        result.warnings.append(
            f"{len(regions)} region(s) where timestamps go backwards, the first after "
            f"{regions[0]['after']} ({regions[0]['first']} .. {regions[0]['last']})"
        )
    if unread is not None:
        until = "the end of the topic" if seen is None else seen.position
        result.exact["answer_range"] = {
            "first": unread.position,
            "last": None if seen is None else seen.position,
        }
        result.exact["differs"] = None
        result.findings.append(
            f"--exact cannot be answered exactly: the first entry at or after the time lies in "
            f"{unread.position} .. {until}, and not all of it was read: "
            + "; ".join(found["not_read"][:3])
        )
        return
    if not found["complete"]:
        result.findings.append(
            "--exact read the topic but not all of it, so the regions where timestamps go "
            "backwards may be more than those listed: " + "; ".join(found["not_read"][:3])
        )
    if result.head is None and not result.end:
        result.exact["differs"] = None  # the rule has no answer to compare
        return
    answer = None if result.head is None else result.head.position
    truth = None if first is None else first.position
    result.exact["differs"] = truth != answer
    if truth != answer:
        result.warnings.append(
            f"the {request.rule} rule answers {answer or 'after the last entry'}, but the first "
            f"entry at or after the time is {truth or 'none (after the last entry)'}"
        )


def with_gaps(heads: Iterator[Head], flat: FlatTopic) -> Iterator[Head]:
    """The heads of the topic's readable ledgers in order (what ``heads`` gives), with a
    ``gap`` head where something was not read: a ledger left out of the flat view, or
    entries of a ledger the storage skipped."""
    pending = next(heads, None)
    for lg in flat.ledgers:
        if lg.missing is not None:
            count = "entries unknown" if lg.uncounted else f"{lg.entries} entries"
            yield Head(
                lg.ledger_id, 0, error=f"ledger {lg.ledger_id} ({count}): {lg.missing}", gap=True
            )
            continue
        if lg.entries <= 0:
            continue
        expected = 0
        while pending is not None and pending.ledger_id == lg.ledger_id:
            head, pending = pending, next(heads, None)
            if head.entry_id > expected:
                yield _gap(lg.ledger_id, expected, head.entry_id - 1)
            yield head
            expected = max(expected, head.entry_id + 1)
        if expected < lg.entries:
            yield _gap(lg.ledger_id, expected, lg.entries - 1)


def _gap(ledger_id: int, first: int, last: int) -> Head:
    what = (
        f"entry {ledger_id}:{first} is"
        if first == last
        else (f"entries {ledger_id}:{first}..{last} are")
    )
    return Head(ledger_id, first, error=f"{what} not in storage", gap=True)


def _messages(
    source: LedgerSource, reader: StoreReader, head: Head, batch: int | None
) -> list[dict[str, Any]]:
    """The messages of the entry at the answer (decoded fully), for --position/--legacy."""
    from pulsarctl_py.decoders import Depth

    if head.error is not None:
        return []
    view = reader.view(head.ledger_id)
    out = []
    try:
        for entry in source.entries(view, head.entry_id, head.entry_id, depth=Depth.MESSAGES):
            for i, msg in enumerate(entry.messages):
                if batch is not None and i != batch:
                    continue
                out.append(_message_json(msg, i))
    except LedgerctlError as exc:
        return [{"error": exc.one_line()}]
    return out


def _message_json(msg: Any, i: int) -> dict[str, Any]:
    value = getattr(msg, "value", None)
    text = None
    if isinstance(value, bytes | memoryview):
        raw = bytes(value)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.hex()
    return {
        "batch_index": i,
        "key": getattr(msg, "key", None),
        "value": text,
        "event_time": getattr(msg, "event_time", None),
    }
