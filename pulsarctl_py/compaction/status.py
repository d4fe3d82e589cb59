"""The existing compaction of a topic, checked, without computing a new one (``--status``).

Checks (findings shaped like ``verify``'s; the check ids are stable):

``compaction-none`` (info)
    No ``__compaction`` cursor, or it names no compacted ledger: the topic was never compacted.
``compacted-ledger-missing`` (error)
    ``CompactedTopicLedger`` names a ledger without metadata or without entries in storage.
``compacted-ledger-wrong-topic`` (error)
    The ledger's ``pulsar/compactedTopic`` names another topic, or it is not a compacted ledger.
``compacted-to-beyond-horizon`` (error)
    The ledger's ``pulsar/compactedTo`` lies after the cursor's mark-delete position (the
    horizon). (Before it is normal: Pulsar's ``to`` is the last entry not entirely deleted.)
``compacted-ledger-empty`` (info, or error)
    The compacted ledger has no entries. A closed compacted ledger with no entries is what
    the broker writes when every key was deleted (``AbstractTwoPhaseCompactor.phaseTwo``
    always creates, closes and commits one): info. Entries the metadata counts but storage
    does not hold: an error.
``horizon-outside-topic`` (error)
    The horizon is not inside the topic's retained ledgers.
``last-position-unreachable`` (error), ``last-position-error`` (error), ``last-position-misread``
(error), ``last-position-nonbatched-index`` (warning)
    What the chosen broker generation answers to GetLastMessageId (formats.md §7).
``compacted-view-differs`` (error, ``--deep``)
    The compacted view differs from a fresh compaction of the topic up to the horizon,
    computed as the broker computes it (transactions, the broker's chunk rule, the broker
    entry metadata it dispatches); a view that also keeps the leading chunks of the latest
    chunked messages (``compact --keep-chunks --apply`` writes one, so that they reassemble)
    is accepted, with ``compacted-view-keeps-chunks`` (info).

``broker-compaction-stale`` (error), ``broker-compaction-error`` (warning),
``broker-last-message-id-differs`` (warning), ``broker-last-message-id-retried`` (info)
    What the broker that has the topic loaded answers (``broker`` in the JSON; asked only
    of a broker that already has it loaded, never loading it:
    :func:`pulsarctl_py.broker_view.compaction_view`): it serves another compacted ledger
    than the stored ``CompactedTopicLedger``; its last compaction failed (its
    ``lastError``); a compacted reader's GetLastMessageId (asked over the binary protocol)
    differs from the predicted one below; or it answered errors before the id (the 4.0.7
    broker's ``BrokerMetadataError ... refCnt: 0`` on an LZ4 compacted ledger), retried
    as the Java client retries.

GetLastMessageId (``get_last_message_id`` in the JSON): what the broker answers a
readCompacted reader and a plain one, as Pulsar 4.0.7's ``ServerCnx.handleGetLastMessageId``
decides it: the topic's last dispatchable entry (``PersistentTopic.getLastDispatchablePosition``:
markers and aborted transactions skipped back from the max read position), unless the
reader reads compacted and the horizon has reached it (or the topic holds no entry): then
the compacted ledger's answer of the chosen generation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
from pulsarctl_py.decoders.errors import DataError, LedgerctlError
from pulsarctl_py.positions import format_position

from .lastpos import DEFAULT, LastPosition, last_position


@dataclass(slots=True)
class CompactionStatus:
    topic: str
    compacted_ledger: int | None = None
    horizon: tuple[int, int] | None = None
    compacted_to: tuple[int, int] | None = None
    ctime: int | None = None
    entries: int | None = None
    keys: int | None = None
    messages: int | None = None
    last: LastPosition | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)
    deep: bool = False
    #: GetLastMessageId as the broker answers it: {"read_compacted": ..., "reader": ...}
    last_message_id: dict[str, Any] | None = None
    #: what the broker that has the topic loaded answers (:func:`pulsarctl_py.broker_view
    #: .compaction_view`); None: not asked
    broker: dict[str, Any] | None = None

    @property
    def age_ms(self) -> int | None:
        return None if self.ctime is None else max(0, int(time.time() * 1000) - self.ctime)

    @property
    def errors(self) -> int:
        return sum(1 for c in self.checks if c["severity"] == "error")

    def add(self, severity: str, check: str, message: str, **details: Any) -> None:
        self.checks.append(
            {
                "severity": severity,
                "check": check,
                "topic": self.topic,
                "ledger_id": self.compacted_ledger,
                "entry_id": None,
                "message": message,
                "details": details,
            }
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "compacted_ledger": self.compacted_ledger,
            "horizon": None if self.horizon is None else format_position(*self.horizon),
            "compacted_to": None
            if self.compacted_to is None
            else format_position(*self.compacted_to),
            "created_ms": self.ctime,  # the age is now minus this (shown in the table)
            "entries": self.entries,
            "messages": self.messages,
            "keys": self.keys,
            "last_message_position": None if self.last is None else self.last.position,
            "last_message": None if self.last is None else self.last.to_json(),
            "get_last_message_id": self.last_message_id,
            "broker": self.broker,
            "deep": self.deep,
            "checks": list(self.checks),
        }


def _view_messages(source: Any, ledger_id: int) -> tuple[list[Any], bytes | None, int]:
    """Decoded compacted entries of a ledger, its last framed entry, and its entry count."""
    view = source.ledger(ledger_id)
    options = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY,
        digest_type=view.digest_type,
        password=view.password,
        depth=Depth.MESSAGES,
    )
    out, last, count = [], None, 0
    for stored in source.raw_entries(view, 0, view.lac):
        entry = decode_entry(stored.data, options, (ledger_id, stored.entry_id))
        count += 1
        framed = next((la for la in entry.layers if la.name == "compacted"), None)
        if framed is not None:
            last = bytes(memoryview(stored.data)[framed.offset :])
        out.append(entry)
    return out, last, count


def _message_set(entries: list[Any]) -> set[tuple]:
    rows = set()
    for entry in entries:
        pos = entry.message_position
        if not entry.messages:
            rows.add((*pos, -1, None, bytes(entry.payload or b"")))
        for m in entry.messages:
            rows.add((*pos, m.batch_index, m.key, bytes(m.value or b"")))
    return rows


def compaction_status(
    source: Any,
    topic: str,
    *,
    generation: str = DEFAULT,
    deep: bool = False,
    metadata_url: str | None = None,
    bookie_dirs: list[str] | None = None,
    retain_null_key: bool = False,
    keep_entry_metadata: bool = False,
    order: str = "publishing",
) -> CompactionStatus:
    """The topic's compaction as stored, with its checks (see the module docstring)."""
    from pulsarctl_py.topics import topic_info

    info = topic_info(source, topic)
    status = CompactionStatus(info.topic, deep=deep)
    status.horizon = info.compaction_horizon
    status.compacted_ledger = info.compacted_ledger
    if status.compacted_ledger is None:
        status.add("info", "compaction-none", f"{info.topic} has no compacted ledger")
        return status
    lid = status.compacted_ledger
    try:
        view = source.ledger(lid)
    except LedgerctlError as exc:
        status.add(
            "error",
            "compacted-ledger-missing",
            f"CompactedTopicLedger is {lid}: {exc.one_line()}; readCompacted reads fail",
        )
        return status
    md = view.metadata
    if md is None:
        status.add("error", "compacted-ledger-missing", f"ledger {lid} has no BookKeeper metadata")
    else:
        status.ctime = md.ctime
        tags = md.pulsar()
        if tags.kind != "compacted":
            status.add(
                "error", "compacted-ledger-wrong-topic", f"ledger {lid} is a {tags.kind} ledger"
            )
        elif tags.compacted_topic not in (None, info.topic):
            status.add(
                "error",
                "compacted-ledger-wrong-topic",
                f"ledger {lid} is the compaction of {tags.compacted_topic}, not {info.topic}",
            )
        if tags.compacted_to:
            to = (tags.compacted_to.get("ledger_id"), tags.compacted_to.get("entry_id"))
            if None not in to:
                status.compacted_to = to  # type: ignore[assignment]
                if status.horizon is not None and to > status.horizon:
                    status.add(
                        "error",
                        "compacted-to-beyond-horizon",
                        f"pulsar/compactedTo {format_position(*to)} is after the horizon "
                        f"{format_position(*status.horizon)}",
                    )
    ids = [li.ledger_id for li in info.ledgers]
    counts = {li.ledger_id: li.entries for li in info.ledgers}
    if status.horizon is not None:
        hl, he = status.horizon
        entries = counts.get(hl)
        if hl in counts and entries is not None and he >= entries and source.bookie is not None:
            # an open ledger's LAC can trail the entries its broker wrote (and compacted):
            # they are stored past it
            stored = source.bookie.last_entry_id(hl)
            if stored is not None and he <= stored:
                entries = stored + 1
        if hl not in counts or (entries is not None and he >= entries):
            status.add(
                "error",
                "horizon-outside-topic",
                f"the horizon {format_position(hl, he)} is not inside the topic's ledgers {ids}",
            )
    if source.bookie is None:
        return status
    try:
        decoded, last, count = _view_messages(source, lid)
    except LedgerctlError as exc:
        status.add("error", "compacted-ledger-missing", f"ledger {lid}: {exc.one_line()}")
        return status
    status.entries = count
    status.messages = sum(len(e.messages) or 1 for e in decoded)
    status.keys = len({m.key for e in decoded for m in e.messages if m.key is not None})
    if count == 0:
        if md is not None and md.is_closed and md.last_entry_id < 0:
            status.add(
                "info",
                "compacted-ledger-empty",
                f"compacted ledger {lid} is empty: every key was deleted (the broker writes "
                "an empty compacted ledger then; readCompacted readers get nothing)",
            )
        else:
            status.add("error", "compacted-ledger-empty", f"compacted ledger {lid} has no entries")
    status.last = last_position(last, generation)
    for f in status.last.findings:
        status.add(
            f["severity"], f["code"], f["message"], position=f["position"], generation=generation
        )
    try:
        status.last_message_id = broker_last_message_id(source, info, status.horizon, status.last)
    except LedgerctlError as exc:
        status.add("warning", "last-message-id-unknown", f"GetLastMessageId: {exc.one_line()}")
    if deep and status.horizon is not None:
        _deep(
            status,
            source,
            info,
            decoded,
            metadata_url,
            bookie_dirs,
            retain_null_key,
            keep_entry_metadata,
            order,
        )
    return status


