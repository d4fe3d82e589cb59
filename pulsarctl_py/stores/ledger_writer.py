"""New ledgers, written the way BookKeeper's client writes them: one interface, two homes.

:class:`LedgerWriter` is where ``compact --apply``, ``migrate compacted`` and ``migrate
index`` write the ledgers they then swap in with a plan. It has two implementations:

* **the running bookies** (:class:`pulsarctl_py.stores.live.writer.RunningBookiesWriter`,
  the default): the ensemble among the writable bookies the ledger's placement allows,
  entries sent over the bookie protocol with the cluster's quorums, digest and password;
* **one stopped bookie's directories**
  (:class:`pulsarctl_py.stores.bookie.newledger.StoppedBookieWriter`, ``--bookie-dir``,
  for standalone clusters and disaster recovery): the ledger placed in the directory the
  bookie reads it from; one bookie holds it, so its ensemble and quorums are 1.

Both treat the ledger's metadata as BookKeeper's client does (apache/bookkeeper 4.17), in
BookKeeper's metadata store (which may differ from Pulsar's: ``--bookkeeper-metadata-url``,
``bookkeeperMetadataServiceUri``), through the functions here, once:

1. a ledger id from BookKeeper's id generator for the cluster's layout
   (``ZkLedgerIdGenerator`` / ``LongZkLedgerIdGenerator``;
   :func:`pulsarctl_py.stores.metadata.allocate_ledger_id`);
2. the metadata, format v3, created OPEN with compare-and-set, must not exist
   (``AbstractZkLedgerManager.createLedgerMetadata``; :func:`create_metadata`, the one
   creator of a new ledger's metadata): the quorums, digest type and password, the custom
   metadata, a random creator token (``cToken``) and no creation time
   (``storeSystemtimeAsLedgerCreationTime`` is off by default). An id whose node exists
   already is given up for a new one, as ``LedgerCreateOp`` does on
   ``LedgerExistException``;
3. the entries (each implementation its own way);
4. the close (``LedgerHandle.doAsyncCloseInternal``; :func:`close_metadata`): CLOSED with
   the last entry id and the length, with compare-and-set on the version step 2 created.
   BookKeeper rebuilds the metadata for that (``LedgerMetadataBuilder.from``), which does
   not carry the creator token: a closed ledger's cToken is 0, and so is ours.

A failure at any step takes the ledger back (:func:`delete_ledger`, the one deletion of a
ledger ledgerctl wrote: its metadata while it is still as written, and a stopped bookie's
files and index keys), so that nothing references it; the error is raised. Both
implementations return one result, :class:`NewLedger`. A :class:`Journal` is told about
each step before it is taken (a plan file saved before every step:
:mod:`pulsarctl_py.plans.writing`).
"""

from __future__ import annotations

import secrets as _secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import limits
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.errors import LedgerctlError

from .live.placement import NO_ISOLATION, Placement

if TYPE_CHECKING:
    from .metadata import MetadataStore
    from .metadata.base import BookKeeperMetadata, Node

#: how many ledger ids to try when ids are taken (LedgerCreateOp retries without a bound)
MAX_CREATE_ATTEMPTS = 100
#: what :func:`delete_ledger` did
DELETED, ABSENT, LEFT = "deleted", "absent", "left"


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


class WrittenFiles(Protocol):
    """What a stopped bookie's directory got for one ledger (``OfflineFiles``)."""

    current: str

    def undo(self) -> None: ...

    def to_json(self) -> dict[str, Any]: ...


@dataclass(slots=True)
class NewLedger:
    """A ledger ledgerctl wrote: where its metadata is and what it holds."""

    ledger_id: int
    entries: int
    length: int
    ensemble: list[str]
    path: str
    version: int
    metadata: str  # BookKeeper's metadata place, for messages
    where: str  # "running bookies" or the stopped bookie's directory
    config: str  # quorums, digest, whether a password is set
    files: WrittenFiles | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ledger_id": self.ledger_id,
            "entries": self.entries,
            "length": self.length,
            "ensemble": list(self.ensemble),
            "metadata_path": self.path,
            "written_to": self.where,
            "settings": self.config,
        }
        if self.files is not None:
            out["bookie_files"] = self.files.to_json()
        return out


