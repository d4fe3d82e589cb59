"""Compute a topic's compaction over a scan plan, on an engine, and report it.

Nothing here writes to the stores: :func:`compact` computes, counts and (when asked) spools
the compacted entries to a temporary file, exports the compacted view, and returns a
:class:`CompactionReport`. Writing is :mod:`.apply`'s job, from the spool.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.engines import ScanPlan, build_scan_plan, get_engine
from pulsarctl_py.engines.local import DEFAULT_MEMORY
from pulsarctl_py.errors import DataError
from pulsarctl_py.positions import format_position

from .core import (
    CHUNK_PREFIX,
    CompactedEntry,
    CompactionOptions,
    Stats,
    fold_for,
)
from .lastpos import NEWEST, LastPosition, last_position
from .reader import PhaseOneSplits, close_sources, phase_two_split

_SPOOL = struct.Struct(">qqI")


@dataclass(slots=True)
class TopicState:
    """What the metadata says about a topic's data and its existing compaction."""

    topic: str
    ledgers: list[tuple[int, int | None, int | None]]
    last: tuple[int, int] | None  # the topic's last entry, taken once
    horizon: tuple[int, int] | None  # the __compaction mark-delete position
    compacted_ledger: int | None
    compacted_entries: int | None = None
    compacted_bytes: int | None = None
    compacted_problem: str | None = None
    cursor_ledger: int | None = None
    partition: int = -1


@dataclass(slots=True)
class CompactionReport:
    topic: str
    engine: str
    order: str
    format: str
    full: bool
    keys: int = 0
    kept: int = 0
    tombstoned: int = 0
    stats: Stats = field(default_factory=Stats)
    horizon: tuple[int, int] | None = None
    compacted_to: tuple[int, int] | None = None
    last: LastPosition | None = None
    previous_compacted_ledger: int | None = None
    compacted_ledger: int | None = None
    applied: bool = False
    plan: ScanPlan | None = None
    spilled: bool = False
    spool: Path | None = None
    notes: list[str] = field(default_factory=list)
    to_delete: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def last_message_position(self) -> str | None:
        return self.last.position if self.last is not None else None

    def to_json(self) -> dict[str, Any]:
        s = self.stats
        return {
            "topic": self.topic,
            "engine": self.engine,
            "keys": self.keys,
            "kept": s.kept,
            "tombstoned": self.tombstoned,
            "keyless_dropped": s.keyless_dropped,
            "not_compactable": s.not_compactable,
            "markers": s.markers,
            "entries_in": s.entries_in,
            "entries_out": s.entries_out,
            "bytes_in": s.bytes_in,
            "bytes_out": s.bytes_out,
            "horizon": None if self.horizon is None else format_position(*self.horizon),
            "last_message_position": self.last_message_position,
            "compacted_ledger": self.compacted_ledger,
            "applied": self.applied,
            # beyond the contract: context for people and scripts that want it
            "order": self.order,
            "format": self.format,
            "full": self.full,
            "previous_compacted_ledger": self.previous_compacted_ledger,
            "compacted_to": None
            if self.compacted_to is None
            else format_position(*self.compacted_to),
            "chunks_kept": s.chunks_kept,
            "undecodable_batches": s.undecodable,
            "spilled": self.spilled,
            "plan": None if self.plan is None else self.plan.to_json(),
            "last_message": None if self.last is None else self.last.to_json(),
            "to_delete": list(self.to_delete),
            "deleted": list(self.deleted),
            "notes": list(self.notes),
            "problems": list(s.problems),
            "seconds": round(self.seconds, 3),
        }


# -- the topic's state ------------------------------------------------------------------------


def topic_state(source: Any, topic: str) -> TopicState:
    """Ledgers, last entry, and existing compaction of ``topic`` from its metadata."""
    from pulsarctl_py.stores.metadata import resolve_topic
    from pulsarctl_py.topics import topic_info

    info = topic_info(source, topic)
    if info.problems:
        raise DataError(f"{info.topic}: {info.problems[0]}")
    ledgers = [(li.ledger_id, li.entries, li.size) for li in info.ledgers]
    last = None
    for ledger_id, entries, _size in ledgers:
        if entries:
            last = (ledger_id, entries - 1)
    cursor = info.compaction_cursor
    state = TopicState(
        info.topic,
        ledgers,
        last,
        info.compaction_horizon,
        info.compacted_ledger,
        cursor_ledger=cursor.cursors_ledger_id if cursor is not None else None,
        partition=resolve_topic(info.topic).partition_index,
    )
    if state.compacted_ledger is not None:
        try:
            view = source.ledger(state.compacted_ledger)
        except LedgerctlError as exc:
            state.compacted_problem = exc.one_line()
        else:
            md = view.metadata
            if md is not None and md.is_closed:
                state.compacted_entries = md.last_entry_id + 1
                state.compacted_bytes = md.length
            elif view.lac is not None:
                state.compacted_entries = view.lac + 1
            else:
                state.compacted_problem = (
                    f"compacted ledger {state.compacted_ledger} has no entries"
                )
    return state


