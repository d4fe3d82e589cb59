"""The repairs: each drafts its changes on a :class:`~pulsarctl_py.plans.draft.Draft`.

Nothing here writes; :mod:`pulsarctl_py.plans.apply` applies a plan. Every repair reads
through the draft, so repairs run one after another (``repair --from-verify``) see what
the earlier ones drafted.

Cursor positions are mark-delete positions ``(ledger, entry)``; ``(L, -1)`` means "before
the first entry of ledger L", the form the broker itself gives a cursor whose ledger is
gone (formats.md §8.2, operators.md row 2). A cursor whose state is in a cursor ledger
(``cursorsLedgerId != -1``) is moved by writing the whole state into its znode and setting
``cursorsLedgerId = -1``: editing only the znode would be ignored by the broker, which
reads the cursor ledger's last entry.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import Depth
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import DataError, LedgerctlError, NotFoundError
from pulsarctl_py.decoders.managed_ledger import DecodedInfo, TopicName
from pulsarctl_py.plans import Draft
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from pulsarctl_py.stores.metadata.base import join
from pulsarctl_py.verify import codes

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource

COMPACTED_TOPIC_LEDGER = "CompactedTopicLedger"
Position = tuple[int, int]


# -- reading through the draft ---------------------------------------------------------------


@dataclass(slots=True)
class Topic:
    name: TopicName
    path: str
    decoded: DecodedInfo[mlpb.ManagedLedgerInfo]

    @property
    def info(self) -> mlpb.ManagedLedgerInfo:
        return self.decoded.message

    @property
    def ids(self) -> list[int]:
        return [li.ledgerId for li in self.info.ledgerInfo]


@dataclass(slots=True)
class Cursor:
    name: str
    path: str
    decoded: DecodedInfo[mlpb.ManagedCursorInfo]
    #: the effective state: from the cursor ledger's last entry when it is there
    position: Position | None
    properties: list[tuple[str, int]]
    origin: str  # "znode", "cursor ledger N", or "znode snapshot (cursor ledger N unread)"

    @property
    def in_ledger(self) -> bool:
        return self.decoded.message.cursorsLedgerId != -1


def load_topic(draft: Draft, topic: str | TopicName, *, changes: bool = True) -> Topic:
    """The topic's ML info as drafted; ``changes``: the plan may change it (it is listed
    among the topics to unload)."""
    from pulsarctl_py.stores.metadata import resolve_topic

    name = resolve_topic(topic)
    data = draft.get(name.ml_path)
    if data is None:
        from pulsarctl_py.topics import topic_hint

        raise NotFoundError(
            f"topic {name.full_name} has no managed ledger ({name.ml_path})"
            + topic_hint(draft.store, name)
        )
    try:
        decoded = mld.parse_ml_info(data)
    except LedgerctlError as exc:
        raise DataError(f"{name.ml_path} does not decode: {exc.one_line()}") from None
    if decoded.missing:
        raise DataError(f"{name.ml_path} lacks required fields: {', '.join(decoded.missing)}")
    if changes:
        draft.topic(name.full_name)
    return Topic(name, name.ml_path, decoded)


def load_cursors(
    draft: Draft, topic: Topic, source: LedgerSource | None, only: str | None = None
) -> list[Cursor]:
    out = []
    for znode in draft.store.children(topic.path):
        name = _decode_name(znode)
        if only is not None and name != only:
            continue
        path = join(topic.path, znode)
        data = draft.get(path)
        if data is None:
            continue
        try:
            decoded = mld.parse_cursor_info(data)
        except LedgerctlError as exc:
            raise DataError(f"cursor {name!r} ({path}) does not decode: {exc.one_line()}") from None
        msg = decoded.message
        position: Position | None = None
        if msg.HasField("markDeleteLedgerId") and msg.HasField("markDeleteEntryId"):
            position = (msg.markDeleteLedgerId, msg.markDeleteEntryId)
        props = [(p.name, p.value) for p in msg.properties]
        origin = "znode"
        if msg.cursorsLedgerId != -1:
            found = cursor_ledger_state(source, msg.cursorsLedgerId)
            if found is not None:
                position, props = found
                origin = f"cursor ledger {msg.cursorsLedgerId}"
            else:
                origin = f"znode snapshot (cursor ledger {msg.cursorsLedgerId} not read)"
        out.append(Cursor(name, path, decoded, position, props, origin))
    return out


def _decode_name(znode: str) -> str:
    try:
        return mld.url_decode(znode)
    except LedgerctlError:
        return znode


def cursor_ledger_state(
    source: LedgerSource | None, ledger_id: int
) -> tuple[Position, list[tuple[str, int]]] | None:
    """The last PositionInfo of a cursor ledger, or None when it cannot be read (the broker
    then rolls back to the znode's position, see :func:`cursor_snapshots`)."""
    if source is None or source.bookie is None:
        return None
    try:
        view = source.ledger(ledger_id)
    except LedgerctlError:
        return None
    last = view.readable_last
    if last is None or last < 0:
        return None
    view.kind = "cursor"
    try:
        entries = list(source.entries(view, last, last))
    except LedgerctlError:
        return None
    for entry in entries:
        if any(p.severity == "error" for p in entry.problems):
            return None
        layer = entry.layers[-1] if entry.layers else None
        if layer is None or layer.name != "position-info":
            return None
        info, missing = mld.parse_position_info(layer.raw)
        if missing:
            return None
        return (info.ledgerId, info.entryId), [(p.name, p.value) for p in info.properties]
    return None


def count_messages(
    source: LedgerSource | None,
    ledger_id: int,
    first: int = 0,
    last: int | None = None,
    *,
    kind: str | None = None,
) -> int | None:
    """Messages in entries [first, last] of a ledger (each entry's ``num_messages_in_batch``,
    or 1), or None when they cannot all be read (no bookie, an entry missing or damaged)."""
    if source is None or source.bookie is None:
        return None
    try:
        view = source.ledger(ledger_id)
        if kind == "compacted":
            view.kind = "compacted"
        if last is None:
            last = view.readable_last
        if last is None:
            return None
        if last < first:
            return 0
        total = seen = 0
        for entry in source.entries(view, first, last, depth=Depth.METADATA):
            md = entry.metadata
            if md is None or any(p.severity == "error" for p in entry.problems):
                return None
            total += md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
            seen += 1
    except LedgerctlError:
        return None
    return total if seen == last - first + 1 else None


def ledger_has_metadata(draft: Draft, ledger_id: int) -> bool:
    from pulsarctl_py.decoders import ledger_metadata as lm

    for layout in (
        lm.LedgerLayout.HIERARCHICAL,
        lm.LedgerLayout.FLAT,
        lm.LedgerLayout.LONG_HIERARCHICAL,
    ):
        if draft.get(lm.ledger_path(ledger_id, layout, draft.ledgers_root())) is not None:
            return True
    return False


def last_entry(topic: Topic, ledger_id: int, source: LedgerSource | None) -> int | None:
    """The last entry id of a listed ledger: the ML's count when recorded, else the
    BookKeeper metadata (closed) or the bookie's LAC; None when nothing tells."""
    infos = list(topic.info.ledgerInfo)
    for i, li in enumerate(infos):
        if li.ledgerId != ledger_id:
            continue
        is_last = i == len(infos) - 1
        if not (is_last and li.entries == 0 and li.size == 0):
            return li.entries - 1
        break
    if source is None:
        return None
    try:
        view = source.ledger(ledger_id)
    except LedgerctlError:
        return None
    return view.readable_last


# -- writing through the draft ---------------------------------------------------------------


def _position_text(p: Position | None) -> str:
    return "none" if p is None else f"{p[0]}:{p[1]}"


def write_cursor(
    draft: Draft,
    cursor: Cursor,
    position: Position,
    why: str,
    *,
    properties: list[tuple[str, int]] | None = None,
    keep_acks: bool = False,
) -> None:
    """Write the cursor's whole state into its znode at ``position`` (cursorsLedgerId -1;
    the bytes: :func:`~pulsarctl_py.decoders.managed_ledger.cursor_at`)."""
    props = cursor.properties if properties is None else properties
    value = mld.cursor_at(cursor.decoded, position, props, keep_acks=keep_acks)
    draft.set(cursor.path, "cursor", value, why)
    cursor.decoded = mld.parse_cursor_info(draft.get(cursor.path) or b"")
    cursor.position = position
    cursor.origin = "znode"


def _set_topic(draft: Draft, topic: Topic, msg: mlpb.ManagedLedgerInfo, why: str) -> None:
    draft.set(topic.path, "managed-ledger", mld.rebuild(topic.decoded, msg), why)
    topic.decoded = mld.parse_ml_info(draft.get(topic.path) or b"")


def _count_between(
    topic: Topic, old: Position, new: Position, source: LedgerSource | None
) -> int | None:
    """Entries in (old, new] (positive) or (new, old] (negative), when the sizes are known."""
    sign = 1
    if new < old:
        old, new, sign = new, old, -1
    total = 0
    for lid in topic.ids:
        if lid < old[0] or lid > new[0]:
            continue
        last = last_entry(topic, lid, source)
        if last is None:
            return None
        lo = old[1] + 1 if lid == old[0] else 0
        hi = min(new[1], last) if lid == new[0] else last
        total += max(0, hi - lo + 1)
    return sign * total


def _cursor_move(
    draft: Draft,
    topic: Topic,
    cursor: Cursor,
    to: Position,
    source: LedgerSource | None,
    why: str,
    *,
    keep_acks: bool = True,
    properties: list[tuple[str, int]] | None = None,
) -> None:
    old = cursor.position
    record: dict[str, Any] = {
        "topic": topic.name.full_name,
        "cursor": cursor.name,
        "from": _position_text(old),
        "from_origin": cursor.origin,
        "to": _position_text(to),
    }
    if old is not None and old[0] in topic.ids:
        n = _count_between(topic, old, to, source)
        record["entries_skipped" if (n or 0) >= 0 else "entries_redelivered"] = (
            None if n is None else abs(n)
        )
    if cursor.in_ledger:
        record["cursors_ledger_id"] = {"from": cursor.decoded.message.cursorsLedgerId, "to": -1}
    write_cursor(draft, cursor, to, why, keep_acks=keep_acks, properties=properties)
    draft.unreachable.cursors.append(record)


def relocate(topic: Topic, position: Position, source: LedgerSource | None) -> Position | None:
    """Where a cursor at ``position`` belongs in the topic's ledger list, or None if fine.

    A ledger the list does not hold: the next listed ledger's start (``next:-1``, the
    broker's rule), or the topic's end when no later ledger exists. An entry after its
    ledger's last entry: that last entry.
    """
    ids = topic.ids
    lid, eid = position
    if not ids:
        return None
    if lid not in ids:
        later = [i for i in ids if i > lid]
        if later:
            return (later[0], -1)
        return end_position(topic, source)
    last = last_entry(topic, lid, source)
    if last is not None and eid > last:
        return (lid, last)
    return None


def end_position(topic: Topic, source: LedgerSource | None) -> Position:
    """The topic's last entry (``--latest``), stepping back over empty ledgers."""
    for lid in reversed(topic.ids):
        last = last_entry(topic, lid, source)
        if last is None:
            raise DataError(
                f"the last entry of ledger {lid} (the open ledger of {topic.name.full_name}) is "
                "not recorded in the metadata: pass --bookie-dir to read its LAC, or give --to"
            )
        if last >= 0:
            return (lid, last)
    return (topic.ids[0], -1) if topic.ids else (-1, -1)


# -- the repairs -----------------------------------------------------------------------------


def missing_ledgers(
    draft: Draft,
    topic_name: str,
    source: LedgerSource | None,
    *,
    recreate: bool = False,
    password: bytes | None = None,
    complete_ensemble: bool = False,
) -> list[int]:
    """Drop ledgers with no BookKeeper metadata (or, given bookie storage, no stored entries
    while the metadata says they hold some) from the topic's list; move cursors that
    pointed into them. Returns the dropped ledger ids.

    A ledger without metadata whose entries the bookie storage still holds (the given
    directories, or the running bookies) is said in a warning; with ``recreate`` its
    metadata is recreated from them instead (:mod:`.recreate`, verified by reading every
    entry back through it), and it stays in the list. The time range of dropped data is
    that of its entries where they can be read, else the bounds the ledgers' close times
    give."""
    from pulsarctl_py.stores.metadata import require_bookkeeper_root

    from .recreate import DataFinder

    require_bookkeeper_root(draft.store)  # without it every ledger would look missing
    topic = load_topic(draft, topic_name)
    cursors = load_cursors(draft, topic, source)
    infos = list(topic.info.ledgerInfo)
    dropped: dict[int, str] = {}
    kept: dict[int, str] = {}  # ledgers whose loss is not proven -> why
    finder = DataFinder.of(source) if source is not None else None
    try:
        recreated = _lost_metadata(
            draft,
            topic,
            source,
            finder,
            dropped,
            kept,
            recreate=recreate,
            password=password,
            complete_ensemble=complete_ensemble,
        )
    finally:
        if finder is not None:
            finder.close()
    for li in infos:
        lid = li.ledgerId
        if lid in dropped or lid in recreated:
            continue
        if source is not None and source.bookie is not None:
            try:
                view = source.ledger(lid)
            except LedgerctlError:
                continue
            md = view.metadata
            if (
                md is not None
                and md.is_closed
                and md.last_entry_id >= 0
                and view.last_stored is None
                and view.unreachable is None
            ):
                why = _proven_empty(source, view, md.last_entry_id)
                if why is None:
                    dropped[lid] = "has no entries on any bookie of its ensembles"
                else:
                    draft.warnings.append(
                        f"ledger {lid} of {topic.name.full_name}: the storage read holds none "
                        f"of its entries 0..{md.last_entry_id}, but {why}: not dropped"
                    )
                    kept[lid] = why
    dropped = {lid: dropped[lid] for lid in topic.ids if lid in dropped}  # the list's order
    draft.repairs.append(
        {
            "repair": "missing-ledgers",
            "topic": topic.name.full_name,
            "ledgers": [{"ledger_id": lid, "reason": why} for lid, why in dropped.items()],
            "recreated": [r.to_json() for r in recreated.values()],
            "not_judged": [{"ledger_id": lid, "reason": why} for lid, why in kept.items()],
        }
    )
    if not dropped:
        return []
    msg = mlpb.ManagedLedgerInfo()
    msg.CopyFrom(topic.info)
    del msg.ledgerInfo[:]
    previous_ts: int | None = None
    for i, li in enumerate(infos):
        if li.ledgerId in dropped:
            u = draft.unreachable
            u.ledgers.append(li.ledgerId)
            recorded = not (i == len(infos) - 1 and li.entries == 0 and li.size == 0)
            if recorded:
                u.entries += li.entries
                u.size += li.size
                u.add_time(previous_ts, li.timestamp or None, basis="close times")
                u.add_messages(count_messages(source, li.ledgerId, 0, li.entries - 1))
            else:
                u.entries_unknown = True
        else:
            msg.ledgerInfo.add().CopyFrom(li)
        previous_ts = li.timestamp or previous_ts
    if infos and infos[-1].ledgerId not in dropped and mld.ml_index(topic.info) is not None:
        draft.warnings.append(
            f"{topic.name.full_name}: the broker entry metadata index jumps over the entries "
            "of the dropped ledgers (verify then reports index-gap): that data is gone"
        )
    reasons = ", ".join(f"{lid} {why}" for lid, why in dropped.items())
    _set_topic(draft, topic, msg, f"drop ledgers from the list: {reasons}")
    _move_out_of(
        draft,
        topic,
        cursors,
        set(dropped),
        source,
        "its position {position} was in dropped ledger {ledger}",
    )
    # a shadow topic lists its source's ledgers: resync those that listed a dropped one
    from pulsarctl_py.stores.metadata import list_managed_ledgers

    for ref in list_managed_ledgers(draft.store):
        data = draft.get(ref.path)
        try:
            info = mld.parse_ml_info(data or b"").message
        except LedgerctlError:
            continue
        src = mld.shadow_source(info)
        if src is None or set(dropped).isdisjoint(li.ledgerId for li in info.ledgerInfo):
            continue
        try:
            same = resolve_topic_name(src).persistence_name == topic.name.persistence_name
        except LedgerctlError:
            same = False
        if same:
            shadow(draft, ref.topic.full_name, source)
    return list(dropped)


def _proven_empty(source: LedgerSource, view: Any, last: int) -> str | None:
    """None when every entry ``0..last`` of a ledger is proven absent from every bookie
    of its write sets (:mod:`pulsarctl_py.stores.absence`); else why it is not proven."""
    absence = source.absence_judge(view)(0, last)
    if absence.uncovered_count:
        return absence.unread_text()
    # the READ_LAC asked of the last ensemble is not every replica: read them all
    try:
        for _ in source.raw_entries(view, 0, last):
            return "an entry of it is on a bookie after all"
    except LedgerctlError as exc:
        return f"its bookies could not all be read ({exc.one_line()})"
    return None


def _lost_metadata(
    draft: Draft,
    topic: Topic,
    source: LedgerSource | None,
    finder: Any,
    dropped: dict[int, str],
    kept: dict[int, str],
    *,
    recreate: bool,
    password: bytes | None,
    complete_ensemble: bool = False,
) -> dict[int, Any]:
    """The topic's ledgers without metadata: each dropped (``dropped``) when no bookie
    holds its entries and every bookie was read; kept (``kept``, with why) when one was
    not, or when its entries are still there; with ``recreate`` and its data found, its
    metadata drafted back. Returns the recreated ones."""
    from .recreate import ledger_place, read_back
    from .recreate import recreate as recreate_ledger

    recreated: dict[int, Any] = {}
    for lid in topic.ids:
        if ledger_has_metadata(draft, lid):
            continue
        found = finder.find(lid) if finder is not None else None
        if found is None or (found.last is None and found.unreachable):
            # its ensemble is unknown, so its entries may be on any bookie: one not read
            # may hold them
            why = (
                "no bookie storage was read"
                if found is None
                else f"not every bookie could be read: {found.unreachable_text()}"
            )
            draft.warnings.append(
                f"ledger {lid} of {topic.name.full_name} has no BookKeeper metadata and none "
                f"of the bookies read holds its entries, but {why}: not dropped (its data "
                "may be there)"
            )
            kept[lid] = why
            continue
        if found.last is None:
            dropped[lid] = "has no BookKeeper metadata, and no bookie holds its entries"
            if recreate:
                where = (
                    "in the bookie storage given" if finder is not None else "(no bookie storage)"
                )
                raise DataError(
                    f"ledger {lid} of {topic.name.full_name} has no BookKeeper metadata and "
                    f"no entries {where}: nothing to recreate it from (drop it without "
                    "--recreate)"
                )
            continue
        if not recreate:
            # its data is not lost: only its metadata is. Dropping it would lose the data
            kept[lid] = f"its entries are still on the bookies ({found.describe()})"
            draft.warnings.append(
                f"ledger {lid} has no BookKeeper metadata but its entries are still on the "
                f"bookies ({found.describe()}): not dropped; `repair missing-ledgers "
                "--recreate` recreates its metadata from them (before the bookies' garbage "
                "collection deletes them)"
            )
            continue
        assert source is not None
        path = ledger_place(draft, lid)
        rec = recreate_ledger(
            draft,
            topic,
            lid,
            found,
            password=password,
            verify=lambda md, lid=lid: read_back(source, lid, md),
            complete_ensemble=complete_ensemble,
        )
        from pulsarctl_py.decoders import ledger_metadata as lm

        draft.set(
            path,
            "ledger",
            lm.build(rec.metadata),
            f"recreate the metadata of ledger {lid} from its entries ({found.describe()}); "
            f"every entry read back through it and verified",
        )
        for note in rec.notes:
            draft.warnings.append(f"ledger {lid}: {note}")
        if "not checked" in rec.sources["password"]:
            draft.warnings.append(f"ledger {lid}: its password is {rec.sources['password']}")
        recreated[lid] = rec
    return recreated


def resolve_topic_name(name: str) -> TopicName:
    from pulsarctl_py.stores.metadata import resolve_topic

    return resolve_topic(name)


def _move_out_of(
    draft: Draft,
    topic: Topic,
    cursors: list[Cursor],
    dropped: set[int] | None,
    source: LedgerSource | None,
    why: str,
) -> None:
    """Move the cursors in a ``dropped`` ledger (None: in any ledger the topic no longer
    lists) to where they belong; ``why`` is formatted with {position} and {ledger}."""
    for cursor in cursors:
        if cursor.position is None:
            continue
        ledger = cursor.position[0]
        if ledger in topic.ids if dropped is None else ledger not in dropped:
            continue
        target = relocate(topic, cursor.position, source)
        if target is not None:
            text = why.format(position=_position_text(cursor.position), ledger=ledger)
            _cursor_move(draft, topic, cursor, target, source, text)


def reset_cursor(
    draft: Draft,
    topic_name: str,
    subscription: str,
    source: LedgerSource | None,
    *,
    to: Position | None = None,
    earliest: bool = False,
    latest: bool = False,
    time_ms: int | None = None,
) -> Position:
    """Move a cursor offline. ``to`` is the next entry to deliver (pulsar-admin's
    reset-cursor meaning): the mark-delete position becomes the entry before it.
    ``time_ms``: the entry a broker's reset by time reads first (``seek``'s broker rule);
    after the last entry when every entry is older."""
    if sum((to is not None, earliest, latest, time_ms is not None)) != 1:
        raise LedgerctlError("give exactly one of --to, --time, --earliest, --latest")
    seek_note = None
    if time_ms is not None:
        to, seek_note = _seek_time(topic_name, time_ms, source)
        if to is None:
            latest = True
    topic = load_topic(draft, topic_name)
    cursors = load_cursors(draft, topic, source, only=subscription)
    if not cursors:
        raise NotFoundError(f"topic {topic.name.full_name} has no cursor {subscription!r}")
    cursor = cursors[0]
    if not topic.ids:
        raise DataError(f"topic {topic.name.full_name} lists no ledgers: nowhere to move to")
    if earliest:
        target = (topic.ids[0], -1)
        how = "earliest"
    elif latest:
        target = end_position(topic, source)
        how = "latest"
    else:
        assert to is not None
        lid, eid = to
        if lid not in topic.ids:
            raise LedgerctlError(
                f"ledger {lid} is not in {topic.name.full_name}'s list "
                f"({', '.join(map(str, topic.ids[:10]))}{'...' if len(topic.ids) > 10 else ''})"
            )
        last = last_entry(topic, lid, source)
        if eid < 0 or (last is not None and eid > last + 1):
            raise LedgerctlError(
                f"entry {eid} is outside ledger {lid} (entries 0..{last}); "
                "the next entry to read must exist or follow the last one"
            )
        target = (lid, eid - 1)
        how = f"to {lid}:{eid}"
    if seek_note is not None:
        how = f"{seek_note}, {how}"
    draft.repairs.append(
        {
            "repair": "cursor",
            "topic": topic.name.full_name,
            "cursor": cursor.name,
            "target": how,
            "mark_delete": _position_text(target),
        }
    )
    if (
        cursor.position == target
        and not cursor.in_ledger
        and not cursor.decoded.message.individualDeletedMessages
        and (cursor.name == mld.COMPACTION_CURSOR or not cursor.decoded.message.properties)
    ):
        return target
    # the broker's reset (ManagedCursorImpl.internalResetCursor) keeps the properties of
    # the __compaction cursor only: every other cursor's mark-delete gets an empty map
    compaction = cursor.name == mld.COMPACTION_CURSOR
    _cursor_move(
        draft,
        topic,
        cursor,
        target,
        source,
        f"reset {how}: mark-delete {_position_text(target)}, individual acks cleared"
        + ("" if compaction else ", properties cleared"),
        keep_acks=False,
        properties=None if compaction else [],
    )
    return target


def _seek_time(
    topic_name: str, time_ms: int, source: LedgerSource | None
) -> tuple[Position | None, str]:
    """The entry a reset by time reads first, by the broker's rule (``pulsarctl_py.seek``);
    None when every entry is older than the time."""
    try:
        from pulsarctl_py import seek as seek_module
    except ImportError:
        raise LedgerctlError(
            "--time needs ledgerctl's seek module, which this build lacks: use --to L:E"
        ) from None
    if source is None:
        raise LedgerctlError("--time reads entries: pass --bookie-dir")
    from pulsarctl_py.timeparse import format_time_ms

    result = seek_module.seek(source, seek_module.SeekRequest(topic=topic_name, time_ms=time_ms))
    if result.findings:
        raise DataError(f"no position for {format_time_ms(time_ms)}: {'; '.join(result.findings)}")
    head = result.head
    note = f"time {format_time_ms(time_ms)} (broker rule)"
    for warning in result.warnings:
        note += f"; {warning}"
    if head is None:
        return None, note
    return (head.ledger_id, head.entry_id), note


def cursor_snapshots(draft: Draft, topic_name: str, source: LedgerSource | None) -> list[str]:
    """Cursors whose cursor ledger is gone (no BookKeeper metadata, or, with bookie storage,
    no stored entry): the broker cannot recover their state from it and rolls back (Pulsar
    4.0.7 ``ManagedCursorImpl.recoverFromLedger``: ``initialize(getRollbackPosition(info),
    emptyMap, cursorProperties)``) to the znode's mark-delete position, clamped to the
    topic's first position, with **no** properties and **no** individual acknowledgements
    (the cursor properties stay), and writes that into the znode as it loads. The plan
    writes exactly that state (``cursorsLedgerId = -1``), so that the rollback is reviewed
    and can be undone; a ``__compaction`` cursor loses its ``CompactedTopicLedger`` with it.
    Returns the names of the cursors changed."""
    topic = load_topic(draft, topic_name)
    changed = []
    first = (topic.ids[0], -1) if topic.ids else None
    for cursor in load_cursors(draft, topic, source):
        cl = cursor.decoded.message.cursorsLedgerId
        if cl == -1 or cursor.position is None:
            continue
        gone = not ledger_has_metadata(draft, cl)
        if not gone and source is not None and source.bookie is not None:
            try:
                view = source.ledger(cl)
            except LedgerctlError:
                view = None
            last = None if view is None else view.readable_last
            gone = view is not None and last is not None and last >= 0 and view.last_stored is None
        if not gone:
            continue
        snapshot = (
            cursor.decoded.message.markDeleteLedgerId,
            cursor.decoded.message.markDeleteEntryId,
        )
        position = first if first is not None and snapshot < first else snapshot
        lost = [p.name for p in cursor.decoded.message.properties]
        write_cursor(
            draft,
            cursor,
            position,
            f"its cursor ledger {cl} is gone: the broker rolls back to the znode's position "
            f"{_position_text(snapshot)}"
            + (
                f" (clamped to the topic's start {_position_text(position)})"
                if position != snapshot
                else ""
            )
            + ", without properties or individual acknowledgements",
            properties=[],
            keep_acks=False,
        )
        if cursor.name == mld.COMPACTION_CURSOR and COMPACTED_TOPIC_LEDGER in lost:
            draft.warnings.append(
                f"{topic.name.full_name}: the __compaction cursor loses CompactedTopicLedger "
                "with its cursor ledger: readCompacted readers read the topic, and the next "
                "compaction starts from the horizon (see repair compaction --clear)"
            )
        changed.append(cursor.name)
    draft.repairs.append(
        {"repair": "cursor-snapshot", "topic": topic.name.full_name, "cursors": changed}
    )
    return changed


def clamp_cursors(draft: Draft, topic_name: str, source: LedgerSource | None) -> list[str]:
    """Cursors past their ledger's last entry, or in a ledger the topic does not list:
    move them to that last entry, or to the next listed ledger's start (the topic's end
    when none follows). Returns the names of the cursors moved."""
    topic = load_topic(draft, topic_name)
    moved = []
    for cursor in load_cursors(draft, topic, source):
        if cursor.position is None:
            continue
        target = relocate(topic, cursor.position, source)
        if target is None:
            continue
        _cursor_move(
            draft,
            topic,
            cursor,
            target,
            source,
            f"clamp {_position_text(cursor.position)} ({cursor.origin}) into the topic's ledgers",
        )
        moved.append(cursor.name)
    draft.repairs.append(
        {"repair": "clamp-cursors", "topic": topic.name.full_name, "cursors": moved}
    )
    return moved


def clear_compaction(draft: Draft, topic_name: str, source: LedgerSource | None) -> int | None:
    """Clear a ``CompactedTopicLedger`` that names a ledger without BookKeeper metadata.

    The ``__compaction`` cursor goes back to the topic's start as well: the next compaction
    then reads the whole topic again, instead of only what follows the old horizon (whose
    keys lived in the lost compacted ledger). Returns the cleared ledger id, or None.
    """
    topic = load_topic(draft, topic_name)
    cursors = load_cursors(draft, topic, source, only=mld.COMPACTION_CURSOR)
    record: dict[str, Any] = {"repair": "compaction", "topic": topic.name.full_name}
    draft.repairs.append(record)
    if not cursors:
        record["cleared"] = None
        return None
    cursor = cursors[0]
    props = dict(cursor.properties)
    ledger = props.get(COMPACTED_TOPIC_LEDGER)
    record["compacted_ledger"] = ledger
    if ledger is None or ledger_has_metadata(draft, ledger):
        record["cleared"] = None
        return None
    kept = [(k, v) for k, v in cursor.properties if k != COMPACTED_TOPIC_LEDGER]
    start = (topic.ids[0], -1) if topic.ids else cursor.position or (-1, -1)
    old = cursor.position
    write_cursor(
        draft,
        cursor,
        start,
        f"{COMPACTED_TOPIC_LEDGER} {ledger} has no BookKeeper metadata: clear it, and move "
        f"the horizon from {_position_text(old)} to the topic's start so that the next "
        "compaction reads every key again",
        properties=kept,
    )
    draft.unreachable.cursors.append(
        {
            "topic": topic.name.full_name,
            "cursor": mld.COMPACTION_CURSOR,
            "from": _position_text(old),
            "to": _position_text(start),
            "cleared": {COMPACTED_TOPIC_LEDGER: ledger},
        }
    )
    record["cleared"] = ledger
    return ledger


def _ledger_path(draft: Draft, ledger_id: int) -> str | None:
    """The znode path of the ledger's metadata (any layout), or None."""
    from pulsarctl_py.decoders import ledger_metadata as lm

    for layout in (
        lm.LedgerLayout.HIERARCHICAL,
        lm.LedgerLayout.FLAT,
        lm.LedgerLayout.LONG_HIERARCHICAL,
    ):
        path = lm.ledger_path(ledger_id, layout, draft.ledgers_root())
        if draft.get(path) is not None:
            return path
    return None


def _ledger_metadata(draft: Draft, ledger_id: int) -> Any:
    """The ledger's BookKeeper metadata as drafted (any layout), or None."""
    from pulsarctl_py.decoders import ledger_metadata as lm

    for layout in (
        lm.LedgerLayout.HIERARCHICAL,
        lm.LedgerLayout.FLAT,
        lm.LedgerLayout.LONG_HIERARCHICAL,
    ):
        data = draft.get(lm.ledger_path(ledger_id, layout, draft.ledgers_root()))
        if data is not None:
            try:
                return lm.parse(data, ledger_id)
            except LedgerctlError as exc:
                raise DataError(f"ledger {ledger_id}'s metadata does not decode: {exc}") from None
    return None


def point_compaction(
    draft: Draft,
    topic_name: str,
    ledger_id: int,
    source: LedgerSource | None,
    *,
    horizon: Position | None = None,
) -> bool:
    """Re-point ``CompactedTopicLedger`` to ``ledger_id`` (a ledger ``compact --apply``
    wrote) and the ``__compaction`` mark-delete to its horizon, the position its custom
    metadata ``pulsar/compactedTo`` names (the last entry phase one read, formats.md §6).

    ``pulsar/compactedTo`` is phase one's "to", the last entry not entirely deleted: it may
    lie before the horizon the compactor acknowledged (deletions at the tail), which makes
    the next compaction re-read those few entries, nothing worse. ``horizon`` (a
    migration that keeps the current one) overrides it.

    Refused: a ledger without metadata, not a closed compacted ledger, without
    ``compactedTo``, or naming another topic in ``pulsar/compactedTopic``. Returns whether
    anything changes. The previous compacted ledger is not deleted (`orphans` lists it).
    """
    from pulsarctl_py.stores.metadata import resolve_topic

    topic = load_topic(draft, topic_name)
    md = _ledger_metadata(draft, ledger_id)
    if md is None:
        raise NotFoundError(f"ledger {ledger_id} has no BookKeeper metadata")
    tags = md.pulsar()
    if tags.compacted_topic is None:
        raise DataError(
            f"ledger {ledger_id} is not a compacted ledger (no pulsar/compactedTopic in its "
            "custom metadata)"
        )
    try:
        owner = resolve_topic(tags.compacted_topic).full_name
    except LedgerctlError:
        owner = tags.compacted_topic
    if owner != topic.name.full_name:
        raise DataError(
            f"ledger {ledger_id} is the compacted ledger of {owner}, not of "
            f"{topic.name.full_name}: refused"
        )
    if not md.is_closed:
        raise DataError(f"ledger {ledger_id} is not closed ({md.state.name}): refused")
    if tags.compacted_to is None:
        raise DataError(
            f"ledger {ledger_id} has no readable pulsar/compactedTo: its horizon is unknown"
        )
    origin = "the horizon kept"
    if horizon is None:
        horizon = (tags.compacted_to["ledger_id"], tags.compacted_to["entry_id"])
        origin = "its pulsar/compactedTo"
    record: dict[str, Any] = {
        "repair": "compaction",
        "topic": topic.name.full_name,
        "to_ledger": ledger_id,
        "horizon": _position_text(horizon),
    }
    draft.repairs.append(record)
    if horizon[0] not in topic.ids:
        draft.warnings.append(
            f"the horizon {_position_text(horizon)} of ledger {ledger_id} is in a ledger the "
            "topic no longer lists: the broker reads the tail from the next ledger"
        )
    from pulsarctl_py.compaction.cursor import draft_compacted_ledger

    cursors = load_cursors(draft, topic, source, only=mld.COMPACTION_CURSOR)
    if not cursors:
        draft_compacted_ledger(
            draft,
            join(topic.path, mld.url_encode(mld.COMPACTION_CURSOR)),
            None,
            horizon,
            ledger_id,
            f"create the __compaction cursor at the horizon of ledger {ledger_id}",
        )
        record["from_ledger"] = None
        draft.unreachable.cursors.append(
            {
                "topic": topic.name.full_name,
                "cursor": mld.COMPACTION_CURSOR,
                "from": "none",
                "to": _position_text(horizon),
            }
        )
        return True
    cursor = cursors[0]
    previous = dict(cursor.properties).get(COMPACTED_TOPIC_LEDGER)
    record["from_ledger"] = previous
    if previous == ledger_id and cursor.position == horizon and not cursor.in_ledger:
        return False
    kept = [(k, v) for k, v in cursor.properties if k != COMPACTED_TOPIC_LEDGER]
    old = cursor.position
    draft_compacted_ledger(
        draft,
        cursor.path,
        cursor.decoded,
        horizon,
        ledger_id,
        f"{COMPACTED_TOPIC_LEDGER} {previous} -> {ledger_id}; mark-delete "
        f"{_position_text(old)} -> {_position_text(horizon)} ({origin})",
        keep=kept,
    )
    draft.unreachable.cursors.append(
        {
            "topic": topic.name.full_name,
            "cursor": mld.COMPACTION_CURSOR,
            "from": _position_text(old),
            "to": _position_text(horizon),
            "compacted_ledger": {"from": previous, "to": ledger_id},
        }
    )
    if previous is not None and previous != ledger_id:
        draft.warnings.append(
            f"the previous compacted ledger {previous} is kept: `ledgerctl orphans` lists it "
            "once nothing references it"
        )
    return True


def shadow(draft: Draft, shadow_name: str, source: LedgerSource | None) -> bool:
    """Resync a shadow topic from its source (formats.md §14): the ledger list with sizes
    and offload contexts (from the shadow's first ledger the source lists on), copied from
    the source; the shadow's own properties kept. No terminated position: a broker never
    writes one into a shadow's znode (``ShadowManagedLedgerImpl.doInitialize`` and
    ``processSourceManagedLedgerInfo`` keep the source's only in memory, as the shadow's
    last confirmed entry), so one found there is dropped. Shadow cursors in ledgers the
    list no longer holds move to the next ledger's start. Returns whether anything
    changes."""
    topic = load_topic(draft, shadow_name)
    source_name = mld.shadow_source(topic.info)
    if source_name is None:
        raise DataError(
            f"{topic.name.full_name} is not a shadow topic "
            f"(no {mld.PROPERTY_SHADOW_SOURCE} property)"
        )
    try:
        src = load_topic(draft, source_name, changes=False)
    except NotFoundError:
        raise DataError(
            f"the shadow's source {source_name} has no managed ledger: nothing to resync from"
        ) from None
    msg = mlpb.ManagedLedgerInfo()
    msg.CopyFrom(topic.info)
    del msg.ledgerInfo[:]
    # from the shadow's first ledger the source still lists on (a shadow made after the
    # source trimmed nothing keeps its start); the whole source list when none is shared
    shared = [lid for lid in topic.ids if lid in src.ids]
    start = min(shared) if shared else None
    for li in src.info.ledgerInfo:
        if start is None or li.ledgerId >= start:
            msg.ledgerInfo.add().CopyFrom(li)
    msg.ClearField("terminatedPosition")
    record: dict[str, Any] = {
        "repair": "shadow",
        "topic": topic.name.full_name,
        "source": src.name.full_name,
    }
    draft.repairs.append(record)
    old_ids = topic.ids
    removed = [lid for lid in old_ids if lid not in src.ids]
    record["removed_ledgers"] = removed
    record["added_ledgers"] = [lid for lid in src.ids if lid not in old_ids]
    if msg.SerializeToString() == topic.info.SerializeToString():
        return False
    for li in topic.info.ledgerInfo:  # reachable through the shadow no more
        if li.ledgerId in removed and li.ledgerId not in draft.unreachable.ledgers:
            draft.unreachable.entries += li.entries
            draft.unreachable.size += li.size
            draft.unreachable.add_messages(count_messages(source, li.ledgerId, 0, li.entries - 1))
    draft.unreachable.ledgers.extend(removed)
    cursors = load_cursors(draft, topic, source)
    _set_topic(draft, topic, msg, f"resync the ledger list from the source {src.name.full_name}")
    _move_out_of(
        draft, topic, cursors, None, source, "its ledger {ledger} is not in the source's list"
    )
    return True


# -- orphans ---------------------------------------------------------------------------------


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
        for o in judge_orphans(draft, source, min_age_ms=min_age_ms)
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


# -- from verify ---------------------------------------------------------------------------

#: verify check id -> the repair that fixes it: verify's table of finding codes
REPAIR_FOR_CHECK = codes.REPAIR_FOR_CHECK


def load_verify_report(path: Any) -> Any:
    """A verify report read back (untrusted, through :mod:`pulsarctl_py.documents`): the
    document of ``verify -o json``, or the lines of ``verify -o jsonl`` (one finding per
    line; a line holding the summary is skipped), as the list of findings."""
    import os

    from pulsarctl_py.documents import parse_document, read_document

    name = os.fspath(path)
    shown = "on standard input" if name == "-" else name
    what = "verify report"
    hint = " (use verify -o json or -o jsonl)"
    data = read_document(path, what, stdin=True)
    try:
        doc = parse_document(data, shown, what, hint)
    except LedgerctlError:
        lines = [line for line in data.splitlines() if line.strip()]
        if len(lines) < 2:
            raise
        doc = [
            parse_document(line, f"{shown} line {n}", what, hint) for n, line in enumerate(lines, 1)
        ]
    if isinstance(doc, dict) and "check" in doc:
        doc = [doc]  # verify -o jsonl of a single finding
    if isinstance(doc, list):
        doc = [f for f in doc if not (isinstance(f, dict) and "check" not in f and "summary" in f)]
    return doc


def from_verify(draft: Draft, report: Any, source: LedgerSource | None) -> list[dict[str, Any]]:
    """Draft the repairs for the findings of ``verify --output json`` (or a list of
    findings); returns the findings no repair handles, each with the reason."""
    findings = report.get("findings") if isinstance(report, dict) else report
    if not isinstance(findings, list) or not all(isinstance(f, dict) for f in findings):
        raise LedgerctlError(
            'not verify output: expected {"findings": [...]} from verify -o json, or one '
            "finding per line from verify -o jsonl"
        )
    todo: dict[tuple[str, str | None], None] = {}
    orphans: set[int] = set()
    unhandled = []
    # topic -> whether every ledger verify found without metadata still has its entries on
    # the bookies (then their metadata is recreated, as the findings say; the recreation
    # reads and verifies them itself)
    recreatable: dict[str, bool] = {}
    for f in findings:
        check = f.get("check")
        if check == "ledger-missing-metadata" and isinstance(f.get("topic"), str):
            data = (
                (f.get("details") or {}).get("data") if isinstance(f.get("details"), dict) else None
            )
            held = isinstance(data, dict) and bool(data.get("copies"))
            recreatable[f["topic"]] = recreatable.get(f["topic"], True) and held
        repair = REPAIR_FOR_CHECK.get(str(check))
        if repair is None:
            unhandled.append({"check": check, "topic": f.get("topic"), "reason": "no repair"})
            continue
        if repair == "orphans":
            if isinstance(f.get("ledger_id"), int):
                orphans.add(f["ledger_id"])
            continue
        topic = f.get("topic")
        if not isinstance(topic, str):
            unhandled.append({"check": check, "topic": topic, "reason": "names no topic"})
            continue
        if check == "ledger-missing-storage" and (source is None or source.bookie is None):
            unhandled.append(
                {"check": check, "topic": topic, "reason": "needs --bookie-dir to confirm"}
            )
            continue
        todo[(repair, topic)] = None
    # a shadow resyncs from its source once the source is repaired
    order = ["missing-ledgers", "cursor-snapshot", "clamp-cursors", "compaction", "shadow"]
    for repair, topic in sorted(todo, key=lambda rt: (order.index(rt[0]), rt[1] or "")):
        assert topic is not None
        if repair == "missing-ledgers":
            missing_ledgers(draft, topic, source, recreate=recreatable.get(topic, False))
        elif repair == "cursor-snapshot":
            cursor_snapshots(draft, topic, source)
        elif repair == "clamp-cursors":
            clamp_cursors(draft, topic, source)
        elif repair == "compaction":
            clear_compaction(draft, topic, source)
        elif repair == "shadow":
            shadow(draft, topic, source)
    if orphans:
        from pulsarctl_py.verify.orphans import DEFAULT_MIN_AGE_MS

        delete_orphans(draft, source, only=orphans, min_age_ms=DEFAULT_MIN_AGE_MS)
    return unhandled


#: the largest ledger metadata file --restore reads: ZooKeeper's default jute.maxbuffer
#: (1 MiB) bounds what a znode can hold
MAX_LEDGER_METADATA_FILE = 1 << 20


def restore_ledger_metadata(draft: Draft, ledger_id: int, path: Any) -> None:
    """Put a ledger's metadata back from a file ``ledger meta --dump`` (or ``bookkeeper
    shell ledgermetadata -dumptofile``) wrote: the bytes as they are, at the ledger's
    znode (created where BookKeeper's layout puts it when it has none), after checking
    that they parse as ledger metadata (BookKeeper's ``LedgerMetadataSerDe``)."""
    from pathlib import Path

    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.infile import read_small
    from pulsarctl_py.stores.metadata import read_ledger

    from .recreate import ledger_place

    file = Path(path)
    # bounded and never blocking: a FIFO nobody writes to, a device, a directory or a
    # file the OS refuses is one line (exit 2, or 3 for permission denied)
    data = read_small(file, MAX_LEDGER_METADATA_FILE, "ledger metadata file")
    if len(data) > MAX_LEDGER_METADATA_FILE:
        raise LedgerctlError(
            f"{file} is larger than ledger metadata can be ({MAX_LEDGER_METADATA_FILE} bytes, "
            "ZooKeeper's jute.maxbuffer)"
        )
    try:
        md = lm.parse(data, ledger_id)
    except LedgerctlError as exc:
        raise LedgerctlError(f"{file} is not BookKeeper ledger metadata: {exc}") from None
    root = draft.ledgers_root()
    record = read_ledger(draft.store, ledger_id, root)
    if record is not None:
        key = record.path
        action = "unchanged" if record.raw == data else "replace"
    else:
        key = ledger_place(draft, ledger_id)
        action = "create"
    why = {
        "create": f"restore ledger {ledger_id}'s metadata from {file} (it has none)",
        "replace": f"replace ledger {ledger_id}'s metadata with {file}'s",
        "unchanged": f"ledger {ledger_id}'s metadata already is {file}'s",
    }[action]
    draft.set(key, "ledger", data, why)
    draft.repairs.append(
        {
            "repair": "ledger-meta",
            "ledger_id": ledger_id,
            "file": str(file),
            "action": action,
            "state": md.state.name,
            "last_entry_id": md.last_entry_id,
            "length": md.length,
            "ensembles": {str(k): list(v) for k, v in sorted(md.ensembles.items())},
        }
    )
    if record is not None and record.metadata is not None and action == "replace":
        old = record.metadata
        if old.is_closed and (not md.is_closed or md.last_entry_id < old.last_entry_id):
            draft.warnings.append(
                f"ledger {ledger_id} is closed at entry {old.last_entry_id}; the file's "
                f"metadata is {md.state.name} at {md.last_entry_id}: readers would lose entries"
            )
