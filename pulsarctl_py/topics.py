"""Topics as an operator looks at them, read from where they are stored.

Topic views join a managed ledger's znode (formats.md §8: its ledgers with entry counts,
sizes and close times, its properties, its terminated position) with its cursors (mark-delete
position, where the state lives, the backlog) and, when bookie storage is given, with what
the storage says about the ledgers the znode cannot know: the open last ledger's entries
(LAC + 1, as ``pulsar-admin topics stats-internal`` shows them after a recovery) and the
last PositionInfo of a cursor ledger (what a broker would recover the cursor to). The
listing of every topic (``topic list``) gives a row per topic, read the same way. Ledger
views (which use the readers of one ledger here) are
:mod:`pulsarctl_py.ledger_views`; what a store must hold before it is asked,
:mod:`pulsarctl_py.stores.metadata.guards`.

Everything here only reads. Backlogs are counted in entries, as the broker counts
``msgBacklog`` for entries that are not batched: the entries after the mark-delete
position, minus those acknowledged individually beyond it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.nodes import json_value, with_text_notes
from pulsarctl_py.errors import LedgerctlError, NotFoundError

if TYPE_CHECKING:
    from pulsarctl_py.decoders.managed_ledger import DecodedInfo, TopicName
    from pulsarctl_py.ledgers import LedgerSource, LedgerView
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.stores.metadata import (
        ChildGroup,
        CursorRecord,
        ManagedLedgerRecord,
    )

#: the cursor property naming the compacted ledger (formats.md §6.1)

Position = tuple[int, int]
Advance = Callable[[], None]


def no_advance() -> None:
    """The default ``advance`` of the listings: no progress shown."""
    return None


def _pos(value: Position | None) -> str | None:
    """A position in JSON: "L:E", as everywhere in ledgerctl's JSON."""
    return None if value is None else f"{value[0]}:{value[1]}"


# -- counting entries ------------------------------------------------------------------------


def entries_after(
    ledgers: Sequence[tuple[int, int | None]], position: Position
) -> tuple[int, bool]:
    """Entries of ``ledgers`` (``(ledger id, entries)`` in order) after ``position``.

    Returns the count and whether it is exact (False when a ledger past the position has
    an unknown entry count; those are left out). A position in a ledger that is no longer
    listed counts every later ledger, as the broker does for a trimmed mark-delete.
    """
    mark_ledger, mark_entry = position
    total, exact = 0, True
    for ledger_id, entries in ledgers:
        if ledger_id < mark_ledger:
            continue
        if entries is None:
            exact = False
            continue
        if ledger_id == mark_ledger:
            total += max(0, entries - (mark_entry + 1))
        else:
            total += entries
    return total, exact


def entries_between(
    ledgers: Sequence[tuple[int, int | None]], lower: Position, upper: Position
) -> int:
    """Entries in the open-closed range ``(lower, upper]`` (a MessageRange)."""
    if upper <= lower:
        return 0
    return max(0, entries_after(ledgers, lower)[0] - entries_after(ledgers, upper)[0])


def _bits_after(key: int, words: Iterable[int], mark: Position) -> int:
    """Entries of ledger ``key`` set in a BitSet long array, after ``mark``."""
    count = 0
    for word_index, word in enumerate(words):
        value = word % 2**64
        while value:
            low = value & -value
            entry = word_index * 64 + low.bit_length() - 1
            if (key, entry) > mark:
                count += 1
            value ^= low
    return count


# -- topic views -----------------------------------------------------------------------------


@dataclass(slots=True)
class TopicLedger:
    """One ledger of a topic, as its managed ledger lists it (and storage completes it)."""

    ledger_id: int
    entries: int | None
    size: int | None
    timestamp: int | None  # ms; None while open (0 in the znode)
    open: bool = False
    #: where entries/size come from: ml-info, ledger-metadata (closed later), lac, unknown
    source: str = "ml-info"
    offloaded: bool = False
    #: where the ledger's entries are: "bookies", "tiered" (offloaded, its BookKeeper copy
    #: deleted) or "both" (offloaded, the BookKeeper copy kept)
    stored: str = "bookies"
    state: str | None = None  # BookKeeper's state, when the ledger metadata was read
    problem: str | None = None
    #: entries the storage holds past the LAC (counted in ``entries``: source "storage")
    beyond_lac: int = 0
    #: an offloaded ledger's location and where each part came from
    #: (:meth:`pulsarctl_py.stores.tiered.where.Location.to_json`)
    location: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ledger_id": self.ledger_id,
            "entries": self.entries,
            "size": self.size,
            "timestamp": self.timestamp,
            "open": self.open,
            "entries_source": self.source,
            "offloaded": self.offloaded,
            "stored": self.stored,
        }
        if self.state is not None:
            out["state"] = self.state
        if self.problem is not None:
            out["problem"] = self.problem
        if self.beyond_lac:
            out["beyond_lac"] = self.beyond_lac
        if self.location is not None:
            out["location"] = self.location
        return out


