"""`ledgerctl inspect`: stream a ledger's (or a topic's) entries, decoded, with a summary.

Entries are read in order with bounded memory; filters apply per entry (position,
time, broker entry metadata) and per message (key). The summary counts what was seen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

from pulsarctl_py.coverage import Tracker
from pulsarctl_py.decoders import Depth, Entry
from pulsarctl_py.errors import LedgerctlError, NotFoundError
from pulsarctl_py.inspect_request import InspectRequest, Summary, in_time_range, read_entries
from pulsarctl_py.ledgers import LedgerSource, LedgerView
from pulsarctl_py.positions import Position
from pulsarctl_py.render import STREAM_MESSAGES, entry_doc


def topic_ledgers(source: LedgerSource, topic: str) -> list[int]:
    """The ledger ids of a topic's managed ledger, in order."""
    if source.metadata is None:
        raise LedgerctlError(f"topic {topic}: a metadata store is needed to find its ledgers")
    from pulsarctl_py.stores.metadata import read_managed_ledger

    record = read_managed_ledger(source.metadata, topic, with_cursors=False)
    if record is None:
        partitions = topic_partitions(source, topic)
        if partitions:
            return [i for p in partitions for i in topic_ledgers(source, p)]
        from pulsarctl_py.topics import topic_hint

        raise NotFoundError(
            f"topic {topic} not found in the metadata store{topic_hint(source.metadata, topic)}"
        )
    return record.ledger_ids


def topic_partitions(source: LedgerSource, topic: str) -> list[str]:
    """The partitions of a partitioned topic, in order; [] when it is not one.

    The count comes from the partitioned-topic metadata (``/admin/partitioned-topics``),
    else from the partitions' managed ledgers present in the store.
    """
    import json

    from pulsarctl_py.stores.metadata import list_managed_ledgers, resolve_topic

    store = source.metadata
    if store is None:
        return []
    name = resolve_topic(topic)
    if name.partition_index >= 0:
        return []
    node = store.get(
        f"/admin/partitioned-topics/{name.namespace_name}/{name.domain}/{name.encoded_local_name}"
    )
    count = None
    if node is not None:
        try:
            count = int(json.loads(bytes(node.data))["partitions"])
        except (ValueError, KeyError, TypeError):
            count = None
    if count is not None and count > 0:
        return [name.partition(i).full_name for i in range(count)]
    found = sorted(
        (ref.topic.partition_index, ref.topic.full_name)
        for ref in list_managed_ledgers(store)
        if ref.topic.partition_index >= 0 and ref.topic.partitioned_topic == name
    )
    return [full for _, full in found]


def _ledger_ids(source: LedgerSource, request: InspectRequest) -> list[int]:
    if (request.ledger_id is None) == (request.topic is None):
        raise LedgerctlError("give a ledger id or --topic, not both")
    if request.ledger_id is not None:
        return [request.ledger_id]
    topic = request.topic or ""
    positional = (request.start, request.end, request.last_n)
    if source.metadata is not None and any(v is not None for v in positional):
        from pulsarctl_py.stores.metadata import read_managed_ledger

        if read_managed_ledger(source.metadata, topic, with_cursors=False) is None:
            partitions = topic_partitions(source, topic)
            if partitions:
                shown = ", ".join(partitions[:4]) + (", ..." if len(partitions) > 4 else "")
                raise LedgerctlError(
                    f"{topic} is a partitioned topic: --from, --to and --last need one of its "
                    f"{len(partitions)} partitions ({shown})"
                )
    return topic_ledgers(source, topic)


def _check_in(position: Position, ids: list[int], what: str, request: InspectRequest) -> None:
    if position.ledger_id in ids:
        return
    if request.topic is None:
        raise LedgerctlError(
            f"{what} {position} is in ledger {position.ledger_id}, but ledger {ids[0]} is "
            f"read: give an entry id, or {ids[0]}:ENTRY"
        )
    shown = ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")
    raise LedgerctlError(
        f"{what} {position}: ledger {position.ledger_id} is not a ledger of topic "
        f"{request.topic} (its ledgers: {shown or 'none'})"
    )


