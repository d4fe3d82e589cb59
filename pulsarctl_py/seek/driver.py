"""The entry point on stores: :func:`seek` answers one :class:`SeekRequest` on a
:class:`~pulsarctl_py.ledgers.LedgerSource`: the ledgers to search (missing ones marked),
the rule that answers, the ``--exact`` scan next to it, and the messages of the entry at
the answer for ``--position`` and ``--legacy-offset``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import DataError, LedgerctlError

from .exact import exact_scan, with_gaps
from .heads import CachedReader, Head, StoreReader
from .index import seek_compacted, seek_index, seek_position
from .legacy import seek_legacy
from .probe import FlatTopic, SeekLedger, SeekResult
from .rules import DEFAULT_CLOCK_SKEW_MS, seek_time_broker, seek_time_kop

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource


RULES = ("broker", "kop", "compacted")


@dataclass(slots=True)
class SeekRequest:
    topic: str | None = None
    ledger_id: int | None = None
    time_ms: int | None = None
    index: int | None = None
    legacy_offset: int | None = None
    position: tuple[int, int, int | None] | None = None
    rule: str = "broker"
    clock_skew_ms: int = DEFAULT_CLOCK_SKEW_MS
    skip_without_index: bool = False
    era: str = "auto"
    exact: bool = False

    def kind(self) -> str:
        given = [
            k
            for k, v in (
                ("time", self.time_ms),
                ("index", self.index),
                ("legacy-offset", self.legacy_offset),
                ("position", self.position),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise LedgerctlError(
                "give exactly one target: --time, --index (--offset), --legacy-offset or "
                f"--position ({'none' if not given else ', '.join(given)} given)"
            )
        return given[0]


def topic_ledgers(
    source: LedgerSource, request: SeekRequest
) -> tuple[str | None, list[SeekLedger], Any]:
    """The ledgers to search, with missing ones marked, and the topic info (or None)."""
    if request.ledger_id is not None:
        if source.bookie is not None:  # a bookie that cannot be reached: exit 3, no answer
            source.bookie.last_entry_id(request.ledger_id)
        view = source.ledger(request.ledger_id)
        lac = view.lac
        entries = 0 if lac is None else lac + 1
        # one ledger alone: no managed-ledger close time to narrow the search by
        row = SeekLedger(request.ledger_id, entries, None)
        if view.storage_error is not None:
            row.missing = view.storage_error
        return None, [row], None
    from pulsarctl_py.topics import topic_info

    if request.topic is None:
        raise LedgerctlError("give a topic, or --ledger L")
    info = topic_info(source, request.topic)
    rows = []
    for li in info.ledgers:
        row = SeekLedger(li.ledger_id, li.entries or 0, li.timestamp)
        if li.offloaded and source.tiered:
            pass  # read from tiered storage (LedgerSource.ledger finds its offload)
        elif li.offloaded:
            row.missing = "offloaded to tiered storage"
        elif source.bookie is not None:
            # a bookie that cannot be reached raises here (exit 3): no answer at all
            stored = source.bookie.last_entry_id(li.ledger_id)
            if li.entries and stored is None:
                row.missing = "not in the given bookie storage"
        if li.entries is None:
            row.missing = li.problem or "its entry count is unknown"
        rows.append(row)
    return info.topic, rows, info


def seek(source: LedgerSource, request: SeekRequest, reads: Any = None) -> SeekResult:
    """Answer one seek request on real stores.

    ``reads`` (an :class:`pulsarctl_py.engines.reads.EngineReads`) runs the --exact scan
    on its engine; the answer is the same.
    """
    kind = request.kind()
    if request.rule not in RULES:
        raise LedgerctlError(f"unknown rule {request.rule!r}: one of {', '.join(RULES)}")
    if source.bookie is None:
        raise LedgerctlError(
            "seek reads entries: pass --bookie-dir, or set LEDGERCTL_BOOKIE_DIRS / "
            "bookie_dirs in ledgerctl.toml"
        )
    topic, ledgers, info = topic_ledgers(source, request)
    store_reader = StoreReader(source)
    reader = CachedReader(store_reader)
    warnings = [
        f"ledger {lg.ledger_id} ({lg.entries} entries) is not read: {lg.missing} (its entries "
        "keep their places; a search that needs one of them has no answer)"
        for lg in ledgers
        if lg.missing is not None
    ]
    flat = FlatTopic(ledgers)
    if kind == "time" and request.rule == "compacted":
        if info is None or info.compacted_ledger is None:
            raise DataError(f"{topic or 'the ledger'} has no compacted ledger (no compaction ran)")
        cview = store_reader.view(info.compacted_ledger)
        centries = 0 if cview.lac is None else cview.lac + 1
        result, _ = seek_compacted(info.compacted_ledger, centries, reader, request.time_ms)  # type: ignore[arg-type]
    elif kind == "time" and request.rule == "kop":
        result, _ = seek_time_kop(
            flat,
            reader,
            request.time_ms,  # type: ignore[arg-type]
            skip_without_index=request.skip_without_index,
            ml_index=None if info is None else info.index,
        )
    elif kind == "time":
        result, _ = seek_time_broker(flat, reader, request.time_ms, request.clock_skew_ms)  # type: ignore[arg-type]
    elif kind == "index":
        result, _ = seek_index(
            flat,
            reader,
            request.index,
            skip_without_index=request.skip_without_index,  # type: ignore[arg-type]
        )
    elif kind == "legacy-offset":
        result, _ = seek_legacy(flat, reader, request.legacy_offset, request.era)  # type: ignore[arg-type]
    else:
        ledger_id, entry_id, batch = request.position  # type: ignore[misc]
        result, _ = seek_position(flat, reader, ledger_id, entry_id, batch)
    result.topic = topic
    result.warnings[:0] = warnings
    if request.exact and kind == "time":
        _exact(result, flat, store_reader, request, reads)
    result.entries_read = store_reader.reads
    if result.head is not None and kind in ("position", "legacy-offset"):
        result.extra["messages"] = _messages(source, store_reader, result.head, result.batch_index)
    return result


@dataclass(slots=True)
class TopicSeek:
    """The answers of ``ledgerctl seek``: one, or for a partitioned topic named by its base
    name one per partition, in partition order (``topic``: its full name)."""

    results: list[SeekResult] = field(default_factory=list)
    topic: str | None = None

    @property
    def partitioned(self) -> bool:
        return self.topic is not None

    @property
    def answered(self) -> bool:
        return all(r.answered for r in self.results)


def seek_topic(
    source: LedgerSource,
    request: SeekRequest,
    scan: Callable[[], AbstractContextManager[Any]],
) -> TopicSeek:
    """Answer ``request`` on ``source``: a partitioned topic by its base name gets the same
    question to every partition (a subscription of a partitioned topic is reset per
    partition too); otherwise :func:`seek` answers it with the --exact scan's engine
    ``scan()`` opens (a context manager giving its ``reads``)."""
    from pulsarctl_py.stores.metadata import resolve_topic
    from pulsarctl_py.topics import partitions_of

    topic = request.topic
    partitions = partitions_of(source.metadata, topic) if topic is not None else []
    if partitions:
        assert topic is not None
        if request.kind() == "position" or request.exact:
            raise LedgerctlError(
                f"{resolve_topic(topic).full_name} is a partitioned topic: --position and "
                f"--exact need one of its partitions ({', '.join(partitions[:3])}"
                + (", ...)" if len(partitions) > 3 else ")")
            )
        return TopicSeek(
            [seek(source, replace(request, topic=p)) for p in partitions],
            resolve_topic(topic).full_name,
        )
    with scan() as reads:
        return TopicSeek([seek(source, request, reads)])


def _exact(
    result: SeekResult,
    flat: FlatTopic,
    reader: StoreReader,
    request: SeekRequest,
    reads: Any = None,
) -> None:
    """The linear scan: the true first entry at or after the time, next to the rule's answer."""
    if request.rule == "compacted":
        return

    readable = [lg for lg in flat.used if lg.missing is None]

    def heads() -> Iterator[Head]:
        if reads is not None:
            ranges = [(lg.ledger_id, 0, lg.entries - 1) for lg in readable]
            for head in reads.heads(reader.source.bookie, ranges):
                reader.reads += 1
                yield head
            return
        for lg in readable:
            yield from reader.stream(lg.ledger_id, 0, lg.entries - 1)

    key = (lambda h: h.publish_time) if request.rule == "kop" else (lambda h: h.timestamp)
    found = exact_scan(with_gaps(heads(), flat), request.time_ms, key)  # type: ignore[arg-type]
    first = found.pop("_head")
    unread, seen = found.pop("_unread_first"), found.pop("_seen_first")
    result.exact = found
    if found["non_monotonic_regions"]:
        regions = found["non_monotonic_regions"]
        result.warnings.append(
            f"{len(regions)} region(s) where timestamps go backwards, the first after "
            f"{regions[0]['after']} ({regions[0]['first']} .. {regions[0]['last']})"
        )
    if unread is not None:
        until = "the end of the topic" if seen is None else seen.position
        result.exact["answer_range"] = {
            "first": unread.position,
            "last": None if seen is None else seen.position,
        }
        result.exact["differs"] = None
        result.findings.append(
            f"--exact cannot be answered exactly: the first entry at or after the time lies in "
            f"{unread.position} .. {until}, and not all of it was read: "
            + "; ".join(found["not_read"][:3])
        )
        return
    if not found["complete"]:
        result.findings.append(
            "--exact read the topic but not all of it, so the regions where timestamps go "
            "backwards may be more than those listed: " + "; ".join(found["not_read"][:3])
        )
    if result.head is None and not result.end:
        result.exact["differs"] = None  # the rule has no answer to compare
        return
    answer = None if result.head is None else result.head.position
    truth = None if first is None else first.position
    result.exact["differs"] = truth != answer
    if truth != answer:
        result.warnings.append(
            f"the {request.rule} rule answers {answer or 'after the last entry'}, but the first "
            f"entry at or after the time is {truth or 'none (after the last entry)'}"
        )


def _messages(
    source: LedgerSource, reader: StoreReader, head: Head, batch: int | None
) -> list[dict[str, Any]]:
    """The messages of the entry at the answer (decoded fully), for --position/--legacy."""
    from pulsarctl_py.decoders import Depth

    if head.error is not None:
        return []
    view = reader.view(head.ledger_id)
    out = []
    try:
        for entry in source.entries(view, head.entry_id, head.entry_id, depth=Depth.MESSAGES):
            for i, msg in enumerate(entry.messages):
                if batch is not None and i != batch:
                    continue
                out.append(_message_json(msg, i))
    except LedgerctlError as exc:
        return [{"error": exc.one_line()}]
    return out


def _message_json(msg: Any, i: int) -> dict[str, Any]:
    value = getattr(msg, "value", None)
    text = None
    if isinstance(value, bytes | memoryview):
        raw = bytes(value)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.hex()
    return {
        "batch_index": i,
        "key": getattr(msg, "key", None),
        "value": text,
        "event_time": getattr(msg, "event_time", None),
    }
