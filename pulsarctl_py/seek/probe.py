"""The search core: the topic as a flat list of entries (:class:`FlatTopic`, as the broker
counts them), probes read through a :class:`~.heads.HeadReader` and kept for
``--explain``, the broker's ``OpFindNewest`` over them, ``getFindPositionRange``, the
result of a search and how it is finished (no answer from what was not read), and the
bounds on the reads a search takes (:data:`READ_SLACK`, see the package docstring)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.positions import format_position
from pulsarctl_py.timeparse import format_time_ms

from .heads import Head, HeadReader

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


def contradictions(probes: Sequence[Probe], key: Callable[[Head], int | None]) -> list[str]:
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


def finish(result: SeekResult, prober: Prober) -> None:
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


def answer_at(result: SeekResult, prober: Prober, i: int) -> None:
    flat = prober.flat
    if i >= flat.n:
        result.end = True
        return
    result.head = prober.head(i)


# -- how many reads a search takes -----------------------------------------------------------


#: Entry reads over ceil(log2 N) a search can take, the answer entry included (N: entries
#: of the range searched); every one of them is needed for the exact answer (module doc).
READ_SLACK = {"broker": 3, "kop": 3, "index": 3, "compacted": 1}


def ceil_log2(entries: int) -> int:
    """ceil(log2 N), 0 for N <= 1."""
    return (entries - 1).bit_length() if entries > 1 else 0


def read_bound(entries: int, rule: str) -> int:
    """The most entries a ``rule`` search over ``entries`` entries reads (:data:`READ_SLACK`)."""
    return ceil_log2(entries) + READ_SLACK[rule]