def check_position_order(start: Position, end: Position, ids: list[int] | None) -> None:
    """Refuse (exit 2) ``--from`` after ``--to``: positions compare in the order of the
    topic's ledgers ``ids`` (a single ledger when None), then entry, then batch index."""

    def key(p: Position) -> tuple[int, int, int]:
        rank = ids.index(p.ledger_id) if ids is not None and p.ledger_id in ids else 0
        return (rank, p.entry_id, -1 if p.batch_index is None else p.batch_index)

    if ids is None and start.ledger_id != end.ledger_id:
        return
    low, high = key(start), key(end)
    if start.batch_index is None or end.batch_index is None:
        low, high = (*low[:2], 0), (*high[:2], 0)
    if low > high:
        raise LedgerctlError(
            f"--from {start} comes after --to {end}"
            + (" in the topic's ledger order" if ids is not None and len(ids) > 1 else "")
            + ": the range holds nothing (swapped?)"
        )


def _plan(
    source: LedgerSource, request: InspectRequest, summary: Summary
) -> Iterator[tuple[LedgerView, int, int]]:
    """Each ledger to read with its entry range [first, last], in the topic's order; what
    a topic's ledgers hold past their last entry is skipped (``summary.gaps``)."""
    ids = _ledger_ids(source, request)
    skipped: set[int] = set()
    lo, hi = 0, len(ids) - 1
    if request.start is not None:
        _check_in(request.start, ids, "--from", request)
        lo = ids.index(request.start.ledger_id)
    if request.end is not None:
        _check_in(request.end, ids, "--to", request)
        hi = len(ids) - 1 - ids[::-1].index(request.end.ledger_id)
    if request.start is not None and request.end is not None:
        check_position_order(request.start, request.end, ids)
    chosen = ids[lo : hi + 1]

    def bounds(view: LedgerView, index: int) -> tuple[int, int]:
        end = view.last_stored if view.last_stored is not None else -1
        first = 0
        if index == 0 and request.start is not None:
            first = max(request.start.entry_id, 0)
        last = end
        if index == len(chosen) - 1 and request.end is not None:
            last = min(request.end.entry_id, end)
        past = view.past_last
        if past is not None and last >= past[0]:
            # a closed ledger holds entries up to its last one: what is stored past it
            # (adds in flight when it was closed) no reader gets, so it is read as no
            # message, of the ledger or of its topic (skipped, and said; -o raw writes
            # such an entry's bytes)
            if view.ledger_id not in skipped:
                skipped.add(view.ledger_id)
                summary.gaps.entries_past_last(view.ledger_id, max(first, past[0]), last)
            last = past[0] - 1
        return first, last

    start, end = request.start, request.end
    one = start is not None and end is not None and start.entry == end.entry
    if request.last_n is None:
        for index, ledger_id in enumerate(chosen):
            view = source.ledger(ledger_id)
            first, last = bounds(view, index)
            if one and first > last:  # one entry asked for by name: say it is not there
                past = view.past_last
                if past is not None and past[0] <= first <= past[1]:
                    raise NotFoundError(
                        f"entry {ledger_id}:{first} is stored past ledger {ledger_id}'s last "
                        f"entry {past[0] - 1} (the ledger was closed while it was being "
                        "added): no reader gets it; -o raw writes its stored bytes"
                    )
                held = "none" if view.last_stored is None else f"up to entry {view.last_stored}"
                raise NotFoundError(
                    f"entry {ledger_id}:{first} is not stored: the bookie storage given "
                    f"holds ledger {ledger_id} {held}"
                )
            yield view, first, last
        return
    # the last N entries of the whole range: find where they start, from the end
    views = [source.ledger(ledger_id) for ledger_id in chosen]
    ranges = [bounds(view, index) for index, view in enumerate(views)]
    wanted = request.last_n
    cut = [(first, first - 1) for first, _ in ranges]
    for index in range(len(views) - 1, -1, -1):
        first, last = ranges[index]
        if wanted <= 0:
            break
        if first > last:
            continue
        take = min(wanted, last - first + 1)
        cut[index] = (last - take + 1, last)
        wanted -= take
    # ledgers wholly before the last N entries are not shown at all
    begin = next((i for i, (first, last) in enumerate(cut) if first <= last), len(views) - 1)
    yield from zip(views[begin:], *zip(*cut[begin:], strict=True), strict=True)


