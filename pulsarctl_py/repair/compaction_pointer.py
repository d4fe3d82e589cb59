"""``repair compaction``: the ``__compaction`` cursor's ``CompactedTopicLedger`` pointer,
cleared when it names a lost ledger (:func:`clear_compaction`) or re-pointed to a compacted
ledger and its horizon (:func:`point_compaction`, also what ``migrate compacted`` drafts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import DataError, LedgerctlError, NotFoundError
from pulsarctl_py.plans import Draft
from pulsarctl_py.stores.metadata.base import join

from .topic_state import (
    COMPACTED_TOPIC_LEDGER,
    Position,
    ledger_has_metadata,
    ledger_metadata,
    load_cursors,
    load_topic,
    position_text,
    write_cursor,
)

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource


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
        f"the horizon from {position_text(old)} to the topic's start so that the next "
        "compaction reads every key again",
        properties=kept,
    )
    draft.unreachable.cursors.append(
        {
            "topic": topic.name.full_name,
            "cursor": mld.COMPACTION_CURSOR,
            "from": position_text(old),
            "to": position_text(start),
            "cleared": {COMPACTED_TOPIC_LEDGER: ledger},
        }
    )
    record["cleared"] = ledger
    return ledger


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
    md = ledger_metadata(draft, ledger_id)
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
        "horizon": position_text(horizon),
    }
    draft.repairs.append(record)
    if horizon[0] not in topic.ids:
        draft.warnings.append(
            f"the horizon {position_text(horizon)} of ledger {ledger_id} is in a ledger the "
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
                "to": position_text(horizon),
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
        f"{position_text(old)} -> {position_text(horizon)} ({origin})",
        keep=kept,
    )
    draft.unreachable.cursors.append(
        {
            "topic": topic.name.full_name,
            "cursor": mld.COMPACTION_CURSOR,
            "from": position_text(old),
            "to": position_text(horizon),
            "compacted_ledger": {"from": previous, "to": ledger_id},
        }
    )
    if previous is not None and previous != ledger_id:
        draft.warnings.append(
            f"the previous compacted ledger {previous} is kept: `ledgerctl orphans` lists it "
            "once nothing references it"
        )
    return True