class LedgerWriter(ABC):
    """Where new ledgers are written (see the module docstring).

    ``store`` is Pulsar's metadata store, open for writing; BookKeeper's metadata is where
    it says (:meth:`MetadataStore.bookkeeper`).
    """

    #: whether the ledgers go into a stopped bookie's directories
    offline = False

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.place = store.bookkeeper()

    @abstractmethod
    def describe(self) -> str:
        """Where the ledgers go, for people."""

    def effective(self, config: LedgerConfig) -> LedgerConfig:
        """The config a ledger gets here (as asked, unless the place allows no other)."""
        return config

    def write(
        self,
        config: LedgerConfig,
        payloads: Iterable[bytes | memoryview],
        *,
        journal: Journal | None = None,
        fallback_bookie: str | None = None,
    ) -> NewLedger:
        """Create, fill and close one ledger; on failure nothing of it is left. The
        ``journal`` is told about each step before it is taken; ``fallback_bookie``: the
        bookie id a stopped bookie's directories stand for when their cookie names none."""
        config = self.effective(config)
        if journal is not None:
            journal.attach(self.store)
        return self._write(config, payloads, journal, fallback_bookie)

    @abstractmethod
    def _write(
        self,
        config: LedgerConfig,
        payloads: Iterable[bytes | memoryview],
        journal: Journal | None,
        fallback_bookie: str | None,
    ) -> NewLedger:
        """Steps 1 to 4 of the module docstring, taken back on failure."""

    def delete(self, ledger: NewLedger) -> bool:
        """Take back a ledger this writer wrote (:func:`delete_ledger`, its metadata while
        still at the version the writer left): whether its metadata was deleted."""
        done = delete_ledger(self.place, ledger.path, at_version(ledger.version), ledger.files)
        return done == DELETED


# -- the metadata of a new ledger --------------------------------------------------------------


def writable_bookies(place: BookKeeperMetadata) -> list[str]:
    """The bookies registered as available and not read-only, by id."""
    from .live.registry import list_bookies

    return [
        r.bookie_id
        for r in list_bookies(place.store, place.root)
        if r.available and not r.read_only
    ]


def _layout(place: BookKeeperMetadata) -> lm.LedgerLayout:
    from .metadata import read_layout

    info = read_layout(place.store, place.root)
    if info is not None and info.layout is not None:
        return info.layout
    return lm.LedgerLayout.HIERARCHICAL


def create_metadata(
    place: BookKeeperMetadata,
    config: LedgerConfig,
    ensemble: list[str],
    journal: Journal | None = None,
) -> tuple[int, str, int, lm.LedgerMetadata]:
    """Take a ledger id and create its metadata, OPEN (steps 1 and 2 of the module doc);
    return the id, the path, the node's version and the metadata."""
    from .metadata import allocate_ledger_id, create_ledger
    from .metadata.base import MetadataConflict

    layout = _layout(place)
    for _ in range(MAX_CREATE_ATTEMPTS):
        ledger_id = allocate_ledger_id(place.store, place.root, layout)
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
        path = lm.ledger_path(ledger_id, layout, place.root)
        if journal is not None:
            journal.creating(ledger_id, path, md.ctoken)
        try:
            _, stat = create_ledger(place.store, ledger_id, md, place.root, layout)
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
    """Close a ledger in its metadata with compare-and-set on ``version`` (step 4);
    return the new version."""
    from .metadata.base import MetadataConflict

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


# -- taking a new ledger back ------------------------------------------------------------------


def at_version(version: int | None) -> Callable[[Node], bool]:
    """A ledger's metadata is still as its writer left it: at ``version``."""
    return lambda node: version is not None and node.stat.version == version


def delete_ledger(
    place: BookKeeperMetadata,
    path: str,
    ours: Callable[[Node], bool],
    files: WrittenFiles | None = None,
    *,
    before: Callable[[], None] | None = None,
) -> str:
    """Delete a ledger ledgerctl wrote: a stopped bookie's files and index keys written
    for it (``files``), then its metadata at ``path``, with compare-and-set on the version
    read, while ``ours`` says the node is still as ledgerctl wrote it. A node that is not
    (someone opened or changed the ledger: it is theirs now) is left, and so are its
    files. ``before`` is called once the ledger is known to be ours, before anything is
    deleted (it may refuse: the bookie must still be stopped). Returns :data:`DELETED`,
    :data:`ABSENT` (no metadata: the files only) or :data:`LEFT`.

    Every deletion of a ledger ledgerctl wrote goes through here: a failed write, a
    command that fails after writing, ``undo``, a run given back by the next."""
    node = place.store.get(path)
    if node is not None and not ours(node):
        return LEFT
    if before is not None:
        before()
    if files is not None:
        files.undo()
    if node is None:
        return ABSENT
    place.store.delete(path, node.stat.version)
    return DELETED


def entry_too_large(ledger_id: int, entry_id: int, size: int) -> LedgerctlError:
    """An entry whose frame is over the limit every reader applies (the maximum message
    size plus 10 KiB, ``decoders.limits.max_frame``, Pulsar's ``nettyMaxFrameSizeBytes``):
    refused before it is sent or stored, since no reader (the broker's nor ledgerctl's)
    would take it back."""
    return LedgerctlError(
        f"entry {ledger_id}:{entry_id} would be a frame of {size} bytes, over the limit of "
        f"{limits.max_frame()} (the maximum message size plus 10 KiB): a broker could not "
        "read it back; raise --max-message-size if the cluster's maxMessageSize is larger"
    )