def inspect(
    source: LedgerSource,
    request: InspectRequest,
    summary: Summary,
    on_ledger: Callable[[LedgerView], None] | None = None,
    *,
    fast: bool = True,
    lines: bool = False,
    hashes: bool = False,
) -> Iterator[tuple[LedgerView, Any]]:
    """Decoded entries of the ledger or topic, in order, filtered; fills ``summary``.

    ``fast``: at ``Depth.ENTRY`` read bookie storage through entry heads
    (:mod:`pulsarctl_py.inspect_heads`; the same entries, filters and summary). With
    ``lines`` too, a regular entry comes as its JSON line (a ``str``), ready to write,
    and without ``limit`` consecutive lines come as a ``list``; ``hashes``: the lines have
    ``payload_sha256`` (``entry_json``'s ``with_hash``).
    """
    from pulsarctl_py.inspect_heads import read_from_heads, serves

    if request.depth is not Depth.MESSAGES and request.message_filters:
        raise LedgerctlError(
            "--key, --property, --sequence-id and a batch index look at messages: "
            "they need --depth messages"
        )
    if request.depth is Depth.ENTRY and request.producer is not None:
        raise LedgerctlError("--producer reads the message metadata: it needs --depth metadata")
    left = request.limit
    if left is not None and left <= 0:
        return
    _check_batch_indexes(source, request)
    for view, first, last in _plan(source, request, summary):
        ledger_id = view.ledger_id
        summary.ledgers.append(ledger_id)
        if on_ledger is not None:
            on_ledger(view)
        if view.last_stored is None:
            _check_missing_storage(source, view, summary)
            continue
        if first > last:
            continue
        tracker = Tracker(summary.gaps, ledger_id, first, last)
        if fast and serves(source, view, request):
            options = source.entry_options(
                view, request.depth, request.verify, request.private_key, request.max_uncompressed
            )
            items = read_from_heads(
                source,
                view,
                first,
                last,
                request,
                options,
                summary,
                lines=lines,
                hashes=hashes,
                tracker=tracker,
            )
        else:
            items = read_entries(source, view, first, last, request)
        for entry in items:
            if type(entry) is str or type(entry) is list:  # JSON lines: kept and counted
                pass
            elif entry.unreadable is not None:  # no time, no messages: always reported
                tracker.see(entry.position[1] if entry.position else first, entry.unreadable)
                summary.add(entry)
            else:
                if entry.position is not None:
                    tracker.see(entry.position[1])
                if not _keep(entry, request) or not _keep_messages(entry, request):
                    continue
                if request.values is not None and request.depth is Depth.MESSAGES:
                    request.decoded = (entry, decode_values(entry, request.values))
                summary.add(entry)
            yield view, entry
            if left is not None:
                left -= 1
                if left <= 0:
                    break
        if left is not None and left <= 0:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # read_from_heads adds what it counted when it ends
            break
        tracker.finish()
    summary.add_gaps()
    for found in source.storage_problems():
        summary.problem(found.check, found.ledger_id, found.message)


def _check_batch_indexes(source: LedgerSource, request: InspectRequest) -> None:
    """A position ``L:E:B`` whose batch index is past the messages of entry ``L:E`` names
    no message: say so before any entry is shown, rather than answer "0 entries" (or
    stop a range short). An entry that cannot be read is left to the scan to report."""
    for at in (request.start, request.end):
        if at is None or at.batch_index is None:
            continue
        try:
            view = source.ledger(at.ledger_id)
            found = list(
                source.entries(
                    view,
                    at.entry_id,
                    at.entry_id,
                    depth=Depth.MESSAGES,
                    verify=False,
                    private_key=request.private_key,
                    keep_going=True,
                    max_uncompressed=request.max_uncompressed,
                )
            )
        except LedgerctlError:
            continue
        entry = found[0] if len(found) == 1 else None
        if entry is None or entry.unreadable is not None or entry.metadata is None:
            continue
        md = entry.metadata
        if md.HasField("num_chunks_from_msg") and md.num_chunks_from_msg > 1:
            continue  # a chunk: its message is whole only at the last chunk
        held = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
        if at.batch_index >= held:
            raise NotFoundError(
                f"no message {at}: entry {at.ledger_id}:{at.entry_id} holds {held} message"
                + (f"s (batch indexes 0..{held - 1})" if held != 1 else " (batch index 0)")
            )


