"""A topic's state as a plan drafts it: what every repair reads and the two writes they share.

Read through the :class:`~pulsarctl_py.plans.draft.Draft` (the store as the plan leaves
it so far, so that repairs run one after another, ``repair --from-verify``, see what the
earlier ones drafted): the topic's managed-ledger info (:class:`Topic`), its cursors with
their effective state (:class:`Cursor`, from the cursor ledger's last entry when it is
there), a ledger's BookKeeper metadata, its last entry and message count. Written through
it: the ledger list (:func:`set_topic`) and a cursor's whole state (:func:`write_cursor`,
:func:`move_cursor`, with where a misplaced cursor belongs: :func:`relocate`).

Cursor positions are mark-delete positions ``(ledger, entry)``; ``(L, -1)`` means "before
the first entry of ledger L", the form the broker itself gives a cursor whose ledger is
gone (formats.md §8.2, operators.md row 2). A cursor whose state is in a cursor ledger
(``cursorsLedgerId != -1``) is moved by writing the whole state into its znode and setting
``cursorsLedgerId = -1``: editing only the znode would be ignored by the broker, which
reads the cursor ledger's last entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import Depth
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import DataError, LedgerctlError, NotFoundError
from pulsarctl_py.decoders.managed_ledger import DecodedInfo, TopicName
from pulsarctl_py.plans import Draft
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from pulsarctl_py.stores.metadata.base import join

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource

COMPACTED_TOPIC_LEDGER = mld.COMPACTED_TOPIC_LEDGER
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
    info = cursor_ledger_info(source, ledger_id)
    if info is None:
        return None
    return (info.ledgerId, info.entryId), [(p.name, p.value) for p in info.properties]


def cursor_ledger_info(source: LedgerSource | None, ledger_id: int) -> mlpb.PositionInfo | None:
    """The last PositionInfo of a cursor ledger, whole (with its individual acks), or None
    when it cannot be read."""
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
        return info
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


def position_text(p: Position | None) -> str:
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


def set_topic(draft: Draft, topic: Topic, msg: mlpb.ManagedLedgerInfo, why: str) -> None:
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


def move_cursor(
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
        "from": position_text(old),
        "from_origin": cursor.origin,
        "to": position_text(to),
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


def move_cursors_out(
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
            text = why.format(position=position_text(cursor.position), ledger=ledger)
            move_cursor(draft, topic, cursor, target, source, text)


def ledger_metadata_path(draft: Draft, ledger_id: int) -> str | None:
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


def ledger_metadata(draft: Draft, ledger_id: int) -> Any:
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
