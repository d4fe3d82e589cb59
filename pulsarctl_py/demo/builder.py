"""Building the demo directory: topics from real entries, then the metadata and bookie files.

The plan (:data:`.model.PLANS` and the constants of :mod:`.model`) says which real
entries make each topic and how they split into ledgers. From it, per topic: the entries in
publish-time order; an append time per entry (publish time + ``APPEND_DELAY_MS``, strictly rising)
that becomes the broker timestamp on the topic with broker entry metadata and sets the
ledgers' close times; ledger ids 0, 1, ... in creation order, as BookKeeper's id generator
hands them out from Pulsar's metadata store. Nothing depends on the clock or on chance,
so two runs write the same bytes (RocksDB's own files aside).

What a broker and a bookie add, and nothing else, is added to the client's bytes:

* ``with-index``: the 0x0e02 BrokerEntryMetadata prefix (broker_timestamp, index = the
  running message count - 1 after this entry, formats.md §2) and the ML property ``index``;
* every entry: BookKeeper's digest header (CRC32C, LAC = entry id - 1, cumulative length,
  formats.md §10); the compacted ledger uses CRC32 like Pulsar's compactor;
* ``orders-partition-0`` is compacted: its ``__compaction`` cursor names a compacted ledger
  holding the latest entry per key, framed with the original position (formats.md §6.2);
* ``shop-orders`` has an Avro schema in two versions, stored as the broker stored it on the
  sandbox (``entries/shop-orders/schemas``, docs/schemas.md): each version's ``SchemaEntry``
  in a schema ledger of its own (entry 0, closed, created when the version was added), and
  the ``SchemaLocator`` at ``/schemas/public/default/shop-orders``. Only the ledger ids in
  their positions are the demo's (BookKeeper hands out other ids here); every other byte
  is the broker's.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, bookkeeper, compacted, decode_entry
from pulsarctl_py.decoders import journal as journal_format
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders import metadata_record as rec
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, master_key
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.managed_ledger import TopicName
from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from pulsarctl_py.proto import pulsar_api_pb2 as api

from .model import (
    ACK_DELAY_MS,
    APPEND_DELAY_MS,
    BOOKIE_DIR,
    BOOKIE_ID,
    BOOKIE_START_MS,
    CLUSTER,
    CLUSTER_LEAD_MS,
    COMPACTED_TOPIC,
    COMPACTION_DELAY_MS,
    CONFIG_FILE,
    CURSOR,
    ENTRY_LOG_LIMIT,
    INSTANCE_ID,
    LAYOUT,
    METADATA_DIR,
    METADATA_URL,
    NAMESPACE,
    PARTITIONED,
    PASSWORD,
    PLANS,
    SHADOWS,
    STORE_INSTANCE,
    TENANT,
    TOPIC_LOAD_MS,
    DemoEntry,
    DemoLedger,
    DemoSummary,
    DemoTopic,
    Draft,
    Real,
    TopicPlan,
)
from .seek_topic import plan_drafts

# -- the real entries ----------------------------------------------------------------------------


def _entries_folder() -> Any:
    return resources.files(__package__) / "entries"


def _load(scenario: str) -> list[Real]:
    folder = _entries_folder() / scenario
    if not folder.is_dir():
        raise LedgerctlError(f"the demo entries {scenario!r} are not installed with ledgerctl")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".bin"))
    out = []
    options = DecodeOptions(outer=Outer.PULSAR_ENTRY, depth=Depth.METADATA)
    for name in names:
        data = (folder / name).read_bytes()
        source = f"{scenario}/{name[:-4]}"
        entry = decode_entry(data, options)
        if entry.metadata is None or not entry.ok:
            raise LedgerctlError(f"the shipped demo entry {source} does not decode")
        out.append(Real(source, data, entry.metadata))
    return out


# -- planning --------------------------------------------------------------------------------


@dataclass(slots=True)
class _SchemaDraft:
    """A schema version's ledger before it has an id: its ``SchemaEntry`` as the broker
    wrote it, naming the ledger ids the broker's BookKeeper gave."""

    topic: int  # index into PLANS
    number: int  # sorts after the topic's data ledgers created in the same millisecond
    ctime: int
    closed_ms: int
    version: int
    source: str  # "<scenario>/schemas/NNNNNN", a file under entries/
    data: bytes
    captured_ledger_id: int  # the ledger the broker stored it in
    ledger: DemoLedger | None = None