# -- GetLastMessageId ---------------------------------------------------------------------------


def _tail_transactions(
    source: Any, ledgers: list[tuple[int, int | None, int | None]], after: tuple[int, int] | None
) -> Any:
    """The transactions of the entries after ``after`` (their metadata read in order): the
    ongoing ones of the topic are all there, since a compaction's horizon is before them."""
    from .core import Transactions, _txn_records, txn_key

    txns = Transactions()
    for ledger_id, entries, _size in ledgers:
        if not entries:
            continue
        first = 0
        if after is not None:
            if ledger_id < after[0]:
                continue
            if ledger_id == after[0]:
                first = after[1] + 1
        if first >= entries:
            continue
        view = source.ledger(ledger_id)
        for entry in source.entries(view, first, entries - 1, depth=Depth.METADATA):
            md = entry.metadata
            if md is None or entry.position is None:
                continue
            txn = txn_key(md)
            if txn is not None:
                for key, rank, tomb in _txn_records(md, txn, entry.position):
                    txns.add(key, rank, tomb)
    return txns


def broker_last_message_id(
    source: Any, info: Any, horizon: tuple[int, int] | None, compacted: LastPosition | None
) -> dict[str, Any]:
    """GetLastMessageId for a readCompacted reader and a plain one (Pulsar 4.0.7
    ``ServerCnx.getLargestBatchIndexWhenPossible``): ``L:E:B`` strings, -1 for no batch
    index, ``-1:-1:-1`` for EARLIEST."""
    from .run import last_dispatchable, previous_position

    ledgers = [(li.ledger_id, li.entries, li.size) for li in info.ledgers]
    txns = _tail_transactions(source, ledgers, horizon)
    last = None
    for ledger_id, entries, _size in ledgers:
        if entries:
            last = (ledger_id, entries - 1)
    max_read = last
    ongoing = txns.ongoing
    if ongoing:
        max_read = previous_position(ledgers, min(ongoing.values()))
    position, _read = last_dispatchable(source, ledgers, max_read, txns.aborted)

    def compacted_answer() -> str:
        if compacted is not None and compacted.error is not None:
            return "error: " + compacted.error
        if compacted is None or compacted.position is None:
            return "-1:-1:-1"  # no compacted entry: EARLIEST
        parts = compacted.position.split(":")
        return ":".join(parts + (["-1"] if len(parts) == 2 else []))

    def tail_answer() -> str:
        assert position is not None
        entry = source.entry_metadata(source.ledger(position[0]), position[1])
        if entry is None:
            raise DataError(f"entry {format_position(*position)} is not offloaded")
        md = entry.metadata
        count = (
            md.num_messages_in_batch
            if md is not None and md.HasField("num_messages_in_batch")
            else -1
        )
        return f"{position[0]}:{position[1]}:{count - 1 if count > 0 else -1}"

    if position is None:
        read_compacted = compacted_answer() if horizon is not None else "-1:-1:-1"
        plain = "-1:-1:-1"
        source_of = "compacted ledger" if horizon is not None else "none"
    elif horizon is not None and position <= horizon:
        read_compacted = compacted_answer()
        plain = tail_answer()
        source_of = "compacted ledger"
    else:
        read_compacted = plain = tail_answer()
        source_of = "topic"
    out = {
        "read_compacted": read_compacted,
        "reader": plain,
        "read_compacted_from": source_of,
        "last_dispatchable": None if position is None else format_position(*position),
        "unconfirmed": None,
    }
    # the broker answers from the LAC it knows; BookKeeper's readers (and this answer) from
    # the one the bookies know, which trails it while the ledger is open (the broker pipelines
    # its adds; the LAC rides on the next one)
    if info.ledgers and info.ledgers[-1].open:
        tail = info.ledgers[-1]
        stored = source.bookie.last_entry_id(tail.ledger_id)
        known = (tail.entries or 0) - 1
        if stored is not None and stored > known:
            out["unconfirmed"] = (
                f"{tail.ledger_id}:{known + 1}..{tail.ledger_id}:{stored}: stored past the "
                "open ledger's LAC; a broker that wrote them answers up to them"
            )
    return out