@dataclass(slots=True)
class CursorView:
    """A cursor (subscription) of a topic: where it is, where its state lives, its backlog."""

    name: str
    znode: str
    path: str
    state_in: str  # znode | ledger
    cursors_ledger_id: int | None
    mark_delete: Position | None
    mark_delete_source: str  # znode | cursor-ledger | none
    znode_mark_delete: Position | None
    last_active: int | None = None
    properties: dict[str, int] = field(default_factory=dict)
    cursor_properties: dict[str, str] = field(default_factory=dict)
    acked_ranges: list[tuple[Position, Position]] = field(default_factory=list)
    acked_bitsets: dict[int, list[int]] = field(default_factory=dict)
    backlog: int | None = None
    backlog_exact: bool = True
    version: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def special(self) -> str | None:
        """compaction, deduplication or replicator for the broker's own cursors."""
        if self.name == mld.COMPACTION_CURSOR:
            return "compaction"
        if self.name == mld.DEDUP_CURSOR:
            return "deduplication"
        if self.name.startswith(mld.REPLICATOR_PREFIX):
            return "replicator"
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "znode": self.znode,
            "path": self.path,
            "special": self.special,
            "state_in": self.state_in,
            "cursors_ledger_id": self.cursors_ledger_id,
            "mark_delete": _pos(self.mark_delete),
            "mark_delete_source": self.mark_delete_source,
            "znode_mark_delete": _pos(self.znode_mark_delete),
            "individually_acked": [[_pos(lo), _pos(hi)] for lo, hi in self.acked_ranges],
            "individually_acked_bitsets": {str(k): v for k, v in self.acked_bitsets.items()},
            "backlog": self.backlog,
            "backlog_exact": self.backlog_exact,
            "last_active": self.last_active,
            "properties": dict(self.properties),
            "cursor_properties": dict(self.cursor_properties),
            "version": self.version,
            "problems": list(self.problems),
        }
        return with_text_notes(out)


@dataclass(slots=True)
class TopicInfo:
    """A topic's managed ledger, cursors and storage facts."""

    topic: str
    managed_ledger: str
    path: str
    partition: int
    partitioned_topic: str | None
    version: int | None
    modified_ms: int | None
    encoding: str | None
    compression: str | None
    ledgers: list[TopicLedger] = field(default_factory=list)
    cursors: list[CursorView] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    terminated_at: Position | None = None
    problems: list[str] = field(default_factory=list)
    #: the ledger ids as stored, when not in the order the broker reads them (``ledgers``
    #: are in the broker's order: mld.broker_order)
    stored_ledger_ids: list[int] | None = None

    @property
    def entries(self) -> int:
        return sum(li.entries or 0 for li in self.ledgers)

    @property
    def size(self) -> int:
        return sum(li.size or 0 for li in self.ledgers)

    @property
    def exact(self) -> bool:
        return all(li.entries is not None for li in self.ledgers)

    @property
    def index(self) -> int | None:
        value = self.properties.get(mld.PROPERTY_INDEX)
        try:
            return None if value is None else int(value)
        except ValueError:
            return None

    @property
    def shadow_source(self) -> str | None:
        return self.properties.get(mld.PROPERTY_SHADOW_SOURCE)

    @property
    def compaction_cursor(self) -> CursorView | None:
        return next((c for c in self.cursors if c.name == mld.COMPACTION_CURSOR), None)

    @property
    def compaction_horizon(self) -> Position | None:
        cursor = self.compaction_cursor
        return None if cursor is None else cursor.mark_delete

    @property
    def compacted_ledger(self) -> int | None:
        cursor = self.compaction_cursor
        return None if cursor is None else cursor.properties.get(mld.COMPACTED_TOPIC_LEDGER)

    def to_json(self) -> dict[str, Any]:
        notes: list[dict[str, Any]] = []
        out: dict[str, Any] = {
            "topic": self.topic,
            "managed_ledger": self.managed_ledger,
            "path": self.path,
            "partition": self.partition,
            "partitioned_topic": self.partitioned_topic,
            "version": self.version,
            "modified_ms": self.modified_ms,
            "encoding": self.encoding,
            "compression": self.compression,
            "ledgers": [li.to_json() for li in self.ledgers],
            "entries": self.entries,
            "size": self.size,
            "entries_exact": self.exact,
            "cursors": [c.to_json() for c in self.cursors],
            "properties": json_value(dict(self.properties), "properties", notes),
            "index": self.index,
            "shadow_source": self.shadow_source,
            "terminated_at": _pos(self.terminated_at),
            "compaction": None
            if self.compaction_cursor is None
            else {
                "horizon": _pos(self.compaction_horizon),
                "compacted_ledger": self.compacted_ledger,
            },
            "problems": list(self.problems),
        }
        if self.stored_ledger_ids is not None:
            out["stored_ledger_ids"] = list(self.stored_ledger_ids)
        if notes:
            out["not_utf8"] = notes
        return out


