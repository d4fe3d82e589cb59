"""New ledgers written to running bookies, the way BookKeeper's own client writes them.

The steps and the rules each one follows (apache/bookkeeper, bookkeeper-server, 4.17):

1. **Ensemble** (``LedgerCreateOp.initiate`` -> ``EnsemblePlacementPolicy.newEnsemble``):
   ``ensemble`` bookies among the registered, writable ones (``<root>/available/<id>``,
   never one under ``available/readonly``) that the ledger's placement allows: the
   broker's bookie isolation (``IsolatedBookieEnsemblePlacementPolicy``: a namespace's
   bookie affinity group, the broker's isolation groups; :mod:`.placement`), whose
   configuration ``LedgerConfig.placement`` carries and ``/bookies`` of Pulsar's metadata
   store completes. With no rack information every bookie is in the default rack, and
   the rack-aware policy (``RackawareEnsemblePlacementPolicyImpl``, which Pulsar's broker
   configures) picks them at random from it: so do we. Each bookie is reached where its
   registration says (:class:`.registry.AddressBook`).
2. **Ledger id** from BookKeeper's id generator for the cluster's layout
   (``ZkLedgerIdGenerator`` / ``LongZkLedgerIdGenerator``: an ephemeral sequential node
   under ``<root>/idgen``; :func:`pulsarctl_py.stores.metadata.allocate_ledger_id`).
3. **Metadata**, format v3, created with compare-and-set (must not exist) in BookKeeper's
   metadata store (``AbstractZkLedgerManager.createLedgerMetadata``): state OPEN, the
   quorums, digest type and password, the custom metadata, a random creator token
   (``cToken``) and no creation time (``storeSystemtimeAsLedgerCreationTime`` is off by
   default). An id whose node exists already is given up for a new one, as
   ``LedgerCreateOp`` does on ``LedgerExistException``.
4. **Entries**: entry ``e`` goes to its write set, ensemble members ``(e + i) mod
   ensemble`` for ``i < write quorum`` (``RoundRobinDistributionSchedule``), as a v3
   ADD_ENTRY with the master key SHA-1("ledger" + password) and the entry packed by the
   digest manager: ledger id, entry id, the last add confirmed when it was sent (the
   piggybacked LAC), the ledger's length with this entry, the digest, the payload
   (``PendingAddOp`` / ``DigestManager.computeDigestAndPackageForSending``). An entry is
   confirmed once ``ack quorum`` bookies of its write set acknowledged it and every entry
   before it is confirmed; that is the LAC the next entries carry. Requests are
   pipelined: at most ``window`` entries (and ``window_bytes`` bytes) are in flight.
5. **Close** (``LedgerHandle.doAsyncCloseInternal``): once every write of every entry is
   acknowledged, the metadata becomes CLOSED with the last entry id and the length,
   written with compare-and-set on the version step 3 created. BookKeeper rebuilds the
   metadata for that (``LedgerMetadataBuilder.from``), which does not carry the creator
   token: a closed ledger's cToken is 0, and so is ours.

Unlike BookKeeper's client this writer does no ensemble change: a bookie that fails a
write, refuses it, or stays silent longer than the timeout fails the whole ledger. Any
failure stops the writer, closes its connections and deletes the metadata it created
(if it still holds what this writer wrote), so nothing references the ledger; bookies
then garbage-collect what they received, as for any deleted ledger. The error is one
line naming the bookie and the entry.
"""

from __future__ import annotations

import contextlib
import random
import secrets as _secrets
import selectors
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import bookie_wire as wire
from pulsarctl_py.decoders import bookkeeper as bk
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import limits
from pulsarctl_py.decoders.checksums import DIGESTS, DigestType, master_key
from pulsarctl_py.errors import LedgerctlError, StoreUnavailable

from .client import BookieConnection, BookieUnavailable, ClientOptions, connection_to
from .placement import NO_ISOLATION, Placement

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import MetadataStore
    from pulsarctl_py.stores.metadata.base import BookKeeperMetadata

