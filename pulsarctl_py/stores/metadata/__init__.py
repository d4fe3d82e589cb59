"""Metadata stores: ZooKeeper and Pulsar's RocksDB store behind one interface.

Open one with :func:`open_metadata_store` from a URL in Pulsar's syntax (``zk:host:2181``,
``rocksdb://path``), or from the defaults (``$LEDGERCTL_METADATA_URL``, ``ledgerctl.toml``).
Read-only unless asked otherwise. kazoo and rocksdict are imported only by the back-end that
needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pulsarctl_py.errors import MetadataConflict, MetadataStoreError, ReadOnlyStoreError

from .base import (
    BookKeeperMetadata,
    ChildGroup,
    MetadataStore,
    Node,
    Op,
    Stat,
    Transaction,
    validate_path,
)
from .guards import require_pulsar_data, require_topic_metadata
from .ledgers import (
    BookKeeperRootMissing,
    LayoutInfo,
    LedgerRecord,
    allocate_ledger_id,
    create_ledger,
    iter_ledger_paths,
    iter_ledgers,
    list_ledgers,
    read_layout,
    read_ledger,
    require_bookkeeper_root,
)
from .managed_ledgers import (
    CursorRecord,
    ManagedLedgerRecord,
    ManagedLedgerRef,
    iter_managed_ledgers,
    list_managed_ledgers,
    managed_ledger_dirs,
    read_cursor,
    read_managed_ledger,
    resolve_topic,
)
from .url import (
    ENV_URL,
    ENV_ZK_AUTH,
    ENV_ZK_AUTH_FILE,
    MetadataUrl,
    ZkDigestAuth,
    parse_metadata_url,
    resolve_metadata_url,
    zk_auth_from_env,
)

if TYPE_CHECKING:
    from .rocksdb import RocksDBMetadataStore
    from .zookeeper import ZooKeeperStore

DEFAULT_TIMEOUT = 5.0


def open_metadata_store(
    url: str | MetadataUrl | None = None,
    *,
    read_only: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    create: bool = False,
) -> MetadataStore:
    """Open the metadata store named by ``url`` (or by the defaults when None).

    ``timeout`` bounds connecting to ZooKeeper and every call. ``create`` makes a new
    RocksDB store (it implies read_only=False). ZooKeeper digest credentials are read
    from the environment only.
    """
    resolved = resolve_metadata_url(url)
    store: MetadataStore
    if resolved.scheme == "rocksdb":
        from .rocksdb import RocksDBMetadataStore

        store = RocksDBMetadataStore(resolved, read_only=read_only and not create, create=create)
    else:
        if create:
            raise MetadataStoreError("create is for a new rocksdb:// store, not for ZooKeeper")
        from .zookeeper import ZooKeeperStore

        store = ZooKeeperStore(
            resolved, read_only=read_only, timeout=timeout, auth=zk_auth_from_env()
        )
    store.place_bookkeeper = _bookkeeper_place
    if resolved.bookkeeper is not None and not create:
        _check_pair(store)
    return store


def _bookkeeper_place(store: MetadataStore, target: MetadataUrl) -> BookKeeperMetadata:
    """:meth:`MetadataStore.bookkeeper` for BookKeeper's metadata named apart from
    ``store`` (``target``): another root of it, or another store, opened on first use with
    ``store``'s mode and closed with it; first checked to be this cluster's
    (:mod:`.cluster`; ClusterMismatch if not)."""
    from .cluster import require_same_cluster

    if store.location.same_store(target):
        place = BookKeeperMetadata(store, target.ledgers_root)
    else:
        if store._bookkeeper_store is None:
            store._bookkeeper_store = open_metadata_store(target, read_only=store.read_only)
        place = BookKeeperMetadata(store._bookkeeper_store, target.ledgers_root)
    if not store._same_cluster:
        # a place given apart from this store: refused when it is another cluster's
        require_same_cluster(store, place)
        store._same_cluster = True
    return place


def _check_pair(store: MetadataStore) -> None:
    """BookKeeper's metadata given apart from Pulsar's: refuse another cluster's at once,
    before any command reads either (:mod:`.cluster`); when its store cannot be reached
    now, the first read of it checks (and says that it cannot be reached)."""
    from pulsarctl_py.decoders.errors import StoreUnavailable

    try:
        store.bookkeeper()
    except StoreUnavailable:
        pass
    except BaseException:
        store.close()
        raise


def __getattr__(name: str) -> object:
    # the back-end classes, without importing kazoo/rocksdict before they are asked for
    if name == "ZooKeeperStore":
        from .zookeeper import ZooKeeperStore

        return ZooKeeperStore
    if name == "RocksDBMetadataStore":
        from .rocksdb import RocksDBMetadataStore

        return RocksDBMetadataStore
    if name == "create_metadata_store":
        from .rocksdb import create_metadata_store

        return create_metadata_store
    raise AttributeError(name)


__all__ = [
    "BookKeeperRootMissing",
    "require_bookkeeper_root",
    "require_pulsar_data",
    "require_topic_metadata",
    "ChildGroup",
    "ENV_URL",
    "ENV_ZK_AUTH",
    "ENV_ZK_AUTH_FILE",
    "CursorRecord",
    "LayoutInfo",
    "LedgerRecord",
    "ManagedLedgerRecord",
    "ManagedLedgerRef",
    "MetadataConflict",
    "MetadataStore",
    "MetadataStoreError",
    "MetadataUrl",
    "Node",
    "Op",
    "ReadOnlyStoreError",
    "RocksDBMetadataStore",
    "Stat",
    "Transaction",
    "ZkDigestAuth",
    "ZooKeeperStore",
    "allocate_ledger_id",
    "create_ledger",
    "create_metadata_store",
    "iter_ledger_paths",
    "iter_ledgers",
    "iter_managed_ledgers",
    "list_ledgers",
    "list_managed_ledgers",
    "managed_ledger_dirs",
    "open_metadata_store",
    "parse_metadata_url",
    "read_cursor",
    "read_layout",
    "read_ledger",
    "read_managed_ledger",
    "resolve_metadata_url",
    "resolve_topic",
    "validate_path",
    "zk_auth_from_env",
]