def require_metadata(source: LedgerSource) -> Any:
    """The source's metadata store; LedgerctlError, saying how to give one, when none."""
    if source.metadata is None:
        raise LedgerctlError(
            "a metadata store is needed: pass --metadata-url, set LEDGERCTL_METADATA_URL, "
            "or put metadata_url in the nearest ledgerctl.toml"
        )
    return source.metadata


def read_ledger_view(source: LedgerSource, ledger_id: int) -> tuple[LedgerView | None, str | None]:
    """The ledger's view (its bookies need not answer), or None and why it cannot be had."""
    try:
        # topic info shows what the metadata says whatever the bookies answer
        return source.ledger(ledger_id, unreachable_ok=True), None
    except LedgerctlError as exc:
        return None, exc.one_line()


def length_at(source: LedgerSource, ledger_id: int, entry_id: int) -> int | None:
    """The ledger length stored in an entry's header (cumulative, including it)."""
    from pulsarctl_py.decoders.bookkeeper import HEADER

    if source.bookie is None:
        return None
    try:
        data = source.bookie.read_entry(ledger_id, entry_id)
    except LedgerctlError:
        return None
    return HEADER.unpack_from(data, 0)[3] if len(data) >= HEADER.size else None


def _complete_open(source: LedgerSource, row: TopicLedger) -> None:
    """Entries and size of the open ledger from its metadata or storage (LAC + 1)."""
    if source.metadata is None and source.bookie is None:
        return
    view, error = read_ledger_view(source, row.ledger_id)
    if view is None:
        row.problem = error
        row.entries = row.size = None
        row.source = "unknown"
        return
    row.state = view.state
    md = view.metadata
    if md is not None and md.is_closed:
        row.entries, row.size, row.source = md.last_entry_id + 1, md.length, "ledger-metadata"
        return
    if view.unreachable is not None:
        row.entries = row.size = None
        row.source = "unknown"
        row.problem = f"the open ledger's bookies could not be asked: {view.unreachable}"
        return
    lac = view.lac
    last = view.last_stored
    if last is not None and (lac is None or last > lac):
        # entries stored past the LAC: the next owner's recovery reads forward from the
        # LAC until an entry is missing and closes the ledger after the last one found
        # (apache/bookkeeper client/LedgerRecoveryOp.java, doRecoveryRead), so they are the
        # ledger's; verify, inspect and the demo count them, and so does the topic
        row.entries = last + 1
        row.size = length_at(source, row.ledger_id, last)
        row.source = "storage"
        row.beyond_lac = last - (lac if lac is not None else -1)
        return
    if lac is None and view.storage_error is None and getattr(source.bookie, "where", "") == "live":
        # the running bookies of its last ensemble answered and none holds an entry: an empty
        # ledger, as BookKeeper's readLastAddConfirmed says (-1); a broker opens one each
        # time it loads a topic
        lac = -1
    if lac is None:
        row.entries = row.size = None
        row.source = "unknown"
        if source.bookie is not None:
            row.problem = "the open ledger has no entries on the given bookie storage"
        return
    row.entries = lac + 1
    row.size = 0 if lac < 0 else length_at(source, row.ledger_id, lac)
    row.source = "lac"


def _topic_ledgers(
    source: LedgerSource,
    info: mlpb.ManagedLedgerInfo,
    resolve_open: bool,
    managed_ledger: str | None = None,
) -> list[TopicLedger]:
    count = len(info.ledgerInfo)
    rows = [
        _topic_ledger(source, li, i < count - 1, resolve_open)
        for i, li in enumerate(info.ledgerInfo)
    ]
    if managed_ledger is not None:
        for row, li in zip(rows, info.ledgerInfo, strict=True):
            if row.offloaded:
                row.location = offload_location(source, managed_ledger, li)
    return rows


def offload_location(
    source: LedgerSource, managed_ledger: str, li: mlpb.ManagedLedgerInfo.LedgerInfo
) -> dict[str, Any]:
    """Where an offloaded ledger is read (its LedgerInfo), see :func:`location_json`."""
    from pulsarctl_py.stores.tiered.locate import from_ledger_info

    return location_json(source, from_ledger_info(managed_ledger, li))


def location_json(source: LedgerSource, loc: Any) -> dict[str, Any]:
    """Where an offloaded ledger is read, with the source of each part (nothing is read
    from the object store); an error in one line when that cannot be resolved."""
    try:
        where = source.tiered_location(loc)
    except LedgerctlError as exc:
        if exc.exit_code == 3:
            raise
        return {"error": exc.one_line()}
    return {"url": where.url(loc), **where.to_json()}


