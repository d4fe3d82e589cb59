"""What an entry absent from the bookies that were read proves: *missing*, or *not covered*.

BookKeeper stores entry ``e`` of a ledger on its write set: the members ``(e + i) mod E``,
``i < W``, of the ensemble of the segment that holds ``e`` (E the ensemble size, W the write
quorum: apache/bookkeeper ``RoundRobinDistributionSchedule``). A ledger written with
ensemble 3 and write quorum 2 therefore leaves a third of its entries off each bookie, and
one bookie's directories can never tell that an entry is gone.

So an entry that none of the bookies read holds is **missing** only when every bookie of
its write set was read:

* running bookies (a live store): each replica of the write set is asked; the store raises
  :class:`~pulsarctl_py.errors.StoreUnavailable` when one of them cannot answer, and skips
  an entry only when every replica answered "no such entry" (``ENOENTRY``/``ENOLEDGER``).
  Every bookie is in reach;
* a stopped bookie's directories: a bookie is read when *all* of its data was given: every
  ledger directory and journal directory its cookie (``current/VERSION``) lists, so that
  entries of its journal not yet flushed to an entry log are seen too. Directories whose
  cookie does not say which bookie they are prove nothing.

Otherwise the entry is **not covered**, and the bookies that would have to be read are named.
A ledger without BookKeeper metadata has no ensemble to go by: its entries may be on any
bookie of the cluster (those the BookKeeper root registers: cookies, ``available``).

:func:`reach_of_dirs` finds whose data the given directories are; :func:`split_absent`
splits a run of absent entries into the missing and the not covered ones. ``verify``,
``repair missing-ledgers``, ``inspect``/``export``/``compact`` (their gap summaries) and
``ledger list`` take their judgments from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata
    from pulsarctl_py.stores.metadata import MetadataStore

#: ranges of entries listed one by one; the rest are counted
LISTED_RANGES = 100
#: an absent run is split entry by entry up to this many entries; past it, per residue
_ENTRY_BY_ENTRY = 1 << 16


@dataclass(frozen=True, slots=True)
class Reach:
    """Whose data a run reads: every bookie (running bookies), or the bookies whose whole
    data was given as directories."""

    live: bool = False
    #: offline: bookies whose every ledger and journal directory (per cookie) was given
    whole: frozenset[str] = frozenset()
    #: offline: bookies of which only part was given -> what is lacking
    partial: Mapping[str, str] = field(default_factory=dict)
    #: offline: directories whose bookie is unknown (no cookie)
    unknown: tuple[str, ...] = ()

    @classmethod
    def everything(cls) -> Reach:
        """Running bookies: every replica is asked."""
        return cls(live=True)

    def covers(self, bookie: str) -> bool:
        return self.live or bookie in self.whole

    def why_not(self, bookie: str) -> str:
        """Why ``bookie``'s data was not read (for messages)."""
        lacking = self.partial.get(bookie)
        return f"{bookie} ({lacking})" if lacking else f"{bookie} (not given)"

    def to_json(self) -> dict[str, Any]:
        return {
            "live": self.live,
            "whole": sorted(self.whole),
            "partial": dict(sorted(self.partial.items())),
            "unknown": list(self.unknown),
        }


@dataclass(slots=True)
class Absence:
    """A run of absent entries split by what their absence proves."""

    missing: list[list[int]] = field(default_factory=list)
    missing_count: int = 0
    uncovered: list[list[int]] = field(default_factory=list)
    uncovered_count: int = 0
    #: bookies that would have to be read to judge the not covered entries -> why not read
    unread: dict[str, str] = field(default_factory=dict)

    def merge(self, other: Absence) -> None:
        _extend(self.missing, other.missing)
        _extend(self.uncovered, other.uncovered)
        self.missing_count += other.missing_count
        self.uncovered_count += other.uncovered_count
        for bookie, why in other.unread.items():
            self.unread.setdefault(bookie, why)

    def unread_text(self) -> str:
        """``bookies a (not given), b (its journal not given) not read``."""
        names = ", ".join(self.unread.values()) or "unknown bookies"
        return f"bookies {names} not read"


def _extend(ranges: list[list[int]], more: Iterable[list[int]]) -> None:
    for first, last in more:
        if ranges and ranges[-1][1] + 1 == first:
            ranges[-1][1] = last
        elif len(ranges) < LISTED_RANGES:
            ranges.append([first, last])


