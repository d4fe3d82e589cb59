"""Migrations that write new ledgers, then swap them in through a plan.

``migrate compacted``: the topic's compacted ledger rewritten in the other batch format
(PIP-429 ``compacted_batch_indexes``, field 31, or the classic ``compacted_out``
placeholders) by the compaction package's phase two and writer; the ``__compaction``
cursor is re-pointed to it by a plan
(:func:`pulsarctl_py.repair.compaction_pointer.point_compaction`, the horizon kept).

The new ledger is written (bookie side, refused while the bookie holds its lock, and its
BookKeeper metadata) only when a plan file is asked for: until the plan is applied nothing
references it, and ``ledgerctl orphans`` lists it if the plan is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import DataError, LedgerctlError, NotFoundError
from pulsarctl_py.plans import Draft

from .compaction_pointer import point_compaction
from .topic_state import (
    COMPACTED_TOPIC_LEDGER,
    last_entry,
    ledger_metadata,
    ledger_metadata_path,
    load_cursors,
    load_topic,
    set_topic,
    write_cursor,
)

if TYPE_CHECKING:
    from pulsarctl_py.compaction.core import CompactedEntry, Stats
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.plans import Plan
    from pulsarctl_py.plans.written import Written
    from pulsarctl_py.stores.ledger_writer import NewLedger
    from pulsarctl_py.writesettings import WriteSettings


class _KeepAll:
    """Phase two's winners over a compacted ledger: every record in it is its key's latest."""

    def keeps(self, key: bytes, rank: bytes) -> bool:
        return True

    def get(self, key: bytes) -> tuple[bytes, bool] | None:
        return None


@dataclass(slots=True)
class CompactedState:
    topic: str
    ledger_id: int
    horizon: tuple[int, int]
    compacted_to: tuple[int, int]
    cursor_version: int | None
    partition: int
    data_ledgers: list[int]
    last_entry: int
    formats: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "compacted_ledger": self.ledger_id,
            "horizon": "{}:{}".format(*self.horizon),
            "compacted_to": "{}:{}".format(*self.compacted_to),
            "entries": self.last_entry + 1,
            "batches": dict(self.formats),
        }


def compacted_state(source: LedgerSource, topic_name: str) -> CompactedState:
    """The topic's compacted ledger, horizon and the ``__compaction`` cursor's version."""
    assert source.metadata is not None
    draft = Draft(source.metadata)
    topic = load_topic(draft, topic_name, changes=False)
    cursors = load_cursors(draft, topic, source, only=mld.COMPACTION_CURSOR)
    ledger = dict(cursors[0].properties).get(COMPACTED_TOPIC_LEDGER) if cursors else None
    if ledger is None or cursors[0].position is None:
        raise NotFoundError(
            f"{topic.name.full_name} has no compacted ledger (CompactedTopicLedger)"
        )
    md = ledger_metadata(draft, ledger)
    if md is None:
        raise DataError(
            f"compacted ledger {ledger} has no BookKeeper metadata: "
            "`ledgerctl repair compaction --clear` first"
        )
    if not md.is_closed or md.last_entry_id < 0:
        raise DataError(f"compacted ledger {ledger} is not closed or holds no entry")
    tags = md.pulsar()
    to = tags.compacted_to
    node = source.metadata.get(cursors[0].path)
    return CompactedState(
        topic=topic.name.full_name,
        ledger_id=ledger,
        horizon=cursors[0].position,
        compacted_to=cursors[0].position if to is None else (to["ledger_id"], to["entry_id"]),
        cursor_version=None if node is None else node.stat.version,
        partition=topic.name.partition_index,
        data_ledgers=topic.ids,
        last_entry=md.last_entry_id,
    )


def converted_entries(
    state: CompactedState,
    fmt: str,
    metadata_url: str,
    bookie_dirs: list[str],
    *,
    accept_damage: bool = False,
    stats: Stats | None = None,
) -> Iterator[CompactedEntry]:
    """The compacted ledger's entries with every readable batch rebatched in ``fmt``
    (single messages copied byte for byte); counts the input's batch formats into
    ``state.formats``. A damaged entry stops it, unless ``accept_damage``: then it is
    copied as the compaction copies it (an undecodable batch whole) and listed in
    ``stats`` (``damaged``, ``problems``)."""
    from pulsarctl_py.compaction.core import CompactionOptions, is_readable_batch, phase_two
    from pulsarctl_py.compaction.reader import close_sources, read_split
    from pulsarctl_py.engines.base import KIND_COMPACTED, Split

    split = Split(
        state.topic,
        state.ledger_id,
        0,
        state.last_entry,
        tuple(bookie_dirs),
        metadata_url,
        0,
        KIND_COMPACTED,
    )

    def counted() -> Iterator[Any]:
        for raw in read_split(split, accept_damage):
            md = raw.metadata
            if md is not None and is_readable_batch(md):
                kind = "pip-429" if md.compacted_batch_indexes else "classic"
                state.formats[kind] = state.formats.get(kind, 0) + 1
            else:
                state.formats["single"] = state.formats.get("single", 0) + 1
            yield raw

    # a format conversion: the entries keep their broker entry metadata prefix
    options = CompactionOptions(
        retain_null_key=True, format=fmt, keep_entry_metadata=True, accept_damage=accept_damage
    )
    stats = stats if stats is not None else Stats()
    try:
        yield from phase_two(counted(), _KeepAll(), options, stats)
    finally:
        close_sources()


def swap_compacted(
    draft: Draft,
    source: LedgerSource | None,
    state: CompactedState,
    ledger_id: int,
    report: dict[str, Any],
    written: list[Written],
    *,
    warnings: list[str] | None = None,
    damaged: int = 0,
) -> None:
    """Draft the swap of a rewritten compacted ledger: the ``__compaction`` cursor
    re-pointed to ``ledger_id`` with the horizon kept
    (:func:`~.compaction_pointer.point_compaction`), the migration's ``report`` recorded
    with the plan's repair, the ledger ``written`` recorded for undo; ``damaged`` entries
    copied (``--accept-damage``) are named in a warning."""
    point_compaction(draft, state.topic, ledger_id, source, horizon=state.horizon)
    draft.repairs[-1]["migration"] = report | {"written_ledger": ledger_id}
    draft.written.extend(written)
    draft.warnings.extend(warnings or [])
    if damaged:
        draft.warnings.append(
            f"{damaged} damaged entries are copied (--accept-damage); the repair record lists them"
        )


# -- migrate index ---------------------------------------------------------------------------

INDEX_PROPERTY = "index"


def legacy_kop_offset(ledger_id: int, entry_id: int, batch_index: int = 0) -> int:
    """The offset KoP < 2.8 gave a message (formats.md §13): ledger << 44 | entry << 12 |
    batch, in a Java ``long`` (negative from ledger 2^19 on, wrapped from 2^20)."""
    from pulsarctl_py.seek.legacy import encode_legacy_offset

    return encode_legacy_offset(ledger_id, entry_id, batch_index, "ledger-entry-batch")


@dataclass(slots=True)
class IndexPlan:
    """Which ledgers are rewritten, how many entries each, and the mapping.

    The new entries are not held: :func:`write_index_ledgers` reads the old ones again and
    writes each copy as it is made, so memory does not grow with the topic."""

    topic: str
    persistence_name: str
    ledgers: list[int]  # rewritten, in topic order
    start: int  # the index of the first rewritten message
    last_index: int = -1
    entries: dict[int, int] = field(default_factory=dict)  # old ledger -> entries copied
    last_entry: dict[int, int] = field(default_factory=dict)  # old ledger -> last entry read
    mapping: list[dict[str, Any]] = field(default_factory=list)
    timestamps_from_publish_time: int = 0
    reindexed: int = 0  # entries whose existing BEM index is replaced
    new_ids: dict[int, int] = field(default_factory=dict)  # old ledger -> new ledger
    lengths: dict[int, int] = field(default_factory=dict)  # old ledger -> new length
    #: the highest ledger id the topic keeps before the copies (new ids must be above it)
    floor: int = -1
    #: damaged entries copied as stored (``--accept-damage``): {"position", "problem"}
    damaged: list[dict[str, str]] = field(default_factory=list)
    #: "L:A..B" ranges stored past a rewritten closed ledger's last entry: not copied
    past_last: list[str] = field(default_factory=list)
    #: planned with ``accept_damage``: the copies are read again the same way
    accept_damage: bool = False
    #: the new ledgers' settings and where each came from (WriteSettings.sources)
    write_settings: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "ledgers": list(self.ledgers),
            "new_ledgers": {str(k): v for k, v in self.new_ids.items()},
            "first_index": self.start,
            "last_index": self.last_index,
            "entries": sum(self.entries.values()),
            "messages": self.last_index - self.start + 1,
            "broker_timestamp_from_publish_time": self.timestamps_from_publish_time,
            "reindexed_entries": self.reindexed,
            "damaged": list(self.damaged),
            "past_last_not_copied": list(self.past_last),
            "write_settings": self.write_settings,
        }


def _index_split(topic: str, ledger_id: int, last: int, dirs: list[str], url: str) -> Any:
    from pulsarctl_py.engines.base import KIND_TOPIC, Split

    return Split(topic, ledger_id, 0, last, tuple(dirs), url, 0, KIND_TOPIC)


def _counted(raw: Any) -> Any:
    """The entry's MessageMetadata; without one its messages cannot be counted (an error,
    damage accepted or not: no index could be given to it or after it)."""
    if raw.metadata is None:
        raise DataError(
            "{}:{}: no readable MessageMetadata; cannot count its messages".format(*raw.position)
        )
    return raw.metadata


def _reindexed(raw: Any, index: int) -> tuple[bytes, int, int, Any, bool]:
    """A topic entry with the broker entry metadata of the messages after ``index``:
    (its bytes, its last index, its message count, its old BEM, whether the broker
    timestamp is its publish_time)."""
    from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer
    from pulsarctl_py.proto import pulsar_api_pb2 as api

    md = _counted(raw)
    count = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
    old = _entry_bem(raw)
    index += max(count, 1)
    new = api.BrokerEntryMetadata(index=index)
    from_publish = not (old is not None and old.HasField("broker_timestamp"))
    new.broker_timestamp = md.publish_time if from_publish else old.broker_timestamp
    body = raw.data[len(raw.bem) :]
    return BrokerEntryMetadataLayer.build(new) + bytes(body), index, count, old, from_publish


def _entry_bem(raw: Any) -> Any:
    from pulsarctl_py.proto import pulsar_api_pb2 as api

    if not raw.bem:
        return None
    bem = api.BrokerEntryMetadata()
    bem.ParseFromString(raw.bem[6:])
    return bem


def plan_index(
    source: LedgerSource,
    topic_name: str,
    metadata_url: str,
    bookie_dirs: list[str],
    start: int | None = None,
    *,
    accept_damage: bool = False,
) -> IndexPlan:
    """Read the topic and compute the rewritten ledgers (nothing written).

    Every ledger from the first one whose entries lack broker entry metadata to the end
    of the topic is rewritten: ledger ids order positions (the broker keeps its ledgers in
    a map sorted by id), so a new ledger (a new, higher id) cannot stand before a ledger
    that stays. Entries that already carry an index get the continued one (reported).

    A damaged entry (a digest, ids or checksum that do not match, a payload that does not
    decode) stops it, unless ``accept_damage``: then it is copied as stored and listed in
    ``IndexPlan.damaged``. An entry whose metadata does not decode always stops it (its
    messages cannot be counted, so no index can be given to it or after it).
    """
    from pulsarctl_py.compaction.core import payload_damage, refuse
    from pulsarctl_py.compaction.reader import close_sources, read_split

    assert source.metadata is not None
    draft = Draft(source.metadata)
    topic = load_topic(draft, topic_name, changes=False)
    infos = list(topic.info.ledgerInfo)
    name = topic.name.full_name
    previous_index: int | None = None
    first: int | None = None
    try:
        for pos, li in enumerate(infos):
            if li.entries == 0:
                continue
            split = _index_split(name, li.ledgerId, li.entries - 1, bookie_dirs, metadata_url)
            ledger_index: int | None = None
            for raw in read_split(split, accept_damage):  # one at a time, up to one without
                bem = _entry_bem(raw)
                if bem is None or not bem.HasField("index"):
                    first = pos
                    break
                ledger_index = bem.index
            if first is not None:
                break
            if ledger_index is not None:
                previous_index = ledger_index
    finally:
        close_sources()
    if first is None:
        raise NotFoundError(
            f"every entry of {topic.name.full_name} carries a broker entry metadata index: "
            "nothing to migrate"
        )
    if start is None:
        start = 0 if previous_index is None else previous_index + 1
    elif previous_index is not None and start <= previous_index:
        raise LedgerctlError(
            f"--start {start} would reuse offsets: the entries before the migrated ledgers "
            f"reach index {previous_index}"
        )
    if start < 0:
        raise LedgerctlError("--start must be 0 or more")
    rewritten = [li for li in infos[first:]]
    plan = IndexPlan(
        topic.name.full_name, topic.name.persistence_name, [li.ledgerId for li in rewritten], start
    )
    plan.floor = max((li.ledgerId for li in infos[:first]), default=-1)
    plan.accept_damage = accept_damage
    index = start - 1
    try:
        for li in rewritten:
            if li.entries == 0 and li is not infos[-1]:
                plan.entries[li.ledgerId] = 0
                plan.last_entry[li.ledgerId] = -1
                continue
            last = li.entries - 1
            if li is infos[-1] and li.entries == 0:
                found = last_entry(topic, li.ledgerId, source)
                last = -1 if found is None else found
            plan.last_entry[li.ledgerId] = last
            plan.entries[li.ledgerId] = 0
            past = source.ledger(li.ledgerId).past_last
            if past is not None:  # no reader gets them: not copied, and said
                plan.past_last.append(f"{li.ledgerId}:{past[0]}..{past[1]}")
            split = _index_split(name, li.ledgerId, last, bookie_dirs, metadata_url)
            for raw in read_split(split, accept_damage) if last >= 0 else []:
                _counted(raw)
                damage = raw.damage or payload_damage(raw)
                if damage is not None:
                    if not accept_damage:
                        raise refuse(raw.position, damage)
                    where = "{}:{}".format(*raw.position)
                    plan.damaged.append({"position": where, "problem": damage})
                _, index, count, old, from_publish = _reindexed(raw, index)
                plan.entries[li.ledgerId] += 1
                plan.timestamps_from_publish_time += from_publish
                if old is not None and old.HasField("index"):
                    plan.reindexed += 1
                first_index = index - max(count, 1) + 1
                plan.mapping.append(
                    {
                        "old_position": "{}:{}".format(*raw.position),
                        "legacy_kop_offset": legacy_kop_offset(*raw.position),
                        "old_index": None
                        if old is None or not old.HasField("index")
                        else old.index,
                        "messages": count,
                        "first_index": first_index,
                        "index": index,
                    }
                )
    finally:
        close_sources()
    plan.last_index = index
    return plan


def _copies(
    plan: IndexPlan, old: int, at: list[int], metadata_url: str, bookie_dirs: list[str]
) -> Iterator[bytes]:
    """The new entries of ledger ``old``, made again as the plan made them, one at a time;
    ``at[0]``: the index before the first, then after the last made."""
    from pulsarctl_py.compaction.reader import close_sources, read_split

    last = plan.last_entry.get(old, -1)
    if last < 0:
        return
    try:
        split = _index_split(plan.topic, old, last, bookie_dirs, metadata_url)
        for raw in read_split(split, plan.accept_damage):
            data, at[0], _, _, _ = _reindexed(raw, at[0])
            yield data
    finally:  # before the writer opens the bookie's index for writing
        close_sources()


def data_custom_metadata(persistence_name: str) -> dict[str, bytes]:
    """A data ledger's custom metadata (``LedgerMetadataUtils
    .buildBaseManagedLedgerMetadata``), in the order a broker's data ledger stores it (the
    iteration order of the Java HashMap it is built in: ``pulsar/managed-ledger`` and
    ``component`` share a bucket, and their order is that of the ``Map.of`` they come
    from, which each broker process salts anew: either order is a broker's)."""
    from pulsarctl_py.decoders import ledger_metadata as lm

    return {
        lm.PULSAR_KEYS["managed_ledger"][0]: persistence_name.encode("utf-8"),
        lm.COMPONENT_KEY: b"managed-ledger",
        lm.APPLICATION_KEY: b"pulsar",
    }