#: entries in flight at most (sent and not acknowledged by every bookie of their write set)
DEFAULT_WRITE_WINDOW = 1024
#: and at most this many payload bytes
DEFAULT_WINDOW_BYTES = 32 * 1024 * 1024
#: how many ledger ids to try when ids are taken (LedgerCreateOp retries without a bound)
MAX_CREATE_ATTEMPTS = 100


class NotEnoughBookies(StoreUnavailable):
    """Fewer writable bookies are registered than the ensemble needs."""


class Journal:
    """Told about each step before it is taken, so that a crash leaves a record of what
    may exist (a plan file; see :mod:`pulsarctl_py.plans.writing`). The default does
    nothing."""

    def attach(self, store: Any) -> None:
        """The writable metadata store (Pulsar's) the writer holds while it writes: a
        journal that writes records of its own uses it (a RocksDB store admits one
        writer)."""

    def creating(self, ledger_id: int, path: str, ctoken: int) -> None:
        """The metadata of ``ledger_id`` is about to be created with creator token
        ``ctoken`` (the node may already exist: then it is someone else's, and another id
        is taken)."""

    def closing(self, ledger_id: int, closed: bytes) -> None:
        """The ledger is about to be closed: its metadata will hold ``closed``."""

    def files(self, ledger_id: int, files: Any) -> None:
        """A stopped bookie's files are about to be written (an ``OfflineFiles``)."""


@dataclass(frozen=True)
class LedgerConfig:
    """How a new ledger is written: quorums, digest, password and custom metadata.

    The password is never shown (``repr`` leaves it out).
    """

    ensemble: int
    write_quorum: int
    ack_quorum: int
    digest: DigestType
    password: bytes = field(default=b"", repr=False)
    custom_metadata: dict[str, bytes] = field(default_factory=dict)
    #: which bookies the broker would place it on (its custom metadata entry, if the
    #: broker records one, is in ``custom_metadata`` already)
    placement: Placement = NO_ISOLATION

    def __post_init__(self) -> None:
        if not self.ensemble >= self.write_quorum >= self.ack_quorum >= 1:
            raise LedgerctlError(
                "the quorums must satisfy ensemble >= write quorum >= ack quorum >= 1 "
                f"(found {self.ensemble}/{self.write_quorum}/{self.ack_quorum})"
            )

    def describe(self) -> str:
        """For people: quorums and digest, and whether a password is set (never which)."""
        text = (
            f"ensemble {self.ensemble}, write quorum {self.write_quorum}, ack quorum "
            f"{self.ack_quorum}, {self.digest.name} digest, "
            + ("a password" if self.password else "an empty password")
        )
        if self.placement.isolated:
            text += f", on the bookies of {self.placement.describe()}"
        return text


@dataclass(slots=True)
class WrittenLedger:
    """A ledger this writer created and closed."""

    ledger_id: int
    entries: int
    length: int
    ensemble: list[str]
    path: str
    version: int
    where: str

    @property
    def last_entry_id(self) -> int:
        return self.entries - 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "entries": self.entries,
            "length": self.length,
            "ensemble": list(self.ensemble),
            "path": self.path,
            "metadata": self.where,
        }


def writable_bookies(place: BookKeeperMetadata) -> list[str]:
    """The bookies registered as available and not read-only, by id."""
    from .registry import list_bookies

    return [
        r.bookie_id
        for r in list_bookies(place.store, place.root)
        if r.available and not r.read_only
    ]


def choose_ensemble(
    bookies: list[str],
    size: int,
    rng: random.Random | None = None,
    placement: Placement = NO_ISOLATION,
) -> list[str]:
    """``size`` distinct bookies at random (the default rack's random selection) among
    ``bookies``, the ones ``placement`` allows."""
    if len(bookies) < size:
        raise NotEnoughBookies(placement.not_enough(sorted(bookies), size))
    return (rng or random.SystemRandom()).sample(sorted(bookies), size)


