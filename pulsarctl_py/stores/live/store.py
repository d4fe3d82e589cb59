"""Ledgers read from running bookies, behind the interface of the offline BookieStore.

:class:`LiveBookieStore` answers what :class:`pulsarctl_py.ledgers.LedgerSource` asks a
bookie store (``ledger``, ``last_entry_id``, ``read_entry``, ``read_entries``,
``iter_locations``, ``close``) from the bookies named in each ledger's metadata:

* entry e is stored on its write set: ensemble members ``(e + i) mod ensemble size`` for
  ``i < write quorum`` (BookKeeper's RoundRobinDistributionSchedule), the ensemble being
  the last segment starting at or before e;
* a bookie is reached at the address its registration publishes (``--bookie-address``
  overrides it; a bookie whose id is its address needs neither):
  :class:`~.registry.AddressBook`;
* a read goes to the first replica of the write set that is not known to be down; on a
  connection error, a timeout, a missing entry or a digest that does not verify, it goes
  on to the next replica. A bookie that failed once is tried last for the rest of the run;
* entries come back in order; reads to one bookie are pipelined (``ClientOptions.window``),
  and a read holds about ``READ_BUDGET`` bytes of answers at a time, whatever the
  size of the entries.

The digest is verified as for offline data: the store checks it to choose a healthy
replica, and marks the entries it verified (``StoredEntry.verified``); the decoders check
it again on the bytes returned, and compaction's head parse trusts the mark. Nothing here
writes, fences or recovers a ledger. ``where = "live"`` names this store for work split across
processes (a split can carry it instead of a bookie directory).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import bookkeeper as bk
from pulsarctl_py.decoders import limits
from pulsarctl_py.decoders.bookie_wire import status_name
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.entry import DecodeOptions
from pulsarctl_py.decoders.heads import EntryHead, head_options
from pulsarctl_py.errors import LedgerctlError, NotFoundError, StoreUnavailable

from ..bookie.model import EntryNotFound, LedgerInfo, Location, StoredEntry
from .client import BookiePool, BookieUnavailable, ClientOptions
from .registry import AddressBook

if TYPE_CHECKING:
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata
    from pulsarctl_py.stores.metadata import MetadataStore

CHUNK = 1024  # entries planned at a time by read_entries
#: bytes of answers a read round asks for (at the largest entry size seen so far; at least
#: one entry, and a bookie may always give one frame of the maximum message size), see
#: ``LiveBookieStore._read``. Against 10 MiB, a compaction of 10^6 messages (631,545 keys)
#: on the sandbox took the same wall time with 4 MiB (0.95, 8 paired runs) and peaked
#: 4.2 MiB lower, where the key table needs the memory; 2 MiB took 7 % longer for 1.1 MiB
#: less.
READ_BUDGET = 4 << 20
#: the size a read round assumes for entries until it has seen a larger one
SMALL_ENTRY = 16 << 10
_ABSENT = ("ENOENTRY", "ENOLEDGER")  # answers that mean "not here", not "broken"


def write_set(md: LedgerMetadata, entry_id: int) -> list[str]:
    """The bookies that hold ``entry_id``, in the order BookKeeper's client reads them."""
    ensemble = md.ensemble_for(entry_id)
    n = len(ensemble)
    if n == 0:
        return []
    quorum = min(max(md.write_quorum_size, 1), n)
    return [ensemble[(entry_id + i) % n] for i in range(quorum)]


def digest_ok(
    data: bytes, ledger_id: int, entry_id: int, kind: DigestType | None, password: bytes | None
) -> bool | None:
    """Whether a stored entry's ids and digest verify; None when it cannot be told."""
    if len(data) < bk.HEADER.size:
        return False
    stored_ledger, stored_entry = bk.HEADER.unpack_from(data, 0)[:2]
    if stored_ledger != ledger_id or (entry_id >= 0 and stored_entry != entry_id):
        return False
    if kind is None:
        return None
    return bk.digest_verifies(data, 0, len(data), kind, password)


@dataclass
class _LedgerState:
    md: LedgerMetadata
    last: int | None = None
    last_known: bool = False
    lac_body: bytes | None = None
    last_errors: list[str] = field(default_factory=list)
    #: why no bookie of the last ensemble answered READ_LAC (None: one did)
    unreachable: str | None = None


