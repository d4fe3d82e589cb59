"""``repair missing-ledgers``: drop from a topic's ledger list the ledgers whose data is
gone, or recreate the metadata of those whose entries the bookies still hold.

A loss is judged on every replica only (:mod:`pulsarctl_py.stores.absence`); cursors in a
dropped ledger move to where the broker would put them, and shadow topics listing a
dropped ledger are resynced (:mod:`.shadow`). Metadata is recreated by :mod:`.recreate`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import DataError, LedgerctlError
from pulsarctl_py.decoders.managed_ledger import TopicName
from pulsarctl_py.plans import Draft
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

from .recreate import DataFinder, ledger_place, read_back
from .recreate import recreate as recreate_ledger
from .shadow import shadow
from .topic_state import (
    Topic,
    count_messages,
    ledger_has_metadata,
    load_cursors,
    load_topic,
    move_cursors_out,
    set_topic,
)

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource


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
    set_topic(draft, topic, msg, f"drop ledgers from the list: {reasons}")
    move_cursors_out(
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
