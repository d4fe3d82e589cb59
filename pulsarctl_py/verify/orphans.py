"""Orphan ledgers: Pulsar ledgers that nothing references.

:func:`unreferenced_ledgers` is the one rule of what an orphan is, shared by
``verify --all`` (``orphan-ledger`` findings) and ``ledgerctl orphans``
(:func:`pulsarctl_py.repair.orphans.find_orphans`): a BookKeeper ledger whose metadata
decodes, whose custom metadata says ``application=pulsar`` and is no schema ledger
(schema references live under /schemas, not read here), that no reference holds, and
whose owner topic's references are all known. Each caller collects the references its
own way (verify while it walks the topics; ``orphans`` by loading every topic).

Such a ledger is still **kept** (never called an orphan, never deleted) when

* a live ledgerctl run holds it in its lease, or a plan file neither applied nor undone
  names it (:class:`pulsarctl_py.plans.leases.Holds`): it is being written, or waits for review;
* with a minimum age: it is younger, or its age is unknown. The age is taken from the best
  creation time there is: the ledger metadata's ``ctime`` (BookKeeper stores it only with
  ``storeSystemtimeAsLedgerCreationTime``, which Pulsar does not set), else the metadata
  store's own creation time of the ledger's node (ZooKeeper's znode ``ctime``; Pulsar's
  RocksDB store keeps a ``createdTimestamp`` in each value's header). A ledger with
  neither is of unknown age, and unknown is never taken for old.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.verify.core import WARNING, Finding, Run

if TYPE_CHECKING:
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata, PulsarLedgerTags
    from pulsarctl_py.plans.leases import Holds
    from pulsarctl_py.stores.metadata import MetadataStore, Stat


#: the default --min-age: a day. The broker lists a ledger it creates at once when it
#: rolls a ledger (one metadata update, bounded by managedLedgerMetadataOperationsTimeout-
#: Seconds, 60 s in 4.0.7), but its compactor references the compacted ledger it writes
#: only when the compaction ends, and nothing bounds how long a compaction of a large topic
#: runs: a day is far past both for any topic a broker compacts in practice.
DEFAULT_MIN_AGE_MS = 24 * 3600 * 1000

#: where a ledger's age was taken from (the ``age_basis`` of findings and listings)
AGE_BASES = {
    "ledger-ctime": "the ledger metadata's ctime",
    "zookeeper-ctime": "its znode's ctime in ZooKeeper",
    "rocksdb-created": "its node's createdTimestamp in the RocksDB metadata store",
    "store-created": "its node's creation time in the metadata store",
    "unknown": "neither the ledger metadata nor the store recorded when it was created",
}


@dataclass(frozen=True, slots=True)
class Unreferenced:
    """A ledger the orphan rule holds for (``kept`` says what still keeps it)."""

    ledger_id: int
    path: str
    metadata: LedgerMetadata
    tags: PulsarLedgerTags
    owner: str | None  # the managed ledger or compacted topic its tags name
    owner_exists: bool | None  # whether that topic has a managed ledger (None: no owner)
    created_ms: int | None = None
    age_basis: str = "unknown"  # a key of AGE_BASES
    age_ms: int | None = None
    #: why it is not called an orphan (a lease, a plan, too young, age unknown); None: it is
    kept: str | None = None
    #: whether it is kept by a lease or a plan (not judged at all) rather than by its age
    held: bool = False

    def age_text(self) -> str:
        from pulsarctl_py.render import human_duration

        if self.age_ms is None:
            return f"age unknown ({AGE_BASES['unknown']})"
        return f"{human_duration(self.age_ms)} old, from {AGE_BASES[self.age_basis]}"


def ledger_created(
    md: LedgerMetadata, stat: Stat | None, store: MetadataStore
) -> tuple[int | None, str]:
    """The best creation time of a ledger and its basis (a key of :data:`AGE_BASES`)."""
    if md.ctime:
        return md.ctime, "ledger-ctime"
    if stat is not None and stat.created_ms > 0:
        return stat.created_ms, getattr(store, "creation_basis", "store-created")
    return None, "unknown"


def unreferenced_ledgers(
    store: MetadataStore,
    referenced: set[int],
    uncertain: set[str],
    *,
    read: Callable[[str], bytes | None] | None = None,
    min_age_ms: int = 0,
    now_ms: int | None = None,
    holds: Holds | None = None,
) -> Iterator[Unreferenced]:
    """Every ledger the orphan rule holds for, in ledger id order, those still kept
    included (``kept`` says why).

    ``referenced``: the ledger ids some managed ledger, cursor or compacted-ledger
    reference holds. ``uncertain``: persistence names of topics whose references are not
    all known; their ledgers are not judged. ``read`` reads a key (default: the store);
    with ``min_age_ms`` a ledger younger, or of unknown age, is kept; ``holds``: the
    leases and plan records (default: read from ``store``).
    """
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.plans.leases import Holds
    from pulsarctl_py.stores.metadata import iter_ledger_paths, resolve_topic

    if read is None:

        def read(path: str) -> bytes | None:
            node = store.get(path)
            return None if node is None else node.data

    holds = Holds(store) if holds is None else holds
    place = store.bookkeeper()
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    for ledger_id, path in iter_ledger_paths(store):
        if ledger_id in referenced:
            continue
        data = read(path)
        if data is None:
            continue
        try:
            md = lm.parse(data, ledger_id)
        except LedgerctlError:
            continue
        tags = md.pulsar()
        if tags.application != "pulsar" or tags.kind == "schema":
            continue
        owner = tags.managed_ledger or tags.compacted_topic
        exists = None
        if owner is not None:
            try:
                owner_topic = resolve_topic(owner)
            except LedgerctlError:
                owner_topic = None
            if owner_topic is not None:
                if owner_topic.persistence_name in uncertain:
                    continue  # its topic's references are not all known: no judgement
                exists = read(owner_topic.ml_path) is not None
        created, basis = ledger_created(md, place.store.exists(path), place.store)
        age = None if created is None else max(0, now - created)
        found = Unreferenced(ledger_id, path, md, tags, owner, exists, created, basis, age)
        why = holds.why(ledger_id)
        if why is not None:
            found = replace(found, kept=why, held=True)
        elif min_age_ms and age is None:
            found = replace(found, kept="of unknown age: " + AGE_BASES["unknown"])
        elif min_age_ms and age is not None and age < min_age_ms:
            found = replace(found, kept=f"too young: {found.age_text()} (--min-age)")
        yield found


def orphan_findings(run: Run) -> Iterator[Finding]:
    """``orphan-ledger`` for every orphan, after every topic of the run was walked."""
    for o in unreferenced_ledgers(run.store, run.referenced, run.unreadable):
        if o.held:
            continue  # a live run writes it, or a plan waiting for review names it
        md, tags, owner = o.metadata, o.tags, o.owner
        whose = (
            ""
            if owner is None
            else f" of {owner}"
            + (" (a topic that no longer exists)" if o.owner_exists is False else "")
        )
        yield Finding(
            WARNING,
            "orphan-ledger",
            None,
            o.ledger_id,
            None,
            f"{tags.kind} ledger {o.ledger_id}{whose} is referenced by no topic, cursor or "
            f"compaction ({md.state.name}, {md.length} bytes; {o.age_text()})",
            {
                "kind": tags.kind,
                "state": md.state.name,
                "length": md.length,
                "ctime": md.ctime,
                "created_ms": o.created_ms,
                "age_ms": o.age_ms,
                "age_basis": o.age_basis,
                "owner": owner,
                "owner_exists": o.owner_exists,
                "tags": tags.to_json(),
            },
        )