class LiveBookieStore:
    """Read-only access to ledgers on running bookies, found through ledger metadata."""

    where = "live"

    def __init__(
        self,
        metadata: MetadataStore,
        options: ClientOptions | None = None,
        password: bytes | None = None,
    ) -> None:
        self.metadata = metadata
        self.options = options or ClientOptions()
        self.password = password
        # bookie ids to addresses through their registrations (DefaultBookieAddressResolver)
        place = getattr(metadata, "bookkeeper", None)
        self.pool = BookiePool(self.options, AddressBook(place) if place is not None else None)
        # what an offline store reports about its own files; a running bookie's files are
        # its own business, so these stay empty (verify and inspect read them alike)
        self.problems: list[Any] = []
        self.findings: list[Any] = []
        self.down: dict[str, str] = {}  # bookie id -> why it failed
        self._largest = 0  # the largest entry read so far (how many fit a read round)
        self._ledgers: dict[int, _LedgerState] = {}

    # -- metadata -----------------------------------------------------------------------

    def _state(self, ledger_id: int) -> _LedgerState:
        state = self._ledgers.get(ledger_id)
        if state is None:
            from pulsarctl_py.stores.metadata import read_ledger

            record = read_ledger(self.metadata, ledger_id)
            if record is None:
                place = self.metadata.bookkeeper()
                hint = ""
                if not place.store.exists(place.root):  # BookKeeper's metadata is elsewhere
                    hint = (
                        f" (no znode {place.root} there: give --bookkeeper-metadata-url or "
                        "--broker-conf)"
                    )
                raise NotFoundError(
                    f"ledger {ledger_id} has no metadata in {place.url}{hint}; "
                    "its bookies are unknown"
                )
            if record.metadata is None:
                raise NotFoundError(
                    f"ledger {ledger_id} metadata: {record.error}; its bookies are unknown"
                )
            state = _LedgerState(record.metadata)
            self._ledgers[ledger_id] = state
        return state

    def assume_metadata(self, ledger_id: int, md: LedgerMetadata) -> None:
        """Read ``ledger_id`` through ``md`` instead of the store's metadata: a ledger's
        metadata recreated from its bookies is read back before any plan writes it."""
        self._ledgers[ledger_id] = _LedgerState(md)

    def metadata_of(self, ledger_id: int) -> LedgerMetadata:
        return self._state(ledger_id).md

    def _digest(self, md: LedgerMetadata) -> tuple[DigestType | None, bytes | None]:
        password = self.password if self.password is not None else md.password
        return md.digest_type, password

    def order(self, bookies: list[str]) -> list[str]:
        """Bookies in read order: the healthy ones first, keeping the write-set order."""
        if not self.down:
            return bookies
        return sorted(bookies, key=lambda b: b in self.down)

    def _mark_down(self, bookie: str, exc: LedgerctlError) -> None:
        self.down.setdefault(bookie, exc.one_line())

    # -- the BookieStore interface ----------------------------------------------------

    def ledger(self, ledger_id: int) -> LedgerInfo:
        state = self._state(ledger_id)
        last = self.last_entry_id(ledger_id)
        return LedgerInfo(
            ledger_id,
            exists=True,
            fenced=None,
            master_key=None,
            explicit_lac=state.lac_body,
            limbo=None,
            last_entry_id=last,
            source="live",
        )

    def last_entry_id(self, ledger_id: int) -> int | None:
        """The highest entry id the bookies of the last ensemble hold (READ_LAC).

        When none of them answers: the metadata's lastEntryId of a closed ledger, else
        :class:`BookieUnavailable`.
        """
        state = self._state(ledger_id)
        if state.last_known:
            return state.last
        md = state.md
        last_first = max(md.ensembles) if md.ensembles else 0
        best: int | None = None
        answered = False
        for bookie in self.order(list(md.ensembles.get(last_first, []))):
            if bookie in self.down:
                state.last_errors.append(self.down[bookie])
                continue
            try:
                reply = self.pool.get(bookie).read_lac(ledger_id)
            except BookieUnavailable as exc:
                self._mark_down(bookie, exc)
                state.last_errors.append(exc.one_line())
                continue
            answered = True
            if reply.status != "EOK":
                continue
            if reply.lac_body is not None and state.lac_body is None:
                state.lac_body = reply.lac_body
            body = reply.body
            if body is not None and len(body) >= bk.HEADER.size:
                entry_id = bk.HEADER.unpack_from(body, 0)[1]
                best = entry_id if best is None else max(best, entry_id)
        if not answered:
            # each bookie's reason once, however often this ledger was asked
            reasons = "; ".join(dict.fromkeys(state.last_errors)) or "no bookie in the ensemble"
            state.unreachable = (
                f"no bookie of ledger {ledger_id}'s last ensemble answered: {reasons}"
            )
            if md.is_closed:
                best = md.last_entry_id if md.last_entry_id >= 0 else None
            else:
                raise BookieUnavailable(
                    ",".join(md.ensembles.get(last_first, [])) or "-", state.unreachable
                )
        state.last, state.last_known = best, True
        return best

    def unreachable(self, ledger_id: int) -> str | None:
        """Why none of the bookies of the ledger's last ensemble answered, once
        :meth:`last_entry_id` asked them; None when one did (or when not asked yet).
        A closed ledger's last entry is then the metadata's, not a bookie's answer."""
        state = self._ledgers.get(ledger_id)
        return None if state is None else state.unreachable

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        for stored in self._read(ledger_id, [entry_id]):
            return stored.data
        raise EntryNotFound(ledger_id, entry_id)

    def read_entries(
        self, ledger_id: int, first: int = 0, last: int | None = None
    ) -> Iterator[StoredEntry]:
        """The entries in ``[first, last]`` the bookies hold, in order.

        ``last`` defaults to the last entry the bookies hold. An entry no replica holds
        is skipped (as offline); one whose every replica failed raises BookieUnavailable.
        """
        if last is None:
            last = self.last_entry_id(ledger_id)
            if last is None:
                return
        start = max(first, 0)
        while start <= last:
            end = min(last, start + CHUNK - 1)
            yield from self._read(ledger_id, range(start, end + 1))
            start = end + 1

    def read_entries_at(self, ledger_id: int, entry_ids: list[int]) -> Iterator[StoredEntry]:
        """The entries of ``entry_ids`` (rising) the bookies hold, in order, asked for in
        the pipelined rounds of :meth:`read_entries` whatever the gaps between them."""
        for at in range(0, len(entry_ids), CHUNK):
            yield from self._read(ledger_id, entry_ids[at : at + CHUNK])

    def read_heads(
        self,
        ledger_id: int,
        first: int = 0,
        last: int | None = None,
        options: DecodeOptions | None = None,
    ) -> Iterator[EntryHead]:
        """The heads of the entries :meth:`read_entries` reads (see
        ``BookieStore.read_heads``), made by the native ``record_heads`` where the digest
        is CRC32C, CRC32 or DUMMY, the Python decoder deciding on any other entry."""
        yield from self._heads(ledger_id, first, last, options, False)

    def read_heads_with_data(
        self,
        ledger_id: int,
        first: int = 0,
        last: int | None = None,
        options: DecodeOptions | None = None,
    ) -> Iterator[tuple[EntryHead, bytes]]:
        """:meth:`read_heads`, each head with the stored bytes of its entry."""
        for pairs in self.read_head_batches(ledger_id, first, last, options):
            yield from pairs

    def read_head_batches(
        self,
        ledger_id: int,
        first: int = 0,
        last: int | None = None,
        options: DecodeOptions | None = None,
    ) -> Iterator[list[tuple[EntryHead, bytes]]]:
        """:meth:`read_heads_with_data` a list of pairs at a time, in order."""
        yield from self._heads(ledger_id, first, last, options, True)

    def _heads(
        self,
        ledger_id: int,
        first: int,
        last: int | None,
        options: DecodeOptions | None,
        batched: bool,
    ) -> Iterator[Any]:
        from pulsarctl_py.stores.bookie.heads import native_digest, record_head_batches

        if options is None:
            kind, password = self._digest(self._state(ledger_id).md)
            options = DecodeOptions(digest_type=kind, password=password)
        opts = head_options(options)
        stored = self.read_entries(ledger_id, first, last)
        try:
            yield from record_head_batches(stored, ledger_id, opts, native_digest(opts), batched)
        finally:
            stored.close()

    def iter_locations(
        self, ledger_id: int, first: int = 0, last: int | None = None
    ) -> Iterator[tuple[int, Location]]:
        """Entry ids in ``[first, last]`` up to the last one held (not checked one by one)."""
        held = self.last_entry_id(ledger_id)
        if held is None:
            return
        end = held if last is None else min(last, held)
        for entry_id in range(max(first, 0), end + 1):
            yield entry_id, _location("-", None)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> LiveBookieStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LiveBookieStore({self.metadata!r})"

    # -- reading with failover ----------------------------------------------------------

    def _read(self, ledger_id: int, entry_ids: range | list[int]) -> Iterator[StoredEntry]:
        """The entries asked for, in order, each from the first replica that gives it.

        Reads go out in rounds, each bookie asked for its entries of the round in parallel.
        A round asks for the first entries still to read that fit ``READ_BUDGET`` at
        the size of the largest entry seen so far, and holds about that budget of
        answers: a bookie whose answers pass its share (the budget's part, one frame of the
        maximum message size at least) stops there and is asked for the rest in the next
        round (not a failure). The entries finished in order are handed
        out after every round. So memory is bounded by the budget, not by the number of
        entries times their size.
        """
        md = self._state(ledger_id).md
        kind, password = self._digest(md)
        sets = _write_sets(md, entry_ids, self.order)
        attempt = dict.fromkeys(entry_ids, 0)
        got: dict[int, StoredEntry] = {}
        fallback: dict[int, StoredEntry] = {}  # a copy whose digest failed, if nothing better
        errors: dict[int, list[str]] = {}  # only entries a replica failed to give
        todo = [e for e in entry_ids if sets[e]]
        for e in entry_ids:
            if not sets[e]:
                errors.setdefault(e, []).append("no ensemble in the ledger metadata")
        order = list(entry_ids)
        done = 0  # entries of ``order`` handed out (or skipped) so far
        while todo:
            fits = max(1, READ_BUDGET // max(self._largest, SMALL_ENTRY))
            todo, waits = todo[:fits], todo[fits:]
            by_bookie: dict[str, list[int]] = {}
            for e in todo:
                by_bookie.setdefault(sets[e][attempt[e]], []).append(e)
            asked = []
            for bookie, ids in by_bookie.items():
                if bookie in self.down:  # failed earlier in this run: not waited for again
                    for e in ids:
                        errors.setdefault(e, []).append(self.down[bookie])
                else:
                    asked.append((bookie, ids))
            share = max(limits.max_frame(), READ_BUDGET // max(1, len(asked)))
            later: set[int] = set()  # not asked this round for the budget's sake
            # each entry goes to one bookie per round, so the threads touch distinct keys
            each_bookie(
                asked,
                lambda bookie, ids, share=share, later=later: self._read_from(
                    bookie, ledger_id, ids, kind, password, got, fallback, errors, share, later
                ),
            )
            todo = waits
            for ids in by_bookie.values():
                for e in ids:
                    if e in got:
                        continue
                    if e not in later:
                        attempt[e] += 1
                        if attempt[e] >= len(sets[e]):
                            continue
                    todo.append(e)
            todo.sort()
            waiting = todo[0] if todo else None
            while done < len(order) and (waiting is None or order[done] < waiting):
                stored = self._finished(ledger_id, order[done], got, fallback, errors)
                done += 1
                if stored is not None:
                    yield stored
        while done < len(order):
            stored = self._finished(ledger_id, order[done], got, fallback, errors)
            done += 1
            if stored is not None:
                yield stored

    @staticmethod
    def _finished(
        ledger_id: int,
        e: int,
        got: dict[int, StoredEntry],
        fallback: dict[int, StoredEntry],
        errors: dict[int, list[str]],
    ) -> StoredEntry | None:
        """Entry ``e``, no longer held here; None when no replica holds it (skipped, as
        offline); StoreUnavailable when every replica failed to give it."""
        stored = got.pop(e, None) or fallback.pop(e, None)
        fallback.pop(e, None)
        errs = errors.pop(e, [])
        if stored is not None:
            return stored
        if errs and not all(msg.endswith(_ABSENT) for msg in errs):
            raise StoreUnavailable(
                f"entry {ledger_id}:{e}: no replica could be read: " + "; ".join(errs)
            )
        return None

    def _read_from(
        self,
        bookie: str,
        ledger_id: int,
        ids: list[int],
        kind: DigestType | None,
        password: bytes | None,
        got: dict[int, StoredEntry],
        fallback: dict[int, StoredEntry],
        errors: dict[int, list[str]],
        share: int | None = None,
        later: set[int] | None = None,
    ) -> None:
        """Read ``ids`` from one bookie into ``got`` (``fallback``, ``errors``). With a
        ``share``: once its answers hold that many bytes, the ids not answered yet go to
        ``later`` and the reads still in flight are dropped (with the connection)."""
        conn = self.pool.get(bookie)
        wanted = set(ids)
        answered: set[int] = set()
        where = _location(bookie)
        held = 0
        replies_of = conn.read_raw(ledger_id, ids)
        try:
            # the per-entry loop of a live read: kept to a few dictionary operations
            for replies in replies_of:
                for _, code, _, e, body, _ in replies:
                    if e not in wanted:
                        continue
                    answered.add(e)
                    if code or body is None:
                        status = status_name(code, v2=conn.v2)
                        errors.setdefault(e, []).append(f"{bookie}: {status}")
                        continue
                    held += len(body)
                    if len(body) > self._largest:
                        self._largest = len(body)
                    ok = digest_ok(body, ledger_id, e, kind, password)
                    if ok is False:
                        errors.setdefault(e, []).append(f"{bookie}: digest does not verify")
                        fallback.setdefault(e, StoredEntry(ledger_id, e, where, body))
                        continue
                    got[e] = StoredEntry(ledger_id, e, where, body, ok is True)
                if share is not None and later is not None and held >= share:
                    rest = [e for e in ids if e not in answered]
                    if rest:
                        later.update(rest)
                        break
        except BookieUnavailable as exc:
            self._mark_down(bookie, exc)
            for e in ids:
                if e not in got:
                    errors.setdefault(e, []).append(exc.one_line())
        finally:
            replies_of.close()


def each_bookie(work: list[tuple[str, list[int]]], read) -> None:
    """``read(bookie, ids)`` for every bookie, the bookies in parallel threads (one
    connection each; blocking sockets release the GIL while they wait). The threads are the
    process's own pool (:func:`_bookie_threads`), kept between calls: a read round is one
    call, and starting and joining a thread per bookie each round cost a tenth of a
    10^4-entry compaction's wall time. A call made from one of those threads reads its
    bookies one after the other (a nested call must not wait for the pool it holds)."""
    if len(work) <= 1 or threading.current_thread().name.startswith(_POOL_PREFIX):
        for bookie, ids in work:
            read(bookie, ids)
        return
    pool = _bookie_threads()
    futures = [pool.submit(read, bookie, ids) for bookie, ids in work]
    try:
        for future in futures:
            future.result()
    finally:
        for future in futures:  # an error: the other bookies' reads end before it is raised
            future.cancel() or future.exception()


_POOL_PREFIX = "ledgerctl-bookie-read"
_POOL: tuple[int, Any] | None = None
_POOL_LOCK = threading.Lock()


def _bookie_threads() -> Any:
    """The process's thread pool for reads from several bookies at once (16 threads at
    most, made when first needed); a process forked from one that had it makes its own
    (the parent's threads do not exist in the child)."""
    global _POOL
    with _POOL_LOCK:
        pid = os.getpid()
        if _POOL is None or _POOL[0] != pid:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = (pid, ThreadPoolExecutor(max_workers=16, thread_name_prefix=_POOL_PREFIX))
        return _POOL[1]


def _write_sets(md: LedgerMetadata, entry_ids: range | list[int], order) -> dict[int, list[str]]:
    """Each entry's write set in read order; one list per (segment, position) pattern."""
    patterns: dict[tuple[int, int], list[str]] = {}
    starts = sorted(md.ensembles)
    if len(starts) == 1 and starts[0] == 0:  # one ensemble (most ledgers): n patterns
        n = len(md.ensembles[0]) or 1
        sets = [order(write_set(md, i)) for i in range(n)]
        return {e: sets[e % n] for e in entry_ids}
    out = {}
    for e in entry_ids:
        first = max((s for s in starts if s <= e), default=-1)
        n = len(md.ensembles.get(first, ())) or 1
        key = (first, e % n)
        ws = patterns.get(key)
        if ws is None:
            ws = patterns[key] = order(write_set(md, e))
        out[e] = ws
    return out


@functools.lru_cache(maxsize=256)
def _location(bookie: str, size: int | None = None) -> Location:
    """Where a live entry came from: the bookie, no file and no offset."""
    return Location("live", Path(bookie), -1, -1, size)


def open_live(
    metadata: MetadataStore, options: ClientOptions | None = None, password: bytes | None = None
) -> LiveBookieStore:
    return LiveBookieStore(metadata, options, password)