def stored_where(li: mlpb.ManagedLedgerInfo.LedgerInfo) -> str:
    """Where a topic's ledger is stored, by its offloadContext: "tiered" once a complete
    offload's BookKeeper copy is deleted (``bookkeeperDeleted``), "both" while it is kept
    (``managedLedgerOffloadDeletionLagMs``), else "bookies" (an offload that never
    completed holds no readable copy)."""
    ctx = li.offloadContext if li.HasField("offloadContext") else None
    if ctx is None or not ctx.complete:
        return "bookies"
    return "tiered" if ctx.bookkeeperDeleted else "both"


def _topic_ledger(
    source: LedgerSource, li: mlpb.ManagedLedgerInfo.LedgerInfo, not_last: bool, resolve_open: bool
) -> TopicLedger:
    """One LedgerInfo of a topic; ``not_last``: it is not the topic's last ledger."""
    closed = _closed(li, not_last)
    row = TopicLedger(
        ledger_id=li.ledgerId,
        entries=li.entries,
        size=li.size,
        timestamp=li.timestamp or None,
        open=not closed,
        offloaded=li.HasField("offloadContext") and li.offloadContext.complete,
        stored=stored_where(li),
    )
    if row.open:
        row.entries = row.size = None
        row.source = "unknown"
        if resolve_open:
            _complete_open(source, row)
    return row


def _closed(li: mlpb.ManagedLedgerInfo.LedgerInfo, not_last: bool) -> bool:
    """Whether a LedgerInfo is a closed ledger's: the broker writes timestamp and entries
    when it closes one, and only the last ledger of a topic can be open."""
    return li.timestamp != 0 or li.entries != 0 or not_last


def _read_position_info(
    source: LedgerSource, ledger_id: int
) -> tuple[mlpb.PositionInfo | None, str | None]:
    """The last PositionInfo of a cursor ledger, or why it could not be read."""
    from pulsarctl_py.decoders import bookkeeper
    from pulsarctl_py.decoders.checksums import DigestType
    from pulsarctl_py.decoders.managed_ledger import parse_position_info

    if source.bookie is None:
        return None, None
    view, error = read_ledger_view(source, ledger_id)
    if view is None:
        return None, f"cursor ledger {ledger_id}: {error}"
    if view.unreachable is not None:
        return (
            None,
            f"cursor ledger {ledger_id}: its bookies could not be asked: {view.unreachable}",
        )
    last = view.last_stored
    if last is None:
        return None, f"cursor ledger {ledger_id} has no entries on the given bookie storage"
    try:
        data = source.bookie.read_entry(ledger_id, last)
    except LedgerctlError as exc:
        return None, f"cursor ledger {ledger_id} entry {last}: {exc.one_line()}"
    problem = None
    kind = view.digest_type or bookkeeper.detect_digest(data, 0, len(data), view.password)
    if kind is None:
        kind = DigestType.CRC32C
        problem = f"cursor ledger {ledger_id}: digest type unknown, assumed CRC32C"
    try:
        layer, _, payload_at = bookkeeper.parse(data, 0, len(data), kind, view.password)
        info, missing = parse_position_info(memoryview(data)[payload_at:])
    except LedgerctlError as exc:
        return None, f"cursor ledger {ledger_id} entry {last}: {exc.one_line()}"
    if layer.check is not None and layer.check.ok is False:
        problem = f"cursor ledger {ledger_id} entry {last}: {kind.name} digest mismatch"
    if missing:
        problem = f"cursor ledger {ledger_id} entry {last}: PositionInfo lacks {', '.join(missing)}"
    return info, problem


def _cursor_view(
    source: LedgerSource,
    record: CursorRecord,
    ledgers: list[tuple[int, int | None]],
    read_ledgers: bool,
) -> CursorView:
    view = CursorView(
        name=record.name,
        znode=record.znode_name,
        path=record.path,
        state_in=record.state_in,
        cursors_ledger_id=record.cursors_ledger_id,
        mark_delete=record.mark_delete,
        mark_delete_source="znode" if record.mark_delete is not None else "none",
        znode_mark_delete=record.mark_delete,
        version=record.stat.version,
    )
    if record.error:
        view.problems.append(record.error)
    ranges: Iterable[Any] = ()
    bitsets: Iterable[Any] = ()
    if record.info is not None:
        msg = record.info.message
        view.last_active = msg.lastActive if msg.HasField("lastActive") else None
        view.properties = {p.name: p.value for p in msg.properties}
        view.cursor_properties = {p.name: p.value for p in msg.cursorProperties}
        ranges = msg.individualDeletedMessages
        view.problems.extend(record.info.problems)
    if view.state_in == "ledger" and read_ledgers and view.cursors_ledger_id is not None:
        info, problem = _read_position_info(source, view.cursors_ledger_id)
        if problem:
            view.problems.append(problem)
        if info is not None:
            view.mark_delete = (info.ledgerId, info.entryId)
            view.mark_delete_source = "cursor-ledger"
            view.properties = {p.name: p.value for p in info.properties}
            ranges = info.individualDeletedMessages
            bitsets = info.individualDeletedMessageRanges
    view.acked_ranges = [
        (
            (r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId),
            (r.upperEndpoint.ledgerId, r.upperEndpoint.entryId),
        )
        for r in ranges
    ]
    view.acked_bitsets = {m.key: list(m.values) for m in bitsets}
    if view.mark_delete is not None:
        backlog, exact = entries_after(ledgers, view.mark_delete)
        for lower, upper in view.acked_ranges:
            backlog -= entries_between(ledgers, max(lower, view.mark_delete), upper)
        for key, words in view.acked_bitsets.items():
            backlog -= _bits_after(key, words, view.mark_delete)
        view.backlog, view.backlog_exact = max(0, backlog), exact
    return view