def placement_candidates(
    place: BookKeeperMetadata, pulsar: MetadataStore | None, placement: Placement, size: int
) -> tuple[list[str], list[str]]:
    """The writable bookies ``placement`` allows for an ensemble of ``size``, and notes.

    The isolation groups are read from ``/bookies`` of ``pulsar`` (Pulsar's metadata
    store, where the broker's BookieRackAffinityMapping reads them; BookKeeper's store
    when not given). A value there that cannot be read stops an isolated placement; for
    any other it only takes the racks away (a note says so).
    """
    from .placement import RACKS_PATH, read_racks

    notes: list[str] = []
    try:
        racks = read_racks(pulsar if pulsar is not None else place.store)
    except LedgerctlError:
        if placement.isolated and placement.primary:
            raise
        racks = None
        notes.append(
            f"{RACKS_PATH} cannot be read: its racks were left aside; no isolation group "
            "restricts this ledger"
        )
    left, more = placement.candidates(writable_bookies(place), size, racks)
    return left, notes + more


def _layout(place: BookKeeperMetadata) -> lm.LedgerLayout:
    from pulsarctl_py.stores.metadata import read_layout

    info = read_layout(place.store, place.root)
    if info is not None and info.layout is not None:
        return info.layout
    return lm.LedgerLayout.HIERARCHICAL


class _Bookie:
    """One ensemble member: its connection and what it still owes us."""

    __slots__ = ("bookie_id", "buf", "conn", "out", "pending", "pos", "sock", "txn")

    def __init__(self, bookie_id: str, conn: BookieConnection) -> None:
        self.bookie_id = bookie_id
        self.conn = conn
        self.sock: Any = None
        self.out: list[bytes] = []
        self.pending: dict[int, int] = {}  # txnId -> entry id
        self.buf = bytearray()
        self.pos = 0
        self.txn = 0