#: a schema version's ledger is created this long after the version's timestamp (the
#: registry stamps SchemaInfo.timestamp, then BookkeeperSchemaStorage creates the ledger,
#: adds entry 0 and closes it: SchemaRegistryServiceImpl.putSchemaIfAbsent,
#: BookkeeperSchemaStorage.addNewSchemaEntryToStore of apache/pulsar 4.0.7)
SCHEMA_STORE_MS = 1


def _schema_storage(scenario: str) -> tuple[bytes, list[tuple[int, int, bytes, int]]]:
    """A scenario's captured schema storage: the index (SchemaLocator bytes) and each
    version as (version, the broker's ledger id, its SchemaEntry bytes, its timestamp)."""
    from pulsarctl_py.proto import schema_storage_pb2 as sspb

    folder = _entries_folder() / scenario / "schemas"
    index_file = folder / "index.bin"
    if not index_file.is_file():
        raise LedgerctlError(f"the demo schema storage {scenario!r} is not installed")
    index = index_file.read_bytes()
    versions = []
    for item in sspb.SchemaLocator.FromString(index).index:
        data = (folder / f"{item.version:06d}.bin").read_bytes()
        info = sspb.SchemaInfo.FromString(sspb.SchemaEntry.FromString(data).schema_data)
        versions.append((item.version, item.position.ledgerId, data, info.timestamp))
    return index, versions


def relocate_schema_positions(data: bytes, kind: str, ledger_ids: dict[int, int]) -> bytes:
    """A SchemaLocator (``kind`` "locator") or SchemaEntry ("entry") with the ledger id of
    every position mapped by ``ledger_ids``; every other field as it was. The first
    version's entry names itself at -1:-1 (``BookkeeperSchemaStorage.createNewSchema``),
    kept. With the identity mapping the bytes come back unchanged (the tests check it)."""
    from pulsarctl_py.proto import schema_storage_pb2 as sspb

    msg: Any = (sspb.SchemaLocator if kind == "locator" else sspb.SchemaEntry).FromString(data)
    positions = list(msg.index) + ([msg.info] if kind == "locator" else [])
    for item in positions:
        if item.position.ledgerId != -1:
            item.position.ledgerId = ledger_ids[item.position.ledgerId]
    return msg.SerializeToString()


def _schema_drafts(topic: int, plan: TopicPlan) -> list[_SchemaDraft]:
    assert plan.schemas is not None
    _index, versions = _schema_storage(plan.schemas)
    return [
        _SchemaDraft(
            topic,
            10_000 + version,
            timestamp + SCHEMA_STORE_MS,
            timestamp + SCHEMA_STORE_MS + 1,
            version,
            f"{plan.schemas}/schemas/{version:06d}",
            data,
            captured,
        )
        for version, captured, data, timestamp in versions
    ]


