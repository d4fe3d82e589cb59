"""What a scan could not see: the difference between what a topic holds and what was read.

Every scan of a topic (``export``, ``compact``, ``inspect --topic``, ``verify``, ``seek
--exact``, the migrations) counts the same four things, and says so in its summary
instead of writing or answering less than the topic holds:

* a ledger the topic lists with entries, of which the storage holds none (or whose index
  cannot tell which it holds);
* entries missing inside a ledger's range (the storage skips them);
* entries that are stored but could not be read (a damaged record, a bookie that failed);
* entries stored past a closed ledger's ``lastEntryId``. BookKeeper readers never get them
  (``LedgerHandle.readEntries`` refuses ids past ``getLastAddConfirmed()``, which is
  ``lastEntryId`` once the ledger is closed: apache/bookkeeper ``LedgerHandle``), and the
  broker's compactor stops at the topic's last entry, so they are skipped, and said in a
  note: they are no part of the topic (adds in flight when the ledger was closed, which a
  healthy cluster has after every unload under load), and a scan that skipped them is
  complete.

:class:`Gaps` holds them (mergeable, picklable: an executor sends its split's part back),
lists the first :data:`LISTED` of each kind and counts the rest. :class:`Tracker` finds the
missing and unreadable entries of one ledger range in a stream of entry ids read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerView

#: entries of each kind listed one by one in a summary; the rest are counted
LISTED = 20


def _span(first: int, last: int) -> str:
    return f"{first}" if first == last else f"{first}..{last}"


@dataclass(slots=True)
class Gaps:
    """What a scan could not read, or skipped, in a topic (see the module docstring)."""

    #: (ledger id, entries it should hold or None when unknown, why the storage gives none)
    ledgers_missing: list[tuple[int, int | None, str]] = field(default_factory=list)
    #: (ledger id, first, last) ranges of entries not in storage; the first LISTED ranges
    missing: list[tuple[int, int, int]] = field(default_factory=list)
    missing_count: int = 0
    #: (ledger id, entry id, why) of entries stored but unreadable; the first LISTED
    unreadable: list[tuple[int, int, str]] = field(default_factory=list)
    unreadable_count: int = 0
    #: (ledger id, first, last) of entries stored past a closed ledger's last entry, skipped
    past_last: list[tuple[int, int, int]] = field(default_factory=list)
    past_last_count: int = 0

    @property
    def complete(self) -> bool:
        """Whether the scan read every entry the topic holds. Entries stored past a closed
        ledger's last entry are not the topic's (adds in flight when the ledger was
        closed, never acknowledged: a healthy cluster has them after every unload under
        load): skipping them leaves the scan complete, and :meth:`notes` says so."""
        return not (self.ledgers_missing or self.missing_count or self.unreadable_count)

    # -- recording ------------------------------------------------------------------------

    def ledger_missing(self, ledger_id: int, entries: int | None, why: str) -> None:
        self.ledgers_missing.append((ledger_id, entries, why))

    def entries_missing(self, ledger_id: int, first: int, last: int) -> None:
        if last < first:
            return
        self.missing_count += last - first + 1
        if len(self.missing) < LISTED:
            self.missing.append((ledger_id, first, last))

    def entry_unreadable(self, ledger_id: int, entry_id: int, why: str) -> None:
        self.unreadable_count += 1
        if len(self.unreadable) < LISTED:
            self.unreadable.append((ledger_id, entry_id, why))

    def entries_past_last(self, ledger_id: int, first: int, last: int) -> None:
        if last < first:
            return
        self.past_last_count += last - first + 1
        if len(self.past_last) < LISTED:
            self.past_last.append((ledger_id, first, last))

    def ledger(self, view: LedgerView, last: int | None) -> bool:
        """Record what the storage cannot give of a ledger whose readers get entries
        ``0..last`` (``last`` None: unknown); True when its entries can be read at all.

        A ledger with entries the storage holds none of (or whose index cannot say) is
        missing; entries stored past a closed ledger's last entry are skipped."""
        if view.storage_error is not None:
            expected = None if last is None else last + 1
            self.ledger_missing(view.ledger_id, expected, view.storage_error)
            return False
        if view.last_stored is None:
            if last is not None and last >= 0:
                self.ledger_missing(view.ledger_id, last + 1, "no entry of it is in storage")
            return False
        past = view.past_last
        if past is not None:
            self.entries_past_last(view.ledger_id, *past)
        return True

    def add(self, other: Gaps) -> None:
        """Merge another scan's (a split's) gaps into these."""
        self.ledgers_missing.extend(other.ledgers_missing)
        for lid, first, last in other.missing:
            if len(self.missing) < LISTED:
                self.missing.append((lid, first, last))
        self.missing_count += other.missing_count
        room = LISTED - len(self.unreadable)
        self.unreadable.extend(other.unreadable[: max(room, 0)])
        self.unreadable_count += other.unreadable_count
        for lid, first, last in other.past_last:
            if len(self.past_last) < LISTED:
                self.past_last.append((lid, first, last))
        self.past_last_count += other.past_last_count

    # -- reporting ------------------------------------------------------------------------

    def errors(self) -> list[str]:
        """One line per thing not read or skipped (the first LISTED of each kind, then a
        count of the rest)."""
        out = [
            f"ledger {lid}" + ("" if n is None else f" ({n} entries)") + f" is not read: {why}"
            for lid, n, why in self.ledgers_missing
        ]
        out += [
            f"entries {lid}:{_span(a, b)} are not in storage"
            if a != b
            else f"entry {lid}:{a} is not in storage"
            for lid, a, b in self.missing
        ]
        more = self.missing_count - sum(b - a + 1 for _, a, b in self.missing)
        if more > 0:
            out.append(f"{more} more entries are not in storage")
        out += [f"entry {lid}:{eid} could not be read: {why}" for lid, eid, why in self.unreadable]
        if self.unreadable_count > len(self.unreadable):
            out.append(
                f"{self.unreadable_count - len(self.unreadable)} more entries could not be read"
            )
        return out

    def notes(self) -> list[str]:
        """One line per run of entries skipped as no part of the topic (stored past a
        closed ledger's last entry), the first LISTED, then a count of the rest."""
        out = [
            f"entries {lid}:{_span(a, b)} are stored past the closed ledger's last entry "
            f"{a - 1}: skipped (adds in flight when it was closed; readers never get them)"
            for lid, a, b in self.past_last
        ]
        more = self.past_last_count - sum(b - a + 1 for _, a, b in self.past_last)
        if more > 0:
            out.append(f"{more} more entries are stored past their ledger's last entry: skipped")
        return out

    def to_json(self) -> dict[str, Any]:
        """The summary fields every scan reports (``complete`` false: exit status 1)."""
        return {
            "complete": self.complete,
            "ledgers_missing": [lid for lid, _, _ in self.ledgers_missing],
            "entries_missing": self.missing_count,
            "entries_unreadable": self.unreadable_count,
            "entries_past_last": self.past_last_count,
            "errors": self.errors(),
            "notes": self.notes(),
        }