def _segments(md: LedgerMetadata, first: int, last: int) -> list[tuple[int, int, int, list[str]]]:
    """``(segment start, lo, hi, ensemble)`` for each segment's part of ``[first, last]``."""
    starts = sorted(md.ensembles)
    out = []
    if not starts or first < starts[0]:  # before the first segment: no ensemble
        end = last if not starts else min(last, starts[0] - 1)
        out.append((-1, first, end, []))
    for i, start in enumerate(starts):
        end = starts[i + 1] - 1 if i + 1 < len(starts) else last
        lo, hi = max(start, first), min(end, last)
        if lo <= hi:
            out.append((start, lo, hi, list(md.ensembles[start])))
    return out


def _count_residue(lo: int, hi: int, r: int, n: int) -> int:
    """How many ``e`` in ``[lo, hi]`` have ``e % n == r``."""
    return (hi - r) // n - (lo - 1 - r) // n


def split_absent(
    md: LedgerMetadata | None,
    reach: Reach,
    first: int,
    last: int,
    *,
    cluster: Sequence[str] = (),
) -> Absence:
    """Split the absent entries ``first..last`` into missing and not covered ones (see
    :class:`Judge`, which keeps what it computed for the next runs of the same ledger)."""
    return Judge(md, reach, cluster)(first, last)


class Judge:
    """Splits runs of a ledger's absent entries into missing and not covered ones.

    ``md`` None: the ledger has no metadata, so its entries may be on any bookie of
    ``cluster`` (the registered bookies); with no cluster known nothing is proven. What
    each segment's write sets are and whether they were read is computed once."""

    def __init__(self, md: LedgerMetadata | None, reach: Reach, cluster: Sequence[str] = ()):
        self.md = md
        self.reach = reach
        self.cluster = list(cluster)
        #: segment start -> (ensemble size, covered per residue, unread bookies per residue)
        self._segments: dict[int, tuple[int, list[bool], list[list[str]]]] = {}

    def _segment(self, start: int, ensemble: list[str]) -> tuple[int, list[bool], list[list[str]]]:
        known = self._segments.get(start)
        if known is None:
            reach, n = self.reach, len(ensemble)
            assert self.md is not None
            w = min(max(self.md.write_quorum_size, 1), n)
            sets = [[ensemble[(r + i) % n] for i in range(w)] for r in range(n)]
            covered = [all(reach.covers(b) for b in s) for s in sets]
            lacking = [[b for b in s if not reach.covers(b)] for s in sets]
            known = self._segments[start] = (n, covered, lacking)
        return known

    def __call__(self, first: int, last: int) -> Absence:
        out = Absence()
        if last < first:
            return out
        if self.md is None:
            unread = [b for b in self.cluster if not self.reach.covers(b)]
            if self.cluster and not unread and not self.reach.unknown:
                out.missing, out.missing_count = [[first, last]], last - first + 1
            else:
                out.uncovered, out.uncovered_count = [[first, last]], last - first + 1
                out.unread = _unread(self.reach, unread if self.cluster else [])
            return out
        for start, lo, hi, ensemble in _segments(self.md, first, last):
            part = Absence()
            if not ensemble:
                part.uncovered, part.uncovered_count = [[lo, hi]], hi - lo + 1
                part.unread = _unread(self.reach, [])
                out.merge(part)
                continue
            n, covered, lacking = self._segment(start, ensemble)
            if all(covered):
                part.missing, part.missing_count = [[lo, hi]], hi - lo + 1
            elif not any(covered):
                part.uncovered, part.uncovered_count = [[lo, hi]], hi - lo + 1
            else:
                for r in range(n):
                    count = _count_residue(lo, hi, r, n)
                    if covered[r]:
                        part.missing_count += count
                    else:
                        part.uncovered_count += count
                # the ranges, entry by entry while they are few enough to list
                for e in range(lo, min(hi, lo + _ENTRY_BY_ENTRY - 1) + 1):
                    _extend(part.missing if covered[e % n] else part.uncovered, [[e, e]])
            if part.uncovered_count:
                # the residues in [lo, hi] (all of them once it spans the ensemble)
                residues = range(n) if hi - lo + 1 >= n else {e % n for e in range(lo, hi + 1)}
                names = sorted({b for r in residues if not covered[r] for b in lacking[r]})
                part.unread = _unread(self.reach, names)
            out.merge(part)
        return out


