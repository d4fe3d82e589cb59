"""The metadata-store interface every back-end implements (ZooKeeper, Pulsar's RocksDB store).

Reads: :meth:`MetadataStore.get` returns a :class:`Node` (``data, stat``) or None,
:meth:`~MetadataStore.children` the sorted child names, :meth:`~MetadataStore.exists` the
stat or None; :meth:`~MetadataStore.scan_children` each child with its own children in one
ordered pass (listings of many topics). Writes, for repair plans only, are compare-and-set
on the node version, the way Pulsar's
``MetadataStore.put(path, data, Optional<Long> expectedVersion)`` works:
``expected_version=-1`` means "must not exist yet", ``N`` means "must be at version N",
None means unconditional. A store opened read-only refuses every write.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, NamedTuple

from pulsarctl_py.decoders.errors import LedgerctlError, StoreUnavailable

# defined with the other error roots; MetadataConflict is imported from here by the
# write spine's modules (repair/plan, bookie_index, written, stores/live/writer)
from pulsarctl_py.errors import MetadataConflict as MetadataConflict
from pulsarctl_py.errors import MetadataStoreError, ReadOnlyStoreError

from .url import MetadataUrl


@dataclass(frozen=True, slots=True)
class Stat:
    """What a store knows about a node besides its data."""

    version: int
    created_ms: int
    modified_ms: int
    ephemeral: bool = False
    #: ZooKeeper: the session id owning an ephemeral node; RocksDB: the writer's instance id
    owner: int = 0
    data_length: int = 0
    #: ZooKeeper only (RocksDB keeps no child counts)
    num_children: int | None = None
    #: which incarnation of the node this is: ZooKeeper's czxid (the transaction that
    #: created it); Pulsar's RocksDB store keeps no creation id, so its creation time (ms).
    #: A node deleted and created again with the same bytes is back at version 0 but is
    #: another incarnation: a plan's compare-and-set checks this too.
    creation: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "created_ms": self.created_ms,
            "modified_ms": self.modified_ms,
            "ephemeral": self.ephemeral,
            "data_length": self.data_length,
        }
        if self.ephemeral:
            out["owner"] = self.owner
        if self.num_children is not None:
            out["num_children"] = self.num_children
        return out


class Node(NamedTuple):
    """A node's data and stat; unpacks as ``data, stat = store.get(path)``."""

    data: bytes
    stat: Stat


def _loaded(node: Node, below: list[Node]) -> Callable[[], tuple[Node, list[Node]]]:
    return lambda: (node, below)


@dataclass(slots=True)
class ChildGroup:
    """One child of a scanned node (:meth:`MetadataStore.scan_children`) and its own
    children: what ``get(child)``, then ``get`` of each of ``children(child)``, read.

    The data and names are at hand; the stats are made when :meth:`nodes` asks (a listing
    of many topics needs no stat)."""

    #: the child's name, as :meth:`MetadataStore.children` gives it
    name: str
    #: its data (None when ``error`` is set)
    data: bytes | None
    #: the names of its children that exist, in the order of ``children()``
    child_names: list[str]
    #: what those reads raise, in that order (the child's own value first), for the caller
    #: to raise where it would have read them one by one; the group is then incomplete
    error: LedgerctlError | None = None
    #: makes the nodes (a store's own way)
    loader: Callable[[], tuple[Node, list[Node]]] | None = field(default=None, repr=False)

    def nodes(self) -> tuple[Node, list[tuple[str, Node]]]:
        """The child's node and (name, node) of each of its children; raises ``error``."""
        if self.error is not None:
            raise self.error
        assert self.loader is not None
        node, below = self.loader()
        return node, list(zip(self.child_names, below, strict=True))


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction."""

    kind: str  # "check", "create", "set", "delete"
    path: str
    data: bytes = b""
    version: int | None = None  # check/set/delete: expected version (None = any)


@dataclass(slots=True)
class Transaction:
    """Operations applied all together or not at all (ZooKeeper ``multi``)."""

    store: MetadataStore
    ops: list[Op] = field(default_factory=list)

    def check(self, path: str, version: int) -> Transaction:
        self.ops.append(Op("check", validate_path(path), version=version))
        return self

    def create(self, path: str, data: bytes) -> Transaction:
        self.ops.append(Op("create", validate_path(path), bytes(data)))
        return self

    def set(self, path: str, data: bytes, version: int | None) -> Transaction:
        self.ops.append(Op("set", validate_path(path), bytes(data), version))
        return self

    def delete(self, path: str, version: int | None) -> Transaction:
        self.ops.append(Op("delete", validate_path(path), version=version))
        return self

    def commit(self) -> list[Stat | None]:
        """Apply every operation; return the new stat of each create/set (None otherwise).

        Raise MetadataConflict naming the first operation whose precondition failed; then
        nothing was applied.
        """
        self.store._require_writable()
        return self.store._commit(list(self.ops))


def validate_path(path: str) -> str:
    """A metadata path: absolute, no empty or relative segments, no trailing slash."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise LedgerctlError(f"invalid metadata path {path!r}: it must start with '/'")
    if path == "/":
        return path
    parts = path[1:].split("/")
    if any(p in ("", ".", "..") for p in parts) or "\x00" in path:
        raise LedgerctlError(f"invalid metadata path {path!r}")
    return path