def _plan_topic(topic: int, plan: TopicPlan) -> list[Draft]:
    if not plan.scenarios:
        return plan_drafts(topic, plan)
    reals = sorted((r for s in plan.scenarios for r in _load(s)), key=lambda r: r.publish_time)
    if sum(plan.ledgers) != len(reals):
        raise LedgerctlError(f"demo plan {plan.name}: {len(reals)} entries, {plan.ledgers}")
    appended: list[tuple[Real, bytes, int, int | None]] = []
    last_ms: int | None = None
    messages = 0
    for real in reals:
        at = real.publish_time + APPEND_DELAY_MS
        at = at if last_ms is None else max(at, last_ms + 1)
        last_ms = at
        payload, index = real.data, None
        if plan.broker_entry_metadata:
            messages += real.messages
            index = messages - 1  # the broker's counter starts at -1 and adds each entry's count
            bem = api.BrokerEntryMetadata(broker_timestamp=at, index=index)
            payload = BrokerEntryMetadataLayer.build(bem) + real.data
        appended.append((real, payload, at, index))
    drafts = []
    ctime = reals[0].publish_time - TOPIC_LOAD_MS
    if plan.schemas is not None:
        # the broker loads the topic (its first ledger) before it stores the producer's
        # schema (ServerCnx.handleProducer: getOrCreateTopic, then addSchema)
        first_schema = min(ts for _v, _l, _d, ts in _schema_storage(plan.schemas)[1])
        ctime = min(ctime, first_schema - 1)
    start = 0
    for number, count in enumerate(plan.ledgers):
        chunk = appended[start : start + count]
        start += count
        is_open = plan.open_last and number == len(plan.ledgers) - 1
        closed = None if is_open else chunk[-1][2] + 1
        drafts.append(Draft(topic, number, ctime, closed, chunk))
        if closed is not None:
            ctime = closed  # the next ledger is created when this one is closed
    return drafts


def _latest_per_key(ledgers: list[DemoLedger], drafts: list[Draft]) -> list[tuple[int, int]]:
    """The topic positions a compactor keeps: the last entry of each key (single messages)."""
    latest: dict[str, tuple[int, int]] = {}
    for ledger, draft in zip(ledgers, drafts, strict=True):
        for entry_id, (real, _payload, _at, _index) in enumerate(draft.entries):
            md = real.metadata
            if (
                md.HasField("num_messages_in_batch")
                or md.encryption_keys
                or not md.HasField("partition_key")
                or md.uncompressed_size <= 0
            ):
                raise LedgerctlError(
                    f"demo plan: {real.source} is not a single keyed message with a value"
                )
            latest[md.partition_key] = (ledger.ledger_id, entry_id)
    return sorted(latest.values())


def _build_topics() -> list[DemoTopic]:
    """Every topic with its ledgers, ids assigned, cursors, compaction and shadows."""
    per_topic = [_plan_topic(i, plan) for i, plan in enumerate(PLANS)]
    compacted_index = next(i for i, p in enumerate(PLANS) if p.name == COMPACTED_TOPIC)
    target = per_topic[compacted_index]
    if target[-1].closed_ms is None:
        raise LedgerctlError("demo plan: the compacted topic must have closed ledgers")
    compaction_ms = target[-1].closed_ms + COMPACTION_DELAY_MS
    compacted_draft = Draft(len(PLANS), 0, compaction_ms, compaction_ms + 1, [])
    schema_drafts = [
        d for i, plan in enumerate(PLANS) if plan.schemas for d in _schema_drafts(i, plan)
    ]
    drafts: list[Any] = [d for topic in per_topic for d in topic] + [compacted_draft]
    # BookKeeper hands out ids in creation order
    ordered = sorted(drafts + schema_drafts, key=lambda d: (d.ctime, d.topic, d.number))
    for ledger_id, draft in enumerate(ordered):
        if isinstance(draft, _SchemaDraft):
            draft.ledger = DemoLedger(
                ledger_id, "schema", draft.ctime, draft.closed_ms, DigestType.CRC32C
            )
            continue
        digest = DigestType.CRC32 if draft is compacted_draft else DigestType.CRC32C
        kind = "compacted" if draft is compacted_draft else "data"
        draft.ledger = DemoLedger(ledger_id, kind, draft.ctime, draft.closed_ms, digest)
        for entry_id, (real, payload, at, index) in enumerate(draft.entries):
            bem = PLANS[draft.topic].broker_entry_metadata or index is not None
            draft.ledger.entries.append(
                DemoEntry(
                    entry_id,
                    real.source,
                    len(payload),
                    real.messages,
                    real.publish_time,
                    at if bem else None,
                    index,
                    payload=payload,
                    appended_ms=at,
                )
            )
    topics: list[DemoTopic] = []
    for plan, topic_drafts in zip(PLANS, per_topic, strict=True):
        name = TopicName.parse(plan.name)
        ledgers = [d.ledger for d in topic_drafts if d.ledger is not None]
        topic = DemoTopic(name.full_name, ledgers, description=plan.description)
        base = name.partitioned_topic
        if base.local_name in PARTITIONED and base != name:
            topic.partitioned_topic = base.full_name
        if plan.broker_entry_metadata or ledgers[-1].entries[-1].index is not None:
            last = ledgers[-1].entries[-1]
            topic.properties[mld.PROPERTY_INDEX] = str(last.index)
        topics.append(topic)
    _add_schemas(topics, schema_drafts)
    _add_cursor(topics)
    _add_compaction(topics, per_topic[compacted_index], compacted_draft)
    for shadow, source in SHADOWS.items():
        src = next(t for t in topics if t.local_name == source)
        topics.append(
            DemoTopic(
                TopicName.parse(shadow).full_name,
                list(src.ledgers),
                {mld.PROPERTY_SHADOW_SOURCE: src.name},
                shadow_source=src.name,
                description=f"shadow topic of {source}",
            )
        )
    return topics


