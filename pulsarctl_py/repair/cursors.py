"""``repair cursor``, ``clamp-cursors`` and ``cursor-snapshot``: a cursor moved offline.

A reset as the broker's reset-cursor writes it (to a position, a time by the broker's
seek rule, the earliest or the latest entry); cursors out of the topic's ledgers clamped
into them; cursors whose cursor ledger is gone rolled back as the broker rolls them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import DataError, LedgerctlError, NotFoundError
from pulsarctl_py.plans import Draft

from .topic_state import (
    COMPACTED_TOPIC_LEDGER,
    Position,
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