def join(parent: str, child: str) -> str:
    """``parent`` + ``/`` + ``child``, without doubling the root slash."""
    return ("" if parent == "/" else parent) + "/" + child


@dataclass(frozen=True)
class BookKeeperMetadata:
    """Where BookKeeper's metadata lives: a store and the ledgers root in it.

    BookKeeper keeps its ledger metadata, the bookie registry (``available``, cookies),
    ``LAYOUT``, ``INSTANCEID`` and the ledger id generator under one root: ``/ledgers`` of
    Pulsar's store unless the broker's ``bookkeeperMetadataServiceUri`` names another root
    or another store (formats.md corrections, §9).
    """

    store: MetadataStore
    root: str

    @property
    def url(self) -> str:
        """The place for messages: the store's URL and the root."""
        return f"{self.store.url} (root {self.root})"

    def path(self, *parts: str) -> str:
        """A path under the root: ``path("available", id)`` -> ``/ledgers/available/id``."""
        return "/".join([self.root.rstrip("/"), *parts]) if parts else self.root


class MetadataStore(abc.ABC):
    """A tree of nodes with data and versions: ZooKeeper or Pulsar's RocksDB store."""

    #: the URL it was opened from, without credentials
    url: str
    #: the same, parsed; with where BookKeeper's metadata lives (``bookkeeper``)
    location: MetadataUrl
    read_only: bool
    _bookkeeper_store: MetadataStore | None = None
    #: BookKeeper's metadata, given apart from this store, was found to be this cluster's
    _same_cluster: bool = False
    #: what :attr:`Stat.created_ms` is in this store (an age basis of verify.orphans)
    creation_basis = "store-created"
    #: makes the place of BookKeeper's metadata named apart from this store (see
    #: :meth:`bookkeeper`); set by the function that opened the store
    place_bookkeeper: Callable[[MetadataStore, MetadataUrl], BookKeeperMetadata] | None = None

    def bookkeeper(self) -> BookKeeperMetadata:
        """Where this cluster's BookKeeper metadata lives (opening its store on first use).

        ``/ledgers`` of this store unless the URL names another root or store; another store
        opens with this one's mode and closes with it. Such a place is first checked to be
        this cluster's (:mod:`pulsarctl_py.stores.metadata.cluster`): ClusterMismatch if not.
        Both are done by :attr:`place_bookkeeper`, which the function that opened this
        store gave it (:func:`pulsarctl_py.stores.metadata.open_metadata_store`: it knows
        the back-ends; this module is below them).
        """
        location = getattr(self, "location", None)
        target = None if location is None else location.bookkeeper
        if target is None:
            root = location.ledgers_root if location is not None else "/ledgers"
            return BookKeeperMetadata(self, root)
        if self.place_bookkeeper is None:
            raise MetadataStoreError(
                f"BookKeeper's metadata at {target} cannot be opened from {self.url}: "
                "open the store with open_metadata_store"
            )
        return self.place_bookkeeper(self, target)

    def _close_bookkeeper(self) -> None:
        other, self._bookkeeper_store = self._bookkeeper_store, None
        if other is not None:
            other.close()

    # -- reads ------------------------------------------------------------------------------

    @abc.abstractmethod
    def get(self, path: str) -> Node | None:
        """The node's data and stat, or None if it does not exist."""

    @abc.abstractmethod
    def children(self, path: str) -> list[str]:
        """The names of the node's children, sorted; empty when there are none (or no node)."""

    def exists(self, path: str) -> Stat | None:
        """The node's stat, or None."""
        node = self.get(path)
        return None if node is None else node.stat

    def scan_children(self, path: str) -> Iterator[ChildGroup]:
        """Each child of ``path`` that exists, with its own children, in the order of
        ``children(path)`` as far as the store allows (a caller must not rely on it for
        more than speed): one ordered pass where the store has one (RocksDB), else a
        ``get`` and ``children`` per child, read as the iteration reaches it.

        A value that does not decode is not raised here but handed over in
        :attr:`ChildGroup.error`; a store that cannot be read raises at once.
        """
        parent = validate_path(path)
        for name in self.children(parent):
            child = join(parent, name)
            node = self.get_or_error(child)
            if node is None:
                continue
            if isinstance(node, LedgerctlError):
                yield ChildGroup(name, None, [], node)
                continue
            names: list[str] = []
            below: list[Node] = []
            error: LedgerctlError | None = None
            for sub in self.children(child):
                found = self.get_or_error(join(child, sub))
                if isinstance(found, LedgerctlError):
                    error = found
                    break
                if found is not None:
                    names.append(sub)
                    below.append(found)
            if error is not None:
                yield ChildGroup(name, None, names, error)
                continue
            yield ChildGroup(name, node.data, names, None, _loaded(node, below))

    def get_or_error(self, path: str) -> Node | LedgerctlError | None:
        """:meth:`get`, the error of a value that does not decode returned rather than
        raised; a store that cannot be read still raises."""
        try:
            return self.get(path)
        except StoreUnavailable:
            raise
        except LedgerctlError as exc:
            return exc

    def walk(self, path: str = "/") -> Iterator[tuple[str, Node | None]]:
        """Every node under ``path`` (itself first), depth first, children sorted."""
        stack = [validate_path(path)]
        while stack:
            current = stack.pop()
            yield current, self.get(current)
            for child in reversed(self.children(current)):
                stack.append(join(current, child))

    # -- writes (repair plans only) ---------------------------------------------------------

    def put(
        self,
        path: str,
        data: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> tuple[str, Stat]:
        """Create or update a node with compare-and-set; return its path and new stat.

        ``expected_version``: -1 = must not exist, N = must be at version N, None = any.
        With ``sequential`` the store appends a counter to ``path`` (ZooKeeper: %010d;
        Pulsar's RocksDB store: unpadded) and returns the path it created.
        """
        self._require_writable()
        validate_path(path)
        if sequential and expected_version not in (None, -1):
            raise LedgerctlError("a sequential node is always new: expected_version must be -1")
        return self._put(path, bytes(data), expected_version, ephemeral, sequential)

    def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete a node (it must have no children) if its version matches."""
        self._require_writable()
        self._delete(validate_path(path), expected_version)

    def transaction(self) -> Transaction:
        """Start a transaction; nothing happens until :meth:`Transaction.commit`."""
        self._require_writable()
        return Transaction(self)

    @abc.abstractmethod
    def _put(
        self,
        path: str,
        data: bytes,
        expected_version: int | None,
        ephemeral: bool,
        sequential: bool,
    ) -> tuple[str, Stat]: ...

    @abc.abstractmethod
    def _delete(self, path: str, expected_version: int | None) -> None: ...

    @abc.abstractmethod
    def _commit(self, ops: list[Op]) -> list[Stat | None]: ...

    def _require_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(
                f"the metadata store {self.url} is open read-only; writes need a repair plan"
            )

    # -- lifecycle --------------------------------------------------------------------------

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections and files; idempotent."""

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"<{type(self).__name__} {self.url} {mode}>"
