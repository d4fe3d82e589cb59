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
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import bookkeeper as bk
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders.checksums import DigestType, master_key
from pulsarctl_py.decoders.errors import DataError, LedgerctlError
from pulsarctl_py.stores.copies import NO_REGISTRY, UNKNOWN_BOOKIE, Copy, DataFinder, Found

from .topic_state import ledger_metadata

__all__ = ["UNKNOWN_BOOKIE", "Copy", "DataFinder", "Found"]

if TYPE_CHECKING:
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.plans import Draft

#: the largest ensemble whose order is searched (8! orders, each checked per residue)
MAX_ENSEMBLE = 8


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


def complete_order(found: Found, size: int, write_quorum: int, absent: list[str]) -> list[str]:
    """The original ensemble of ``size`` bookies of a ledger some of whose bookies could
    not be read (``absent``): the bookies holding copies plus as many of ``absent`` as make
    ``size``, in the one order in which every copy lies on its entry's write set (round
    robin). Refused when no order or more than one fits: never a smaller ensemble."""
    holders = sorted({c.bookie for c in found.copies if c.entries})
    extra = size - len(holders)
    if extra < 0 or extra > len(absent):
        raise DataError(
            f"ledger {found.ledger_id}: {len(holders)} bookies hold copies and "
            f"{len(absent)} could not be read: no ensemble of {size} is made of them"
        )
    if size > MAX_ENSEMBLE:
        raise DataError(
            f"ledger {found.ledger_id}: an ensemble of {size} bookies is more than the "
            f"{MAX_ENSEMBLE} whose order ledgerctl searches"
        )
    by_residue: list[set[str]] = [set() for _ in range(size)]
    for copy in found.copies:
        for e in copy.entries:
            by_residue[e % size].add(copy.bookie)
    fits: list[list[str]] = []
    for chosen in itertools.combinations(sorted(absent), extra):
        members = [*holders, *chosen]
        for order in itertools.permutations(members):
            sets = [{order[(r + i) % size] for i in range(write_quorum)} for r in range(size)]
            # every copy on its write set, and every write set holding a copy read
            if all(held <= ws for held, ws in zip(by_residue, sets, strict=True)):
                fits.append(list(order))
                if len(fits) > 1:
                    break
        if len(fits) > 1:
            break
    if len(fits) != 1:
        how = "no order" if not fits else "more than one order"
        raise DataError(
            f"ledger {found.ledger_id}: {how} of an ensemble of {size} bookies (write quorum "
            f"{write_quorum}) made of {', '.join(holders)} and of {extra} of "
            f"{', '.join(absent)} puts every copy on its write set: not recreated (start the "
            "bookies that could not be read, and recreate from all of them)"
        )
    return fits[0]


@dataclass(slots=True)
class Neighbour:
    """What the topic's other ledgers say (the broker wrote them alike)."""

    ledger_id: int
    metadata: LedgerMetadata


def neighbour(draft: Draft, ids: list[int], ledger_id: int) -> Neighbour | None:
    """The nearest ledger of the topic that still has metadata."""
    for other in sorted((i for i in ids if i != ledger_id), key=lambda i: abs(i - ledger_id)):
        try:
            md = ledger_metadata(draft, other)
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
    complete_ensemble: bool = False,
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
    absent = [b for b in found.unreachable if b != NO_REGISTRY]
    if found.unreachable and (not complete_ensemble or NO_REGISTRY in found.unreachable):
        names = "; ".join(f"{b}: {why}" for b, why in found.unreachable.items())
        raise DataError(
            f"ledger {ledger_id}: bookies of the cluster could not be read ({names}): its "
            "ensemble may include them, and recreating it from the others would give a "
            "smaller ensemble, its entries below their write quorum. Start them (or give "
            "their directories) and recreate from all"
            + (
                ", or pass --complete-ensemble to recreate the original ensemble with them in it"
                if NO_REGISTRY not in found.unreachable
                else ""
            )
        )
    if absent:
        shape = _expected_shape(near, broker)
        if shape is None:
            raise DataError(
                f"ledger {ledger_id}: --complete-ensemble needs the ensemble size and write "
                "quorum, which neither the topic's other ledgers nor a broker configuration "
                "(--broker-conf) gives"
            )
        (size, write_quorum), said = shape
        ensemble = complete_order(found, size, write_quorum, absent)
        sources["ensemble"] = (
            f"the bookies holding entries and of those not read ({', '.join(absent)}), in the "
            f"one order their copies follow, at the ensemble size of {said}"
        )
        sources["write_quorum"] = said
        held = [b for b in ensemble if b not in absent]
        notes.append(
            f"recreated with bookies {', '.join(b for b in ensemble if b in absent)} in its "
            f"ensemble, which could not be read (the copies on {', '.join(held)} were "
            "verified)"
        )
    else:
        ensemble = ensemble_order(found, write_quorum)
        sources["ensemble"] = "the bookies holding entries, in the order their copies follow"
        sources["write_quorum"] = "the most copies one entry has"
    under = sum(1 for c in counts.values() if c < write_quorum)
    if under and absent:
        notes.append(
            f"{under} entries were read from fewer than {write_quorum} copies (the others are "
            "on the bookies not read, checked when they are read again)"
        )
    elif under:
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


def _expected_shape(near: Neighbour | None, broker: Any) -> tuple[tuple[int, int], str] | None:
    """``((ensemble size, write quorum), where from)``: the topic's other ledgers', else
    the broker configuration's."""
    if near is not None:
        md = near.metadata
        return (md.ensemble_size, md.write_quorum_size), f"ledger {near.ledger_id}"
    if broker is not None:
        return (broker.ensemble, broker.write_quorum), f"the broker configuration {broker.path}"
    return None


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