class LedgerWriter:
    """Create one ledger on running bookies, add entries, close it (see the module doc).

    Use as a context manager: leaving the block with an exception (or without
    :meth:`close`) deletes the ledger's metadata (:meth:`abort`).
    """

    def __init__(
        self,
        place: BookKeeperMetadata,
        config: LedgerConfig,
        options: ClientOptions | None = None,
        *,
        window: int = DEFAULT_WRITE_WINDOW,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
        rng: random.Random | None = None,
        bookies: list[str] | None = None,
        journal: Journal | None = None,
        pulsar: MetadataStore | None = None,
    ) -> None:
        self.place = place
        self.pulsar = pulsar  # Pulsar's metadata store: the bookies' isolation groups
        self.journal = journal
        self.config = config
        self.options = options or ClientOptions()
        if self.options.v2:
            raise LedgerctlError(
                "writing ledgers needs bookie protocol v3 (--bookie-protocol v3 or auto)"
            )
        self.window = max(1, window)
        self.window_bytes = max(1, window_bytes)
        self.rng = rng
        self._given_bookies = bookies
        self.ledger_id: int | None = None
        self.path: str | None = None
        self.version: int | None = None
        self.ensemble: list[str] = []
        self.closed = False
        self.aborted = False
        self.notes: list[str] = []
        self._bookies: list[_Bookie] = []
        self._selector: selectors.BaseSelector | None = None
        self._digest = DIGESTS[config.digest]
        self._master_key = master_key(config.password)
        self._next_entry = 0
        self._length = 0
        self._lac = -1
        self._acks: dict[int, int] = {}  # entry id -> acknowledgements so far
        self._needed = config.write_quorum
        self._sizes: dict[int, int] = {}  # entry id -> payload size, while in flight
        self._inflight_bytes = 0
        self._confirmed_writes = 0  # entries acknowledged by every bookie of their set

    # -- create -------------------------------------------------------------------------

    def create(self) -> int:
        """Choose the ensemble, connect to it, take a ledger id and create the metadata."""
        if self.ledger_id is not None:
            return self.ledger_id

        cfg = self.config
        bookies = self._given_bookies
        if bookies is None:
            bookies, notes = placement_candidates(
                self.place, self.pulsar, cfg.placement, cfg.ensemble
            )
            self.notes.extend(notes)
        self.ensemble = choose_ensemble(bookies, cfg.ensemble, self.rng, cfg.placement)
        self._connect()
        try:
            created = create_metadata(self.place, cfg, self.ensemble, self.journal)
        except BaseException:
            self._disconnect()
            raise
        self.ledger_id, self.path, self.version, self._metadata = created
        return self.ledger_id

    def _connect(self) -> None:
        from .registry import AddressBook

        ssl_context = self.options.ssl_context()
        resolver = AddressBook(self.place)  # as BookKeeper's client reaches them
        selector = selectors.DefaultSelector()
        try:
            for bookie_id in self.ensemble:
                conn = connection_to(bookie_id, self.options, resolver, ssl_context)
                conn.connect()
                member = _Bookie(bookie_id, conn)
                member.sock = conn._sock
                member.sock.setblocking(True)
                self._bookies.append(member)
                selector.register(member.sock, selectors.EVENT_READ, member)
        except BaseException:
            selector.close()
            self._disconnect()
            raise
        self._selector = selector

    def _disconnect(self) -> None:
        if self._selector is not None:
            with contextlib.suppress(Exception):
                self._selector.close()
            self._selector = None
        for member in self._bookies:
            member.conn.close()
        self._bookies = []

    # -- entries ------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._next_entry

    @property
    def length(self) -> int:
        return self._length

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    def add(self, payload: bytes | memoryview) -> int:
        """Send one entry (pipelined); return its entry id."""
        if self.ledger_id is None:
            self.create()
        if self.closed or self.aborted:
            raise LedgerctlError("the ledger writer is closed")
        while len(self._acks) >= self.window or (
            self._acks and self._inflight_bytes + len(payload) > self.window_bytes
        ):
            self._flush()
            self._receive()
        entry_id = self._next_entry
        self._next_entry += 1
        self._length += len(payload)
        assert self.ledger_id is not None
        head = bk.HEADER.pack(self.ledger_id, entry_id, self._lac, self._length)
        digest = self._digest.compute([head, payload], self.config.password)
        assert digest is not None
        body = b"".join((head, digest, payload))
        n = len(self._bookies)
        for i in range(self.config.write_quorum):
            member = self._bookies[(entry_id + i) % n]
            request = wire.v3_add_request(
                member.txn + 1, self.ledger_id, entry_id, self._master_key, body
            )
            if len(request) - wire.FRAME_LEN.size > limits.max_frame():
                raise entry_too_large(self.ledger_id, entry_id, len(request) - wire.FRAME_LEN.size)
            member.txn += 1
            member.pending[member.txn] = entry_id
            member.out.append(request)
        self._acks[entry_id] = 0
        self._sizes[entry_id] = len(payload)
        self._inflight_bytes += len(payload)
        if sum(len(m.out) for m in self._bookies) >= 64:
            self._flush()
        return entry_id

    def add_all(self, payloads: Iterable[bytes | memoryview]) -> int:
        """Add every payload; return how many."""
        count = 0
        for payload in payloads:
            self.add(payload)
            count += 1
        return count

    def _flush(self) -> None:
        timeout = self.options.timeout
        for member in self._bookies:
            if not member.out:
                continue
            data = b"".join(member.out)
            member.out.clear()
            member.sock.settimeout(timeout)
            try:
                member.sock.sendall(data)
            except TimeoutError:
                raise self._failed(member, f"cannot send within {timeout:g}s") from None
            except OSError as exc:
                raise self._failed(
                    member, f"connection lost while sending: {exc.strerror or exc}"
                ) from None

    def _failed(self, member: _Bookie, message: str) -> BookieUnavailable:
        entries = sorted(set(member.pending.values()))
        at = f" (entry {self.ledger_id}:{entries[0]})" if entries else ""
        return BookieUnavailable(member.bookie_id, message + at)

    def _receive(self) -> None:
        """Wait for answers (at most ``timeout`` seconds of silence) and count them."""
        selector = self._selector
        assert selector is not None
        timeout = self.options.timeout
        # TLS may hold decrypted bytes the selector cannot see
        ready = [m for m in self._bookies if isinstance(m.sock, ssl.SSLSocket) and m.sock.pending()]
        if not ready:
            events = selector.select(timeout)
            if not events:
                waiting = [m for m in self._bookies if m.pending]
                member = waiting[0] if waiting else self._bookies[0]
                raise self._failed(member, f"no answer to an add within {timeout:g}s")
            ready = [key.data for key, _ in events]
        for member in ready:
            self._read(member)

    def _read(self, member: _Bookie) -> None:
        sock = member.sock
        sock.settimeout(self.options.timeout)
        try:
            chunk = sock.recv(1 << 18)
        except TimeoutError:
            raise self._failed(member, "no answer within the timeout") from None
        except (ssl.SSLWantReadError, BlockingIOError):
            return
        except OSError as exc:
            raise self._failed(member, f"connection lost: {exc.strerror or exc}") from None
        if not chunk:
            raise self._failed(member, "closed the connection")
        buf = member.buf
        if member.pos:
            del buf[: member.pos]
            member.pos = 0
        buf += chunk
        pos, end = 0, len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if size > limits.max_frame():
                raise self._failed(member, f"sent a frame of {size} bytes, over the limit")
            if end - pos < 4 + size:
                break
            frame = bytes(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            self._answer(member, frame)
        member.pos = pos

    def _answer(self, member: _Bookie, frame: bytes) -> None:
        from pulsarctl_py.decoders.errors import InputFormatError

        try:
            reply = wire.parse_v3_response(frame)
        except InputFormatError as exc:
            raise self._failed(member, str(exc)) from None
        entry_id = member.pending.pop(reply.key, None)  # type: ignore[call-overload]
        if reply.op != "add" or entry_id is None:
            raise self._failed(
                member, f"answered a request it was not asked ({reply.op} {reply.key})"
            )
        if reply.status != "EOK":
            hint = {
                "EREADONLY": ": it is read-only now",
                "EUA": ": it requires authentication",
                "EFENCED": ": the ledger is fenced (someone opened it for recovery)",
                "EBADVERSION": ": it does not accept this request",
            }.get(reply.status, "")
            raise BookieUnavailable(
                member.bookie_id,
                f"refused entry {self.ledger_id}:{entry_id} ({reply.status}){hint}",
            )
        acks = self._acks.get(entry_id)
        if acks is None:
            raise self._failed(member, f"acknowledged entry {entry_id} twice")
        acks += 1
        if acks >= self._needed:
            del self._acks[entry_id]
            self._inflight_bytes -= self._sizes.pop(entry_id, 0)
            self._confirmed_writes += 1
        else:
            self._acks[entry_id] = acks
        # the LAC: every entry up to it has its ack quorum
        ack_quorum = self.config.ack_quorum
        lac = self._lac
        while lac + 1 < self._next_entry:
            pending = self._acks.get(lac + 1)
            if pending is not None and pending < ack_quorum:
                break
            lac += 1
        self._lac = lac

    def wait(self) -> None:
        """Send what is queued and wait until every write is acknowledged."""
        while self._acks or any(m.out for m in self._bookies):
            self._flush()
            if self._acks:
                self._receive()

    # -- close / abort ------------------------------------------------------------------

    def close(self) -> WrittenLedger:
        """Wait for every write, then close the ledger in its metadata (compare-and-set)."""
        if self.ledger_id is None:
            self.create()
        assert self.ledger_id is not None and self.path is not None
        self.wait()
        self._disconnect()
        self.version = close_metadata(
            self.place,
            self.path,
            self.version,
            self._metadata,
            self._next_entry - 1,
            self._length,
            self.journal,
        )
        self.closed = True
        return WrittenLedger(
            self.ledger_id,
            self._next_entry,
            self._length,
            list(self.ensemble),
            self.path,
            self.version,
            self.place.url,
        )

    def abort(self) -> bool:
        """Stop, and delete the metadata this writer created if it still holds it.

        Returns whether the metadata was deleted (False when there was none, or it was
        changed by someone else: then it is left alone).
        """
        self.aborted = True
        self._disconnect()
        if self.path is None or self.version is None:
            return False
        return delete_metadata(self.place, self.path, self.version)

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None or not self.closed:
            self.abort()


def entry_too_large(ledger_id: int, entry_id: int, size: int) -> LedgerctlError:
    """An entry whose frame is over the limit every reader applies (the maximum message
    size plus 10 KiB, ``decoders.limits.max_frame``, Pulsar's ``nettyMaxFrameSizeBytes``):
    refused before it is sent, since no reader (the broker's nor ledgerctl's) would take
    it back."""
    return LedgerctlError(
        f"entry {ledger_id}:{entry_id} would be a frame of {size} bytes, over the limit of "
        f"{limits.max_frame()} (the maximum message size plus 10 KiB): a broker could not "
        "read it back; raise --max-message-size if the cluster's maxMessageSize is larger"
    )


def create_metadata(
    place: BookKeeperMetadata,
    config: LedgerConfig,
    ensemble: list[str],
    journal: Journal | None = None,
) -> tuple[int, str, int, lm.LedgerMetadata]:
    """Take a ledger id and create its metadata, OPEN (steps 2 and 3 of the module doc);
    return the id, the path, the node's version and the metadata."""
    from pulsarctl_py.stores.metadata import allocate_ledger_id
    from pulsarctl_py.stores.metadata.base import MetadataConflict

    layout = _layout(place)
    store, root = place.store, place.root
    for _ in range(MAX_CREATE_ATTEMPTS):
        ledger_id = allocate_ledger_id(store, root, layout)
        md = lm.LedgerMetadata(
            ensemble_size=config.ensemble,
            write_quorum_size=config.write_quorum,
            ack_quorum_size=config.ack_quorum,
            state=lm.LedgerState.OPEN,
            ensembles={0: list(ensemble)},
            last_entry_id=-1,
            length=0,
            digest_type=config.digest,
            password=config.password,
            ctime=None,
            # AbstractZkLedgerManager.createLedgerMetadata: nextLong(Long.MAX_VALUE)
            ctoken=_secrets.randbelow(2**63 - 1),
            custom_metadata=dict(config.custom_metadata),
            ledger_id=ledger_id,
        )
        path = lm.ledger_path(ledger_id, layout, root)
        if journal is not None:
            journal.creating(ledger_id, path, md.ctoken)
        try:
            _, stat = store.put(path, lm.build(md), -1)
        except MetadataConflict:
            continue  # LedgerExistException: another id
        return ledger_id, path, stat.version, md
    raise LedgerctlError(
        f"no free ledger id under {place.url} after {MAX_CREATE_ATTEMPTS} attempts"
    )


def close_metadata(
    place: BookKeeperMetadata,
    path: str,
    version: int,
    md: lm.LedgerMetadata,
    last_entry_id: int,
    length: int,
    journal: Journal | None = None,
) -> int:
    """Close a ledger in its metadata with compare-and-set on ``version`` (step 5);
    return the new version."""
    from pulsarctl_py.stores.metadata.base import MetadataConflict

    md.state = lm.LedgerState.CLOSED
    md.last_entry_id = last_entry_id
    md.length = length
    md.ctoken = 0  # LedgerMetadataBuilder.from keeps no creator token
    closed = lm.build(md)
    if journal is not None and md.ledger_id is not None:
        journal.closing(md.ledger_id, closed)
    try:
        _, stat = place.store.put(path, closed, version)
    except MetadataConflict as exc:
        raise MetadataConflict(
            exc.path,
            "changed while ledgerctl wrote the ledger (someone opened or deleted it); "
            "it is left as it is",
        ) from None
    return stat.version


def delete_metadata(place: BookKeeperMetadata, path: str, version: int) -> bool:
    """Delete a ledger's metadata if it is still at ``version``; whether it was deleted."""
    try:
        node = place.store.get(path)
        if node is None or node.stat.version != version:
            return False
        place.store.delete(path, version)
    except LedgerctlError:
        return False
    return True


def write_ledger(
    place: BookKeeperMetadata,
    config: LedgerConfig,
    payloads: Iterable[bytes | memoryview],
    options: ClientOptions | None = None,
    **kwargs: Any,
) -> WrittenLedger:
    """Create, fill and close one ledger; on any failure nothing references it."""
    with LedgerWriter(place, config, options, **kwargs) as writer:
        writer.create()
        writer.add_all(payloads)
        return writer.close()