def _check_missing_storage(source: LedgerSource, view: LedgerView, summary: Summary) -> None:
    """Metadata says the ledger has entries, the storage holds none: a wrong --bookie-dir?"""
    md = view.metadata
    if source.bookie is None or md is None or not md.is_closed or md.last_entry_id < 0:
        return
    if getattr(source.bookie, "where", None) == "live":  # running bookies: their answers say
        return
    if view.storage_error is not None:  # reported with the storage's problems
        summary.gaps.ledger_missing(view.ledger_id, md.last_entry_id + 1, view.storage_error)
        return
    summary.gaps.ledger_missing(view.ledger_id, md.last_entry_id + 1, "not in the bookie storage")
    dirs = ", ".join(str(d) for d in source.bookie.layout.ledger_dirs) or "(no ledger dirs)"
    absence = source.absence_judge(view)(0, md.last_entry_id)
    # missing only when every bookie of its ensembles was read (stores/absence)
    check, why = (
        ("ledger-missing-storage", "every bookie of its ensembles read")
        if not absence.uncovered_count
        else ("storage-not-covered", absence.unread_text())
    )
    summary.problem(
        check,
        view.ledger_id,
        f"ledger {view.ledger_id} has {md.last_entry_id + 1} entries in its metadata but "
        f"none in the bookie storage looked at ({dirs}; {why}): wrong --bookie-dir?",
    )


def _keep(entry: Entry, request: InspectRequest) -> bool:
    if request.broker_metadata is not None:
        if (entry.broker_entry_metadata is not None) != request.broker_metadata:
            return False
    if request.since is not None or request.until is not None:
        if not in_time_range(entry.entry_timestamp, request):
            return False
    if request.producer is not None:
        md = entry.metadata
        if md is None or md.producer_name != request.producer:
            return False
    return True


def _keep_messages(entry: Entry, request: InspectRequest) -> bool:
    """Drop the messages the message filters exclude; False when none is left."""
    if not request.message_filters:
        return True
    at, start, end = entry.position, request.start, request.end
    low = start.batch_index if start is not None and at == start.entry else None
    high = end.batch_index if end is not None and at == end.entry else None
    entry.messages = [m for m in entry.messages if _message_kept(m, request, low, high)]
    if request.where and entry.messages:
        entry.messages = [m for m in entry.messages if _value_kept(entry, m, request)]
    return bool(entry.messages)


def _value_kept(entry: Entry, m: Any, request: InspectRequest) -> bool:
    """--where: the message's decoded value has every field asked for."""
    from pulsarctl_py.values import message_key_bytes

    values = request.values
    if values is None:
        return False
    md = entry.metadata
    version = md.schema_version if md is not None and md.HasField("schema_version") else None
    decoded = values.decode(version, m.value, message_key_bytes(m))
    if not decoded.decoded:
        return False
    return all(w.matches(decoded.value) for w in request.where)


def _message_kept(m: Any, request: InspectRequest, low: int | None, high: int | None) -> bool:
    index = max(m.batch_index, 0)
    if (low is not None and index < low) or (high is not None and index > high):
        return False
    if request.key is not None and m.key != request.key:
        return False
    if request.sequence_ids is not None:
        first, last = request.sequence_ids
        if not first <= m.sequence_id <= last:
            return False
    for name, value in request.properties:
        if name not in m.properties:
            return False
        if value is not None and m.properties[name] != value:
            return False
    return True


