"""Recreate a ledger's lost BookKeeper metadata from the entries its bookies still hold.

A ledger whose metadata znode is gone (deleted by hand, a restored ZooKeeper snapshot, a
tool run against the wrong chroot) is unreadable for every client although its entries
may still sit on the bookies, until the bookies' garbage collection removes them (it
deletes the entries of ledgers without metadata, every ``gcWaitTime``). Everything the
metadata held can be found again from the bookies, except what is said below:

* **where the entries are**: offline, each ledger directory given (a stopped bookie's,
  told apart by the cookie in ``current/VERSION``, whose ``bookieHost`` is the bookie's
  id); live, every bookie registered under ``available`` (and ``available/readonly``),
  asked with READ_LAC for the ledger and then for each entry;
* **ensemble, write quorum**: the bookies holding entries form the ensemble; the write
  quorum is the most copies one entry has; their order is the one in which every entry
  ``e`` lies on its write set ``ensemble[(e + i) % E]``, ``i < W`` (BookKeeper's
  ``RoundRobinDistributionSchedule``). An ensemble change (several segments) is not
  guessed: refused;
* **last entry and length**: the highest entry id held (every entry from 0 must be held
  somewhere, as BookKeeper's recovery reads forward until no bookie has the next one:
  ``LedgerRecoveryOp``), and the ledger length stored in that entry's header (the
  ``length`` field of ``DigestManager.computeDigestAndPackageForSending``: the ledger's
  length after that entry);
* **digest type**: the one whose digest verifies on entry 0 (CRC32C, CRC32, HMAC with a
  candidate password, DUMMY by the entry's layout);
* **password**: the metadata stores the password, the bookie only its master key,
  SHA-1("ledger" + password) (``MacDigestManager.genDigest("ledger", password)``, kept in
  the bookie's ``ledgers`` index or ``.idx`` header). Candidates, in order: the password
  given (``--password-env``/``--password-file``), the one in the metadata of the topic's
  other ledgers, ``managedLedgerPassword`` of the broker configuration, the empty
  password; offline the one whose master key is the bookie's is taken (none: refused).
  Running bookies do not tell their master key: there the first candidate is taken and
  the plan says it was not checked against the bookie;
* **ack quorum, custom metadata**: from the topic's other ledgers (Pulsar tags them all
  alike), else the broker configuration's ack quorum and Pulsar's tags for the topic;
* **ctime**: unknown; the first entry's time is written.

The new metadata is CLOSED (format v3) and verified before the plan is made: every entry
is read back through it (offline from the directories, live from the bookies of each
entry's write set) and its digest verified with the recreated digest type and password.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import bookkeeper as bk
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders.checksums import DigestType, master_key
from pulsarctl_py.decoders.errors import DataError, LedgerctlError, StoreUnavailable

if TYPE_CHECKING:
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.bookie import BookieStore
    from pulsarctl_py.stores.metadata import MetadataStore

    from .plan import Draft

#: the largest ensemble whose order is searched (8! orders, each checked per residue)
MAX_ENSEMBLE = 8


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


#: the prefix of the name of a directory's bookie when no cookie tells it
UNKNOWN_BOOKIE = "unknown bookie of "


def _cookie_host(current: Path, metadata: MetadataStore | None) -> str:
    """The id of the bookie a ``current/`` directory belongs to: its cookie's bookieHost
    (``current/VERSION``), else the bookie whose cookie in the metadata store lists the
    directory; else a name starting with :data:`UNKNOWN_BOOKIE` (never written)."""
    from pulsarctl_py.stores.live.registry import list_bookies, parse_cookie

    try:
        with open(current / "VERSION", "rb") as fh:
            host = parse_cookie(fh.read(65536)).bookie_host
        if host:
            return host
    except OSError:
        pass
    if metadata is not None:
        wanted = {str(current.parent), str(current.parent.resolve())}
        try:
            for record in list_bookies(metadata):
                cookie = record.cookie
                if cookie is not None and wanted & set(cookie.ledger_dirs + cookie.journal_dirs):
                    return record.bookie_id
        except LedgerctlError:
            pass
    return f"{UNKNOWN_BOOKIE}{current.parent}"


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
        if ledger_dirs is not None:
            from pulsarctl_py.stores.bookie import open_bookie

            groups: dict[str, list[Path]] = {}
            for current in [*ledger_dirs, *(journal_dirs or [])]:
                host = _cookie_host(current, cookies)
                if current not in groups.setdefault(host, []):
                    groups[host].append(current)
            for host, dirs in groups.items():
                if not any(d in ledger_dirs for d in dirs):
                    continue  # a journal alone holds no ledger of ours
                store = open_bookie([str(d) for d in dirs])
                self._stores.append((host, ", ".join(str(d) for d in dirs), store))

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

        found = Found(ledger_id, [])
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
        for record in list_bookies(self._live_metadata):
            if not (record.available or record.read_only):
                continue  # registered by a cookie only: not running
            bookie = record.bookie_id
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


# -- the metadata, recreated ---------------------------------------------------------------


@dataclass(slots=True)
class Recreated:
    """Recreated metadata, and where each part of it came from."""

    ledger_id: int
    metadata: LedgerMetadata
    found: Found
    #: field -> what it was taken from
    sources: dict[str, str]
    notes: list[str]
    first_ms: int | None
    last_ms: int | None
    verified: int = 0

    def to_json(self) -> dict[str, Any]:
        from pulsarctl_py.timeparse import format_time_ms

        md = self.metadata
        return {
            "ledger_id": self.ledger_id,
            "ensemble": md.ensembles.get(0, []),
            "ensemble_size": md.ensemble_size,
            "write_quorum_size": md.write_quorum_size,
            "ack_quorum_size": md.ack_quorum_size,
            "last_entry_id": md.last_entry_id,
            "length": md.length,
            "digest_type": md.digest_type.name if md.digest_type is not None else None,
            "data_time_range": None
            if self.first_ms is None
            else [format_time_ms(self.first_ms), format_time_ms(self.last_ms)],
            "sources": dict(self.sources),
            "notes": list(self.notes),
            "verified_entries": self.verified,
            "data": self.found.to_json(),
        }


@dataclass(slots=True)
class Candidate:
    """A password the ledger may have been written with, and where it comes from."""

    password: bytes = field(repr=False)
    source: str


def entry_time(data: bytes, digest: DigestType | None, password: bytes | None) -> int | None:
    """An entry's time as inspect gives it (broker timestamp, else publish time)."""
    from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry

    options = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY,
        digest_type=digest,
        password=password,
        depth=Depth.METADATA,
        verify=False,
    )
    try:
        return decode_entry(data, options).entry_timestamp or None
    except LedgerctlError:
        return None