def index_settings(
    source: LedgerSource, plan: IndexPlan, settings: WriteSettings, *, offline: bool = False
) -> tuple[WriteSettings, list[str]]:
    """The settings of the topic's new data ledgers: the topic's persistence policies
    (topic-level, else the namespace's) over the broker's quorums
    (``BrokerService.getManagedLedgerConfig``, :func:`~pulsarctl_py.writesettings
    .topic_data_settings`), and the managed-ledger digest and password, checked against
    the topic's newest ledger with metadata (a different password is refused: the broker
    could not open the ledgers). ``offline``: written into one stopped bookie, where the
    quorums are 1 whatever the policies say (``LedgerTarget.effective``): the topic
    policies are not read."""
    from pulsarctl_py.stores.metadata import resolve_topic
    from pulsarctl_py.writesettings import check_against_ledger, data_settings, topic_data_settings

    assert source.metadata is not None
    if offline:
        name = resolve_topic(plan.topic)
        settings = data_settings(settings, source.metadata, name.namespace_name, name.local_name)
    else:
        settings = topic_data_settings(settings, source, plan.topic)
    plan.write_settings = settings.sources()
    notes: list[str] = []
    draft = Draft(source.metadata)
    topic = load_topic(draft, plan.topic, changes=False)
    for ledger_id in reversed(topic.ids):
        md = ledger_metadata(draft, ledger_id)
        if md is not None:
            notes += check_against_ledger(settings, md, ledger_id)
            break
    return settings, notes