def _add_schemas(topics: list[DemoTopic], drafts: list[_SchemaDraft]) -> None:
    """Each topic's schema ledgers (entry 0: its SchemaEntry, positions in the demo's
    ledger ids) and its schema index, as the broker wrote them."""
    from pulsarctl_py.decoders.schemas import locator_path
    from pulsarctl_py.schemas import topic_schema_name

    ids = {d.captured_ledger_id: d.ledger.ledger_id for d in drafts if d.ledger is not None}
    for i, plan in enumerate(PLANS):
        mine = [d for d in drafts if d.topic == i]
        if not mine or plan.schemas is None:
            continue
        topic = topics[i]
        index, _versions = _schema_storage(plan.schemas)
        for draft in mine:
            ledger = draft.ledger
            assert ledger is not None
            payload = relocate_schema_positions(draft.data, "entry", ids)
            ledger.entries.append(
                DemoEntry(
                    0,
                    draft.source,
                    len(payload),
                    0,
                    draft.ctime - SCHEMA_STORE_MS,
                    payload=payload,
                    appended_ms=ledger.ctime,
                )
            )
            topic.schema_ledgers.append(ledger)
        topic.schema_path = locator_path(topic_schema_name(topic.name))
        topic.schema_index = relocate_schema_positions(index, "locator", ids)


def _add_cursor(topics: list[DemoTopic]) -> None:
    topic_name, subscription, (ledger_no, entry_id), acked = CURSOR
    topic = next(t for t in topics if t.local_name == topic_name)
    topic.cursors[subscription] = {
        "mark_delete": [topic.ledgers[ledger_no].ledger_id, entry_id],
        "acked": [[topic.ledgers[n].ledger_id, e] for n, e in acked],
        "last_active": _last_append(topic) + ACK_DELAY_MS,
    }


def _last_append(topic: DemoTopic) -> int:
    last = topic.ledgers[-1]
    return last.closed_ms if last.closed_ms is not None else last.entries[-1].publish_time + 1


def _add_compaction(topics: list[DemoTopic], drafts: list[Draft], draft: Draft) -> None:
    topic = next(t for t in topics if t.local_name == COMPACTED_TOPIC)
    ledger = draft.ledger
    assert ledger is not None
    keep = _latest_per_key(topic.ledgers, drafts)
    by_position = {(lg.ledger_id, e.entry_id): e for lg in topic.ledgers for e in lg.entries}
    for entry_id, position in enumerate(keep):
        original = by_position[position]
        framed = compacted.build(
            api.MessageIdData(ledgerId=position[0], entryId=position[1]), original.payload
        )
        ledger.entries.append(
            DemoEntry(
                entry_id,
                original.source,
                len(framed),
                original.messages,
                original.publish_time,
                original=position,
                payload=framed,
                appended_ms=ledger.ctime,
            )
        )
    horizon = (topic.ledgers[-1].ledger_id, topic.ledgers[-1].last_entry_id)
    topic.compacted_ledger = ledger
    topic.cursors[mld.COMPACTION_CURSOR] = {
        "mark_delete": list(horizon),
        "acked": [],
        "last_active": ledger.closed_ms,
        "properties": {mld.COMPACTED_TOPIC_LEDGER: ledger.ledger_id},
    }


