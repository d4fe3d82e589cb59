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
2. **Ledger id** and 3. **metadata**, created OPEN, as every new ledger's
   (:func:`pulsarctl_py.stores.ledger_writer.create_metadata`).
4. **Entries**: entry ``e`` goes to its write set, ensemble members ``(e + i) mod
   ensemble`` for ``i < write quorum`` (``RoundRobinDistributionSchedule``), as a v3
   ADD_ENTRY with the master key SHA-1("ledger" + password) and the entry packed by the
   digest manager: ledger id, entry id, the last add confirmed when it was sent (the
   piggybacked LAC), the ledger's length with this entry, the digest, the payload
   (``PendingAddOp`` / ``DigestManager.computeDigestAndPackageForSending``). An entry is
   confirmed once ``ack quorum`` bookies of its write set acknowledged it and every entry
   before it is confirmed; that is the LAC the next entries carry. Requests are
   pipelined: at most ``window`` entries (and ``window_bytes`` bytes) are in flight.
5. **Close**: once every write of every entry is acknowledged, the metadata is closed
   with compare-and-set (:func:`pulsarctl_py.stores.ledger_writer.close_metadata`).

:class:`LedgerHandle` writes one ledger (create, add, close, like BookKeeper's
``LedgerHandle``); :class:`RunningBookiesWriter` is the running bookies' implementation of
:class:`~pulsarctl_py.stores.ledger_writer.LedgerWriter`.

Unlike BookKeeper's client this writer does no ensemble change: a bookie that fails a
write, refuses it, or stays silent longer than the timeout fails the whole ledger. Any
failure stops the writer, closes its connections and deletes the metadata it created
(if it still holds what this writer wrote: :func:`~pulsarctl_py.stores.ledger_writer
.delete_ledger`), so nothing references the ledger; bookies
then garbage-collect what they received, as for any deleted ledger. The error is one
line naming the bookie and the entry.
"""

from __future__ import annotations

import contextlib
import random
import selectors
import ssl
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import bookie_wire as wire
from pulsarctl_py.decoders import bookkeeper as bk
from pulsarctl_py.decoders import limits
from pulsarctl_py.decoders.checksums import DIGESTS, master_key
from pulsarctl_py.errors import LedgerctlError, StoreUnavailable
from pulsarctl_py.stores.ledger_writer import (
    Journal,
    LedgerConfig,
    LedgerWriter,
    NewLedger,
    at_version,
    close_metadata,
    create_metadata,
    delete_ledger,
    entry_too_large,
    writable_bookies,
)

from .client import BookieConnection, BookieUnavailable, ClientOptions, connection_to
from .placement import NO_ISOLATION, Placement

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import MetadataStore
    from pulsarctl_py.stores.metadata.base import BookKeeperMetadata

#: entries in flight at most (sent and not acknowledged by every bookie of their write set)
DEFAULT_WRITE_WINDOW = 1024
#: and at most this many payload bytes
DEFAULT_WINDOW_BYTES = 32 * 1024 * 1024


class NotEnoughBookies(StoreUnavailable):
    """Fewer writable bookies are registered than the ensemble needs."""


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


class LedgerHandle:
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

    def close(self) -> NewLedger:
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
        return NewLedger(
            self.ledger_id,
            self._next_entry,
            self._length,
            list(self.ensemble),
            self.path,
            self.version,
            self.place.url,
            "running bookies",
            self.config.describe(),
            notes=list(self.notes),
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
        try:
            return delete_ledger(self.place, self.path, at_version(self.version)) == "deleted"
        except LedgerctlError:
            return False  # the store failed too: the error that stopped the writer stands

    def __enter__(self) -> LedgerHandle:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None or not self.closed:
            self.abort()


def write_ledger(
    place: BookKeeperMetadata,
    config: LedgerConfig,
    payloads: Iterable[bytes | memoryview],
    options: ClientOptions | None = None,
    **kwargs: Any,
) -> NewLedger:
    """Create, fill and close one ledger; on any failure nothing references it."""
    with LedgerHandle(place, config, options, **kwargs) as writer:
        writer.create()
        writer.add_all(payloads)
        return writer.close()


class RunningBookiesWriter(LedgerWriter):
    """The running bookies of ``store``'s cluster (see the module docstring), reached with
    ``options``; the ledger's placement completed from ``/bookies`` of ``store``."""

    def __init__(self, store: MetadataStore, options: ClientOptions | None = None) -> None:
        super().__init__(store)
        self.options = options

    def describe(self) -> str:
        return f"the running bookies registered in {self.place.url}"

    def _write(
        self,
        config: LedgerConfig,
        payloads: Iterable[bytes | memoryview],
        journal: Journal | None,
        fallback_bookie: str | None,
    ) -> NewLedger:
        return write_ledger(
            self.place, config, payloads, self.options, journal=journal, pulsar=self.store
        )