def data_time_span(found: Found) -> tuple[int | None, int | None]:
    """The times of the first and the last entry held (None where they do not decode)."""
    last = found.last
    if last is None:
        return None, None
    times = []
    for entry_id in (min(found.held), last):
        try:
            times.append(entry_time(found.read(entry_id), None, None))
        except LedgerctlError:
            times.append(None)
    return times[0], times[1]


def detect(found: Found, candidates: list[Candidate]) -> tuple[DigestType, Candidate | None]:
    """The digest type of entry 0 (and the candidate password a MAC digest needs)."""
    data = found.read(0)
    kind = bk.detect_digest(data, 0, len(data), None)
    if kind is not None:
        return kind, None
    for candidate in candidates:
        if bk.detect_digest(data, 0, len(data), candidate.password) is DigestType.HMAC:
            return DigestType.HMAC, candidate
    if bk.detect_by_layout(data, 0, len(data)) is DigestType.DUMMY:
        return DigestType.DUMMY, None
    raise DataError(
        f"ledger {found.ledger_id} entry 0: no digest type verifies (CRC32C, CRC32; HMAC "
        "with none of the candidate passwords; not DUMMY by its layout): the entry is "
        "damaged, or written with a password not given (--password-env/--password-file)"
    )


def choose_password(
    found: Found, candidates: list[Candidate], mac: Candidate | None
) -> tuple[Candidate, str]:
    """The password to record, and how it was checked."""
    keys = {c.master_key for c in found.copies if c.master_key is not None}
    if mac is not None:
        return mac, "verified by the HMAC digest of entry 0"
    if keys:
        for candidate in candidates:
            if master_key(candidate.password) in keys:
                return candidate, "its master key is the bookie's"
        tried = "; ".join(c.source for c in candidates)
        raise DataError(
            f"ledger {found.ledger_id}: the bookie's master key matches no candidate password "
            f"({tried}): give the ledger's password with --password-env or --password-file"
        )
    return candidates[0], "not checked: running bookies do not tell their master key"


def ensemble_order(found: Found, write_quorum: int) -> list[str]:
    """The order of the holding bookies in which every copy lies on its entry's write set
    (round robin); refused when none does (an ensemble change, a lost bookie)."""
    holders = sorted({c.bookie for c in found.copies if c.entries})
    size = len(holders)
    if size > MAX_ENSEMBLE:
        raise DataError(
            f"ledger {found.ledger_id} is held by {size} bookies: more than the "
            f"{MAX_ENSEMBLE} whose order ledgerctl searches (an ensemble change?)"
        )
    # per residue of the entry id modulo the ensemble size: the bookies that hold one
    by_residue: list[set[str]] = [set() for _ in range(size)]
    for copy in found.copies:
        for e in copy.entries:
            by_residue[e % size].add(copy.bookie)
    for order in itertools.permutations(holders):
        if all(
            held <= {order[(r + i) % size] for i in range(write_quorum)}
            for r, held in enumerate(by_residue)
        ):
            return list(order)
    raise DataError(
        f"ledger {found.ledger_id}: its copies on {', '.join(holders)} follow no single "
        f"ensemble of {size} bookies with write quorum {write_quorum} (the ledger changed "
        "ensembles, or a bookie that held it is missing): not recreated automatically"
    )