def _topic_info(
    source: LedgerSource,
    record: ManagedLedgerRecord,
    *,
    resolve_open: bool = True,
    read_cursor_ledgers: bool = True,
) -> TopicInfo:
    name = record.ref.topic
    base = name.partitioned_topic
    info = TopicInfo(
        topic=name.full_name,
        managed_ledger=record.ref.name,
        path=record.ref.path,
        partition=name.partition_index,
        partitioned_topic=base.full_name if name.partition_index >= 0 else None,
        version=record.stat.version,
        modified_ms=record.stat.modified_ms or None,
        encoding=record.info.encoding.value if record.info is not None else None,
        compression=record.info.compression if record.info is not None else None,
        properties=record.properties,
        terminated_at=record.terminated_at,
    )
    if record.error:
        info.problems.append(record.error)
    if record.info is not None:
        info.problems.extend(record.info.problems)
        info.stored_ledger_ids = record.info.stored_ledger_ids
        info.ledgers = _topic_ledgers(source, record.info.message, resolve_open, record.ref.name)
    counts = [(li.ledger_id, li.entries) for li in info.ledgers]
    info.cursors = [_cursor_view(source, c, counts, read_cursor_ledgers) for c in record.cursors]
    return info


def topic_hint(store: Any, topic: str | TopicName) -> str:
    """`` (did you mean NAME?)`` for the topic of ``topic``'s namespace closest to it, or
    ``""``. The names are the namespace's managed ledgers (one listing, on the error path
    only), compared by their local names and shown as the user wrote theirs (short, or
    in full)."""
    from pulsarctl_py.stores.metadata import resolve_topic
    from pulsarctl_py.stores.metadata.base import join
    from pulsarctl_py.usage import did_you_mean

    try:
        name = resolve_topic(topic)
        folder = name.ml_path.rsplit("/", 1)[0]
        found = [mld.TopicName.from_ml_path(join(folder, c)) for c in store.children(folder)]
    except (LedgerctlError, ValueError):
        return ""
    local = name.full_name.rsplit("/", 1)[-1]
    by_local = {t.full_name.rsplit("/", 1)[-1]: t.full_name for t in found}
    hint = did_you_mean(local, by_local)
    typed = topic if isinstance(topic, str) else topic.full_name
    if hint and "/" in typed:
        closest = hint[len(" (did you mean ") : -2]
        hint = f" (did you mean {by_local[closest]}?)"
    return hint


def partitions_of(store: Any, topic: str) -> list[str]:
    """The partitions of ``topic`` (full names, in partition order) when it names a
    partitioned topic by its base name and has no managed ledger of its own; else []."""
    from pulsarctl_py.stores.metadata import list_managed_ledgers, resolve_topic

    name = resolve_topic(topic)
    if name.partition_index >= 0 or store is None or store.get(name.ml_path) is not None:
        return []
    found = sorted(
        (ref.topic.partition_index, ref.topic.full_name)
        for ref in list_managed_ledgers(store)
        if ref.topic.partitioned_topic == name and ref.topic.partition_index >= 0
    )
    return [full for _, full in found]


def topic_not_found(source: LedgerSource, name: TopicName) -> LedgerctlError:
    """The error for a topic without a managed ledger: its partitions when it is a
    partitioned topic, else NotFoundError with the closest name (:func:`topic_hint`)."""
    from pulsarctl_py.stores.metadata import list_managed_ledgers

    store = source.metadata
    partitions = [
        ref.topic.full_name
        for ref in list_managed_ledgers(store)
        if ref.topic.partitioned_topic == name and ref.topic.partition_index >= 0
    ]
    if partitions:
        shown = ", ".join(partitions[:3]) + (", ..." if len(partitions) > 3 else "")
        return LedgerctlError(
            f"{name.full_name} is a partitioned topic with {len(partitions)} partitions; "
            f"ask for one of them: {shown}"
        )
    return NotFoundError(
        f"topic {name.full_name} not found in {store.url} (no znode {name.ml_path})"
        + topic_hint(store, name)
    )


def topic_info(source: LedgerSource, topic: str) -> TopicInfo:
    """One topic: ledgers, cursors with backlogs, properties, compaction, termination."""
    from pulsarctl_py.stores.metadata import read_managed_ledger, resolve_topic

    store = require_metadata(source)
    name = resolve_topic(topic)
    record = read_managed_ledger(store, name)
    if record is None:
        raise topic_not_found(source, name)
    return _topic_info(source, record)


