"""Do Pulsar's metadata and BookKeeper's metadata belong to one cluster?

When BookKeeper's metadata is not ``/ledgers`` of Pulsar's store (another root or another
store: ``--bookkeeper-metadata-url``, ``$LEDGERCTL_BOOKKEEPER_METADATA_URL``,
``bookkeeper_metadata_url``, a broker's ``bookkeeperMetadataServiceUri``), the two URLs
come from two settings, and a wrong pair (one cluster's ``--metadata-url`` with another
cluster's variable left in the shell) would read cluster A's topics with cluster B's
ledgers: every answer wrong, every repair planned from the wrong ledgers. This module
checks the pair before BookKeeper's metadata is read (``MetadataStore.bookkeeper``).

**What links the two.** Neither store names the other: ``PulsarClusterMetadataSetup``
formats BookKeeper and writes ``/admin/clusters/<name>`` but records no BookKeeper
identity, and BookKeeper's ``INSTANCEID`` (which its cookies repeat) names BookKeeper's
cluster only. The link is the ledgers: the broker creates each ledger of a topic with
custom metadata naming its managed ledger (``LedgerMetadataUtils
.buildBaseManagedLedgerMetadata``: ``application=pulsar``, ``component=managed-ledger``,
``pulsar/managed-ledger=<name>``; a cursor ledger adds ``pulsar/cursor``, a compacted
ledger names ``pulsar/compactedTopic``), and records the ledger's id, entries and size in
the managed ledger's ``ManagedLedgerInfo`` (``ManagedLedgerImpl``).

**What is compared**, on a sample, stopping at the first agreement:

1. From Pulsar's side: the first managed ledgers in name order (at most
   :data:`MANAGED_LEDGERS`, found with a bounded walk of ``/managed-ledgers``); of each,
   its newest ledger and its newest closed ledger that BookKeeper should still hold (not
   offloaded and deleted). Each is read under BookKeeper's root. It *agrees* when its
   custom metadata names that managed ledger, or, a ledger without Pulsar's tags (written
   by an old broker), when it is closed with the entries and size the managed ledger
   records. It *disagrees* when BookKeeper has no such ledger, when the ledger names
   another managed ledger (or is a schema or compacted ledger), or when an untagged closed
   ledger holds other entries or another size.
2. Only when (1) found no agreement, from BookKeeper's side: the newest ledgers under its
   root (at most :data:`BOOKKEEPER_LEDGERS`, a bounded walk down the last branch) that
   Pulsar tagged with a managed ledger or a compacted topic. One *agrees* when Pulsar's
   store holds that managed ledger, and *disagrees* when it does not.

One agreement is enough. The pair is refused (:class:`ClusterMismatch`, exit 2) when no
link agrees and at least one disagrees; with nothing to compare (no managed ledger with a
ledger in BookKeeper, no Pulsar ledger in BookKeeper) it passes. A BookKeeper root that
does not exist is not judged here: reading it says so. Cost: about six reads when the
first ledger agrees, a few dozen at most.

**What it cannot catch**: two clusters whose sampled ledger ids belong to managed ledgers
of the same names (topics created in the same order by one script, with no old-broker
ledgers): the links agree although the data differ; and a pair where neither side has a
ledger to compare (a Pulsar store without topics, or whose topics have no ledger left,
with a BookKeeper holding no Pulsar-tagged ledger).

**What it refuses although the pair is right**: a cluster where every sampled link
disagrees: the ledgers of every sampled topic lost from BookKeeper's metadata, or every
newest ledger orphaned while Pulsar holds no topic. The message says what was compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import LedgerctlError

from .base import join
from .ledgers import read_ledger

if TYPE_CHECKING:
    from .base import BookKeeperMetadata, MetadataStore

#: at most this many managed ledgers are compared, and this many ledgers of each
MANAGED_LEDGERS = 8
LEDGERS_PER_MANAGED_LEDGER = 2
#: at most this many of BookKeeper's newest ledgers are read, newest first, until one names
#: its topic (ledgers written without Pulsar's tags, or deleted meanwhile, name none; with 4 a
#: run of them among the newest left nothing to compare and the pair was taken)
BOOKKEEPER_LEDGERS = 16
#: at most this many children listings per walk
LISTINGS = 24


class ClusterMismatch(LedgerctlError):
    """Pulsar's metadata and BookKeeper's metadata of different clusters (exit 2)."""


@dataclass
class Comparison:
    """The links compared: how many agree, and what each disagreement was."""

    compared: int = 0
    agreed: int = 0
    disagreements: list[str] = field(default_factory=list)

    def agree(self) -> None:
        self.compared += 1
        self.agreed += 1

    def disagree(self, why: str) -> None:
        self.compared += 1
        self.disagreements.append(why)

    @property
    def refused(self) -> bool:
        return self.agreed == 0 and bool(self.disagreements)


def _managed_ledgers(store: MetadataStore) -> list[str]:
    """The names of the first managed ledgers in name order (v2 and v1 names), found with
    at most :data:`LISTINGS` listings."""
    found: list[str] = []
    stack: list[tuple[str, int]] = [(mld.ML_ROOT, 0)]
    listings = 0
    while stack and len(found) < MANAGED_LEDGERS and listings < LISTINGS:
        path, depth = stack.pop()
        names = store.children(path)
        listings += 1
        if depth in (3, 4) and path.rsplit("/", 1)[-1] == "persistent":
            for name in names[: MANAGED_LEDGERS - len(found)]:
                found.append(join(path, name)[len(mld.ML_ROOT) + 1 :])
        elif depth < 3:
            stack.extend((join(path, n), depth + 1) for n in reversed(names))
    return found


def _candidates(info: mld.DecodedInfo) -> list[tuple[int, int | None, int | None]]:
    """(ledger id, entries, size) of the newest ledger and of the newest closed one still
    in BookKeeper (entries and size None where the managed ledger records none: the
    ledger it writes to)."""

    def closed(li: object) -> bool:
        return li.HasField("entries") and li.entries > 0  # type: ignore[attr-defined]

    kept = [
        li
        for li in info.message.ledgerInfo
        if not (li.HasField("offloadContext") and li.offloadContext.bookkeeperDeleted)
    ]
    chosen = kept[-1:]
    if chosen and not closed(chosen[0]):
        chosen += [li for li in kept[:-1] if closed(li)][-1:]
    return [
        (li.ledgerId, li.entries, li.size) if closed(li) else (li.ledgerId, None, None)
        for li in chosen[:LEDGERS_PER_MANAGED_LEDGER]
    ]


def _forward(pulsar: MetadataStore, place: BookKeeperMetadata, result: Comparison) -> None:
    for name in _managed_ledgers(pulsar):
        node = pulsar.get(join(mld.ML_ROOT, name))
        if node is None:
            continue
        try:
            info = mld.parse_ml_info(node.data)
        except LedgerctlError:
            continue
        for ledger_id, entries, size in _candidates(info):
            record = read_ledger(place.store, ledger_id, place.root)
            if record is None:
                result.disagree(f"ledger {ledger_id}, which {name} lists, is not there")
                continue
            md = record.metadata
            if md is None:
                continue
            tags = md.pulsar()
            if tags.managed_ledger is not None and tags.kind in ("data", "cursor"):
                if mld.names_managed_ledger(tags.managed_ledger, name):
                    result.agree()
                    return
                result.disagree(
                    f"ledger {ledger_id}, which {name} lists, is {tags.managed_ledger}'s there"
                )
            elif tags.kind in ("schema", "compacted"):
                result.disagree(
                    f"ledger {ledger_id}, which {name} lists, is a {tags.kind} ledger there"
                )
            elif entries is not None and md.is_closed:
                if (md.last_entry_id + 1, md.length) == (entries, size):
                    result.agree()
                    return
                result.disagree(
                    f"ledger {ledger_id}, which {name} lists with {entries} entries and "
                    f"{size} bytes, holds {md.last_entry_id + 1} entries and {md.length} "
                    "bytes there"
                )


def _newest_ledgers(place: BookKeeperMetadata) -> list[tuple[int, str]]:
    """(id, path) of the newest ledgers under the root: the last branch of the ledger
    tree (hierarchical or flat), at most :data:`BOOKKEEPER_LEDGERS`."""
    store, root = place.store, place.root
    path, depth = root, 1
    for _ in range(6):
        names = store.children(path)
        leaves = [(lm.ledger_id_from_path(join(path, n), root), join(path, n)) for n in names]
        ledgers = sorted((lid, p) for lid, p in leaves if lid is not None)
        if ledgers:
            return ledgers[-BOOKKEEPER_LEDGERS:]
        dirs = [n for n in names if lm.is_ledger_dir(n, depth)]
        if not dirs:
            return []
        # long hierarchical (3 digits) holds the larger ids
        path, depth = join(path, max(dirs, key=lambda n: (len(n), n))), depth + 1
    return []


def _reverse(pulsar: MetadataStore, place: BookKeeperMetadata, result: Comparison) -> None:
    for ledger_id, path in reversed(_newest_ledgers(place)):
        node = place.store.get(path)
        if node is None:
            continue
        try:
            tags = lm.parse(node.data, ledger_id).pulsar()
        except LedgerctlError:
            continue
        owner = tags.managed_ledger if tags.kind in ("data", "cursor") else None
        if tags.kind == "compacted" and tags.compacted_topic:
            try:
                owner = mld.TopicName.parse(tags.compacted_topic).persistence_name
            except LedgerctlError:
                owner = None
        if not owner:
            continue
        if pulsar.exists(join(mld.ML_ROOT, owner)) is not None:
            result.agree()
            return
        result.disagree(f"ledger {ledger_id} there is {owner}'s, a topic this store lacks")


def compare(pulsar: MetadataStore, place: BookKeeperMetadata) -> Comparison:
    """Compare the links between Pulsar's store and BookKeeper's metadata at ``place``
    (the module docstring says which)."""
    result = Comparison()
    _forward(pulsar, place, result)
    if result.agreed == 0:
        _reverse(pulsar, place, result)
    return result


#: the pairs already found to agree in this process (Spark executors open a store per split)
_AGREED: set[str] = set()


def require_same_cluster(pulsar: MetadataStore, place: BookKeeperMetadata) -> None:
    """Raise :class:`ClusterMismatch` when Pulsar's store and BookKeeper's metadata at
    ``place`` belong to different clusters (see the module docstring); once per pair and
    process."""
    location = pulsar.location
    key = str(location.absolute())
    if key in _AGREED:
        return
    if place.store.exists(place.root) is None and not place.store.children(place.root):
        return  # no BookKeeper metadata there at all: reading it says so, with the place
    result = compare(pulsar, place)
    if not result.refused:
        _AGREED.add(key)
        return
    bookkeeper = location.bookkeeper_location
    shown = "; ".join(result.disagreements[:2])
    more = len(result.disagreements) - 2
    raise ClusterMismatch(
        f"the metadata store {location.with_bookkeeper(None)} (from {location.source}) and "
        f"BookKeeper's metadata at {bookkeeper} (from {bookkeeper.source}) are of different "
        f"clusters: {shown}{f' (and {more} more)' if more > 0 else ''}; none of the "
        f"{result.compared} ledgers compared agrees. Give this cluster's BookKeeper "
        "metadata URL (--bookkeeper-metadata-url, or its brokers' "
        "bookkeeperMetadataServiceUri)"
    )