@dataclass(slots=True)
class Neighbour:
    """What the topic's other ledgers say (the broker wrote them alike)."""

    ledger_id: int
    metadata: LedgerMetadata


def neighbour(draft: Draft, ids: list[int], ledger_id: int) -> Neighbour | None:
    """The nearest ledger of the topic that still has metadata."""
    from .repairs import _ledger_metadata

    for other in sorted((i for i in ids if i != ledger_id), key=lambda i: abs(i - ledger_id)):
        try:
            md = _ledger_metadata(draft, other)
        except LedgerctlError:
            continue
        if md is not None and md.ensembles:
            return Neighbour(other, md)
    return None


def candidates_for(given: bytes | None, near: Neighbour | None, broker: Any) -> list[Candidate]:
    out: list[Candidate] = []
    if given is not None:
        out.append(Candidate(given, "the password given (--password-env/--password-file)"))
    if near is not None and near.metadata.password is not None:
        out.append(Candidate(near.metadata.password, f"the password of ledger {near.ledger_id}"))
    if broker is not None and broker.password is not None:
        out.append(Candidate(broker.password.reveal(), f"managedLedgerPassword of {broker.path}"))
    out.append(Candidate(b"", "the empty password"))
    unique: list[Candidate] = []
    for candidate in out:
        if all(candidate.password != c.password for c in unique):
            unique.append(candidate)
    return unique


def recreate(
    draft: Draft,
    topic: Any,
    ledger_id: int,
    found: Found,
    *,
    password: bytes | None = None,
    verify: Callable[[LedgerMetadata], int] | None = None,
) -> Recreated:
    """The metadata of ``ledger_id`` (a ledger of ``topic``) from ``found``, verified."""
    from pulsarctl_py.stores.metadata.url import resolve_broker_conf

    last = found.last
    if last is None:
        raise DataError(f"ledger {ledger_id}: no bookie holds any of its entries")
    gaps = found.gaps()
    if gaps:
        shown = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in gaps[:5])
        raise DataError(
            f"ledger {ledger_id}: entries {shown} are on no bookie found ({found.describe()}"
            + (f"; not asked: {', '.join(found.unreachable)}" if found.unreachable else "")
            + "): its metadata cannot be recreated whole"
        )
    sources: dict[str, str] = {}
    notes: list[str] = []
    near = neighbour(draft, topic.ids, ledger_id)
    try:
        broker = resolve_broker_conf()
    except LedgerctlError:
        broker = None
    candidates = candidates_for(password, near, broker)
    digest, mac = detect(found, candidates)
    sources["digest_type"] = "the digest that verifies on entry 0"
    chosen, how = choose_password(found, candidates, mac)
    sources["password"] = f"{chosen.source} ({how})"
    if near is not None and near.metadata.digest_type not in (None, digest):
        notes.append(
            f"ledger {near.ledger_id} of the topic has digest {near.metadata.digest_type.name}, "
            f"this one's entries {digest.name}"
        )
    unknown = [c.where for c in found.copies if c.bookie.startswith(UNKNOWN_BOOKIE)]
    if unknown:
        raise DataError(
            f"ledger {ledger_id}: cannot tell which bookie holds the copy in "
            f"{', '.join(unknown)} (no cookie current/VERSION there, and no bookie's cookie "
            "in the metadata store lists it): the ensemble would name no bookie"
        )
    counts: dict[int, int] = {}
    for copy in found.copies:
        for e in copy.entries:
            counts[e] = counts.get(e, 0) + 1
    write_quorum = max(counts.values())
    ensemble = ensemble_order(found, write_quorum)
    sources["ensemble"] = "the bookies holding entries, in the order their copies follow"
    sources["write_quorum"] = "the most copies one entry has"
    under = sum(1 for c in counts.values() if c < write_quorum)
    if under:
        notes.append(f"{under} entries have fewer than {write_quorum} copies")
    ack = write_quorum
    sources["ack_quorum"] = "the write quorum"
    if (
        near is not None
        and near.metadata.write_quorum_size == write_quorum
        and near.metadata.ensemble_size == len(ensemble)
    ):
        ack = min(near.metadata.ack_quorum_size, write_quorum)
        sources["ack_quorum"] = f"ledger {near.ledger_id}"
    elif broker is not None and broker.ack_quorum <= write_quorum:
        ack = broker.ack_quorum
        sources["ack_quorum"] = f"managedLedgerDefaultAckQuorum of {broker.path}"
    tail = found.read(last)
    length = bk.HEADER.unpack_from(tail, 0)[3]
    sources["last_entry_id"] = "the highest entry id held"
    sources["length"] = f"the header of entry {last}"
    if near is not None and _tags_of(near, topic):
        custom = dict(near.metadata.custom_metadata)
        sources["custom_metadata"] = f"ledger {near.ledger_id}"
    else:
        custom = lm.pulsar_custom_metadata(topic.name.persistence_name)
        sources["custom_metadata"] = "Pulsar's tags for the topic"
    first_ms = entry_time(found.read(0), digest, chosen.password)
    last_ms = entry_time(tail, digest, chosen.password)
    ctime: int | None
    if near is not None and near.metadata.ctime is None:
        # the client that wrote the topic's ledgers stores no ctime (BookKeeper's
        # storeSystemtimeAsLedgerCreationTime off, as Pulsar's brokers run it)
        ctime = None
        sources["ctime"] = f"none, as ledger {near.ledger_id} stores none"
    elif first_ms is None:
        import time

        ctime = time.time_ns() // 1_000_000
        sources["ctime"] = "now (entry 0 has no time)"
    else:
        ctime = first_ms
        sources["ctime"] = "the time of entry 0 (the creation time is not stored anywhere else)"
    md = lm.LedgerMetadata(
        ensemble_size=len(ensemble),
        write_quorum_size=write_quorum,
        ack_quorum_size=ack,
        state=lm.LedgerState.CLOSED,
        ensembles={0: ensemble},
        last_entry_id=last,
        length=length,
        digest_type=digest,
        password=chosen.password,
        ctime=ctime,
        custom_metadata=custom,
        ledger_id=ledger_id,
    )
    fenced = [c.bookie for c in found.copies if c.fenced]
    if fenced:
        notes.append(f"fenced on {', '.join(fenced)} (its writer was cut off: closing it is right)")
    rec = Recreated(ledger_id, md, found, sources, notes, first_ms, last_ms)
    if verify is not None:
        rec.verified = verify(md)
        if rec.verified != last + 1:
            raise DataError(
                f"ledger {ledger_id}: read back through the recreated metadata, "
                f"{rec.verified} of {last + 1} entries verify: not recreated"
            )
    return rec


