"""The exact answer by a linear scan (``--exact``): every entry head in order, the first
entry at or after the time, the regions where timestamps go backwards, and what was not
read (:func:`with_gaps` marks it in the stream of heads)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pulsarctl_py.coverage import LISTED

from .heads import Head
from .probe import FlatTopic


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
