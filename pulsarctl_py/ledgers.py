"""Ledgers where they live: metadata from the metadata store, bytes from bookie storage.

:class:`LedgerSource` joins a :class:`MetadataStore` (ledger metadata: state, digest
type, password, Pulsar's custom metadata) with a :class:`BookieStore` (the entries,
fence state, explicit LAC) and decodes entries with the right digest and outer layer:

* topic data ledgers hold Pulsar entries;
* compacted ledgers hold compacted framing around Pulsar entries;
* cursor ledgers hold one PositionInfo per entry;
* the data ledgers of the broker's transaction stores (the coordinator's log, a
  subscription's pending-ack store) hold raw protobuf records (``entry_format``).

Either store may be missing (metadata only, or a bare bookie directory); what cannot be
known is then None, never guessed silently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import ChunkAssembler, DecodeOptions, Depth, Entry, Outer, decode_entry
from pulsarctl_py.decoders.bookkeeper import HEADER as BK_HEADER
from pulsarctl_py.decoders.bookkeeper import plausible_header
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.nodes import Layer, Problem
from pulsarctl_py.decoders.protos import proto_fields
from pulsarctl_py.decoders.transactions import store_of
from pulsarctl_py.errors import (
    CorruptEntryError,
    LedgerctlError,
    NotFoundError,
    StoreUnavailable,
)

if TYPE_CHECKING:
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata
    from pulsarctl_py.stores.absence import Judge, Reach
    from pulsarctl_py.stores.bookie import BookieStore, LedgerInfo, StoredEntry
    from pulsarctl_py.stores.live import ClientOptions, LiveBookieStore
    from pulsarctl_py.stores.metadata import MetadataStore
    from pulsarctl_py.stores.tiered.locate import TieredLedger, TieredReader
    from pulsarctl_py.stores.tiered.where import Location, Locator


@dataclass(slots=True)
class LedgerView:
    """Everything known about one ledger before reading its entries."""

    ledger_id: int
    metadata: LedgerMetadata | None = None
    metadata_error: str | None = None
    bookie: LedgerInfo | None = None
    last_stored: int | None = None  # highest entry id held by the bookie storage
    last_stored_lac: int | None = None  # the LAC piggybacked on that entry
    last_entry_error: str | None = None  # why that entry could not be read, if it could not
    storage_error: str | None = None  # why the bookie's index could not tell, if it could not
    #: why the running bookies could not be asked (a live store whose bookies of the last
    #: ensemble all failed): what they hold is then unknown, which is no finding in the data
    unreachable: str | None = None
    kind: str = "unknown"  # data, cursor, compacted, schema, unknown
    #: a data ledger of a transaction store holds its records, not Pulsar entries:
    #: "transaction-log" or "pending-ack" (decoders/transactions.py); None otherwise
    entry_format: str | None = None
    digest_type: DigestType | None = None
    password: bytes | None = field(default=None, repr=False)
    #: the ledger's offload, read from tiered storage (its BookKeeper metadata gone; its
    #: metadata is then the one the offloader embedded): None when read from bookies
    tiered: TieredLedger | None = None

    @property
    def lac(self) -> int | None:
        """Last add confirmed: lastEntryId when closed, else the best the bookie knows.

        For an open ledger this is the larger of the explicit LAC and the LAC carried by
        the last stored entry, as BookKeeper's readLastAddConfirmed computes it.
        """
        md = self.metadata
        if md is not None and md.is_closed:
            return md.last_entry_id
        known = [v for v in (self.last_stored_lac, self.explicit_lac) if v is not None]
        return max(known) if known else None

    @property
    def readable_last(self) -> int | None:
        """The last entry a reader gets: ``lastEntryId`` when closed; else the last entry
        the bookie holds or its LAC, whichever is higher (what opening it with recovery
        finds); None when nothing tells."""
        md = self.metadata
        if md is not None and md.is_closed:
            return md.last_entry_id
        known = [v for v in (self.lac, self.last_stored) if v is not None]
        return max(known) if known else None

    @property
    def past_last(self) -> tuple[int, int] | None:
        """``(first, last)`` of the entries stored past a closed ledger's ``lastEntryId``:
        no reader gets them (BookKeeper's ``LedgerHandle.readEntries`` stops at the LAC,
        which is ``lastEntryId`` once closed); None when there are none."""
        md = self.metadata
        if md is None or not md.is_closed or self.last_stored is None:
            return None
        if self.last_stored <= md.last_entry_id:
            return None
        return md.last_entry_id + 1, self.last_stored

    @property
    def explicit_lac(self) -> int | None:
        return self.bookie.explicit_lac_value if self.bookie is not None else None

    @property
    def state(self) -> str | None:
        return self.metadata.state.name if self.metadata is not None else None

    def bookie_json(self) -> dict[str, Any] | None:
        """The bookies' view: from a bookie's files, or asked of the running bookies
        (``source`` live: fence state and master key cannot be asked, so they are None);
        when the running bookies could not be asked, every fact is None and
        ``unreachable`` says why."""
        b = self.bookie
        if self.unreachable is not None:
            return {
                "exists": None,
                "fenced": None,
                "has_master_key": None,
                "explicit_lac": None,
                "last_entry_id": None,
                "last_entry_lac": None,
                "last_entry_error": None,
                "storage_error": None,
                "source": "live",
                "unreachable": self.unreachable,
            }
        if b is None:
            return None
        live = b.source == "live"
        return {
            "exists": b.exists,
            "fenced": b.fenced,
            "has_master_key": None if live else b.master_key is not None,
            "explicit_lac": self.explicit_lac,
            "last_entry_id": self.last_stored,
            "last_entry_lac": self.last_stored_lac,
            "last_entry_error": self.last_entry_error,
            "storage_error": self.storage_error,
            "source": b.source,
            "unreachable": None,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "kind": self.kind,
            "state": self.state,
            "lac": self.lac,
            "digest_type": self.digest_type.name if self.digest_type else None,
            "metadata": self.metadata.to_json() if self.metadata is not None else None,
            "metadata_error": self.metadata_error,
            "bookie": self.bookie_json(),
            "tiered": self.tiered.to_json() if self.tiered is not None else None,
        }


@dataclass(frozen=True, slots=True)
class StorageProblem:
    """What the bookie storage reported about itself while it was read, under the code of
    the verify check that reports it (:mod:`pulsarctl_py.verify.codes`)."""

    #: ``storage-index-unusable``: an index that is missing or cannot be read, so entries
    #: were located by scanning the entry logs (a bookie could not serve them);
    #: ``storage-damaged``: an error met reading the storage's own files (an entry log's
    #: header or ledgers map, a journal, the lastMark)
    check: str
    ledger_id: int | None
    message: str


class LedgerSource:
    """Read ledgers through a metadata store and bookie storage, either of them optional."""

    def __init__(
        self,
        metadata: MetadataStore | None,
        bookie: BookieStore | LiveBookieStore | None,
        password: bytes | None = None,
        *,
        tiered: bool = False,
        offload_url: str | None = None,
        s3_endpoint: str | None = None,
        prefer: str = "tiered",
        broker_conf: str | None = None,
    ) -> None:
        self.metadata = metadata
        self.bookie = bookie
        self.password = password  # an override for every ledger (from env or file)
        self._reach: Reach | None = None
        self._cluster: list[str] | None = None
        #: read offloaded ledgers from tiered storage (their managed ledger's
        #: offloadContext says where), from a copy at ``offload_url`` when given
        #: (``file:///dir`` or ``s3://bucket``) and through ``s3_endpoint`` when given
        self.tiered = tiered
        self.offload_url = offload_url
        self.s3_endpoint = s3_endpoint
        #: which copy of a ledger that has both is read: "tiered" (the broker's default,
        #: ``managedLedgerDataReadPriority=tiered-storage-first``) or "bookkeeper"
        self.prefer = prefer
        #: the broker configuration for the offload settings (None: the one the settings
        #: name, ``--broker-conf``); given to Spark executors, which do not see the flag
        self.broker_conf = broker_conf
        self._offloaded: dict[int, TieredLedger] | None = None
        self._by_ml: dict[str, dict[int, TieredLedger]] = {}
        self._tiered_readers: dict[int, TieredReader] = {}
        self._locator: Locator | None = None

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        metadata_url: str | None = None,
        bookie_dirs: Sequence[Path | str] | None = None,
        password: bytes | None = None,
        *,
        need_metadata: bool = False,
        need_bookie: bool = False,
        live: ClientOptions | None = None,
        metadata_only: bool = False,
        tiered: bool = False,
        offload_url: str | None = None,
        s3_endpoint: str | None = None,
        prefer: str | None = None,
        broker_conf: str | None = None,
    ) -> Iterator[LedgerSource]:
        """Open the stores named by flags or by the env/config defaults, and close them.

        Without a bookie directory (flag, env or ledgerctl.toml) and with a metadata store,
        entries are read from the running bookies named in ledger metadata
        (:mod:`pulsarctl_py.stores.live`, ``live`` client options or the environment's).
        A bookie directory, when given, always wins. ``metadata_only`` commands (listings)
        open no bookie store at all, so they never connect to a bookie.

        ``tiered``: offloaded ledgers are read from tiered storage; ``offload_url``,
        ``s3_endpoint`` and ``prefer`` are resolved like every setting (flag, variable,
        ledgerctl.toml) when not given.
        """
        from pulsarctl_py.config import resolve_bookie_dirs

        if tiered:
            tiered_settings = resolve_tiered(offload_url, s3_endpoint, prefer)
        else:
            tiered_settings = {"offload_url": offload_url, "s3_endpoint": s3_endpoint}

        dirs = resolve_bookie_dirs(bookie_dirs)
        use_live = not dirs and not metadata_only
        store = _open_metadata(metadata_url, required=need_metadata or not dirs)
        if need_bookie and not dirs and store is None:
            raise LedgerctlError(
                "no bookie directory given: pass --bookie-dir, set LEDGERCTL_BOOKIE_DIRS, "
                "or put bookie_dirs in the nearest ledgerctl.toml"
            )
        bookie: Any = None
        try:
            if dirs:
                from pulsarctl_py.stores.bookie import open_bookie

                bookie = open_bookie(dirs)
            elif use_live and store is not None:
                from pulsarctl_py.stores.live import LiveBookieStore
                from pulsarctl_py.stores.live.config import resolve_client_options

                bookie = LiveBookieStore(store, live or resolve_client_options(), password)
            source = cls(
                store, bookie, password, tiered=tiered, broker_conf=broker_conf, **tiered_settings
            )
            try:
                yield source
            finally:
                source.close_tiered()
        finally:
            if bookie is not None:
                bookie.close()
            if store is not None:
                store.close()

    @property
    def reach(self) -> Reach | None:
        """Whose data this source reads (:mod:`pulsarctl_py.stores.absence`): every bookie
        (running bookies), or the bookies whose whole data the directories given are; None
        without bookie storage."""
        if self._reach is None and self.bookie is not None:
            from pulsarctl_py.stores.absence import Reach, reach_of_dirs, registered_cookies

            layout = getattr(self.bookie, "layout", None)
            if self.live_options is not None or layout is None:
                self._reach = Reach.everything()
            else:
                self._reach = reach_of_dirs(
                    layout.ledger_dirs, layout.journal_dirs, registered_cookies(self.metadata)
                )
        return self._reach

    def cluster_bookies(self) -> list[str]:
        """Every bookie the BookKeeper root knows (registered or by its cookie): where the
        entries of a ledger without metadata may be. Empty without a metadata store."""
        if self._cluster is None:
            from pulsarctl_py.stores.absence import registered_cookies

            self._cluster = sorted(registered_cookies(self.metadata))
        return self._cluster

    def absence_judge(self, view: LedgerView | None) -> Judge:
        """What the absence of one of the ledger's entries from this source proves
        (:class:`~pulsarctl_py.stores.absence.Judge`)."""
        from pulsarctl_py.stores.absence import Judge, Reach

        md = view.metadata if view is not None else None
        reach = self.reach or Reach()
        return Judge(md, reach, self.cluster_bookies() if md is None else ())

    def storage_problems(self) -> list[StorageProblem]:
        """What the bookie storage reported about itself so far (each once; none without
        bookie storage): verify turns them into findings, inspect and ``ledger meta``
        show them."""
        bookie = self.bookie
        if bookie is None:
            return []
        out: list[StorageProblem] = []
        seen: set[str] = set()
        for found in bookie.findings:
            if found.kind == "unusable-index" and found.message not in seen:
                seen.add(found.message)
                out.append(StorageProblem("storage-index-unusable", found.ledger_id, found.message))
        for problem in bookie.problems:
            text = str(problem)
            if problem.severity == "error" and text not in seen:
                seen.add(text)
                out.append(StorageProblem("storage-damaged", None, text))
        return out

    @property
    def live_options(self) -> ClientOptions | None:
        """How this source reaches running bookies, or None when it reads files."""
        return self.bookie.options if getattr(self.bookie, "where", None) == "live" else None  # type: ignore[union-attr]

    # -- one ledger --------------------------------------------------------------------

    def ledger(self, ledger_id: int, *, unreachable_ok: bool = False) -> LedgerView:
        """What the metadata and the bookie storage know about one ledger.

        Running bookies (a live store) that cannot be asked leave ``view.unreachable``
        set. ``unreachable_ok`` is for commands that show metadata and the bookies' view
        side by side (``ledger meta``, ``topic info``): the view is returned whatever the
        bookies answer. Otherwise an open ledger whose last ensemble does not answer
        raises :class:`StoreUnavailable` (its end cannot be known: exit 3); a closed
        ledger's end is its ``lastEntryId``, and reading its entries raises when no
        replica answers.
        """
        view = LedgerView(ledger_id)
        if self.metadata is not None:
            from pulsarctl_py.stores.metadata import read_ledger

            record = read_ledger(self.metadata, ledger_id)
            if record is not None:
                view.metadata = record.metadata
                view.metadata_error = record.error
        if self.bookie is not None and self.live_options is not None:
            self._ask_live(view, unreachable_ok)
        elif self.bookie is not None:
            from pulsarctl_py.stores.bookie import EntryNotFound

            try:
                view.bookie = self.bookie.ledger(ledger_id)
            except EntryNotFound:
                view.bookie = None
            except LedgerctlError as exc:  # a damaged index: say so, and what is known
                view.storage_error = self._storage_error(exc)
            try:
                view.last_stored = self.bookie.last_entry_id(ledger_id)
            except LedgerctlError as exc:
                view.storage_error = self._storage_error(exc)
        if self.bookie is not None and view.unreachable is None:
            if view.last_stored is not None:
                # a damaged last entry costs its LAC, not the whole view of the ledger
                try:
                    data = self.bookie.read_entry(ledger_id, view.last_stored)
                except StoreUnavailable as exc:
                    if self.live_options is None:
                        view.last_entry_error = exc.one_line()
                    else:  # no replica answered: unknown, not damaged
                        view.unreachable = exc.one_line()
                except LedgerctlError as exc:
                    view.last_entry_error = exc.one_line()
                else:
                    if len(data) >= BK_HEADER.size:
                        view.last_stored_lac = BK_HEADER.unpack_from(data, 0)[2]
        if (
            self.tiered
            and view.metadata is None
            and view.metadata_error is None
            and view.bookie is None
            and view.last_stored is None
        ):
            self._attach_tiered(view)
        elif self.tiered and view.metadata is not None and self.prefer == "tiered":
            # both copies: read where the broker reads (ManagedLedgerImpl.getLedgerHandle
            # opens a complete offload first under tiered-storage-first)
            managed_ledger = view.metadata.pulsar().managed_ledger
            loc = self.locate(ledger_id, managed_ledger) if managed_ledger else None
            if loc is not None and loc.complete:
                view.tiered = loc
        if (
            view.metadata is None
            and view.tiered is None
            and view.bookie is None
            and view.last_stored is None
            and view.storage_error is None
            and view.unreachable is None
        ):
            where = " and ".join(
                w for w, s in (("metadata", self.metadata), ("bookie storage", self.bookie)) if s
            )
            raise NotFoundError(f"ledger {ledger_id} not found in {where}")
        md = view.metadata
        if md is not None:
            tags = md.pulsar()
            view.kind = tags.kind
            if view.kind == "data":
                view.entry_format = store_of(tags.managed_ledger)
            view.digest_type = md.digest_type
            view.password = md.password
        if self.password is not None:
            view.password = self.password
        return view

    # -- tiered storage ------------------------------------------------------------------

    def offloaded(self) -> dict[int, TieredLedger]:
        """Every offloaded ledger the managed ledgers name (read once per source)."""
        if self._offloaded is None:
            from pulsarctl_py.stores.tiered.locate import offloaded_ledgers

            self._offloaded = offloaded_ledgers(self.metadata) if self.metadata else {}
        return self._offloaded

    def locate(self, ledger_id: int, managed_ledger: str | None = None) -> TieredLedger | None:
        """The ledger's offload as its managed ledger records it, or None: from that one
        managed ledger when its name is known (a topic's verbs, BookKeeper's custom
        metadata), else from one pass over every managed ledger."""
        if self.metadata is None:
            return None
        if managed_ledger is None:
            return self.offloaded().get(ledger_id)
        found = self._by_ml.get(managed_ledger)
        if found is None:
            from pulsarctl_py.stores.tiered.locate import managed_ledger_offloads

            found = self._by_ml[managed_ledger] = managed_ledger_offloads(
                self.metadata, managed_ledger
            )
        return found.get(ledger_id)

    def _attach_tiered(self, view: LedgerView) -> None:
        """A ledger without BookKeeper metadata that its managed ledger says is offloaded:
        read from tiered storage, with the metadata the offloader embedded."""
        loc = self.offloaded().get(view.ledger_id)
        if loc is None:
            return
        view.tiered = loc
        # what tiered storage holds, as its managed ledger records it
        view.last_stored = loc.last_entry_id
        try:
            view.metadata = self._tiered_reader(view).metadata()
        except LedgerctlError as exc:
            view.metadata_error = exc.one_line()

    def locator(self) -> Locator:
        """Where offloaded ledgers are read (:mod:`pulsarctl_py.stores.tiered.where`, the
        broker's resolution): ledgerctl's overrides, the broker configuration the settings
        name (``--broker-conf``), each namespace's and topic's offload policies."""
        if self._locator is None:
            from pulsarctl_py.precedence import Sources
            from pulsarctl_py.stores.tiered import where
            from pulsarctl_py.stores.tiered.where import Locator, Overrides

            if self.broker_conf is not None:
                from pulsarctl_py.brokerconf import load_broker_conf

                conf = load_broker_conf(self.broker_conf)
            else:
                conf = Sources.of().broker_conf()

            read = where.topic_policy_reader

            def policies(topic: str) -> Any:
                if self.bookie is None:
                    raise LedgerctlError("this command reads no bookie")
                if read is None:
                    raise LedgerctlError(
                        "no reader of topic policies was given to this source "
                        "(pulsarctl_py.topicpolicies.install)"
                    )
                return read(self, topic, conf)

            self._locator = Locator(
                self.metadata,
                Overrides.of(self.offload_url, self.s3_endpoint),
                conf,
                topic_policies=policies,
            )
        return self._locator

    def tiered_location(self, loc: TieredLedger) -> Location:
        """Where one offloaded ledger is read, and where each part of that came from."""
        return self.locator().locate(loc)

    def _tiered_reader(self, view: LedgerView) -> TieredReader:
        from pulsarctl_py.stores.tiered.locate import open_tiered

        assert view.tiered is not None
        reader = self._tiered_readers.get(view.ledger_id)
        if reader is None:
            reader = open_tiered(
                view.tiered,
                self.offload_url,
                self.s3_endpoint,
                location=self.tiered_location(view.tiered),
            )
            self._tiered_readers[view.ledger_id] = reader
        return reader

    def close_tiered(self) -> None:
        for reader in self._tiered_readers.values():
            reader.close()
        self._tiered_readers.clear()

    def _tiered_entries(
        self,
        view: LedgerView,
        first: int,
        last: int | None,
        options: DecodeOptions,
        keep_going: bool,
    ) -> Iterator[tuple[int, Entry]]:
        """(entry id, decoded entry) of an offloaded ledger; a damaged record is an
        :func:`unreadable_entry` with ``keep_going``."""
        from pulsarctl_py.errors import DataError

        assert view.tiered is not None
        end = view.tiered.last_entry_id if last is None else min(last, view.tiered.last_entry_id)
        reader = self._tiered_reader(view)
        for stored in reader.read_entries(first, end, keep_going=keep_going):
            position = (view.ledger_id, stored.entry_id)
            if stored.error is not None:
                yield (
                    stored.entry_id,
                    unreadable_entry(view.ledger_id, stored.entry_id, DataError(stored.error)),
                )
            else:
                yield stored.entry_id, decode_entry(stored.data, options, position)

    def _ask_live(self, view: LedgerView, unreachable_ok: bool) -> None:
        """The running bookies' view of a ledger (READ_LAC to its last ensemble)."""
        from pulsarctl_py.stores.bookie import EntryNotFound

        store: Any = self.bookie
        try:
            view.bookie = store.ledger(view.ledger_id)
            view.last_stored = store.last_entry_id(view.ledger_id)
        except EntryNotFound:
            view.bookie = None
        except StoreUnavailable as exc:  # an open ledger whose last ensemble is down
            if not unreachable_ok:
                raise
            view.unreachable = getattr(exc, "reason", None) or exc.one_line()
            return
        except LedgerctlError as exc:
            if view.metadata is None and view.metadata_error is None:
                return  # no metadata to find its bookies by: no fact about the bookies
            view.storage_error = self._storage_error(exc)
            return
        # a closed ledger: its end is the metadata's when no bookie answered
        view.unreachable = store.unreachable(view.ledger_id)

    def _storage_error(self, exc: LedgerctlError) -> str:
        """Keep an index error with the store's problems (reported once), return its text."""
        text = exc.one_line()
        if self.bookie is not None:
            problem = Problem("error", "bookie-index", 0, text)
            if problem not in self.bookie.problems:
                self.bookie.problems.append(problem)
        return text

    def raw_entries(
        self, view: LedgerView, first: int = 0, last: int | None = None
    ) -> Iterator[StoredEntry]:
        """The stored entries in [first, last], in order (nothing without bookie storage)."""
        if view.tiered is not None:
            raise LedgerctlError(
                f"ledger {view.ledger_id} is read from tiered storage: its entries have no "
                "bookie framing to show raw"
            )
        if self.bookie is None:
            raise LedgerctlError(
                f"ledger {view.ledger_id}: no bookie storage to read entries from "
                "(pass --bookie-dir, or set LEDGERCTL_BOOKIE_DIRS / bookie_dirs in ledgerctl.toml)"
            )
        yield from self.bookie.read_entries(view.ledger_id, first, last)

    def raw_entries_at(self, view: LedgerView, entry_ids: list[int]) -> Iterator[StoredEntry]:
        """The stored entries of ``entry_ids`` (rising), in order: the running bookies are
        asked for them all in pipelined rounds (``read_entries_at``); any other storage
        reads each run of consecutive ids as :meth:`raw_entries` does. An id the storage
        lacks is skipped, as :meth:`raw_entries` skips it."""
        at = getattr(self.bookie, "read_entries_at", None)
        if at is not None and view.tiered is None:
            yield from at(view.ledger_id, entry_ids)
            return
        for first, last in id_runs(entry_ids):
            yield from self.raw_entries(view, first, last)

    def entries(
        self,
        view: LedgerView,
        first: int = 0,
        last: int | None = None,
        *,
        depth: Depth = Depth.MESSAGES,
        verify: bool = True,
        private_key: Any = None,
        keep_going: bool = False,
        max_uncompressed: int | None = None,
        assembler: ChunkAssembler | None = None,
        join_chunks: bool = True,
    ) -> Iterator[Entry]:
        """Decode the ledger's entries in [first, last] in order, joining chunked messages.

        ``assembler``: the chunks read so far, when this read goes on from another one;
        ``join_chunks`` False: each entry decoded on its own (a chunk stays a chunk).

        ``max_uncompressed`` caps the size a payload may decompress to (the
        ``--max-message-size`` of inspect and verify); None keeps the decoders' default.

        An entry whose stored bytes cannot be read (a damaged log record or index) raises
        :class:`LedgerctlError`; with ``keep_going`` it is yielded instead as an
        :func:`unreadable_entry` carrying the error, and the read goes on after it.
        """
        options = self.entry_options(view, depth, verify, private_key, max_uncompressed)
        if assembler is None:
            assembler = ChunkAssembler(options)
        if view.tiered is not None:
            for _entry_id, entry in self._tiered_entries(view, first, last, options, keep_going):
                if entry.chunk is not None and depth is Depth.MESSAGES and join_chunks:
                    assembler.add(entry)
                yield entry
            return
        decode = _Detecting(options) if options.digest_type is None and verify else None
        next_id = first
        while last is None or next_id <= last:
            try:
                for stored in self.raw_entries(view, next_id, last):
                    next_id = stored.entry_id + 1
                    position = (view.ledger_id, stored.entry_id)
                    if decode is not None:
                        entry = decode(stored.data, position)
                    else:
                        entry = decode_entry(stored.data, options, position)
                    if view.kind == "cursor":
                        _decode_position_info(entry)
                    elif entry.chunk is not None and depth is Depth.MESSAGES and join_chunks:
                        assembler.add(entry)
                    yield entry
                return
            except LedgerctlError as exc:
                # a store that cannot be reached (a bookie down) is no finding in the data
                going = keep_going and not isinstance(exc, StoreUnavailable)
                failed = self._next_stored(view, next_id, last) if going else None
                if failed is None:
                    raise
                yield unreadable_entry(view.ledger_id, failed, exc)
                next_id = failed + 1

    def entry_metadata(
        self, view: LedgerView, entry_id: int, *, keep_going: bool = False
    ) -> Entry | None:
        """One entry decoded to its MessageMetadata (``Depth.METADATA``), wherever it is
        stored: read by id from a bookie, or from tiered storage through the offload's
        index. None: an offloaded ledger whose offload lacks the entry. A bookie that
        cannot give it raises; an offload's unreadable entry raises too, or with
        ``keep_going`` comes back as an :func:`unreadable_entry`."""
        if view.tiered is not None:
            found = self.entries(
                view, entry_id, entry_id, depth=Depth.METADATA, keep_going=keep_going
            )
            return next(iter(found), None)
        if self.bookie is None:
            raise LedgerctlError(
                f"ledger {view.ledger_id}: no bookie storage to read entries from "
                "(pass --bookie-dir, or set LEDGERCTL_BOOKIE_DIRS / bookie_dirs in ledgerctl.toml)"
            )
        data = self.bookie.read_entry(view.ledger_id, entry_id)
        options = DecodeOptions(
            outer=Outer.BOOKIE_ENTRY,
            digest_type=view.digest_type,
            password=view.password,
            depth=Depth.METADATA,
        )
        return decode_entry(data, options, (view.ledger_id, entry_id))

    @staticmethod
    def entry_options(
        view: LedgerView,
        depth: Depth = Depth.MESSAGES,
        verify: bool = True,
        private_key: Any = None,
        max_uncompressed: int | None = None,
    ) -> DecodeOptions:
        """How :meth:`entries` decodes this ledger's entries."""
        options = DecodeOptions(
            # an offloaded entry is the broker's bytes, without the bookie's framing
            outer=Outer.PULSAR_ENTRY if view.tiered is not None else Outer.BOOKIE_ENTRY,
            digest_type=view.digest_type,
            password=view.password,
            private_key=private_key,
            depth=Depth.ENTRY if view.kind == "cursor" else depth,
            verify=verify,
            records=view.entry_format if view.kind != "cursor" else None,
        )
        if max_uncompressed is not None:
            options.max_uncompressed = max_uncompressed
        return options

    def _next_stored(self, view: LedgerView, first: int, last: int | None) -> int | None:
        """The id of the first entry in [first, last] the bookie index lists."""
        if self.bookie is None:
            return None
        found = next(iter(self.bookie.iter_locations(view.ledger_id, first, last)), None)
        return None if found is None else found[0]


class _Detecting:
    """Decode a ledger's entries whose digest type is not known (no metadata) computing
    each digest once.

    Detection (``decode_entry`` with no digest type) verifies CRC32C first, then decodes
    with the type it found, computing the digest a second time. Once an entry of the
    ledger was detected as CRC32C, the next ones are decoded as CRC32C directly: when the
    header is plausible and the digest verifies, that is what detection would have found
    and decoded. An entry that does not is decoded again the detecting way, and the
    ledger goes back to detecting until an entry is CRC32C again.
    """

    def __init__(self, options: DecodeOptions) -> None:
        self.options = options
        self.crc32c = replace(options, digest_type=DigestType.CRC32C)
        self.known = False

    def __call__(self, data: bytes | memoryview, position: tuple[int, int]) -> Entry:
        if self.known:
            entry = decode_entry(data, self.crc32c, position)
            bk = entry.layers[0] if entry.layers else None
            if (
                bk is not None
                and bk.name == "bookie-entry"
                and bk.check is not None
                and bk.check.ok is True
                and plausible_header(data, 0, len(data))
            ):
                return entry
        entry = decode_entry(data, self.options, position)
        self.known = entry.digest_type is DigestType.CRC32C
        return entry


def unreadable_entry(ledger_id: int, entry_id: int, exc: LedgerctlError) -> Entry:
    """An entry that could not be read from storage: no bytes, one error problem."""
    entry = Entry(b"", position=(ledger_id, entry_id), unreadable=exc.one_line())
    if isinstance(exc, CorruptEntryError):
        problem = Problem(
            "error",
            exc.layer,
            exc.offset,
            f"cannot read the entry: expected {exc.expected}, found {exc.found}",
        )
    else:
        problem = Problem("error", "storage", 0, f"cannot read the entry: {exc.one_line()}")
    entry.problems.append(problem)
    return entry


def _decode_position_info(entry: Entry) -> None:
    """A cursor-ledger entry: the payload after the digest is one PositionInfo."""
    from pulsarctl_py.decoders.managed_ledger import parse_position_info

    bk = entry.layers[0] if entry.layers else None
    if bk is None or bk.name != "bookie-entry":
        return
    # drop anything decode_entry guessed after the bookie layer
    del entry.layers[1:]
    entry.problems[:] = [p for p in entry.problems if p.layer == "bookie-entry"]
    start = bk.offset + bk.length
    raw = memoryview(entry.data)[start:]
    try:
        info, missing = parse_position_info(raw)
    except LedgerctlError as exc:
        entry.problems.append(Problem("error", "position-info", start, str(exc)))
        return
    fields = proto_fields(info)
    if missing:
        entry.problems.append(
            Problem("error", "position-info", start, "PositionInfo lacks " + ", ".join(missing))
        )
    entry.layers.append(Layer("position-info", start, len(raw), raw, fields))


def resolve_tiered(
    offload_url: str | None = None, s3_endpoint: str | None = None, prefer: str | None = None
) -> dict[str, Any]:
    """``offload_url``, ``s3_endpoint`` and ``prefer`` for :class:`LedgerSource`: each
    given value, else its variable or ledgerctl.toml key (:mod:`pulsarctl_py.precedence`);
    a ``prefer`` other than tiered or bookkeeper is refused in one line."""
    from pulsarctl_py.precedence import resolve
    from pulsarctl_py.stores.tiered.locate import PREFER

    chosen = resolve("prefer", prefer)
    value = str(chosen.value).strip().lower()
    if value not in PREFER:
        raise LedgerctlError(
            f"{chosen.source}: prefer {chosen.value!r} is not one of {', '.join(PREFER)}"
        )
    return {
        "offload_url": resolve("offload_url", offload_url).value or None,
        "s3_endpoint": resolve("s3_endpoint", s3_endpoint).value or None,
        "prefer": value,
    }


def _open_metadata(url: str | None, *, required: bool) -> MetadataStore | None:
    from pulsarctl_py.stores.metadata import open_metadata_store
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    if url is None and not required:
        try:
            resolved = resolve_metadata_url(None)
        except LedgerctlError:
            return None
        return open_metadata_store(resolved)
    return open_metadata_store(url)


def id_runs(ids: list[int]) -> Iterator[tuple[int, int]]:
    """The runs of consecutive ids in rising ``ids``, as inclusive ``(first, last)``."""
    first = last = None
    for i in ids:
        if last is not None and i == last + 1:
            last = i
            continue
        if first is not None:
            yield first, last  # type: ignore[misc]
        first = last = i
    if first is not None:
        yield first, last  # type: ignore[misc]
