"""Whether a live broker owns a topic, from the metadata store alone.

A broker that owns a topic caches its metadata and rewrites it on every ledger roll and
cursor close, so a metadata write made behind its back is lost or, worse, mixed with the
broker's own (formats.md §8.3). Brokers own topics by namespace bundle:

* **which bundle** (``NamespaceBundleFactory`` / ``ConsistentHashingTopicBundleAssigner
  .findBundle``): the topic's full name (``persistent://tenant/ns/local``, a partition's
  own name for a partition) hashed with CRC32 (Guava ``Hashing.crc32().hashString(name,
  UTF_8).padToLong()``, the unsigned 32-bit value), in the bundle whose range
  ``[lower, upper)`` holds it (the last one includes ``0xffffffff``). The ranges are the
  namespace's bundle boundaries: ``bundles.boundaries`` of its local policies
  (``/admin/local-policies/<tenant>/<ns>``), else of its policies
  (``/admin/policies/<tenant>/<ns>``), else one bundle ``0x00000000_0xffffffff``;
* **who owns it**, with the ZooKeeper-based load managers (the default
  ``ModularLoadManagerImpl`` and the older simple one: ``OwnershipCache``): an ephemeral
  node ``/namespace/<tenant>/<ns>/<0xlower_0xupper>`` holding the owner's
  ``NamespaceEphemeralData`` (``nativeUrl``, ``httpUrl``). It exists exactly as long as
  the owning broker's session does.

The extensible load manager (``ExtensibleLoadManagerImpl``) keeps ownership in a system
topic instead; its brokers register ``loadManagerClassName`` in ``/loadbalance/brokers``.
Then ownership cannot be told from the metadata store (:func:`owner_of` raises
:class:`TopicOwned`); :mod:`pulsarctl_py.stores.broker` then asks every broker.

Unloading a bundle releases it, but any lookup takes it again: a client's, and on a
cluster with transactions or topic-level policies the broker's own system readers
(``__transaction_buffer_snapshot``, ``__change_events``), which reconnect at once (seen
on the sandbox: the bundle owned again 30 ms after the unload). Then only stopping the
broker that owns it frees it. Pulsar's RocksDB store is only writable while no broker
runs (it holds the database's lock), so no live broker can own anything there.
"""

from __future__ import annotations

import itertools
import json
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import StoreUnavailable

if TYPE_CHECKING:
    from pulsarctl_py.decoders.managed_ledger import TopicName
    from pulsarctl_py.stores.metadata import MetadataStore

FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF
EXTENSIBLE = "ExtensibleLoadManager"


class TopicOwned(StoreUnavailable):
    """A live broker owns the topic's namespace bundle: its metadata is not ours to write."""


@dataclass(frozen=True, slots=True)
class Bundle:
    namespace: str
    lower: int
    upper: int

    @property
    def range(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    @property
    def path(self) -> str:
        return f"/namespace/{self.namespace}/{self.range}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range}"


@dataclass(frozen=True, slots=True)
class Owner:
    topic: str
    bundle: Bundle
    broker: str  # the owner's web (or broker) service URL, or its session id

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "bundle": str(self.bundle), "broker": self.broker}


def topic_hash(full_name: str) -> int:
    """The bundle hash of a topic name: its CRC32, unsigned."""
    return zlib.crc32(full_name.encode("utf-8"))


def _boundaries(store: MetadataStore, namespace: str) -> list[int]:
    for root in ("/admin/local-policies", "/admin/policies"):
        node = store.get(f"{root}/{namespace}")
        if node is None or not node.data.strip():
            continue
        try:
            bundles = json.loads(node.data).get("bundles") or {}
            found = [int(str(b), 16) for b in bundles.get("boundaries") or []]
        except (ValueError, AttributeError, TypeError):
            continue
        if len(found) >= 2 and found == sorted(found):
            return found
    return [FULL_LOWER, FULL_UPPER]


def topic_bundle(store: MetadataStore, topic: TopicName) -> Bundle:
    """The namespace bundle that holds ``topic``."""
    namespace = topic.namespace_name
    bounds = _boundaries(store, namespace)
    h = topic_hash(topic.full_name)
    for lower, upper in itertools.pairwise(bounds):
        if lower <= h < upper or (upper == bounds[-1] and h == upper):
            return Bundle(namespace, lower, upper)
    # a hash outside the boundaries (policies not covering the full range): the nearest
    if h >= bounds[-1]:
        return Bundle(namespace, bounds[-2], bounds[-1])
    return Bundle(namespace, bounds[0], bounds[1])


def _extensible(store: MetadataStore) -> str | None:
    """A registered broker that runs the extensible load manager, if any."""
    for broker in store.children("/loadbalance/brokers"):
        node = store.get(f"/loadbalance/brokers/{broker}")
        if node is None:
            continue
        try:
            data = json.loads(node.data)
        except ValueError:
            continue
        if isinstance(data, dict) and EXTENSIBLE in str(data.get("loadManagerClassName", "")):
            return broker
    return None


def owner_of(store: MetadataStore, topic: TopicName) -> Owner | None:
    """The live broker that owns ``topic``'s bundle, or None.

    Raises :class:`TopicOwned` when ownership cannot be told (the extensible load manager).
    """
    if store.location.scheme != "zk":
        return None
    bundle = topic_bundle(store, topic)
    node = store.get(bundle.path)
    if node is not None and node.stat.ephemeral:
        try:
            data = json.loads(node.data)
            broker = data.get("httpUrl") or data.get("nativeUrl") or ""
        except (ValueError, AttributeError):
            broker = ""
        return Owner(topic.full_name, bundle, str(broker) or f"session {node.stat.owner:#x}")
    extensible = _extensible(store)
    if extensible is not None:
        raise TopicOwned(
            f"broker {extensible} runs the extensible load manager, which keeps bundle "
            f"ownership outside the metadata store: ledgerctl cannot tell whether it owns "
            f"{topic.full_name}; unload bundle {bundle} (pulsar-admin namespaces unload "
            f"{bundle.namespace} --bundle {bundle.range}) and pass --force-owned"
        )
    return None