@dataclass(slots=True)
class TopicRow:
    """One line of ``topic list``: a topic, or a partitioned topic with its partitions."""

    topic: str
    ledgers: int
    entries: int
    size: int
    cursors: int
    exact: bool = True
    managed_ledger: str | None = None
    partition: int = -1
    partitions: list[TopicRow] = field(default_factory=list)
    cursor_names: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def partitioned(self) -> bool:
        return bool(self.partitions)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": self.topic,
            "partitioned": self.partitioned,
            "ledgers": self.ledgers,
            "entries": self.entries,
            "size": self.size,
            "entries_exact": self.exact,
            "cursors": self.cursors,
        }
        if self.partitioned:
            out["partitions"] = [p.to_json() for p in self.partitions]
        else:
            out["managed_ledger"] = self.managed_ledger
            out["partition"] = self.partition
            out["cursor_names"] = list(self.cursor_names)
        if self.problems:
            out["problems"] = list(self.problems)
        return out


def _row(info: TopicInfo) -> TopicRow:
    return TopicRow(
        topic=info.topic,
        ledgers=len(info.ledgers),
        entries=info.entries,
        size=info.size,
        cursors=len(info.cursors),
        exact=info.exact,
        managed_ledger=info.managed_ledger,
        partition=info.partition,
        cursor_names=[c.name for c in info.cursors],
        problems=list(info.problems),
    )


def _require_namespace(store: Any, namespace: str) -> None:
    """Raise NotFoundError unless ``tenant/namespace`` has a node under /managed-ledgers."""
    from pulsarctl_py.stores.metadata.guards import present
    from pulsarctl_py.stores.metadata.managed_ledgers import ML_ROOT

    if namespace.count("/") != 1 or not all(namespace.split("/")):
        raise LedgerctlError(f"namespace {namespace!r}: expected TENANT/NAMESPACE")
    path = f"{ML_ROOT}/{namespace}"
    if not present(store, path):
        raise NotFoundError(f"namespace {namespace} not found in {store.url} (no znode {path})")


def list_topics(
    source: LedgerSource,
    *,
    namespace: str | None = None,
    advance: Advance = no_advance,
) -> list[TopicRow]:
    """Every topic under /managed-ledgers; partitions grouped under their partitioned topic.

    The open last ledger of each topic is counted from storage when it is given.
    ``namespace`` (``tenant/namespace``) keeps only that namespace's topics.
    """
    return list(iter_topics(source, namespace=namespace, advance=advance))


def iter_topics(
    source: LedgerSource,
    *,
    namespace: str | None = None,
    advance: Advance = no_advance,
) -> Iterator[TopicRow]:
    """:func:`list_topics` one row at a time, in the order of topic names.

    Memory: one folder's topic names (a namespace's, for one domain) and one row; each
    topic's metadata is read when its row is made.
    """
    from pulsarctl_py.stores.metadata import (
        managed_ledger_dirs,
        read_managed_ledger,
        require_topic_metadata,
    )
    from pulsarctl_py.stores.metadata.base import join
    from pulsarctl_py.stores.metadata.managed_ledgers import cursor_name, decode_ml_info

    store = require_metadata(source)
    require_topic_metadata(store)
    wanted = namespace.strip("/") if namespace else None
    if wanted is not None:
        _require_namespace(store, wanted)
    TopicName, PARTITION_SUFFIX = mld.TopicName, mld.PARTITION_SUFFIX
    url_decode, url_encode = mld.url_decode, mld.url_encode
    for prefix, path in managed_ledger_dirs(store):
        folder = TopicName.from_ml_path(join(path, "x"))  # its domain, tenant, namespace
        if wanted is not None and folder.namespace_name != wanted:
            continue
        domain, tenant, ns, cluster = folder.domain, folder.tenant, folder.namespace, folder.cluster
        ml_prefix = f"{folder.namespace_name}/{domain}/"
        # (row topic, partition or -1, local name, znode name): a partition's row is its
        # partitioned topic's; names only, each topic's znodes are read when its turn comes
        keyed: list[tuple[str, int, str, str]] = []
        for encoded in store.children(path):
            try:
                local = url_decode(encoded)
            except LedgerctlError:
                continue  # not a topic's znode
            if PARTITION_SUFFIX not in local:  # TopicName.partition_index, the common case
                keyed.append((prefix + local, -1, local, encoded))
                continue
            name = TopicName(domain, tenant, ns, local, cluster)
            part = name.partition_index
            base = name.partitioned_topic.full_name if part >= 0 else name.full_name
            keyed.append((base, part, local, encoded))
        keyed.sort(key=lambda k: (k[0], k[1]))
        # the topics' znodes and their cursors' in one ordered pass over the folder; a topic
        # the pass has gone by (the order of names is not the order of keys) is read alone
        scan = _Lookahead(store.scan_children(path))
        group: TopicRow | None = None
        for base, part, local, encoded in keyed:
            if group is not None and (part < 0 or base != group.topic):
                yield _finish(group)
                group = None
            # a znode name that is not the canonical encoding of its topic's name is read
            # where the topic's name says (as topic info does), not where it was found
            canonical = local is encoded or url_encode(local) == encoded
            found = scan.take(encoded) if canonical else None
            if found is not None:
                if found.error is not None:
                    raise found.error
                assert found.data is not None
                advance()
                info, error = decode_ml_info(found.data)
                row = _row_of(
                    source,
                    base if part < 0 else prefix + local,
                    part,
                    ml_prefix + encoded,
                    info,
                    error,
                    [cursor_name(c) for c in found.child_names],
                )
            else:
                record = read_managed_ledger(store, TopicName(domain, tenant, ns, local, cluster))
                advance()
                if record is None:  # deleted while listing
                    continue
                row = _list_row(source, record)
            if part < 0:
                yield row
                continue
            if group is None:
                group = TopicRow(base, 0, 0, 0, 0)
            group.partitions.append(row)
            group.ledgers += row.ledgers
            group.entries += row.entries
            group.size += row.size
            group.exact = group.exact and row.exact
            group.cursor_names = sorted(set(group.cursor_names) | set(row.cursor_names))
            group.cursors = len(group.cursor_names)
        if group is not None:
            yield _finish(group)