def entry_json(
    view: LedgerView,
    entry: Entry,
    with_hex: bool = False,
    with_hash: bool = False,
    decoded: list[Any] | None = None,
    value_mode: str = "both",
) -> dict[str, Any]:
    """The per-entry JSON of inspect: decode's shape plus digest, LAC and kind.

    ``with_hash`` adds ``payload_sha256``, the SHA-256 of what follows the bookie header
    and digest: it lets two copies of an entry (bookies, backups) be compared without
    the bytes. It is asked for (``--hash``): a hash per entry costs a scan's time.
    """
    if len(entry.messages) <= STREAM_MESSAGES:  # render.entry_doc's case, without a call
        doc = entry.to_json(with_hex)
    else:
        doc = entry_doc(entry, with_hex)
    layers = entry.layers
    bk = layers[0] if layers and layers[0].name == "bookie-entry" else None
    # the bookie layer's check, as its layer shows it
    doc["digest"] = doc["layers"][0].get("check") if bk is not None else None
    if bk is not None and with_hash:
        doc["payload_sha256"] = hashlib.sha256(entry.data[bk.offset + bk.length :]).hexdigest()
    lac = view.lac
    entry_id = doc["entry_id"]
    doc["confirmed"] = None if lac is None or entry_id is None else entry_id <= lac
    doc["ledger_kind"] = view.kind
    if decoded is not None:
        add_values(doc, decoded, value_mode)
    return doc


def decode_values(entry: Entry, values: Any) -> list[Any]:
    """Each message's value decoded with its schema version (``values.Decoded``); a
    value that does not decode is a problem of the entry, named by its message id."""
    from pulsarctl_py.decoders.nodes import Problem
    from pulsarctl_py.values import message_key_bytes

    md = entry.metadata
    version = md.schema_version if md is not None and md.HasField("schema_version") else None
    out = []
    for m in entry.messages:
        got = values.decode(version, m.value, message_key_bytes(m))
        if got.error is not None:
            where = m.message_id or "a message"
            entry.problems.append(Problem("error", "value", 0, f"{where}: value {got.error}"))
        out.append(got)
    return out


def add_values(doc: dict[str, Any], decoded: list[Any], mode: str = "both") -> None:
    """Each message of ``doc`` (an entry's JSON) gains ``schema_version``, ``schema_type``
    and ``value_decoded`` (``value_error`` when it does not decode with its schema,
    ``value_note`` when it has none); ``mode`` "decoded" keeps ``value`` only where the
    value was not decoded. Messages written one at a time (``render.Streamed``) gain them
    as they are written."""
    from pulsarctl_py.render import Streamed

    messages = doc["messages"]
    if isinstance(messages, Streamed):
        items = messages.items
        doc["messages"] = Streamed(
            _add_value(out, got, mode) for got, out in zip(decoded, items, strict=False)
        )
        return
    for got, out in zip(decoded, messages, strict=False):
        _add_value(out, got, mode)


def _add_value(out: dict[str, Any], got: Any, mode: str) -> dict[str, Any]:
    out["schema_version"] = got.schema_version
    out["schema_type"] = got.schema_type
    out["value_decoded"] = got.value if got.decoded else None
    if got.error is not None:
        out["value_error"] = got.error
    elif got.note is not None:
        out["value_note"] = got.note
    if mode == "decoded" and got.decoded:
        out.pop("value", None)
    return out


def read_values(source: LedgerSource, request: InspectRequest, values: str) -> None:
    """``--values`` (raw, auto, decoded or both): at ``--depth messages`` the schemas of
    the request's topic or ledger, by which its values are decoded (required unless auto,
    or when ``--where`` looks at decoded values), set on ``request``."""
    if values != "raw" and request.depth is Depth.MESSAGES:
        from pulsarctl_py.values import values_for

        request.values = values_for(
            source,
            request.topic,
            request.ledger_id,
            required=values != "auto" or bool(request.where),
        )
        if request.values is not None:
            request.value_mode = "decoded" if values == "decoded" else "both"
    elif request.where:
        raise LedgerctlError("--where looks at decoded values: it needs --depth messages")


def stored_entry(metadata_url: str | None, bookie_dirs: list[Any], at: Position) -> bytes:
    """One entry's stored bytes (bookie header and digest included), for ``-o raw``."""
    with LedgerSource.open(metadata_url, bookie_dirs, need_bookie=True) as source:
        view = source.ledger(at.ledger_id)
        data = next(iter(source.raw_entries(view, at.entry_id, at.entry_id)), None)
        if data is None or data.entry_id != at.entry_id:
            raise NotFoundError(f"entry {at} is not in the bookie storage given")
        return bytes(data.data)
