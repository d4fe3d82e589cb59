"""The time rules: where a subscription reset by time reads first (the broker's
``PersistentMessageFinder`` and ``OpFindNewest``, :func:`seek_time_broker`) and what KoP's
LIST_OFFSETS by timestamp answers (:func:`seek_time_kop`); formats.md §13, §15, and the
package docstring for the rules in full."""

from __future__ import annotations

from pulsarctl_py.positions import format_position
from pulsarctl_py.timeparse import format_time_ms

from .heads import Head, HeadReader
from .probe import (
    FlatTopic,
    Prober,
    SeekResult,
    answer_at,
    contradictions,
    find_position_range,
    finish,
    op_find_newest,
)

#: apache/pulsar ServiceConfiguration.java:
#: managedLedgerCursorResetLedgerCloseTimestampMaxClockSkewMillis = 60000
DEFAULT_CLOCK_SKEW_MS = 60_000


def _no_entries(flat: FlatTopic) -> str:
    """Why a reset by time has nothing to land on, and what the broker does then."""
    if not flat.ledgers:
        return (
            "the managed ledger lists no ledger: the broker fails a reset by time "
            "(getFirstPosition() is null)"
        )
    if not any(lg.entries > 0 for lg in flat.ledgers):
        return (
            "the topic has no entries: a reset by time leaves the cursor at the end "
            f"({flat.ledgers[0].ledger_id}:0 or the next valid position), with nothing to read"
        )
    return "no entry of the topic is in the given storage: every ledger holding one is missing"


def _reset_to_first_position(result: SeekResult, prober: Prober, narrowed: bool) -> None:
    """No entry matched: ``PersistentSubscription.resetCursor(long)`` resets to
    ``ManagedCursorImpl.getFirstPosition()``, entry 0 of the first ledger the managed
    ledger lists, and ``asyncResetCursor`` moves an invalid position on to the next valid
    one (entry 0 of the next ledger with entries). Ledgers missing from storage count, as
    they do for the broker."""
    flat = prober.flat
    first = next(lg for lg in flat.ledgers if lg.entries > 0)  # flat.n > 0 here
    where = format_position(first.ledger_id, 0)
    why = (
        f"the first entry of the narrowed range {result.search_range['start']} is not before "  # type: ignore[index]
        "the time"
        if narrowed
        else "no entry is before the time"
    )
    if first.missing is not None:
        # the broker resets there when none of its entries is before the time either:
        # they were not read, so that is not known: no answer (the probes' findings)
        prober.unreadable.append(
            Head(first.ledger_id, 0, error=f"ledger {first.ledger_id}: {first.missing}")
        )
        result.warnings.append(
            f"{why} among the entries read: the broker resets to {where}, the first position "
            f"of the managed ledger, if no entry of its unread ledger is either"
        )
        return
    answer_at(result, prober, flat.index_of(first.ledger_id, 0))  # type: ignore[arg-type]
    if narrowed:
        result.warnings.append(
            f"{why}: the broker resets to the first position of the managed ledger, {where}"
        )


def seek_time_broker(
    flat: FlatTopic, reader: HeadReader, target: int, skew: int = DEFAULT_CLOCK_SKEW_MS
) -> tuple[SeekResult, Prober]:
    """Where a subscription reset to ``target`` reads first (formats.md §15)."""
    result = SeekResult(None, "time", target, "broker")
    prober = Prober(flat, reader)
    if flat.n == 0 or not flat.readable:
        result.findings.append(_no_entries(flat))
        return result, prober
    start_pos, end_pos = find_position_range(flat.ledgers, target, skew)
    start = 0 if start_pos is None else flat.first_at_or_after(*start_pos)
    end = flat.n - 1 if end_pos is None else min(flat.last_at_or_before(*end_pos), flat.n - 1)
    count = end - start + 1 if start <= end else 0
    result.span = (start, min(end + 2, flat.n - 1))  # the answer: up to check-last's next
    result.searched = (start, end)
    result.search_range = {
        "start": format_position(*flat.position(start)) if start < flat.n else None,
        "end": format_position(*flat.position(end)) if 0 <= end < flat.n else None,
        "entries": max(count, 0),
        "narrowed_by_close_time": start_pos is not None or end_pos is not None,
        "clock_skew_ms": skew,
    }

    def pred(h: Head) -> tuple[bool, str]:
        ts = h.timestamp
        ok = ts is not None and ts < target
        return ok, f"{format_time_ms(ts)} {'<' if ok else '>='} {format_time_ms(target)}"

    found = op_find_newest(prober, start, count, pred) if count > 0 else None
    if found is None:
        _reset_to_first_position(result, prober, start_pos is not None)
    else:
        answer_at(result, prober, found + 1)
    result.warnings.extend(contradictions(prober.probes, lambda h: h.timestamp))
    if found is not None and result.head is not None and result.head.error is None:
        ts = result.head.timestamp
        if ts is not None and ts < target:
            result.warnings.append(
                f"the entry the cursor would read first, {result.head.position}, has timestamp "
                f"{format_time_ms(ts)}, before the time: timestamps are not in order here"
            )
    finish(result, prober)
    return result, prober