def write_index_ledgers(
    metadata_url: str,
    bookie_dirs: list[str],
    plan: IndexPlan,
    *,
    settings: WriteSettings | None = None,
    options: Any = None,
    journal: Any = None,
) -> list[NewLedger]:
    """Write the plan's new ledgers, as the managed ledger writes data ledgers (to the
    running bookies, or into the stopped bookie of ``bookie_dirs``), through the one
    "write new ledgers" context (:class:`pulsarctl_py.plans.writing.LedgerTarget`); fills
    ``new_ids``.

    Refused while the bookie holds its lock or is registered as running. A failure
    removes what this call wrote (metadata, and a stopped bookie's files and index keys)
    before it is raised."""
    from pulsarctl_py.plans.writing import LedgerTarget
    from pulsarctl_py.stores.ledger_writer import Journal
    from pulsarctl_py.writesettings import resolve_write_settings

    settings = settings if settings is not None else resolve_write_settings()
    config = settings.data_config(data_custom_metadata(plan.persistence_name))
    floor = plan.floor
    at = [plan.start - 1]  # the index before the next copy

    class Above(Journal):
        """Refuses an id at or below the ledgers the topic keeps, before it is used."""

        def attach(self, store: Any) -> None:
            if journal is not None:
                journal.attach(store)

        def creating(self, ledger_id: int, path: str, ctoken: int) -> None:
            if ledger_id <= floor:
                raise DataError(
                    f"the ledger id generator gave {ledger_id}, not above ledger "
                    f"{floor} that the topic keeps before the copies: the broker "
                    "orders ledgers by id"
                )
            if journal is not None:
                journal.creating(ledger_id, path, ctoken)

        def files(self, ledger_id: int, files: Any) -> None:
            if journal is not None:
                journal.files(ledger_id, files)

        def closing(self, ledger_id: int, closed: bytes) -> None:
            if journal is not None:
                journal.closing(ledger_id, closed)

    try:
        with LedgerTarget.opened(
            metadata_url,
            bookie_dirs,
            options=options,
            doing="writing the migrated ledgers into its storage",
            journal=Above(),
            topic_ledgers=plan.ledgers,
        ) as target:
            for old in plan.ledgers:
                copies = (
                    _copies(plan, old, at, metadata_url, bookie_dirs)
                    if plan.entries.get(old, 0)
                    else iter(())
                )
                ledger = target.write(config, copies)
                plan.new_ids[old] = ledger.ledger_id
                plan.lengths[old] = ledger.length
                if ledger.entries != plan.entries.get(old, 0):
                    raise DataError(
                        f"ledger {old} gave {ledger.entries} entries to copy, "
                        f"{plan.entries.get(old, 0)} when the migration was planned: it "
                        "changed meanwhile; plan again"
                    )
            if at[0] != plan.last_index:
                raise DataError(
                    f"the copies end at index {at[0]}, the plan at {plan.last_index}: the "
                    "topic changed meanwhile; plan again"
                )
            return list(target.written)
    except BaseException:
        plan.new_ids.clear()
        raise


