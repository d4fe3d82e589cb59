"""``repair shadow``: resync a shadow topic's ledger list from its source (PIP-180)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import DataError, NotFoundError
from pulsarctl_py.plans import Draft
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

from .topic_state import (
    count_messages,
    load_cursors,
    load_topic,
    move_cursors_out,
    set_topic,
)

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource


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
    set_topic(draft, topic, msg, f"resync the ledger list from the source {src.name.full_name}")
    move_cursors_out(
        draft, topic, cursors, None, source, "its ledger {ledger} is not in the source's list"
    )
    return True