# -- metadata ----------------------------------------------------------------------------------


class _Tree:
    """Metadata nodes to write: path -> MetaValue, parents created as ZooKeeper would."""

    def __init__(self) -> None:
        self.nodes: dict[str, rec.MetaValue] = {}
        self._implicit: set[str] = set()

    def add(
        self, path: str, data: bytes, created: int, modified: int | None = None, version: int = 0
    ) -> None:
        if path in self.nodes and path not in self._implicit:
            raise LedgerctlError(f"demo metadata: {path} written twice")
        self._implicit.discard(path)
        self.nodes[path] = rec.MetaValue(
            version, STORE_INSTANCE, created, created if modified is None else modified, False, data
        )
        self._parents(path, created)

    def _parents(self, path: str, created: int) -> None:
        parent = path.rsplit("/", 1)[0]
        while parent:
            node = self.nodes.get(parent)
            if node is None:
                self.nodes[parent] = rec.MetaValue(0, STORE_INSTANCE, created, created, False, b"")
                self._implicit.add(parent)
            elif parent in self._implicit and node.created_ms > created:
                node.created_ms = node.modified_ms = created
            parent = parent.rsplit("/", 1)[0]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for path in sorted(self.nodes):
            yield rec.path_key(path), rec.build(self.nodes[path])


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _cookie() -> bytes:
    """The bookie's cookie (layout 5: a version line, then CookieFormat in text format)."""
    return (
        "5\n"
        f'bookieHost: "{BOOKIE_ID}"\n'
        f'journalDir: "{BOOKIE_DIR}"\n'
        f'ledgerDirs: "1\\t{BOOKIE_DIR}"\n'
        f'instanceId: "{INSTANCE_ID}"\n'
    ).encode()


def _ledger_metadata(ledger: DemoLedger, topic: DemoTopic) -> bytes:
    if ledger.kind == "compacted":
        # compactedTo: the last position phase one read, which is also the horizon
        horizon = topic.cursors[mld.COMPACTION_CURSOR]["mark_delete"]
        custom = {
            lm.APPLICATION_KEY: b"pulsar",
            lm.COMPONENT_KEY: b"compacted-ledger",
            lm.PULSAR_KEYS["compacted_topic"][0]: topic.name.encode(),
            lm.PULSAR_KEYS["compacted_to"][0]: lm.encode_message_id(*horizon),
        }
    elif ledger.kind == "schema":
        # LedgerMetadataUtils.buildMetadataForSchema (docs/schemas.md)
        from pulsarctl_py.schemas import topic_schema_name

        custom = {
            lm.APPLICATION_KEY: b"pulsar",
            lm.COMPONENT_KEY: b"schema",
            lm.PULSAR_KEYS["schema_id"][0]: topic_schema_name(topic.name).encode(),
        }
    else:
        custom = lm.pulsar_custom_metadata(TopicName.parse(topic.name).persistence_name)
    md = lm.LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        state=lm.LedgerState.CLOSED if ledger.closed_ms is not None else lm.LedgerState.OPEN,
        ensembles={0: [BOOKIE_ID]},
        last_entry_id=ledger.last_entry_id if ledger.closed_ms is not None else -1,
        length=ledger.size if ledger.closed_ms is not None else 0,
        digest_type=ledger.digest_type,
        password=PASSWORD,
        ctime=ledger.ctime,
        custom_metadata=custom,
    )
    return lm.build(md)