def _unread(reach: Reach, bookies: Iterable[str]) -> dict[str, str]:
    out = {b: reach.why_not(b) for b in bookies}
    for where in reach.unknown:
        out.setdefault(where, f"{where} (no cookie: which bookie it is is unknown)")
    return out


# -- whose data the directories are -------------------------------------------------------


@dataclass(slots=True)
class _Given:
    ledger: set[str] = field(default_factory=set)
    journal: set[str] = field(default_factory=set)
    cookie: Any = None


def _cookie_of(current: Path) -> Any:
    """The parsed cookie of a ``current/`` directory, or None."""
    from pulsarctl_py.stores.live.registry import parse_cookie

    try:
        with open(current / "VERSION", "rb") as fh:
            cookie = parse_cookie(fh.read(65536))
    except OSError:
        return None
    return cookie if cookie.bookie_host else None


def bookie_of_dir(current: Path, registered: Mapping[str, Any]) -> tuple[str | None, Any]:
    """``(bookie id, cookie)`` of a ``current/`` directory: its own cookie's
    ``bookieHost`` (``current/VERSION``), else the bookie whose cookie in the BookKeeper
    root (``registered``: :func:`registered_cookies`) lists the directory; ``(None,
    None)`` when neither tells."""
    cookie = _cookie_of(current)
    if cookie is not None:
        return cookie.bookie_host, cookie
    wanted = {str(current.parent), str(current.parent.resolve())}
    for bookie, listed in registered.items():
        if listed is not None and wanted & set(listed.ledger_dirs + listed.journal_dirs):
            return bookie, listed
    return None, None


def registered_cookies(metadata: MetadataStore | None) -> dict[str, Any]:
    """Each bookie's cookie as the BookKeeper root registers it (empty when unknown)."""
    if metadata is None:
        return {}
    from pulsarctl_py.decoders.errors import LedgerctlError
    from pulsarctl_py.stores.live.registry import list_bookies

    try:
        return {r.bookie_id: r.cookie for r in list_bookies(metadata)}
    except LedgerctlError:
        return {}


def reach_of_dirs(
    ledger_dirs: Sequence[Path],
    journal_dirs: Sequence[Path],
    registered: Mapping[str, Any] | None = None,
) -> Reach:
    """Whose data the ``current/`` directories given are, and whether all of it was given.

    A directory's bookie is found by :func:`bookie_of_dir` (``registered``: the cookies of
    the BookKeeper root, :func:`registered_cookies`). A bookie is read whole when as many
    of its ledger and journal directories were given as its cookie lists."""
    given: dict[str, _Given] = {}
    unknown: list[str] = []
    for kind, dirs in (("ledger", ledger_dirs), ("journal", journal_dirs)):
        for current in dirs:
            current = Path(current)
            bookie, cookie = bookie_of_dir(current, registered or {})
            if bookie is None:
                if str(current) not in unknown:
                    unknown.append(str(current))
                continue
            g = given.setdefault(bookie, _Given())
            g.cookie = g.cookie or cookie
            getattr(g, kind).add(str(current.resolve()))
    whole: set[str] = set()
    partial: dict[str, str] = {}
    for bookie, g in given.items():
        cookie = g.cookie
        want_ledger = max(len(cookie.ledger_dirs) if cookie is not None else 0, 1)
        want_journal = len(cookie.journal_dirs) if cookie is not None else 0
        if cookie is not None and set(cookie.journal_dirs) <= set(cookie.ledger_dirs):
            want_journal = 0  # the journal shares the ledger directories given
        lacking = []
        if len(g.ledger) < want_ledger:
            lacking.append(f"{len(g.ledger)} of its {want_ledger} ledger directories given")
        if len(g.journal) < want_journal:
            lacking.append(
                f"{len(g.journal)} of its {want_journal} journal directories given: entries "
                "not yet flushed from the journal are not seen"
            )
        if lacking:
            partial[bookie] = "; ".join(lacking)
        else:
            whole.add(bookie)
    return Reach(False, frozenset(whole), partial, tuple(unknown))