def swap_index_ledgers(
    draft: Draft,
    plan: IndexPlan,
    source: LedgerSource | None,
    *,
    delete_old: bool = False,
    written: list[Written] | None = None,
    mapping_file: str | None = None,
) -> None:
    """Draft the swap: the ML list names the new ledgers (one compare-and-set on the ML
    znode), its ``index`` property is raised to the last index, cursors and the terminated
    position move to the same entry of the new ledger; old ledgers' metadata deleted only
    with ``delete_old``. The new ledgers ``written`` are recorded for undo, and the
    mapping's file, when it was saved to one, with the repair."""
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

    topic = load_topic(draft, plan.topic)
    missing = [lid for lid in plan.ledgers if lid not in topic.ids]
    if missing:
        raise DataError(
            f"ledgers {missing} are no longer in {plan.topic}'s list: make a new migration"
        )
    ids = plan.new_ids

    def moved(lid: int, eid: int) -> tuple[int, int]:
        return (ids.get(lid, lid), eid)

    msg = mlpb.ManagedLedgerInfo()
    msg.CopyFrom(topic.info)
    for li in msg.ledgerInfo:
        if li.ledgerId in ids:
            old = li.ledgerId
            li.ledgerId = ids[old]
            li.entries = plan.entries.get(old, 0)
            li.size = plan.lengths.get(old, 0)
            li.ClearField("offloadContext")
    props = {p.key: p.value for p in msg.properties}
    try:
        existing = int(props.get(INDEX_PROPERTY, "-1"))
    except ValueError:
        existing = -1
    value = max(existing, plan.last_index)
    if existing > plan.last_index:
        draft.warnings.append(
            f"the index property stays at {existing} (above the last migrated index "
            f"{plan.last_index}): it is never lowered, the next offsets continue after it"
        )
    kept = [(p.key, p.value) for p in msg.properties if p.key != INDEX_PROPERTY]
    del msg.properties[:]
    for k, v in [*kept, (INDEX_PROPERTY, str(value))]:
        msg.properties.add(key=k, value=v)
    if msg.HasField("terminatedPosition"):
        t = msg.terminatedPosition
        t.ledgerId, t.entryId = moved(t.ledgerId, t.entryId)
    cursors = load_cursors(draft, topic, source)
    set_topic(
        draft,
        topic,
        msg,
        f"swap ledgers {plan.ledgers} for their copies with a continuous index "
        f"{plan.start}..{plan.last_index}; index property {value}",
    )
    for cursor in cursors:
        _move_cursor(draft, topic, cursor, moved, plan)
    if delete_old:
        for lid in plan.ledgers:
            path = ledger_metadata_path(draft, lid)
            if path is not None:
                draft.delete(path, "ledger", f"old ledger {lid}, copied into {ids[lid]}")
    record = {"repair": "migrate-index"} | plan.to_json()
    record["old_ledgers_deleted"] = delete_old
    if mapping_file is not None:
        record["mapping_file"] = mapping_file
    draft.repairs.append(record)
    draft.written.extend(written or [])
    draft.warnings.append(
        f"the new ledgers {sorted(ids.values())} are written already; `ledgerctl undo` "
        "restores the metadata and leaves them unreferenced (`ledgerctl orphans` lists them)"
    )
    if plan.past_last:
        draft.warnings.append(
            "entries stored past their closed ledger's last entry are not copied (no reader "
            f"gets them): {', '.join(plan.past_last[:10])}"
        )
    if plan.damaged:
        shown = ", ".join(d["position"] for d in plan.damaged[:10])
        draft.warnings.append(
            f"{len(plan.damaged)} damaged entries are copied as stored (--accept-damage): "
            f"{shown}{' ...' if len(plan.damaged) > 10 else ''}; the repair record lists them"
        )
    if plan.reindexed:
        draft.warnings.append(
            f"{plan.reindexed} entries already carried an index and get a new one: "
            "consumers' offsets in them must be translated with the mapping too"
        )
    if plan.timestamps_from_publish_time:
        draft.warnings.append(
            f"broker_timestamp of {plan.timestamps_from_publish_time} entries is their "
            "publish_time (the broker's append time was never recorded)"
        )