def seek_time_kop(
    flat: FlatTopic,
    reader: HeadReader,
    target: int,
    *,
    skip_without_index: bool = False,
    ml_index: int | None = None,
) -> tuple[SeekResult, Prober]:
    """KoP's LIST_OFFSETS by timestamp (formats.md §13).

    KoP's current offset is the broker's index generator
    (``ManagedLedgerInterceptorImpl.getIndex()``): recovered from the managed ledger's
    ``index`` property (``ml_index``), then from the last entry's broker entry metadata
    when it has an index; -1 when neither. Below 0, KoP answers ``max(0, index)``."""
    result = SeekResult(None, "time", target, "kop", span=(0, flat.n - 1))
    prober = Prober(flat, reader)
    if flat.n == 0:
        result.findings.append("the topic has no entries")
        return result, prober

    def pred(h: Head) -> tuple[bool, str]:
        ts = h.publish_time
        ok = ts is not None and ts <= target
        shown = f"{format_time_ms(ts)} {'<=' if ok else '>'} {format_time_ms(target)}"
        return ok, f"publish_time {shown}"

    found = op_find_newest(prober, 0, flat.n - 1, pred)
    p = 0 if found is None else found
    last = prober.head(flat.n - 1)
    current = last.index if last.index is not None else ml_index
    if current is None or current < 0:
        # KafkaRequestHandler.fetchOffsetByTimestamp: a current offset below 0 answers
        # max(0, current) without reading the entry found
        result.extra["log_end_offset"] = 0
        result.kafka_offset = 0
        result.head = prober.head(p)
        why = "" if ml_index is not None else " and the managed ledger no 'index' property"
        result.warnings.append(
            f"the last entry {last.position} has no continuous index{why}: KoP's current "
            f"index is {-1 if current is None else current} and LIST_OFFSETS answers 0 (with "
            "the AppendIndexMetadataInterceptor KoP 2.8+ needs; without it KoP fails)"
        )
        finish(result, prober)
        return result, prober
    result.extra["log_end_offset"] = current + 1
    head = prober.head(p)
    if head.index is None and head.has_bem:
        # streamnative/kop MessageMetadataUtils.peekOffset: the index getter throws on
        # metadata without one; a MetadataCorruptedException, not NoBrokerEntryMetadata,
        # so getOffsetOfPosition fails whatever skipMessagesWithoutIndex says
        result.findings.append(
            f"entry {head.position} has broker entry metadata without an index: KoP fails "
            "there (MetadataCorruptedException), whatever skipMessagesWithoutIndex says"
        )
        result.head = head
    elif head.index is None:
        if skip_without_index:
            result.kafka_offset = 0
            result.head = head
            result.warnings.append(
                f"entry {head.position} has no index; skipMessagesWithoutIndex makes it offset 0"
            )
        else:
            result.findings.append(
                f"entry {head.position} has no broker entry metadata index: KoP fails here "
                "(pass --skip-without-index for skipMessagesWithoutIndex=true)"
            )
            result.head = head
    else:
        pub = head.publish_time or 0
        offset = head.index if pub >= target else head.index + 1
        result.kafka_offset = offset
        if offset == head.index:
            result.head = head
            result.batch_index = head.num_messages - 1 if head.batched else None
            if head.num_messages > 1:
                result.warnings.append(
                    "KoP answers the entry's last offset, not its first: ListOffsets by "
                    "time returns the stored index of the entry, which is the offset of its "
                    "last message"
                )
        else:
            answer_at(result, prober, p + 1)
            if result.head is not None and result.head.batched:
                result.batch_index = 0
    finish(result, prober)
    return result, prober