class Tracker:
    """The entries of one ledger range ``[first, last]`` as they are read, in order: the
    ids the storage skipped are missing, the ones that could not be read unreadable.

    ``see`` may be told an id twice, or an id before the range (a read that goes on
    from another one): only ids past the last one seen count. ``finish`` (once the range
    was read to its end) counts what is left as missing."""

    __slots__ = ("expected", "gaps", "last", "ledger_id")

    def __init__(self, gaps: Gaps, ledger_id: int, first: int, last: int | None) -> None:
        self.gaps = gaps
        self.ledger_id = ledger_id
        self.last = last
        self.expected = first

    def see(self, entry_id: int, unreadable: str | None = None) -> tuple[int, int] | None:
        """One entry read (``unreadable``: why its bytes could not be); the range of
        entries missing before it, if any."""
        if entry_id < self.expected or (self.last is not None and entry_id > self.last):
            return None
        gap = None
        if entry_id > self.expected:
            gap = (self.expected, entry_id - 1)
            self.gaps.entries_missing(self.ledger_id, *gap)
        if unreadable is not None:
            self.gaps.entry_unreadable(self.ledger_id, entry_id, unreadable)
        self.expected = entry_id + 1
        return gap

    def see_run(self, ids: list[int]) -> None:
        """Consecutive reads at once (``ids`` in order): one check when they follow on."""
        if not ids:
            return
        if ids[0] == self.expected and ids[-1] - ids[0] == len(ids) - 1:
            if self.last is None or ids[-1] <= self.last:
                self.expected = ids[-1] + 1
                return
        for entry_id in ids:
            self.see(entry_id)

    def finish(self) -> tuple[int, int] | None:
        """The range was read to its end: the entries missing at its end, if any."""
        if self.last is None or self.expected > self.last:
            return None
        gap = (self.expected, self.last)
        self.gaps.entries_missing(self.ledger_id, *gap)
        self.expected = self.last + 1
        return gap