def plan_compaction(
    state: TopicState,
    *,
    full: bool,
    metadata_url: str | None,
    bookie_dirs: list[str],
    split_entries: int | None = None,
    live: Any = None,
) -> tuple[ScanPlan, list[str]]:
    """The scan plan: the compacted ledger plus the tail after the horizon, or everything."""
    notes: list[str] = []
    incremental = not full and state.compacted_ledger is not None and state.horizon is not None
    if incremental and state.compacted_problem is not None:
        raise DataError(
            f"{state.topic}: the existing compaction cannot be read ({state.compacted_problem}); "
            "run with --full to rebuild it from the topic's ledgers"
        )
    kwargs: dict[str, Any] = {"live": live}
    if split_entries is not None:
        kwargs["split_entries"] = split_entries
    if incremental:
        assert state.compacted_ledger is not None and state.horizon is not None
        kwargs["after"] = state.horizon
        kwargs["compacted"] = (
            state.compacted_ledger,
            state.compacted_entries or 0,
            state.compacted_bytes,
        )
        notes.append(
            f"incremental: compacted ledger {state.compacted_ledger} "
            f"plus the entries after {format_position(*state.horizon)}"
        )
    elif state.compacted_ledger is not None:
        notes.append("full: the existing compacted ledger is not read")
    plan = build_scan_plan(
        state.topic,
        state.ledgers,
        bookie_dirs=bookie_dirs,
        metadata_url=metadata_url,
        upto=state.last,
        **kwargs,
    )
    notes.extend(plan.notes)
    return plan, notes


# -- progress ---------------------------------------------------------------------------------


class Progress:
    """Compaction's progress (nothing when disabled): on a terminal, one line of the
    progress display (pulsarctl_py.render.activity) counting the phase's entries; on any
    other stream (``--progress`` asked for in a log), a line when each phase starts and
    one when the work ends."""

    def __init__(self, enabled: bool, total_entries: int, stream: IO[str] | None = None) -> None:
        self.enabled = enabled
        self.total = total_entries
        self.stream = stream or sys.stderr
        self.done = 0
        self.phase = ""
        self._shown: Any = None
        self._line: Any = None

    def start(self, phase: str) -> None:
        self.close()
        self.phase, self.done = phase, 0
        if not self.enabled:
            return
        if self.stream.isatty():
            from pulsarctl_py import render

            console = render.make_console(file=self.stream)
            self._shown = render.activity(
                console, f"compact: {phase}", total=self.total, unit="entries"
            )
            self._line = self._shown.__enter__()
        else:
            self._write(f"{phase}: {self.total} entries")

    def split_done(self, split: Any) -> None:
        self.count(self.done + split.entries)

    def count(self, done: int) -> None:
        self.done = done
        if self._line is not None:
            self._line.update(completed=done)

    def close(self) -> None:
        if self._shown is not None:
            shown, self._shown, self._line = self._shown, None, None
            shown.__exit__(None, None, None)
        elif self.enabled and self.phase and not self.stream.isatty():
            self._write(f"{self.phase}: done, {self.done}/{self.total} entries")
            self.phase = ""

    def _write(self, text: str) -> None:
        self.stream.write(f"ledgerctl compact: {text}\n")
        self.stream.flush()


# -- export -----------------------------------------------------------------------------------


def export_lines(entry: CompactedEntry, retain_null_key: bool) -> Iterator[dict[str, Any]]:
    """The messages a readCompacted reader receives from one compacted entry, as JSON rows."""
    from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
    from pulsarctl_py.decoders.nodes import json_value

    decoded = decode_entry(
        entry.data, DecodeOptions(outer=Outer.COMPACTED, depth=Depth.MESSAGES, verify=False)
    )
    lid, eid = entry.position
    if not decoded.messages:
        md = decoded.metadata
        yield {
            "key": md.partition_key if md is not None and md.HasField("partition_key") else None,
            "value": None,
            "properties": {kv.key: kv.value for kv in md.properties} if md is not None else {},
            "position": format_position(lid, eid),
            "publish_time": md.publish_time if md is not None else None,
            "note": "payload not decoded (encrypted or a chunk)",
        }
        return
    for m in decoded.messages:
        if m.key is None and not retain_null_key:
            continue
        yield {
            "key": m.key,
            "value": None if m.value is None else json_value(bytes(m.value)),
            "properties": dict(m.properties),
            "position": format_position(lid, eid, None if m.batch_index < 0 else m.batch_index),
            "publish_time": m.publish_time,
            "event_time": m.event_time,
        }