def _move_cursor(draft: Draft, topic: Any, cursor: Any, moved: Any, plan: IndexPlan) -> None:
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

    if cursor.position is None:
        return
    ids = plan.new_ids
    touched = cursor.position[0] in ids or any(
        r.lowerEndpoint.ledgerId in ids or r.upperEndpoint.ledgerId in ids
        for r in cursor.decoded.message.individualDeletedMessages
    )
    compacted = dict(cursor.properties).get(COMPACTED_TOPIC_LEDGER)
    if not touched and compacted is None:
        return
    if compacted is not None:
        # the compacted ledger names the old positions: compact again after the migration
        start = (topic.ids[0], -1)
        write_cursor(
            draft,
            cursor,
            start,
            f"the compacted ledger {compacted} names positions of the old ledgers: clear "
            f"{COMPACTED_TOPIC_LEDGER} and compact again",
            properties=[(k, v) for k, v in cursor.properties if k != COMPACTED_TOPIC_LEDGER],
        )
        draft.warnings.append(
            f"{COMPACTED_TOPIC_LEDGER} {compacted} is cleared: run `ledgerctl compact "
            f"{plan.topic} --apply` after the migration"
        )
        return
    if cursor.in_ledger:
        write_cursor(
            draft,
            cursor,
            moved(*cursor.position),
            f"mark-delete {cursor.position[0]}:{cursor.position[1]} to the new ledger "
            "(state moved into the znode; the cursor ledger's acks are not carried)",
        )
        return
    msg = mlpb.ManagedCursorInfo()
    msg.CopyFrom(cursor.decoded.message)
    msg.markDeleteLedgerId, msg.markDeleteEntryId = moved(*cursor.position)
    for r in msg.individualDeletedMessages:
        for end in (r.lowerEndpoint, r.upperEndpoint):
            end.ledgerId, end.entryId = moved(end.ledgerId, end.entryId)
    for b in msg.batchedEntryDeletionIndexInfo:
        b.position.ledgerId, b.position.entryId = moved(b.position.ledgerId, b.position.entryId)
    from pulsarctl_py.decoders import managed_ledger as mld2

    draft.set(
        cursor.path,
        "cursor",
        mld2.rebuild(cursor.decoded, msg),
        "positions in the old ledgers move to the same entries of the new ledgers",
    )


def ledgers_undo_keeps(plan: Plan) -> list[int]:
    """The ledgers a migration in ``plan`` wrote that undoing it leaves (sorted): those its
    repairs name (``new_ledgers`` of ``migrate index``, ``written_ledger`` of ``migrate
    compacted``) but the plan's records of written ledgers, which the undo deletes, do not.
    They stay, referenced by nothing."""
    ours = {w.ledger_id for w in plan.written}
    written = [
        ledger
        for r in plan.repairs
        for ledger in (
            [
                *(r.get("new_ledgers") or {}).values(),
                (r.get("migration") or {}).get("written_ledger"),
            ]
        )
        if isinstance(ledger, int) and ledger not in ours
    ]
    return sorted(written)
