"""``repair cursor``, ``clamp-cursors`` and ``cursor-snapshot``: a cursor moved offline.

A reset as the broker's reset-cursor writes it (to a position, a time by the broker's
seek rule, the earliest or the latest entry), a skip of N entries and a cleared backlog
as the broker's ``skip`` and ``clear-backlog`` write them, for one subscription or all of
them, on a topic or on every partition of a partitioned topic (:func:`cursor_operation`);
cursors out of the topic's ledgers clamped into them; cursors whose cursor ledger is gone
rolled back as the broker rolls them back.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import DataError, LedgerctlError, NotFoundError
from pulsarctl_py.plans import Draft
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

from .topic_state import (
    COMPACTED_TOPIC_LEDGER,
    Cursor,
    Position,
    Topic,
    cursor_ledger_info,
    end_position,
    last_entry,
    ledger_has_metadata,
    load_cursors,
    load_topic,
    move_cursor,
    position_text,
    relocate,
    write_cursor,
)

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource


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
    sought: tuple[Position | None, str] | None = None,
) -> Position:
    """Move a cursor offline. ``to`` is the next entry to deliver (pulsar-admin's
    reset-cursor meaning): the mark-delete position becomes the entry before it.
    ``time_ms``: the entry a broker's reset by time reads first (``seek``'s broker rule);
    after the last entry when every entry is older (``sought``: that entry, found already
    for another subscription of the topic)."""
    if sum((to is not None, earliest, latest, time_ms is not None)) != 1:
        raise LedgerctlError("give exactly one of --to, --time, --earliest, --latest")
    seek_note = None
    if time_ms is not None:
        to, seek_note = sought if sought is not None else _seek_time(topic_name, time_ms, source)
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
            "mark_delete": position_text(target),
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
    move_cursor(
        draft,
        topic,
        cursor,
        target,
        source,
        f"reset {how}: mark-delete {position_text(target)}, individual acks cleared"
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
            f"{position_text(snapshot)}"
            + (
                f" (clamped to the topic's start {position_text(position)})"
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
        move_cursor(
            draft,
            topic,
            cursor,
            target,
            source,
            f"clamp {position_text(cursor.position)} ({cursor.origin}) into the topic's ledgers",
        )
        moved.append(cursor.name)
    draft.repairs.append(
        {"repair": "clamp-cursors", "topic": topic.name.full_name, "cursors": moved}
    )
    return moved


# -- skip, clear backlog, across subscriptions and partitions --------------------------------


def internal_cursor(name: str) -> str | None:
    """What a broker's own cursor is for (compaction, deduplication, replicator), or None
    for a subscription a client made."""
    if name == mld.COMPACTION_CURSOR:
        return "compaction"
    if name == mld.DEDUP_CURSOR:
        return "deduplication"
    if name.startswith(mld.REPLICATOR_PREFIX):
        return "replicator"
    return None


def topics_of(draft: Draft, topic_name: str) -> list[str]:
    """The topic, or every partition of a partitioned topic given by its base name (the
    count from its partitioned-topic metadata, as the broker's admin operations on a base
    name take it: ``PersistentTopicsBase.internalResetCursor`` and
    ``internalSkipAllMessages`` call each ``topicName.getPartition(i)``). A declared
    partition without a managed ledger is refused: a plan for some partitions only would
    look like one for all."""
    import json

    from pulsarctl_py.stores.metadata import resolve_topic
    from pulsarctl_py.topics import partitioned_metadata_path

    name = resolve_topic(topic_name)
    if name.partition_index >= 0 or draft.get(name.ml_path) is not None:
        return [name.full_name]
    path = partitioned_metadata_path(name)
    data = draft.get(path)
    if data is None:
        return [name.full_name]  # load_topic says what is missing
    try:
        count = int(json.loads(data)["partitions"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise DataError(f"{path} does not decode as partitioned-topic metadata") from None
    parts = [name.partition(i) for i in range(count)]
    missing = [p.full_name for p in parts if draft.get(p.ml_path) is None]
    if missing:
        raise DataError(
            f"{name.full_name} declares {count} partitions, but {', '.join(missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''} has no managed ledger: nothing planned"
        )
    return [p.full_name for p in parts]


def cursor_operation(
    draft: Draft,
    topic_name: str,
    subscription: str | None,
    source: LedgerSource | None,
    *,
    to: Position | None = None,
    earliest: bool = False,
    latest: bool = False,
    time_ms: int | None = None,
    skip: int | None = None,
    clear_backlog: bool = False,
) -> list[dict[str, Any]]:
    """One operation on one subscription (``subscription``) or on every subscription a
    client made (None; the broker's own cursors are left, and named in a warning), of the
    topic or of every partition of a partitioned topic (:func:`topics_of`): a reset
    (:func:`reset_cursor`), a skip of ``skip`` entries (:func:`skip_entries`) or a cleared
    backlog (:func:`clear_cursor_backlog`). One plan, one change per cursor moved. Returns
    what each cursor became: ``{"topic", "cursor", "mark_delete"}``."""
    modes = (to is not None, earliest, latest, time_ms is not None, skip is not None)
    if sum(modes) + clear_backlog != 1:
        raise LedgerctlError(
            "give exactly one of --to, --time, --earliest, --latest, --skip, --clear-backlog"
        )
    topics = topics_of(draft, topic_name)
    if to is not None and len(topics) > 1:
        raise LedgerctlError(
            f"--to L:E is a position in one partition's ledgers; {topic_name} has "
            f"{len(topics)} partitions: name one, or use --time, --earliest, --latest"
        )
    done: list[dict[str, Any]] = []
    found = 0
    for name in topics:
        topic = load_topic(draft, name)
        if subscription is not None:
            names = [subscription]
        else:
            names = []
            left = []
            for cursor in load_cursors(draft, topic, source):
                (left if internal_cursor(cursor.name) else names).append(cursor.name)
            if left:
                draft.warnings.append(
                    f"{topic.name.full_name}: the broker's own cursors are left as they are: "
                    + ", ".join(f"{n} ({internal_cursor(n)})" for n in left)
                )
            if not names:
                draft.warnings.append(f"{topic.name.full_name}: no subscription to change")
        found += len(names)
        sought = None
        if time_ms is not None and names:
            sought = _seek_time(topic.name.full_name, time_ms, source)
        for sub in names:
            if skip is not None:
                position = skip_entries(draft, topic.name.full_name, sub, source, skip)
            elif clear_backlog:
                position = clear_cursor_backlog(draft, topic.name.full_name, sub, source)
            else:
                position = reset_cursor(
                    draft,
                    topic.name.full_name,
                    sub,
                    source,
                    to=to,
                    earliest=earliest,
                    latest=latest,
                    time_ms=time_ms,
                    sought=sought,
                )
            done.append(
                {
                    "topic": topic.name.full_name,
                    "cursor": sub,
                    "mark_delete": position_text(position),
                }
            )
    if not found:
        raise NotFoundError(
            f"{topic_name}: no subscription to change on "
            + (f"any of its {len(topics)} partitions" if len(topics) > 1 else "it")
        )
    return done


def _one_cursor(
    draft: Draft, topic_name: str, subscription: str, source: LedgerSource | None, what: str
) -> tuple[Topic, Cursor]:
    topic = load_topic(draft, topic_name)
    cursors = load_cursors(draft, topic, source, only=subscription)
    if not cursors:
        raise NotFoundError(f"topic {topic.name.full_name} has no cursor {subscription!r}")
    kind = internal_cursor(subscription)
    if kind is not None:
        raise LedgerctlError(
            f"{subscription} is the broker's {kind} cursor: {what} is for subscriptions "
            "(move it with `repair cursor` --to/--earliest/--latest"
            + (", or `repair compaction`" if kind == "compaction" else "")
            + ")"
        )
    if not topic.ids:
        raise DataError(f"topic {topic.name.full_name} lists no ledgers: nowhere to move to")
    return topic, cursors[0]


def _entries(topic: Topic, source: LedgerSource | None) -> list[Position]:
    """Every entry of the topic, in order (the last ledger's from the bookies' LAC)."""
    out: list[Position] = []
    for lid in topic.ids:
        last = last_entry(topic, lid, source)
        if last is None:
            raise DataError(
                f"the last entry of ledger {lid} of {topic.name.full_name} is not recorded "
                "in the metadata: pass --bookie-dir (or reach the bookies) to read its LAC"
            )
        out.extend((lid, e) for e in range(last + 1))
    return out


def _acked(
    ranges: list[tuple[Position, Position]], position: Position
) -> tuple[Position, Position] | None:
    """The individually acknowledged range (lower, upper] holding ``position``, or None."""
    for lower, upper in ranges:
        if lower < position <= upper:
            return (lower, upper)
    return None


def _cursor_acks(
    topic: Topic, cursor: Cursor, source: LedgerSource | None
) -> tuple[Any, list[tuple[Position, Position]]]:
    """The cursor's state with its individual acknowledgements: the znode's, or, when its
    state is in a cursor ledger, that ledger's last PositionInfo (which a broker recovers);
    the state returned is the znode's value carrying those acks, cursorsLedgerId -1."""
    msg = mlpb.ManagedCursorInfo()
    msg.CopyFrom(cursor.decoded.message)
    if cursor.in_ledger:
        info = cursor_ledger_info(source, msg.cursorsLedgerId)
        if info is None:
            raise DataError(
                f"cursor {cursor.name!r} of {topic.name.full_name} keeps its state in cursor "
                f"ledger {msg.cursorsLedgerId}, which could not be read: the entries "
                "acknowledged one by one, which a skip passes over, are unknown (pass "
                "--bookie-dir, or reach the bookies)"
            )
        if len(info.individualDeletedMessageRanges):
            raise DataError(
                f"cursor {cursor.name!r} of {topic.name.full_name} keeps its acks as "
                "individualDeletedMessageRanges (unackedRangesOpenCacheSetEnabled), which "
                "ledgerctl does not rewrite"
            )
        del msg.individualDeletedMessages[:]
        msg.individualDeletedMessages.extend(info.individualDeletedMessages)
        del msg.batchedEntryDeletionIndexInfo[:]
        msg.batchedEntryDeletionIndexInfo.extend(info.batchedEntryDeletionIndexInfo)
        msg.cursorsLedgerId = -1
    ranges = [
        (
            (r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId),
            (r.upperEndpoint.ledgerId, r.upperEndpoint.entryId),
        )
        for r in msg.individualDeletedMessages
    ]
    return dataclasses.replace(cursor.decoded, message=msg), sorted(ranges)


def _move(
    draft: Draft,
    topic: Topic,
    cursor: Cursor,
    target: Position,
    source: LedgerSource | None,
    why: str,
    state: Any,
) -> None:
    """Write ``cursor`` at ``target`` from ``state`` (its value carrying the acks to keep
    after ``target``), with no mark-delete properties: the broker's skip and clear-backlog
    mark-delete through ``ManagedCursorImpl.asyncMarkDelete(position, callback, ctx)``,
    which passes an empty properties map."""
    in_ledger = cursor.in_ledger
    ledger_id = cursor.decoded.message.cursorsLedgerId
    cursor.decoded = state
    move_cursor(draft, topic, cursor, target, source, why, keep_acks=True, properties=[])
    if in_ledger:
        draft.unreachable.cursors[-1]["cursors_ledger_id"] = {"from": ledger_id, "to": -1}


def skip_entries(
    draft: Draft, topic_name: str, subscription: str, source: LedgerSource | None, count: int
) -> Position:
    """Skip ``count`` entries of a subscription, as the broker's skip writes it
    (``pulsar-admin topics skip``: ``PersistentTopicsBase.internalSkipMessages`` ->
    ``PersistentSubscription.skipMessages`` -> ``ManagedCursorImpl.asyncSkipEntries`` with
    ``IndividualDeletedEntries.Exclude``): the mark-delete position moves to the
    ``count``-th entry after it that is not acknowledged individually (entries acknowledged
    one by one are passed over, ``getNumIndividualDeletedEntriesToSkip``), at most to the
    topic's last entry; then over an acknowledged range that follows it
    (``setAcknowledgedPosition``); the acks up to it are dropped, the later ones kept
    (``individualDeletedMessages.removeAtMost``); the mark-delete properties are emptied.
    The broker counts entries: a batch is one. Returns the new mark-delete position."""
    if count < 1:
        raise LedgerctlError(f"skip {count}: give a number of entries, 1 or more")
    topic, cursor = _one_cursor(draft, topic_name, subscription, source, "skip")
    current = cursor.position if cursor.position is not None else (topic.ids[0], -1)
    state, ranges = _cursor_acks(topic, cursor, source)
    entries = _entries(topic, source)
    after = [e for e in entries if e > current]
    target = current
    left = count
    for entry in after:
        if _acked(ranges, entry) is not None:
            continue
        target = entry
        left -= 1
        if left == 0:
            break
    # past an acknowledged range right after it, as setAcknowledgedPosition does
    for entry in (e for e in entries if e > target):
        found = _acked(ranges, entry)
        if found is None:
            break
        target = max(target, found[1])
    draft.repairs.append(
        {
            "repair": "skip",
            "topic": topic.name.full_name,
            "cursor": cursor.name,
            "entries": count,
            "mark_delete": position_text(target),
        }
    )
    if target <= current:
        draft.warnings.append(
            f"{topic.name.full_name} {cursor.name}: no entry after {position_text(current)} "
            "to skip: left as it is"
        )
        return current
    skipped = count - left
    _move(
        draft,
        topic,
        cursor,
        target,
        source,
        f"skip {count} entries ({skipped} there): mark-delete {position_text(target)}, "
        "acks up to it dropped, later ones kept, properties cleared",
        state,
    )
    return target


def clear_cursor_backlog(
    draft: Draft, topic_name: str, subscription: str, source: LedgerSource | None
) -> Position:
    """Clear a subscription's backlog, as the broker's clear-backlog writes it
    (``pulsar-admin topics clear-backlog``: ``PersistentTopicsBase.internalSkipAllMessages``
    -> ``PersistentSubscription.clearBacklog`` -> ``ManagedCursorImpl.asyncClearBacklog``):
    the mark-delete position becomes the topic's last entry (``ledger.getLastPosition()``),
    every individual ack is dropped (all are at or before it), the mark-delete properties
    are emptied. A cursor at or past the last entry is left (the broker's mark-delete of
    an earlier position fails, and clear-backlog takes that as done). Returns the new
    mark-delete position."""
    topic, cursor = _one_cursor(draft, topic_name, subscription, source, "clear-backlog")
    target = end_position(topic, source)
    current = cursor.position
    draft.repairs.append(
        {
            "repair": "clear-backlog",
            "topic": topic.name.full_name,
            "cursor": cursor.name,
            "mark_delete": position_text(target),
        }
    )
    if current is not None and current >= target:
        draft.warnings.append(
            f"{topic.name.full_name} {cursor.name}: at {position_text(current)}, no backlog "
            "to clear: left as it is"
        )
        return current
    move_cursor(
        draft,
        topic,
        cursor,
        target,
        source,
        f"clear backlog: mark-delete {position_text(target)} (the topic's last entry), "
        "individual acks and properties cleared",
        keep_acks=False,
        properties=[],
    )
    return target