def read_spool(path: Path) -> Iterator[CompactedEntry]:
    """Entries spooled by :func:`compact` (``spool=True``), in order."""
    with path.open("rb") as fh:
        while True:
            head = fh.read(_SPOOL.size)
            if not head:
                return
            lid, eid, size = _SPOOL.unpack(head)
            data = fh.read(size)
            yield CompactedEntry((lid, eid), data, 0, -1)


# -- compact ----------------------------------------------------------------------------------


def compact(
    topic: str,
    *,
    metadata_url: str | None = None,
    bookie_dirs: list[str] | None = None,
    options: CompactionOptions | None = None,
    full: bool = False,
    memory: int | None = DEFAULT_MEMORY,
    engine: str = "local",
    export: Path | None = None,
    spool: bool = False,
    progress: bool = False,
    split_entries: int | None = None,
    generation: str = NEWEST,
    on_state: Callable[[TopicState], None] | None = None,
    live: Any = None,
    pick_engine: Callable[[int], str] | None = None,
) -> CompactionReport:
    """Compute the compaction of ``topic``; spool the entries when ``spool`` (for --apply).

    ``pick_engine``, when given, names the engine from the plan's entries (``--engine
    auto``) instead of ``engine``.
    """
    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    options = options or CompactionOptions()
    started = time.monotonic()
    url = str(resolve_metadata_url(metadata_url))
    dirs = [str(d) for d in resolve_bookie_dirs(bookie_dirs)]
    # without a bookie directory the entries come from the running bookies
    with LedgerSource.open(url, dirs, need_metadata=True, need_bookie=True, live=live) as source:
        state = topic_state(source, topic)
        live = source.live_options
    if on_state is not None:
        on_state(state)
    report = CompactionReport(
        state.topic, engine, options.order, options.format, full or state.compacted_ledger is None
    )
    report.previous_compacted_ledger = state.compacted_ledger
    report.horizon = state.last
    if state.last is None:
        report.notes.append("the topic has no entries: nothing to compact")
        report.seconds = time.monotonic() - started
        return report
    plan, notes = plan_compaction(
        state,
        full=full,
        metadata_url=url,
        bookie_dirs=dirs,
        split_entries=split_entries,
        live=live,
    )
    report.plan, report.notes = plan, notes
    if pick_engine is not None:
        report.engine = engine = pick_engine(plan.entries)
    runner = get_engine(engine)
    spool_file: IO[bytes] | None = None
    export_file: IO[str] | None = None
    tracker = Progress(progress, plan.entries)
    try:
        tracker.start("phase one")
        table = runner.latest_per_key(
            plan,
            PhaseOneSplits(options),
            memory=memory,
            progress=tracker.split_done,
            fold=fold_for(options),
        )
        try:
            report.spilled = table.spilled
            for key, _rank, tomb in table.items():
                if key.startswith(CHUNK_PREFIX):
                    continue
                report.keys += 1
                report.tombstoned += tomb
            if spool:
                fd, name = tempfile.mkstemp(prefix="ledgerctl-compacted-", suffix=".spool")
                report.spool = Path(name)
                spool_file = os.fdopen(fd, "wb")
            if export is not None:
                export_file = export.open("w", encoding="utf-8")
            tracker.start("phase two")
            last: CompactedEntry | None = None
            stats = report.stats
            for item in runner.map_splits(
                plan, functools.partial(phase_two_split, options=options), table
            ):
                if isinstance(item, Stats):
                    stats.add(item)
                    tracker.count(stats.entries_in)
                    continue
                last = item
                if spool_file is not None:
                    spool_file.write(_SPOOL.pack(*item.position, len(item.data)))
                    spool_file.write(item.data)
                if export_file is not None:
                    for row in export_lines(item, options.retain_null_key):
                        export_file.write(json.dumps(row, sort_keys=True) + "\n")
        finally:
            table.close()
        report.compacted_to = stats.to
        report.last = last_position(last.data if last is not None else None, generation)
        if stats.chunks_kept:
            report.notes.append(
                f"{stats.chunks_kept} leading chunk(s) kept so that chunked messages can be "
                "reassembled; Pulsar's compactor keeps only each message's last chunk"
            )
    except BaseException:
        if spool_file is not None:
            spool_file.close()
            spool_file = None
        if report.spool is not None:
            report.spool.unlink(missing_ok=True)
            report.spool = None
        raise
    finally:
        tracker.close()
        if spool_file is not None:
            spool_file.close()
        if export_file is not None:
            export_file.close()
        close_sources()
        runner.close()
    report.seconds = time.monotonic() - started
    return report