def _tags_of(near: Neighbour, topic: Any) -> bool:
    """Whether the neighbour's custom metadata names the topic's managed ledger."""
    tags = near.metadata.pulsar()
    return tags.kind == "data" and tags.managed_ledger == topic.name.persistence_name


def read_back(source: LedgerSource, ledger_id: int, md: LedgerMetadata) -> int:
    """Read every entry through ``md`` (offline: the directories; live: each entry's write
    set) with its digest verified; the number that verify, in order from entry 0."""
    from pulsarctl_py.decoders import Depth
    from pulsarctl_py.ledgers import LedgerView

    bookie = source.bookie
    if bookie is None:
        return 0
    if getattr(bookie, "where", None) == "live":
        bookie.assume_metadata(ledger_id, md)
    view = LedgerView(
        ledger_id,
        metadata=md,
        kind="data",
        digest_type=md.digest_type,
        password=md.password,
    )
    good = 0
    for entry in _entries(source, view, md.last_entry_id, Depth.ENTRY):
        bk_layer = entry.layers[0] if entry.layers else None
        if (
            entry.position != (ledger_id, good)
            or entry.unreadable is not None
            or bk_layer is None
            or bk_layer.check is None
            or bk_layer.check.ok is not True
        ):
            break
        good += 1
    return good


def _entries(source: LedgerSource, view: Any, last: int, depth: Any) -> Iterator[Any]:
    try:
        yield from source.entries(view, 0, last, depth=depth, verify=True, keep_going=True)
    except LedgerctlError:
        return


def ledger_place(draft: Draft, ledger_id: int) -> str:
    """The znode the ledger's metadata is created at (the cluster's layout), refused when
    its parent is absent in ZooKeeper (a plan creates the ledger's znode only)."""
    from pulsarctl_py.stores.metadata import read_layout

    root = draft.ledgers_root()
    layout_info = read_layout(draft.store)
    layout = (
        layout_info.layout
        if layout_info is not None and layout_info.layout is not None
        else lm.LedgerLayout.HIERARCHICAL
    )
    path = lm.ledger_path(ledger_id, layout, root)
    parent = path.rsplit("/", 1)[0]
    if type(draft.store).__name__ == "ZooKeeperStore" and draft.store.exists(parent) is None:
        raise DataError(
            f"ledger {ledger_id}: the parent znode {parent} is gone too (BookKeeper removes "
            "empty ones); create it first (zkCli: create " + parent + "), then plan again"
        )
    return path