class _Lookahead:
    """The groups of an ordered scan, taken by name in another order: those passed over
    are kept, up to :data:`LOOKAHEAD` of them (then the oldest are dropped and their
    topics read alone)."""

    def __init__(self, groups: Iterator[ChildGroup]) -> None:
        self._groups = groups
        self._kept: dict[str, ChildGroup] = {}
        self._last: str | None = None
        self._done = False

    def take(self, name: str) -> ChildGroup | None:
        """The group of ``name``; None when the scan has none for it (or dropped it)."""
        if self._kept:
            kept = self._kept.pop(name, None)
            if kept is not None:
                return kept
        while not self._done and (self._last is None or self._last < name):
            found = next(self._groups, None)
            if found is None:
                self._done = True
                break
            self._last = found.name
            if found.name == name:
                return found
            self._kept[found.name] = found
            if len(self._kept) > LOOKAHEAD:
                del self._kept[next(iter(self._kept))]
        return None


#: groups of a folder's scan kept while the listing's order catches up with the keys'
#: (partitions 10 and up sort after partition 1 in the store, after 9 in the listing)
LOOKAHEAD = 4096


def _list_row(source: LedgerSource, record: ManagedLedgerRecord) -> TopicRow:
    """``_row(_topic_info(source, record, read_cursor_ledgers=False))``, without the cursor
    views (backlogs, acknowledged ranges) a row does not show."""
    name = record.ref.topic
    return _row_of(
        source,
        name.full_name,
        name.partition_index,
        record.ref.name,
        record.info,
        record.error,
        [c.name for c in record.cursors],
    )


def _row_of(
    source: LedgerSource,
    topic: str,
    partition: int,
    managed_ledger: str,
    info: DecodedInfo[mlpb.ManagedLedgerInfo] | None,
    error: str | None,
    cursor_names: list[str],
) -> TopicRow:
    """A topic's row (``topic``: its full name) from its decoded ManagedLedgerInfo and its
    cursors' names (the cursor
    znodes' values are not shown in a row, so not decoded)."""
    problems = [error] if error else []
    ledgers = entries = size = 0
    exact = True
    if info is not None:
        problems.extend(info.problems)
        listed = info.message.ledgerInfo
        ledgers = len(listed)
        for li in listed:
            entries += li.entries
            size += li.size
        if ledgers:
            last = listed[-1]
            if not _closed(last, False):
                # the open last ledger: from its ledger metadata or storage, as topic info
                # does (what its LedgerInfo says was counted above: take it back)
                entries -= last.entries
                size -= last.size
                row = _topic_ledger(source, last, False, True)
                entries += row.entries or 0
                size += row.size or 0
                exact = row.entries is not None
    return TopicRow(
        topic=topic,
        ledgers=ledgers,
        entries=entries,
        size=size,
        cursors=len(cursor_names),
        exact=exact,
        managed_ledger=managed_ledger,
        partition=partition,
        cursor_names=cursor_names,
        problems=problems,
    )


def _finish(group: TopicRow) -> TopicRow:
    group.partitions.sort(key=lambda p: p.partition)
    return group


# -- a partitioned topic by its base name ----------------------------------------------------


def partitioned_metadata_path(name: TopicName) -> str:
    """Where a broker keeps a partitioned topic's metadata (``{"partitions": N}``: Pulsar's
    ``PartitionedTopicMetadata``, ``NamespaceResources.PartitionedTopicResources``)."""
    return (
        f"/admin/partitioned-topics/{name.namespace_name}/{name.domain}/{name.encoded_local_name}"
    )


