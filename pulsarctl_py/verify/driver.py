"""The driver of ``verify``: :func:`verify_topics` walks the topics and hands each part of
a topic to its check family: :mod:`.ledgers` (the ledger list, metadata, owners, storage,
entry scans, counts and sizes), :mod:`.tiered` (offloaded ledgers' tiered copies),
:mod:`.order` (index continuity, the ``index`` property,
timestamps), :mod:`.cursors`, :mod:`.compaction`, :mod:`.shadow` and :mod:`.orphans`;
then it turns what the storage reported about itself into findings.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import LedgerctlError, NotFoundError
from pulsarctl_py.verify.core import (
    ERROR,
    INFO,
    Finding,
    LedgerFacts,
    Limiter,
    ProgressCallback,
    Run,
    VerifyStats,
)

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata import ManagedLedgerRecord, ManagedLedgerRef


def verify_topics(
    source: LedgerSource,
    topics: list[str] | None = None,
    *,
    progress: ProgressCallback | None = None,
    stats: VerifyStats | None = None,
    fast: bool = True,
    reads: Any = None,
    max_uncompressed: int | None = None,
    brokers: Any = None,
) -> Iterator[Finding]:
    """Verify the named topics (None: every topic, plus the orphan-ledger check).

    A topic name may be a full or short topic name or a managed-ledger name; a
    partitioned topic's name stands for its partitions. Raise LedgerctlError when there is
    no metadata store or a named topic does not exist. Findings stream as they are found;
    ``stats`` (when given) is filled in on the way. ``fast=False`` reads every entry
    through the general decode path, never the fast path (:mod:`.fastscan`); ``reads`` (an
    :class:`pulsarctl_py.engines.reads.EngineReads`) reads the entries on its engine
    instead of in this process (the fast path is in-process, so it is not taken then); the
    findings are the same. ``max_uncompressed``: the most a payload may decompress to
    (``--max-message-size``; None: the decoders' default); past it, entry-undecodable.
    ``brokers`` (a :class:`pulsarctl_py.broker_view.BrokerLookup`): compare each topic a
    broker has loaded with what it serves (:mod:`.broker`); the views compared are
    appended to ``brokers.views``.
    """
    if source.metadata is None:
        raise LedgerctlError("verify needs the metadata store (pass --metadata-url)")
    run = Run(source, progress, stats if stats is not None else VerifyStats(), reads)
    run.fast = fast and reads is None
    run.max_uncompressed = max_uncompressed
    run.brokers = brokers
    if brokers is not None:
        run.broker_views = brokers.views
    if reads is not None:
        reads.max_uncompressed = max_uncompressed
    try:
        yield from _drive(run, topics)
    finally:
        run.close()


def storage_findings(source: LedgerSource) -> list[Finding]:
    """What the bookie storage reported about itself while it was read, as findings
    (``storage-index-unusable``, ``storage-damaged``: :meth:`LedgerSource.storage_problems`)."""
    return [
        Finding(ERROR, p.check, None, p.ledger_id, None, p.message)
        for p in source.storage_problems()
    ]


def _drive(run: Run, topics: list[str] | None) -> Iterator[Finding]:
    from pulsarctl_py.stores.metadata import (
        list_managed_ledgers,
        require_bookkeeper_root,
        require_topic_metadata,
    )
    from pulsarctl_py.verify.confirm import confirmed
    from pulsarctl_py.verify.orphans import orphan_findings

    if topics is None:
        require_topic_metadata(run.store)  # an empty answer from the wrong place is no "ok"
    refs = list_managed_ledgers(run.store) if topics is None else _resolve(run, topics)
    if not refs:
        # a verification that checked nothing is no "ok"
        raise NotFoundError(
            f"nothing to verify: {run.store.url} holds no topic (no managed ledger under "
            "/managed-ledgers)"
        )
    # without BookKeeper's metadata every ledger would look missing: nothing is judged
    require_bookkeeper_root(run.store)
    run.run_names = {ref.name for ref in refs}
    run.topics_total = len(refs)
    if run.source.bookie is None:
        yield run.emit(
            Finding(
                INFO,
                "storage-not-checked",
                None,
                None,
                None,
                "no bookie storage given: entries, sizes and digests were not checked",
            )
        )
    for ref in refs:
        run.report("topic", ref.topic.full_name)
        stats = run.stats
        before = (stats.ledgers, stats.entries, stats.payload_bytes)
        for finding in confirmed(run, ref.topic, _topic(run, ref.topic)):
            yield run.emit(finding)
        stats.per_topic[ref.topic.full_name] = [
            stats.ledgers - before[0],
            stats.entries - before[1],
            stats.payload_bytes - before[2],
        ]
        run.topics_done += 1
        run.stats.topics += 1
    if topics is None:
        run.report("orphans", None)
        for finding in orphan_findings(run):
            yield run.emit(finding)
    for finding in storage_findings(run.source):
        yield run.emit(finding)
    run.report("done", None)


def _resolve(run: Run, names: list[str]) -> list[ManagedLedgerRef]:
    from pulsarctl_py.stores.metadata import ManagedLedgerRef, resolve_topic

    out: list[ManagedLedgerRef] = []
    seen: set[str] = set()
    for name in names:
        topic = resolve_topic(name)
        found: list[mld.TopicName] = []
        if run.store.exists(topic.ml_path) is not None:
            found.append(topic)
        elif topic.partition_index < 0:
            parent = topic.ml_path.rsplit("/", 1)[0]
            prefix = mld.url_encode(topic.local_name + mld.PARTITION_SUFFIX)
            for child in run.store.children(parent):
                if child.startswith(prefix) and child[len(prefix) :].isdigit():
                    found.append(topic.partition(int(child[len(prefix) :])))
            found.sort(key=lambda t: t.partition_index)
        if not found:
            from pulsarctl_py.topics import topic_hint

            raise NotFoundError(
                f"no managed ledger for topic {topic.full_name}" + topic_hint(run.store, topic)
            )
        for t in found:
            if t.persistence_name not in seen:
                seen.add(t.persistence_name)
                out.append(ManagedLedgerRef(t.persistence_name, t.ml_path, t))
    return out


def _topic(run: Run, name: mld.TopicName) -> Iterator[Finding]:
    from pulsarctl_py.stores.metadata import read_managed_ledger
    from pulsarctl_py.verify.broker import broker_findings
    from pulsarctl_py.verify.cursors import cursor_findings
    from pulsarctl_py.verify.ledgers import data_ledgers
    from pulsarctl_py.verify.shadow import shadow_findings
    from pulsarctl_py.verify.tiered import tiered_findings

    record = read_managed_ledger(run.store, name)
    topic = name.full_name
    if record is None:  # deleted while we ran
        return
    if record.info is None or record.info.missing:
        yield Finding(
            ERROR,
            "ml-unreadable",
            topic,
            None,
            None,
            f"the managed-ledger znode {record.ref.path} does not decode: {record.error}",
            {"path": record.ref.path, "error": record.error},
        )
        if record.info is None:
            run.unreadable.add(record.ref.name)
            return
    # the ledgers as the broker reads them: sorted by id, a repeated id's last LedgerInfo
    # (mld.broker_order); how they are stored is judged here
    infos = list(record.info.message.ledgerInfo)
    ids = [li.ledgerId for li in infos]
    run.referenced.update(ids)
    yield from _stored_order(record, topic)
    source_name = record.properties.get(mld.PROPERTY_SHADOW_SOURCE)
    limiter = Limiter()
    facts: dict[int, LedgerFacts] = {}
    if source_name is not None:
        gen = shadow_findings(run, record, source_name, facts)
    else:
        # the offloaded ledgers' tiered copies (a shadow's are checked under its source)
        gen = itertools.chain(
            data_ledgers(run, record, infos, facts), tiered_findings(run, record, infos)
        )
    for finding in gen:
        if limiter.allow(finding):
            yield finding
    yield from limiter.summary(topic)
    for cursor in record.cursors:
        yield from cursor_findings(run, record, cursor, ids, facts)
    yield from broker_findings(run, topic)


def _stored_order(record: ManagedLedgerRecord, topic: str) -> Iterator[Finding]:
    """How a topic's ledger list is stored, against the order the broker reads it in.

    Unique ids out of order are what an offload leaves (``ManagedLedgerImpl``
    ``tryTransformLedgerInfo`` writes the list from a HashMap copy of its ledger map):
    the broker sorts them when it loads the topic, so that is information, not damage.
    A repeated id is damage: the broker's map keeps the last LedgerInfo stored for it and
    drops the others (``ManagedLedgerImpl.initialize``), with whatever they said.
    """
    assert record.info is not None
    stored = record.info.stored_ledger_ids
    if stored is None:
        return
    counts = collections.Counter(stored)
    for lid in sorted(lid for lid, n in counts.items() if n > 1):
        yield Finding(
            ERROR,
            "ledger-list-duplicate",
            topic,
            lid,
            None,
            f"{record.ref.name} lists ledger {lid} {counts[lid]} times; a broker loading "
            "the topic keeps only the last of its LedgerInfos (as ledgerctl reads it) and "
            "drops the others",
            {"times": counts[lid], "stored_ledger_ids": stored[:1000]},
        )
    if any(b < a for a, b in itertools.pairwise(stored)):
        yield Finding(
            INFO,
            "ledger-list-unordered",
            topic,
            None,
            None,
            f"{record.ref.name} stores its ledger ids out of id order: {stored[:50]}; the "
            "broker sorts them by id when it loads the topic (as ledgerctl reads them) and "
            "writes them sorted at its next update of the list",
            {"stored_ledger_ids": stored[:1000]},
        )