def _ml_info(topic: DemoTopic) -> bytes:
    info = mlpb.ManagedLedgerInfo()
    for ledger in topic.ledgers:
        item = info.ledgerInfo.add(ledgerId=ledger.ledger_id)
        if ledger.closed_ms is None:
            item.timestamp = 0  # what the broker records for the ledger it is writing
        else:
            item.entries = len(ledger.entries)
            item.size = ledger.size
            item.timestamp = ledger.closed_ms
    for key, value in topic.properties.items():
        info.properties.add(key=key, value=value)
    return mld.build_info(info)


def _cursor_info(cursor: dict[str, Any]) -> bytes:
    ledger_id, entry_id = cursor["mark_delete"]
    info = mlpb.ManagedCursorInfo(
        cursorsLedgerId=-1,  # the state is in this znode (the cursor was closed cleanly)
        markDeleteLedgerId=ledger_id,
        markDeleteEntryId=entry_id,
        lastActive=cursor["last_active"],
    )
    # individually acked entries beyond the mark-delete: ranges (lower exclusive, upper]
    for acked_ledger, acked_entry in cursor["acked"]:
        info.individualDeletedMessages.add(
            lowerEndpoint=mlpb.NestedPositionInfo(ledgerId=acked_ledger, entryId=acked_entry - 1),
            upperEndpoint=mlpb.NestedPositionInfo(ledgerId=acked_ledger, entryId=acked_entry),
        )
    for name, value in cursor.get("properties", {}).items():
        info.properties.add(name=name, value=value)
    return mld.build_info(info)


def _metadata_tree(topics: list[DemoTopic], cluster_ms: int) -> tuple[_Tree, int]:
    tree = _Tree()
    at = cluster_ms
    tree.add("/ledgers/LAYOUT", LAYOUT, at)
    tree.add("/ledgers/INSTANCEID", INSTANCE_ID.encode(), at)
    tree.add("/ledgers/idgen", b"", at)
    tree.add("/ledgers/available/readonly", b"", at + BOOKIE_START_MS)
    tree.add(f"/ledgers/cookies/{BOOKIE_ID}", _cookie(), at + BOOKIE_START_MS)
    at += BOOKIE_START_MS + 500
    tree.add(
        f"/admin/clusters/{CLUSTER}",
        _json(
            {"serviceUrl": "http://localhost:8080", "brokerServiceUrl": "pulsar://localhost:6650"}
        ),
        at,
    )
    tree.add(
        f"/admin/policies/{TENANT}",
        _json({"adminRoles": [], "allowedClusters": [CLUSTER]}),
        at + 1,
    )
    tree.add(
        f"/admin/policies/{TENANT}/{NAMESPACE}",
        _json(
            {
                "bundles": {
                    "boundaries": [
                        "0x00000000",
                        "0x40000000",
                        "0x80000000",
                        "0xc0000000",
                        "0xffffffff",
                    ],
                    "numBundles": 4,
                },
                "replication_clusters": [CLUSTER],
                "deleted": False,
            }
        ),
        at + 2,
    )
    owners: dict[int, DemoTopic] = {}
    for topic in topics:
        if topic.shadow_source is None:
            for ledger in topic.ledgers + topic.schema_ledgers:
                owners[ledger.ledger_id] = topic
            if topic.compacted_ledger is not None:
                owners[topic.compacted_ledger.ledger_id] = topic
    ledgers = {lg.ledger_id: lg for t in topics for lg in t.ledgers + t.schema_ledgers}
    ledgers.update(
        {t.compacted_ledger.ledger_id: t.compacted_ledger for t in topics if t.compacted_ledger}
    )
    for ledger_id in sorted(ledgers):
        ledger = ledgers[ledger_id]
        closed = ledger.closed_ms is not None
        tree.add(
            lm.ledger_path(ledger_id),
            _ledger_metadata(ledger, owners[ledger_id]),
            ledger.ctime,
            ledger.closed_ms if closed else None,
            1 if closed else 0,
        )
    for base, partitions in PARTITIONED.items():
        name = TopicName.parse(base)
        first = min(t.ledgers[0].ctime for t in topics if t.partitioned_topic == name.full_name)
        tree.add(
            f"/admin/partitioned-topics/{TENANT}/{NAMESPACE}/persistent/{name.encoded_local_name}",
            _json({"partitions": partitions}),
            first - TOPIC_LOAD_MS,
        )
    for topic in topics:
        if topic.schema_path is not None:
            # created with version 0, rewritten with each later version
            # (BookkeeperSchemaStorage.updateSchemaLocator)
            first, last = topic.schema_ledgers[0], topic.schema_ledgers[-1]
            assert first.closed_ms is not None and last.closed_ms is not None
            tree.add(
                topic.schema_path,
                topic.schema_index,
                first.closed_ms,
                last.closed_ms,
                len(topic.schema_ledgers) - 1,
            )
    for topic in topics:
        name = TopicName.parse(topic.name)
        if topic.shadow_source is not None:
            source = next(t for t in topics if t.name == topic.shadow_source)
            created = _last_append(source) + COMPACTION_DELAY_MS
            modified, version = created, 1
        else:
            created = topic.ledgers[0].ctime
            last = topic.ledgers[-1]
            modified = max(last.ctime, last.closed_ms or 0)
            version = len(topic.ledgers) + (0 if last.closed_ms is None else 1)
        tree.add(name.ml_path, _ml_info(topic), created, modified, version)
        for subscription, cursor in topic.cursors.items():
            tree.add(
                name.cursor_path(subscription),
                _cursor_info(cursor),
                created if subscription != mld.COMPACTION_CURSOR else cursor["last_active"] - 1,
                cursor["last_active"],
                1,
            )
    return tree, len(ledgers)