def _deep(
    status: CompactionStatus,
    source: Any,
    info: Any,
    decoded: list[Any],
    metadata_url: str | None,
    bookie_dirs: list[str] | None,
    retain_null_key: bool,
    keep_entry_metadata: bool,
    order: str = "publishing",
) -> None:
    """Compare the stored compacted view with a fresh full compaction up to the horizon,
    as the broker computes it (:func:`.run.run_phase_one`: transactions, the horizon given)."""
    import functools

    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.engines import LocalEngine
    from pulsarctl_py.engines.local import DEFAULT_MEMORY
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    from .core import CompactionOptions, Stats, is_chunk
    from .reader import close_sources, phase_two_split
    from .run import run_phase_one
    from .state import topic_state

    # what the broker computed: it copies what it cannot decode (a batch whole); every
    # chunk kept, so that a view written with --keep-chunks is told apart below
    options = CompactionOptions(
        retain_null_key=retain_null_key,
        order=order,
        keep_chunks=True,
        keep_entry_metadata=keep_entry_metadata,
        accept_damage=True,
    )
    url = str(resolve_metadata_url(metadata_url))
    dirs = [str(d) for d in resolve_bookie_dirs(bookie_dirs)]
    engine = LocalEngine()
    fresh = []
    leading: set[tuple[int, int]] = set()  # leading chunks, which the broker does not keep
    try:
        state = topic_state(source, info.topic)
        one = run_phase_one(
            engine,
            state,
            options,
            full=True,
            metadata_url=url,
            bookie_dirs=dirs,
            live=source.live_options,
            memory=DEFAULT_MEMORY,
            horizon=status.horizon,
        )
        try:
            for item in engine.map_splits(
                one.plan, functools.partial(phase_two_split, options=one.options), one.table
            ):
                if isinstance(item, Stats):
                    continue
                entry = decode_entry(item.data, DecodeOptions(outer=Outer.COMPACTED))
                md = entry.metadata
                if md is not None and is_chunk(md) and md.chunk_id < md.num_chunks_from_msg - 1:
                    leading.add(item.position)
                fresh.append(entry)
        finally:
            one.table.close()
    except LedgerctlError as exc:
        status.add("warning", "compacted-view-unchecked", f"cannot recompute: {exc.one_line()}")
        return
    finally:
        close_sources()
    stored, with_chunks = _message_set(decoded), _message_set(fresh)
    expected = {r for r in with_chunks if (r[0], r[1]) not in leading}
    if stored == expected:
        return
    if leading and stored == with_chunks:
        status.add(
            "info",
            "compacted-view-keeps-chunks",
            f"the compacted view keeps {len(leading)} leading chunk(s) of the latest chunked "
            "messages, which the broker's compactor drops (so that they reassemble)",
        )
        return
    missing = sorted(r[:3] for r in expected - stored)[:5]
    extra = sorted(r[:3] for r in stored - expected)[:5]
    status.add(
        "error",
        "compacted-view-differs",
        f"the compacted view differs from a fresh compaction up to the horizon: "
        f"{len(expected - stored)} message(s) missing, {len(stored - expected)} unexpected",
        missing=[_pos(m) for m in missing],
        unexpected=[_pos(m) for m in extra],
    )


def _pos(row: tuple) -> str:
    lid, eid, index = row
    return format_position(lid, eid, None if index < 0 else index)


def topic_with_compaction(source: Any, topic: str) -> tuple[Any, CompactionStatus | None]:
    """``topic info``: the topic (:func:`pulsarctl_py.topics.topic_info`) and, when it has
    a compacted ledger, its compaction's status (the checks of ``compact --status``
    without ``--deep``)."""
    from pulsarctl_py.topics import topic_info

    info = topic_info(source, topic)
    if info.compacted_ledger is None:
        return info, None
    return info, compaction_status(source, info.topic)