@dataclass(slots=True)
class SubscriptionTotal:
    """One subscription summed over the partitions that have it."""

    name: str
    backlog: int = 0
    backlog_exact: bool = True
    partitions: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backlog": self.backlog,
            "backlog_exact": self.backlog_exact,
            "partitions": self.partitions,
        }


@dataclass(slots=True)
class PartitionedTopicInfo:
    """A partitioned topic: each partition's :class:`TopicInfo`, and their sum.

    ``declared`` is the partition count of the partitioned-topic metadata (None when that
    node is absent or does not decode); ``missing`` the partitions it declares that have
    no managed ledger: findings, as are ``problems`` (metadata absent or unreadable,
    partitions beyond the declared count)."""

    topic: str
    metadata_path: str
    declared: int | None
    partitions: list[TopicInfo] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ledgers(self) -> int:
        return sum(len(p.ledgers) for p in self.partitions)

    @property
    def entries(self) -> int:
        return sum(p.entries for p in self.partitions)

    @property
    def size(self) -> int:
        return sum(p.size for p in self.partitions)

    @property
    def exact(self) -> bool:
        return all(p.exact for p in self.partitions)

    @property
    def findings(self) -> list[str]:
        """What is wrong with the topic as a whole (a missing partition first)."""
        out = [
            f"partition {m} is declared in {self.metadata_path} but has no managed ledger"
            for m in self.missing
        ]
        return out + list(self.problems)

    def subscriptions(self) -> list[SubscriptionTotal]:
        """Each subscription's backlog summed over the partitions (in name order); a
        partition's unknown backlog makes the sum inexact, as does a missing partition."""
        totals: dict[str, SubscriptionTotal] = {}
        for part in self.partitions:
            for cursor in part.cursors:
                total = totals.setdefault(cursor.name, SubscriptionTotal(cursor.name))
                total.partitions += 1
                if cursor.backlog is None:
                    total.backlog_exact = False
                else:
                    total.backlog += cursor.backlog
                    total.backlog_exact = total.backlog_exact and cursor.backlog_exact
        for total in totals.values():
            if self.missing:
                total.backlog_exact = False
        return [totals[k] for k in sorted(totals)]

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partitioned": True,
            "metadata_path": self.metadata_path,
            "partitions_declared": self.declared,
            "partitions": [p.to_json() for p in self.partitions],
            "missing_partitions": list(self.missing),
            "total": {
                "partitions": len(self.partitions),
                "ledgers": self.ledgers,
                "entries": self.entries,
                "size": self.size,
                "entries_exact": self.exact and not self.missing,
                "subscriptions": [s.to_json() for s in self.subscriptions()],
            },
            "findings": self.findings,
        }


def partitioned_topic_info(source: LedgerSource, topic: str) -> PartitionedTopicInfo | None:
    """A partitioned topic named by its base name: every partition the partitioned-topic
    metadata declares (``/admin/partitioned-topics/...``), read as :func:`topic_info` reads
    one, and the sum. None when ``topic`` names a partition, a topic with a managed ledger
    of its own, or nothing partitioned (neither the metadata nor any partition's managed
    ledger). Without the metadata node the partitions present are shown, and its absence
    is a finding."""
    import json

    from pulsarctl_py.stores.metadata import read_managed_ledger, resolve_topic
    from pulsarctl_py.stores.metadata.base import join

    store = require_metadata(source)
    name = resolve_topic(topic)
    if name.partition_index >= 0 or store.get(name.ml_path) is not None:
        return None
    path = partitioned_metadata_path(name)
    node = store.get(path)
    declared: int | None = None
    problems: list[str] = []
    if node is not None:
        try:
            declared = int(json.loads(bytes(node.data))["partitions"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            problems.append(f"{path} does not decode as partitioned-topic metadata")
    folder = name.ml_path.rsplit("/", 1)[0]
    present: dict[int, TopicName] = {}
    for child in store.children(folder):
        try:
            found = mld.TopicName.from_ml_path(join(folder, child))
        except (LedgerctlError, ValueError):
            continue
        if found.partition_index >= 0 and found.partitioned_topic == name:
            present[found.partition_index] = found
    if node is None:
        if not present:
            return None
        problems.append(
            f"no partitioned-topic metadata ({path}): the partitions found are shown, "
            "the broker does not know the topic as partitioned"
        )
    wanted = range(declared) if declared is not None else sorted(present)
    beyond = sorted(i for i in present if declared is not None and i >= declared)
    if beyond:
        problems.append(
            f"managed ledgers of partitions {', '.join(map(str, beyond))} beyond the "
            f"{declared} partitions {path} declares"
        )
    out = PartitionedTopicInfo(name.full_name, path, declared, problems=problems)
    for index in wanted:
        part = present.get(index, name.partition(index))
        record = read_managed_ledger(store, part) if index in present else None
        if record is None:
            out.missing.append(part.full_name)
            continue
        out.partitions.append(_topic_info(source, record))
    return out