def _write_metadata(path: Path, tree: _Tree, ledger_count: int) -> None:
    from pulsarctl_py.stores.metadata.rocksdb import create_metadata_store

    store = create_metadata_store(path)
    try:
        # ids came from the store-wide sequence, as Pulsar's ledger id generator takes them
        store.put_raw(rec.SEQUENTIAL_ID_KEY, rec.build_long(ledger_count))
        store.put_raw(rec.INSTANCE_ID_KEY, rec.build_long(STORE_INSTANCE))
        for key, value in tree.items():
            store.put_raw(key, value)
    finally:
        store.close()


# -- bookie --------------------------------------------------------------------------------------


def _bookie_entries(ledger: DemoLedger) -> list[bytes]:
    out = []
    length = 0
    for entry in ledger.entries:
        length += entry.size
        header = BookieEntryHeader(ledger.ledger_id, entry.entry_id, entry.entry_id - 1, length)
        out.append(bookkeeper.build(header, entry.payload, ledger.digest_type, PASSWORD))
    return out


def _write_bookie(
    current: Path, ledgers: list[DemoLedger], journal_id: int
) -> tuple[list[str], str]:
    from pulsarctl_py.stores.bookie.writers import (
        JournalWriter,
        write_db_ledger_dir,
        write_last_mark,
    )

    key = master_key(PASSWORD)
    packed = {ledger.ledger_id: _bookie_entries(ledger) for ledger in ledgers}
    # DbLedgerStorage flushes its write cache sorted by ledger and entry
    ordered = [entry for ledger_id in sorted(packed) for entry in packed[ledger_id]]
    current.mkdir(parents=True)
    _write_new(current / "VERSION", _cookie())
    summary = write_db_ledger_dir(current, ordered, key, log_size_limit=ENTRY_LOG_LIMIT)
    # the journal holds the adds in the order they happened, one flush (and 512-byte
    # alignment) per add, the master key before a ledger's first entry
    adds = []
    for ledger in ledgers:
        for entry, data in zip(ledger.entries, packed[ledger.ledger_id], strict=True):
            adds.append((entry.appended_ms, ledger.ledger_id, entry.entry_id, data))
    adds.sort(key=lambda a: a[:3])
    name = journal_format.journal_file_name(journal_id)
    writer = JournalWriter(current / name)
    try:
        for _at, ledger_id, entry_id, data in adds:
            if entry_id == 0:
                writer.add_master_key(ledger_id, key)
            writer.add_entry(data)
            writer.flush()
    finally:
        end = writer.close()
    write_last_mark(current, journal_id, end)  # everything is in the entry logs already
    logs = [f"{log_id:x}.log" for log_id in summary.log_ids]
    return logs, name


