"""What a metadata store must hold before its answers about Pulsar mean anything.

A store at the wrong place (a wrong ZooKeeper chroot, BookKeeper's store given for the
broker's) answers "no topics" or "no ledgers" to every question: that empty answer is the
wrong place's, and these guards say so instead (NotFoundError, naming what was looked at).
BookKeeper's own root has its guard with the ledgers
(:func:`pulsarctl_py.stores.metadata.ledgers.require_bookkeeper_root`).
"""

from __future__ import annotations

from typing import Any

from pulsarctl_py.decoders.errors import LedgerctlError, NotFoundError

#: what Pulsar and BookKeeper keep at the root of a metadata store
PULSAR_ROOTS = ("/managed-ledgers", "/ledgers", "/admin")
#: where Pulsar keeps its topics' metadata (a cluster with no topic yet has /admin)
TOPIC_ROOTS = ("/managed-ledgers", "/admin")


def present(store: Any, path: str) -> bool:
    """A node, or children under its path (RocksDB stores need not hold the parents)."""
    return store.exists(path) is not None or bool(store.children(path))


def require_pulsar_data(store: Any) -> None:
    """Raise NotFoundError when the store holds no Pulsar data at all (a wrong chroot).

    An empty answer from such a store would read as "no topics, ok": the paths looked at
    and what the root holds instead say where the data may be.
    """
    if any(present(store, path) for path in PULSAR_ROOTS):
        return
    try:
        found = store.children("/")
    except LedgerctlError:
        found = []
    holds = (
        "it is empty"
        if not found
        else "its root holds "
        + ", ".join("/" + name for name in found[:8])
        + (", ..." if len(found) > 8 else "")
    )
    raise NotFoundError(
        f"no Pulsar data in {store.url}: none of {', '.join(PULSAR_ROOTS)} exists and "
        f"{holds} (wrong ZooKeeper chroot or metadata store?)"
    )


def require_topic_metadata(store: Any) -> None:
    """Raise NotFoundError unless the store holds Pulsar's topic metadata.

    A store holding only BookKeeper's metadata (its ``/ledgers``: the chroot of a
    BookKeeper cluster, or the store a broker's ``bookkeeperMetadataServiceUri`` names)
    answers "no topics" to every question about topics; that answer is the wrong place's.
    """
    require_pulsar_data(store)
    if any(present(store, path) for path in TOPIC_ROOTS):
        return
    raise NotFoundError(
        f"no Pulsar topic metadata in {store.url}: neither {' nor '.join(TOPIC_ROOTS)} "
        "exists, only BookKeeper's metadata (wrong ZooKeeper chroot, or the store "
        "BookKeeper uses rather than the broker's metadataStoreUrl?)"
    )
