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
``compacted-ledger-empty`` (error)
    The compacted ledger has no entries.
``horizon-outside-topic`` (error)
    The horizon is not inside the topic's retained ledgers.
``last-position-unreachable`` (error), ``last-position-error`` (error), ``last-position-misread``
(error), ``last-position-nonbatched-index`` (warning)
    What the chosen broker generation answers to GetLastMessageId (formats.md §7).
``compacted-view-differs`` (error, ``--deep``)
    The compacted view differs from a fresh compaction of the topic up to the horizon.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.positions import format_position

from .lastpos import NEWEST, LastPosition, last_position


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
    generation: str = NEWEST,
    deep: bool = False,
    metadata_url: str | None = None,
    bookie_dirs: list[str] | None = None,
    retain_null_key: bool = False,
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
        status.add("error", "compacted-ledger-empty", f"compacted ledger {lid} has no entries")
    status.last = last_position(last, generation)
    for f in status.last.findings:
        status.add(
            f["severity"], f["code"], f["message"], position=f["position"], generation=generation
        )
    if deep and status.horizon is not None:
        _deep(status, info, decoded, metadata_url, bookie_dirs, retain_null_key)
    return status


def _deep(
    status: CompactionStatus,
    info: Any,
    decoded: list[Any],
    metadata_url: str | None,
    bookie_dirs: list[str] | None,
    retain_null_key: bool,
) -> None:
    """Compare the stored compacted view with a fresh full compaction up to the horizon."""
    import functools

    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.engines import LocalEngine, build_scan_plan
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    from .core import CompactionOptions, Stats
    from .reader import PhaseOneSplits, close_sources, phase_two_split

    # what the broker computed: it copies what it cannot decode (a batch whole)
    options = CompactionOptions(retain_null_key=retain_null_key, accept_damage=True)
    url = str(resolve_metadata_url(metadata_url))
    dirs = [str(d) for d in resolve_bookie_dirs(bookie_dirs)]
    ledgers = [(li.ledger_id, li.entries, li.size) for li in info.ledgers]
    plan = build_scan_plan(
        info.topic, ledgers, bookie_dirs=dirs, metadata_url=url, upto=status.horizon
    )
    engine = LocalEngine()
    fresh = []
    try:
        with engine.latest_per_key(plan, PhaseOneSplits(options)) as table:
            for item in engine.map_splits(
                plan, functools.partial(phase_two_split, options=options), table
            ):
                if not isinstance(item, Stats):
                    fresh.append(decode_entry(item.data, DecodeOptions(outer=Outer.COMPACTED)))
    except LedgerctlError as exc:
        status.add("warning", "compacted-view-unchecked", f"cannot recompute: {exc.one_line()}")
        return
    finally:
        close_sources()
    stored, expected = _message_set(decoded), _message_set(fresh)
    if stored != expected:
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