def _write_new(path: Path, data: bytes) -> None:
    with open(path, "xb") as fh:
        fh.write(data)


# -- the directory -------------------------------------------------------------------------------

_OURS = (METADATA_DIR, BOOKIE_DIR, CONFIG_FILE)


def _looks_like_ours(path: Path) -> bool:
    if path.name == CONFIG_FILE:
        return path.is_file()
    if not path.is_dir() or path.is_symlink():
        return False
    if not any(path.iterdir()):
        return True
    if path.name == METADATA_DIR:
        return (path / "CURRENT").is_file()
    return (path / "current").is_dir()


def _prepare(target: Path, force: bool) -> None:
    from pulsarctl_py.outputs import check_directory_target

    # a symbolic link, a device, a FIFO or a file: refused, never followed or replaced
    check_directory_target(target)
    if target.is_dir() and any(target.iterdir()):
        if not force:
            raise LedgerctlError(
                f"{target} is not empty; choose a new directory or pass --force to replace "
                "the demo data in it"
            )
        for name in _OURS:
            path = target / name
            if not path.exists() and not path.is_symlink():
                continue
            if path.is_symlink():
                raise LedgerctlError(
                    f"will not replace {path}: it is a symbolic link (to {os.readlink(path)})"
                )
            if not _looks_like_ours(path):
                raise LedgerctlError(
                    f"will not replace {path}: it does not look like ledgerctl demo data"
                )
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
    target.mkdir(parents=True, exist_ok=True)


def _config_text() -> str:
    dirs = ", ".join(json.dumps(d) for d in [BOOKIE_DIR])
    return (
        "# Written by `ledgerctl demo`: ledgerctl commands run in this directory (or one\n"
        "# below it) read the demo's metadata store and bookie directory without connection\n"
        "# flags. Relative paths are relative to this file.\n"
        f'metadata_url = "{METADATA_URL}"\n'
        f"bookie_dirs = [{dirs}]\n"
    )


def create_demo(target: str | os.PathLike[str], *, force: bool = False) -> DemoSummary:
    """Create the demo data directory in ``target`` and describe what it holds.

    ``target`` must be missing or empty unless ``force``; then only the demo's own
    entries in it (``metadata/``, ``bookkeeper/``, ``ledgerctl.toml``) are replaced.
    """
    root = Path(target)
    _prepare(root, force)
    topics = _build_topics()
    first_publish = min(e.publish_time for t in topics for lg in t.ledgers for e in lg.entries)
    cluster_ms = (first_publish - CLUSTER_LEAD_MS) // 1000 * 1000
    tree, ledger_count = _metadata_tree(topics, cluster_ms)
    created: list[Path] = []
    try:
        created.append(root / METADATA_DIR)
        _write_metadata(root / METADATA_DIR, tree, ledger_count)
        summary = DemoSummary(root, topics, {}, [], "")
        created.append(root / BOOKIE_DIR)
        logs, journal = _write_bookie(
            root / BOOKIE_DIR / "current", summary.ledgers(), cluster_ms + BOOKIE_START_MS
        )
        created.append(root / CONFIG_FILE)
        _write_new(root / CONFIG_FILE, _config_text().encode())
    except BaseException:
        for path in created:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                path.unlink()
        raise
    summary.partitioned_topics = {TopicName.parse(b).full_name: n for b, n in PARTITIONED.items()}
    summary.entry_logs = logs
    summary.journal = journal
    return summary
