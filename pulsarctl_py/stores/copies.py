"""Every copy of a ledger's entries that the bookies hold, found without its metadata.

A ledger whose BookKeeper metadata is gone has no ensemble to say where its entries are:
they may be on any bookie of the cluster. :class:`DataFinder` looks everywhere a run can:

* offline, each stopped bookie's directories given, told apart by the cookie in
  ``current/VERSION`` (whose ``bookieHost`` is the bookie's id; else the bookie whose cookie
  in the metadata store lists the directory);
* live, every bookie registered under ``available`` (and ``available/readonly``), asked
  with READ_LAC for the ledger and then for each entry.

What it could not look at is said, never taken for "holds nothing": a bookie the BookKeeper
root knows (by its cookie) that is not running, or whose directories were not given
whole, is in :attr:`Found.unreachable` (:mod:`pulsarctl_py.stores.absence` says what "whole" is).
``verify`` (a ledger without metadata: are its entries still somewhere?) and ``repair
missing-ledgers`` (drop it, or recreate its metadata) take the same answer from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import bookkeeper as bk
from pulsarctl_py.decoders.errors import DataError, LedgerctlError, StoreUnavailable

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.bookie import BookieStore
    from pulsarctl_py.stores.metadata import MetadataStore


@dataclass(slots=True)
class Copy:
    """One bookie's copy of a ledger: the entry ids it holds and how to read them."""

    bookie: str
    where: str
    entries: list[int]
    read: Callable[[int], bytes] = field(repr=False)
    #: the bookie's master key for the ledger (offline only: a running bookie keeps it)
    master_key: bytes | None = field(default=None, repr=False)
    fenced: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "bookie": self.bookie,
            "where": self.where,
            "entries": len(self.entries),
            "first_entry": self.entries[0] if self.entries else None,
            "last_entry": self.entries[-1] if self.entries else None,
            "has_master_key": self.master_key is not None,
            "fenced": self.fenced,
        }


@dataclass(slots=True)
class Found:
    """A ledger's data on the bookies: every copy found, and the bookies not asked."""

    ledger_id: int
    copies: list[Copy]
    #: bookie -> why it could not be asked (live) or read (offline)
    unreachable: dict[str, str] = field(default_factory=dict)

    @property
    def held(self) -> set[int]:
        return {e for c in self.copies for e in c.entries}

    @property
    def last(self) -> int | None:
        held = self.held
        return max(held) if held else None

    def gaps(self) -> list[tuple[int, int]]:
        """Runs of entry ids in ``0..last`` that no copy holds."""
        held, last = self.held, self.last
        out: list[tuple[int, int]] = []
        if last is None:
            return out
        start = None
        for e in range(last + 1):
            if e not in held:
                start = e if start is None else start
            elif start is not None:
                out.append((start, e - 1))
                start = None
        if start is not None:
            out.append((start, last))
        return out

    def read(self, entry_id: int) -> bytes:
        """The stored bytes of one entry, from the first copy that holds and gives it."""
        errors = []
        for copy in self.copies:
            if entry_id in copy.entries:
                try:
                    return copy.read(entry_id)
                except LedgerctlError as exc:
                    errors.append(f"{copy.bookie}: {exc.one_line()}")
        raise DataError(
            f"ledger {self.ledger_id} entry {entry_id}: "
            + ("; ".join(errors) if errors else "on no bookie")
        )

    def unreachable_text(self) -> str:
        """The bookies that could not be looked at, and why, for messages."""
        return "; ".join(
            why if bookie == NO_REGISTRY else f"bookie {bookie} ({why})"
            for bookie, why in self.unreachable.items()
        )

    def describe(self) -> str:
        """``entries 0..9 on bookies a (10), b (7)``: for plans and warnings."""
        last = self.last
        span = "no entries" if last is None else f"entries 0..{last}"
        holders = ", ".join(f"{c.bookie} ({len(c.entries)})" for c in self.copies if c.entries)
        return f"{span} on {holders or 'no bookie'}"

    def to_json(self) -> dict[str, Any]:
        return {
            "last_entry": self.last,
            "copies": [c.to_json() for c in self.copies],
            "gaps": [list(g) for g in self.gaps()],
            "unreachable": dict(self.unreachable),
        }


# -- finding the data ----------------------------------------------------------------------


#: the name :attr:`Found.unreachable` gives the cluster's bookies when none is known
NO_REGISTRY = "the cluster's bookies"
_NO_REGISTRY_WHY = (
    "the BookKeeper root registers no bookie (no cookies, none available): which bookies "
    "the cluster has is unknown"
)

#: the prefix of the name of a directory's bookie when no cookie tells it
UNKNOWN_BOOKIE = "unknown bookie of "


def _cookie_host(current: Path, registered: dict[str, Any]) -> str:
    """The id of the bookie a ``current/`` directory belongs to (see
    :func:`pulsarctl_py.stores.absence.bookie_of_dir`); else a name starting with
    :data:`UNKNOWN_BOOKIE` (never written)."""
    from pulsarctl_py.stores.absence import bookie_of_dir

    bookie, _ = bookie_of_dir(current, registered)
    return bookie if bookie is not None else f"{UNKNOWN_BOOKIE}{current.parent}"


