"""``orphans``: BookKeeper ledgers of Pulsar that nothing references, judged, listed
(:func:`list_orphans`) and deleted as a plan (:func:`delete_orphans`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.plans import Draft

from .topic_state import (
    COMPACTED_TOPIC_LEDGER,
    count_messages,
    load_cursors,
    load_topic,
)

if TYPE_CHECKING:
    from pathlib import Path

    from pulsarctl_py.ledgers import LedgerSource


@dataclass(slots=True)
class Orphan:
    ledger_id: int
    path: str
    kind: str
    state: str
    length: int
    entries: int | None  # None while open
    ctime: int
    owner: str | None
    owner_exists: bool | None
    #: the best creation time there is, and its basis (verify.orphans.AGE_BASES)
    created_ms: int | None = None
    age_ms: int | None = None
    age_basis: str = "unknown"
    #: why it is kept rather than called an orphan (None: an orphan)
    kept: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "ledger_id": self.ledger_id,
            "path": self.path,
            "kind": self.kind,
            "state": self.state,
            "length": self.length,
            "entries": self.entries,
            "ctime": self.ctime,
            "created_ms": self.created_ms,
            "age_ms": self.age_ms,
            "age_basis": self.age_basis,
            "owner": self.owner,
            "owner_exists": self.owner_exists,
        }
        if self.kept is not None:
            out["kept"] = self.kept
        return out


@dataclass(slots=True)
class OrphanListing:
    """What ``ledgerctl orphans`` lists: the orphans, and the unreferenced ledgers kept
    (each with why: :attr:`Orphan.kept`)."""

    orphans: list[Orphan]
    kept: list[Orphan]
    min_age_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "orphans": [o.to_json() for o in self.orphans],
            "kept": [o.to_json() for o in self.kept],
            "min_age_ms": self.min_age_ms,
        }


#: an orphan younger than this on a metadata store a running cluster shares (ZooKeeper) is
#: judged again once it is this old: a broker creates a ledger before it references it (its
#: compactor creates the compacted ledger, then moves the ``__compaction`` cursor; a cursor
#: creates its new ledger, then switches to it), so for a moment the ledger is referenced
#: by nothing. The broker's periodic compaction of its system topics
#: (``__transaction_buffer_snapshot``, every ``brokerServiceCompactionMonitorIntervalInSeconds``)
#: was listed so by ``orphans --min-age 0`` 200-250 ms after it began.
SETTLE_MS = 3000


def list_orphans(
    metadata_url: str | None, bookie_dirs: list[Path] | None, *, min_age_ms: int = 0
) -> OrphanListing:
    """Judge every Pulsar ledger of the stores (:func:`judge_orphans`), writing nothing:
    ``bookie_dirs`` (none: the running bookies) read the cursor ledgers. On a store a
    running cluster shares, orphans younger than :data:`SETTLE_MS` are judged again on
    fresh reads once they are that old, and only those still orphans are listed (what a
    broker is creating right now is referenced by then)."""
    from pulsarctl_py.ledgers import LedgerSource

    with LedgerSource.open(metadata_url, bookie_dirs or None, need_metadata=True) as source:
        assert source.metadata is not None
        judged = settled_orphans(Draft(source.metadata), source, min_age_ms=min_age_ms)
    return OrphanListing(
        [o for o in judged if o.kept is None], [o for o in judged if o.kept is not None], min_age_ms
    )


def settled_orphans(
    draft: Draft, source: LedgerSource | None, *, min_age_ms: int = 0
) -> list[Orphan]:
    """:func:`judge_orphans` on ``draft``, and on a store a running cluster shares, the
    orphans younger than :data:`SETTLE_MS` judged again on fresh reads (a new Draft) once
    they are that old: an orphan is one both judgements found (what a broker was creating
    is referenced by then); the kept ones are the second judgement's. Listing and deleting
    both judge this way."""
    judged = list(judge_orphans(draft, source, min_age_ms=min_age_ms))
    young = [
        o.age_ms for o in judged if o.kept is None and o.age_ms is not None and o.age_ms < SETTLE_MS
    ]
    if not young or not _shared(draft.store):
        return judged
    first = {o.ledger_id for o in judged if o.kept is None}
    _pause((SETTLE_MS - min(young)) / 1000)
    return [
        o
        for o in judge_orphans(Draft(draft.store), source, min_age_ms=min_age_ms)
        if o.kept is not None or o.ledger_id in first
    ]


def _shared(store: Any) -> bool:
    """Whether a running cluster may be writing ``store`` while it is read (ZooKeeper; a
    RocksDB metadata store is opened by one process at a time)."""
    from pulsarctl_py.stores.metadata.zookeeper import ZooKeeperStore

    return isinstance(store, ZooKeeperStore)


def _pause(seconds: float) -> None:
    import time

    time.sleep(max(0.0, seconds))


def find_orphans(
    draft: Draft, source: LedgerSource | None, *, min_age_ms: int = 0, now_ms: int | None = None
) -> Iterator[Orphan]:
    """Every orphan (:func:`judge_orphans`, the kept ones left out)."""
    for o in judge_orphans(draft, source, min_age_ms=min_age_ms, now_ms=now_ms):
        if o.kept is None:
            yield o


def judge_orphans(
    draft: Draft, source: LedgerSource | None, *, min_age_ms: int = 0, now_ms: int | None = None
) -> Iterator[Orphan]:
    """Every BookKeeper ledger tagged ``application=pulsar`` (schema ledgers aside) that no
    managed ledger, cursor or compacted-ledger reference holds; ``kept`` set on those
    that are still not orphans: a live ledgerctl run holds it, a plan waiting for review
    names it, or (with ``min_age_ms``) it is younger or of unknown age
    (:func:`pulsarctl_py.verify.orphans.unreferenced_ledgers`).

    No judgement (the ledger is not listed) when its topic's metadata does not decode, or
    its topic's ``__compaction`` cursor keeps its state in a cursor ledger that cannot be
    read (the reference may be there).
    """
    from pulsarctl_py.stores.metadata import (
        list_managed_ledgers,
        require_bookkeeper_root,
        require_topic_metadata,
    )
    from pulsarctl_py.verify.orphans import unreferenced_ledgers

    store = draft.store
    # the wrong place answers "no orphans", or (with BookKeeper's metadata and no topics)
    # makes every ledger look orphaned
    require_topic_metadata(store)
    require_bookkeeper_root(store)
    referenced: set[int] = set()
    uncertain: set[str] = set()  # persistence names whose references are not all known
    for ref in list_managed_ledgers(store):
        try:
            topic = load_topic(draft, ref.topic, changes=False)
            cursors = load_cursors(draft, topic, source)
        except LedgerctlError:
            uncertain.add(ref.name)
            continue
        referenced.update(topic.ids)
        for cursor in cursors:
            cl = cursor.decoded.message.cursorsLedgerId
            if cl != -1:
                referenced.add(cl)
            if cursor.origin.startswith("znode snapshot"):
                uncertain.add(ref.name)
            for name, value in cursor.properties:
                if name == COMPACTED_TOPIC_LEDGER:
                    referenced.add(value)
            for name, value in (
                (p.name, p.value) for p in cursor.decoded.message.properties
            ):  # the snapshot's reference too
                if name == COMPACTED_TOPIC_LEDGER:
                    referenced.add(value)
    for o in unreferenced_ledgers(
        store, referenced, uncertain, read=draft.get, min_age_ms=min_age_ms, now_ms=now_ms
    ):
        md = o.metadata
        entries = md.last_entry_id + 1 if md.is_closed else None
        yield Orphan(
            o.ledger_id,
            o.path,
            o.tags.kind,
            md.state.name,
            md.length,
            entries,
            md.ctime,
            o.owner,
            o.owner_exists,
            o.created_ms,
            o.age_ms,
            o.age_basis,
            o.kept,
        )


def delete_orphans(
    draft: Draft,
    source: LedgerSource | None,
    *,
    only: set[int] | None = None,
    min_age_ms: int = 0,
) -> list[Orphan]:
    """Draft the deletion of every orphan's ledger znode (or of those in ``only``) and, given
    an offline bookie's directories, of its entries in that bookie's indexes."""
    from pulsarctl_py.plans.draft import draft_deletion

    judged = [
        o
        for o in settled_orphans(draft, source, min_age_ms=min_age_ms)
        if only is None or o.ledger_id in only
    ]
    orphans = [o for o in judged if o.kept is None]
    for o in judged:
        if o.kept is not None:
            draft.warnings.append(f"ledger {o.ledger_id} is not deleted: {o.kept}")
    whys = {o.ledger_id: f"orphan {o.kind} ledger of {o.owner or 'no topic'}" for o in orphans}
    for o in orphans:
        draft.delete(o.path, "ledger", whys[o.ledger_id])
        draft.unreachable.ledgers.append(o.ledger_id)
        draft.unreachable.size += o.length
        if o.entries is None:
            draft.unreachable.entries_unknown = True
        else:
            draft.unreachable.entries += o.entries
        if o.kind == "data" or o.kind == "compacted":
            draft.unreachable.add_messages(
                None
                if o.entries is None
                else count_messages(source, o.ledger_id, 0, o.entries - 1, kind=o.kind)
            )
    draft.repairs.append({"repair": "orphans", "deleted": [o.to_json() for o in orphans]})
    if draft_deletion(draft, source, whys):
        draft.warnings.append(
            "the given bookie directories' indexes drop these ledgers (the bookie must be "
            "stopped); their entry log bytes stay until the bookie compacts its entry logs, "
            "and other bookies garbage-collect them on their next GC run"
        )
    elif orphans:
        draft.warnings.append(
            "only the ledgers' metadata is deleted: bookies garbage-collect the entries of "
            "ledgers without metadata on their next GC run"
        )
    return orphans