class DataFinder:
    """Finds the entries of ledgers without metadata: in stopped bookies' directories
    (grouped by bookie), or on the running bookies a metadata store registers."""

    def __init__(
        self,
        *,
        ledger_dirs: list[Path] | None = None,
        journal_dirs: list[Path] | None = None,
        metadata: MetadataStore | None = None,
        live: Any = None,
        cookies: MetadataStore | None = None,
    ) -> None:
        self._stores: list[tuple[str, str, BookieStore]] = []
        self._live_metadata = metadata
        self._live = live
        self._pool: Any = None
        self.offline = ledger_dirs is not None
        #: bookies whose copies could not be looked at -> why (see :attr:`Found.unreachable`)
        self.not_read: dict[str, str] = {}
        if ledger_dirs is not None:
            from pulsarctl_py.stores.absence import reach_of_dirs, registered_cookies
            from pulsarctl_py.stores.bookie import open_bookie

            registered = registered_cookies(cookies)
            groups: dict[str, list[Path]] = {}
            for current in [*ledger_dirs, *(journal_dirs or [])]:
                host = _cookie_host(current, registered)
                if current not in groups.setdefault(host, []):
                    groups[host].append(current)
            for host, dirs in groups.items():
                if not any(d in ledger_dirs for d in dirs):
                    continue  # a journal alone holds no ledger of ours
                store = open_bookie([str(d) for d in dirs])
                self._stores.append((host, ", ".join(str(d) for d in dirs), store))
            # what the directories do not cover: bookies given in part, and the ones the
            # BookKeeper root registers whose directories were not given at all
            reach = reach_of_dirs(ledger_dirs, journal_dirs or [], registered)
            self.not_read = {b: reach.why_not(b) for b in reach.partial}
            for bookie in registered:
                if not reach.covers(bookie):
                    self.not_read.setdefault(bookie, "its directories were not given")
            if not registered:
                self.not_read[NO_REGISTRY] = _NO_REGISTRY_WHY

    @classmethod
    def of(cls, source: LedgerSource) -> DataFinder | None:
        """The finder for the bookie storage of ``source`` (None: it has none)."""
        bookie = source.bookie
        if bookie is None:
            return None
        if getattr(bookie, "where", None) == "live":
            return cls(metadata=source.metadata, live=bookie.options)
        layout = getattr(bookie, "layout", None)
        if layout is None:
            return None
        return cls(
            ledger_dirs=[Path(d) for d in layout.ledger_dirs],
            journal_dirs=[Path(d) for d in layout.journal_dirs],
            cookies=source.metadata,
        )

    def close(self) -> None:
        for _, _, store in self._stores:
            store.close()
        self._stores.clear()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> DataFinder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def find(self, ledger_id: int) -> Found:
        """Every copy of the ledger's entries the finder can see (maybe none)."""
        if self.offline:
            return self._find_offline(ledger_id)
        return self._find_live(ledger_id)

    def _find_offline(self, ledger_id: int) -> Found:
        from pulsarctl_py.stores.bookie import EntryNotFound

        found = Found(ledger_id, [], dict(self.not_read))
        for host, where, store in self._stores:
            try:
                entries = [e for e, _ in store.iter_locations(ledger_id)]
            except LedgerctlError as exc:
                found.unreachable[host] = exc.one_line()
                continue
            if not entries:
                continue
            key = fenced = None
            try:
                info = store.ledger(ledger_id)
                key, fenced = info.master_key, info.fenced
            except EntryNotFound:
                pass
            except LedgerctlError as exc:
                found.unreachable[host] = exc.one_line()

            def read(entry_id: int, store: BookieStore = store) -> bytes:
                return store.read_entry(ledger_id, entry_id)

            found.copies.append(Copy(host, f"ledger dirs {where}", entries, read, key, fenced))
        return found

    def _find_live(self, ledger_id: int) -> Found:
        from pulsarctl_py.stores.live.client import BookiePool, BookieUnavailable
        from pulsarctl_py.stores.live.registry import AddressBook, list_bookies

        found = Found(ledger_id, [])
        if self._live_metadata is None:
            return found
        if self._pool is None:
            self._pool = BookiePool(self._live, AddressBook(self._live_metadata.bookkeeper))
        pool = self._pool
        records = list_bookies(self._live_metadata)
        if not records:
            found.unreachable[NO_REGISTRY] = _NO_REGISTRY_WHY
        for record in records:
            bookie = record.bookie_id
            if not (record.available or record.read_only):
                # registered by its cookie only: a bookie of the cluster that is not
                # running, whose copies are unknown (not "none")
                found.unreachable[bookie] = (
                    "not running (the BookKeeper root has its cookie, no registration under "
                    "available)"
                )
                continue
            try:
                conn = pool.get(bookie)
                reply = conn.read_lac(ledger_id)
                if reply.status != "EOK" or reply.body is None or len(reply.body) < bk.HEADER.size:
                    continue
                last = bk.HEADER.unpack_from(reply.body, 0)[1]
                held = sorted(
                    r[3]
                    for replies in conn.read_raw(ledger_id, range(0, last + 1))
                    for r in replies
                    if r[1] == 0 and r[4] is not None
                )
            except (BookieUnavailable, StoreUnavailable) as exc:
                found.unreachable[bookie] = exc.one_line()
                continue
            if not held:
                continue

            def read(entry_id: int, conn: Any = conn, bookie: str = bookie) -> bytes:
                reply = conn.read_entry(ledger_id, entry_id)
                if reply.status != "EOK" or reply.body is None:
                    raise DataError(f"bookie {bookie} answered {reply.status}")
                return bytes(reply.body)

            found.copies.append(Copy(bookie, "running bookie", held, read))
        return found
