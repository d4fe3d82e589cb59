"""Compute a topic's compaction over a scan plan, on an engine, and report it.

Nothing here writes to the stores: :func:`compact` computes, counts, exports the compacted
view and returns a :class:`CompactionReport`. The compacted entries go, in topic order, to a
``write`` sink while phase two produces them (``compact --apply/--plan``: the compacted ledger
is written as the broker's ``TwoPhaseCompactor.phaseTwoLoop`` adds each entry), or, when
asked, to a temporary spool file (:func:`read_spool`).
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from pulsarctl_py.coverage import Gaps
from pulsarctl_py.engines import ScanPlan, build_scan_plan, get_engine
from pulsarctl_py.engines.local import DEFAULT_MEMORY
from pulsarctl_py.errors import DataError
from pulsarctl_py.positions import format_position

from .core import (
    CHUNK_PREFIX,
    KEY_PREFIX,
    CompactedEntry,
    CompactionOptions,
    Stats,
    Transactions,
    fold_for,
    txn_key,
)
from .lastpos import DEFAULT, LastPosition, last_position
from .reader import (
    KeptEntries,
    PhaseOneSplits,
    SparseReads,
    adopt,
    close_sources,
    phase_one_to,
    phase_two_split,
)
from .state import TopicState, topic_state

_SPOOL = struct.Struct(">qqI")

#: the share of ``--memory`` phase one's entries may take when kept for phase two (the
#: local engine; reader.KeptEntries): the key table's in-memory share is 0.4 and RocksDB's
#: 5/32 (engines/local.py), and entries are kept only until the table spills
KEEP_SHARE = 1 / 8
#: and at most this: the keep is all of the topic or nothing, for a topic whose fixed
#: costs are most of a compaction (10^5 messages of 100 bytes are 12 MB; keeping them
#: saves 6 % of the wall time); at 10^6 keys the memory is the key table's
KEEP_MOST = 16 << 20


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
    #: the transactions phase one found, and the entry after which the broker's transaction
    #: buffer stops dispatching (None: the topic's last entry)
    transactions: Transactions | None = None
    max_read: tuple[int, int] | None = None
    #: an incremental compaction with nothing dispatchable since the horizon
    nothing_new: bool = False
    notes: list[str] = field(default_factory=list)
    #: what people must know before writing this compaction (pip-429: clients that crash)
    warnings: list[str] = field(default_factory=list)
    to_delete: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    seconds: float = 0.0
    #: the plan that commits the written compacted ledger (--apply, --plan)
    plan_file: str | None = None
    #: the broker settings the run followed, and where each came from (CompactorSettings)
    settings: dict[str, Any] | None = None
    #: what the scan skipped: entries stored past a closed ledger's last entry
    gaps: Gaps = field(default_factory=Gaps)

    @property
    def ok(self) -> bool:
        """No damage gone on past, nothing skipped: exit status 0."""
        return self.gaps.complete and not self.stats.damaged_count

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
            "chunked_messages_cut": s.chunked_cut,
            "undecodable_batches": s.undecodable,
            "aborted_entries": s.aborted,
            # a Pulsar 4.0/4.1 broker's own compaction of this topic fails (pulsar#26290)
            "broker_compaction_fails_at": None
            if s.broker_failure_at is None
            else format_position(*s.broker_failure_at),
            "transactions": None if self.transactions is None else self.transactions.to_json(),
            "max_read_position": None if self.max_read is None else format_position(*self.max_read),
            "nothing_new": self.nothing_new,
            "settings": self.settings,
            "spilled": self.spilled,
            "plan": None if self.plan is None else self.plan.to_json(),
            "last_message": None if self.last is None else self.last.to_json(),
            "to_delete": list(self.to_delete),
            "deleted": list(self.deleted),
            "plan_file": self.plan_file,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "problems": list(s.problems),
            "damaged": list(s.damaged),
            "damaged_count": s.damaged_count,
            **self.gaps.to_json(),
            "seconds": round(self.seconds, 3),
        }


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


def _scanned_ledgers(state: TopicState, full: bool) -> set[int]:
    """The data ledgers a compaction of ``state`` reads (all, or those after the horizon)."""
    incremental = not full and state.compacted_ledger is not None and state.horizon is not None
    start = state.horizon[0] if incremental and state.horizon is not None else None
    end = state.last[0] if state.last is not None else None
    return {
        lid
        for lid, _entries, _size in state.ledgers
        if (start is None or lid >= start) and (end is None or lid <= end)
    }


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


def export_lines(
    entry: CompactedEntry, retain_null_key: bool, values: Any = None
) -> Iterator[dict[str, Any]]:
    """The messages a readCompacted reader receives from one compacted entry, as rows.

    ``values`` (:class:`pulsarctl_py.export.ValueOptions`): the topic's schemas; each row
    then also has ``schema_version``, ``schema_type`` and ``value_decoded`` (JSON, or the
    typed value of ``values.column`` for Parquet), and ``value_error`` when the value does
    not decode with its schema version.
    """
    from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
    from pulsarctl_py.decoders.nodes import json_value

    decoded = decode_entry(
        entry.data, DecodeOptions(outer=Outer.COMPACTED, depth=Depth.MESSAGES, verify=False)
    )
    lid, eid = entry.position
    md = decoded.metadata
    if not decoded.messages:
        errors = [p for p in decoded.problems if p.severity == "error"]
        yield {
            "key": md.partition_key if md is not None and md.HasField("partition_key") else None,
            "value": None,
            "properties": {kv.key: kv.value for kv in md.properties} if md is not None else {},
            "position": format_position(lid, eid),
            "publish_time": md.publish_time if md is not None else None,
            "note": f"payload not decoded: {errors[0]} (copied as stored, --accept-damage)"
            if errors
            else "payload not decoded (encrypted or a chunk)",
        }
        return
    version = md.schema_version if md is not None and md.HasField("schema_version") else None
    for m in decoded.messages:
        if m.key is None and not retain_null_key:
            continue
        row = {
            "key": m.key,
            "value": None if m.value is None else json_value(bytes(m.value)),
            "properties": dict(m.properties),
            "position": format_position(lid, eid, None if m.batch_index < 0 else m.batch_index),
            "publish_time": m.publish_time,
            "event_time": m.event_time,
        }
        if values is not None and values.values is not None:
            _add_values(row, values, version, m)
        yield row


def _add_values(row: dict[str, Any], values: Any, version: Any, m: Any) -> None:
    """A compacted view row's decoded value, as export gives it (export._add_value)."""
    from pulsarctl_py.values import message_key_bytes

    key = message_key_bytes(m)
    got = values.values.decode(version, m.value, key)
    row["schema_version"] = got.schema_version
    row["schema_type"] = got.schema_type
    if not got.decoded:
        row["value_decoded"] = None
    elif values.column is not None:
        row["value_decoded"] = values.column.value(values.values, version, m.value, key)
    else:
        row["value_decoded"] = got.value
    if got.error is not None:
        row["value_error"] = got.error


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


# -- what the broker dispatches to the compactor -------------------------------------------


def previous_position(
    ledgers: list[tuple[int, int | None, int | None]], position: tuple[int, int]
) -> tuple[int, int] | None:
    """``ManagedLedgerImpl.getPreviousPosition``: the entry before ``position`` in the
    topic (ledgers without entries skipped), or None before the first one."""
    ledger_id, entry_id = position
    if entry_id > 0:
        return (ledger_id, entry_id - 1)
    ids = [lid for lid, _e, _s in ledgers]
    at = ids.index(ledger_id) if ledger_id in ids else len(ids)
    for lid, entries, _size in reversed(ledgers[:at]):
        if entries:
            return (lid, entries - 1)
    return None


def last_dispatchable(
    source: Any,
    ledgers: list[tuple[int, int | None, int | None]],
    start: tuple[int, int] | None,
    aborted: frozenset[bytes],
) -> tuple[tuple[int, int] | None, int]:
    """The broker's last dispatchable position at or before ``start``, and the entries read.

    ``PersistentTopic.getLastDispatchablePosition`` walks back one entry at a time from the
    transaction buffer's max read position (``ManagedLedgerImplUtils.asyncGetLastValidPosition``)
    past markers and entries of aborted transactions. The compactor reads up to it (its
    raw reader's GetLastMessageId), so it is the horizon a compaction commits."""
    read = 0
    views: dict[int, Any] = {}
    position = start
    while position is not None:
        ledger_id, entry_id = position
        view = views.get(ledger_id)
        if view is None:
            view = views[ledger_id] = source.ledger(ledger_id)
        read += 1
        entry = source.entry_metadata(view, entry_id)
        if entry is None:
            raise DataError(f"entry {format_position(*position)} is not offloaded")
        md = entry.metadata
        if md is None:
            raise DataError(
                f"entry {format_position(*position)}: no readable MessageMetadata; the broker "
                "cannot tell whether it is dispatchable"
            )
        marker = md.HasField("marker_type")
        txn = txn_key(md)
        if not marker and (txn is None or txn not in aborted):
            return position, read
        position = previous_position(ledgers, position)
    return None, read


def scan_table(table: Any, sparse: SparseReads | None = None) -> tuple[int, int, Transactions]:
    """Phase one's key table: keys, winning tombstones, and the transactions it recorded.
    With ``sparse``, ``sparse.winners`` is set to the entries of its noted splits that hold
    a key's winner that is not a tombstone, in a batch (:class:`~.reader.EntryBits`)."""
    single = b"\x00\x00\x00\x00"  # a single message's rank suffix: always read
    memory = getattr(table, "memory_table", None)
    native = getattr(memory() if memory is not None else None, "native", None)
    found = sparse.entry_bits() if sparse is not None else None
    add = found.add if found is not None else None
    if native is not None:
        # the in-memory native table counts itself and sets the bits; when every key is a
        # message key (no transaction or chunk-group record) nothing needs a record of its
        # own, else the walk below counts them (the bits are set already)
        spans, bits = (found.packed(), found.bits) if found is not None else (b"", bytearray())
        if not native.live_entries(KEY_PREFIX, single, spans, bits):
            if sparse is not None:
                sparse.winners = found
            keys = len(native)
            return keys, keys - native.live, Transactions()
        add = None
    keys = tombstoned = 0
    txns = Transactions()
    message = KEY_PREFIX[0]
    # in any order when the table can stream them so (the local engine's): sorting an
    # in-memory table for this would hold every record at once
    for key, rank, tomb in getattr(table, "records", table.items)():
        # a message key is the usual record; transaction and chunk-group records are not
        if key[0] != message and (txns.add(key, rank, tomb) or key.startswith(CHUNK_PREFIX)):
            continue
        keys += 1
        if tomb:
            tombstoned += 1
        elif add is not None and len(rank) >= 16 and rank[16:] != single:
            add(*_LEDGER_ENTRY.unpack_from(rank))
    if sparse is not None:
        sparse.winners = found
    return keys, tombstoned, txns


_LEDGER_ENTRY = struct.Struct(">QQ")


@dataclass(slots=True)
class PhaseOne:
    """Phase one as the broker's compactor would run it, and where phase two reads."""

    table: Any
    plan: ScanPlan
    options: CompactionOptions
    transactions: Transactions
    horizon: tuple[int, int] | None
    max_read: tuple[int, int] | None
    keys: int = 0
    tombstoned: int = 0
    notes: list[str] = field(default_factory=list)


def run_phase_one(
    runner: Any,
    state: TopicState,
    options: CompactionOptions,
    *,
    full: bool,
    metadata_url: str,
    bookie_dirs: list[str],
    live: Any,
    memory: int | None,
    split_entries: int | None = None,
    progress: Progress | None = None,
    horizon: tuple[int, int] | None = None,
    keep: KeptEntries | None = None,
    source: Any = None,
    sparse: SparseReads | None = None,
) -> PhaseOne:
    """Phase one over the topic, as the ``__compaction`` subscription would be served.

    The first pass reads the whole topic (or the previous compacted view and the tail) and
    records its transactions. The horizon is then the broker's: the last dispatchable entry
    before the first entry of the oldest ongoing transaction (or ``horizon`` when given, for
    checking a stored compaction). When transactions were aborted or are ongoing, or the
    horizon is before the topic's end, phase one runs again on what the broker dispatches up
    to the horizon: entries of aborted transactions left out. Returns the key table (the
    caller closes it) and the plan phase two reads. ``keep``: the entries read are kept
    there for phase two, as far as its budget goes. ``source``: the run's open
    LedgerSource, which the splits this process reads and the horizon walk then use
    instead of opening their own."""
    from pulsarctl_py.ledgers import LedgerSource

    given = horizon is not None
    tracker = progress or Progress(False, 0)
    plan, notes = plan_compaction(
        state,
        full=full,
        metadata_url=metadata_url,
        bookie_dirs=bookie_dirs,
        split_entries=split_entries,
        live=live,
    )
    if source is not None:
        for split in plan.splits[:1]:
            adopt(split, source)
    tracker.total = plan.entries
    tracker.start("phase one")
    if keep is not None:
        keep.planned, keep.seen = plan.entries, 0
        if plan.bytes > keep.budget:  # the bytes metadata gives: too many to keep them all
            keep.release()
    fold = fold_for(options)
    table = runner.latest_per_key(
        plan,
        PhaseOneSplits(options, keep, sparse),
        memory=memory,
        progress=tracker.split_done,
        fold=fold,
    )
    try:
        keys, tombstoned, txns = scan_table(table, sparse)
        ongoing = txns.ongoing
        max_read = state.last
        if ongoing:
            first = min(ongoing.values())
            max_read = previous_position(state.ledgers, first)
            notes.append(
                f"{len(ongoing)} ongoing transaction(s), the oldest from "
                f"{format_position(*first)}: the broker dispatches nothing from there on, so "
                "it is not compacted yet"
            )
        if horizon is None and source is not None:
            horizon, _read = last_dispatchable(source, state.ledgers, max_read, txns.aborted)
        elif horizon is None:
            with LedgerSource.open(
                metadata_url,
                bookie_dirs,
                need_metadata=True,
                need_bookie=True,
                live=live,
                tiered=True,
            ) as opened:
                horizon, _read = last_dispatchable(opened, state.ledgers, max_read, txns.aborted)
        elif max_read is not None and horizon > max_read:
            notes.append(
                f"the horizon {format_position(*horizon)} is past the max read position "
                f"{format_position(*max_read)} of the ongoing transactions"
            )
        aborted = txns.aborted
        if aborted or (horizon != state.last and horizon is not None):
            if not given and horizon is not None and horizon != state.last:
                notes.append(
                    f"horizon {format_position(*horizon)}: the last entry the broker dispatches "
                    f"(the topic ends at {format_position(*state.last)})"  # type: ignore[misc]
                )
            options = replace(options, aborted=aborted)
            cut = replace(state, last=horizon)
            plan, _ = plan_compaction(
                cut,
                full=full,
                metadata_url=metadata_url,
                bookie_dirs=bookie_dirs,
                split_entries=split_entries,
                live=live,
            )
            # records past a given horizon count too, unlike the broker's own (only markers
            # and aborted entries follow it)
            if aborted or ongoing or given:
                table.close()
                tracker.total = plan.entries
                tracker.start("phase one, without aborted and ongoing transactions")
                table = runner.latest_per_key(
                    plan,
                    PhaseOneSplits(options, keep, sparse),
                    memory=memory,
                    progress=tracker.split_done,
                    fold=fold,
                )
                keys, tombstoned, _ = scan_table(table, sparse)
    except BaseException:
        table.close()
        raise
    if keep is not None and table.spilled:
        keep.release()  # too large to keep as well: phase two reads the topic again
    out = PhaseOne(table, plan, options, txns, horizon, None if not ongoing else max_read)
    out.keys, out.tombstoned, out.notes = keys, tombstoned, notes
    return out


# -- compact ----------------------------------------------------------------------------------

#: where phase two's compacted entries go while it runs (``compact(write=...)``): called with
#: the report so far and the entries, in topic order
PhaseTwoSink = Callable[[CompactionReport, Iterator[CompactedEntry]], Any]


def _check_phase_two_to(
    stats: Stats, compacted_to: tuple[int, int] | None, skipped: bool = False
) -> None:
    """Phase two's last undeleted entry must be the one phase one found (``compacted_to``,
    the compacted ledger's ``pulsar/compactedTo``, written before phase two ended).
    ``skipped``: phase two saw every entry but the plain batches it skipped (sparse
    reads), and those are never phase one's "to" when a later entry is."""
    if stats.to != compacted_to and not (
        skipped and (stats.to is None or stats.to < compacted_to)  # type: ignore[operator]
    ):
        said = [format_position(*p) if p else "none" for p in (stats.to, compacted_to)]
        raise DataError(
            f"phase two's last undeleted entry {said[0]} is not the one read before it "
            f"({said[1]}): the topic changed under the compaction, or this is a bug"
        )


def compact(
    topic: str,
    *,
    metadata_url: str | None = None,
    bookie_dirs: list[str] | None = None,
    options: CompactionOptions | None = None,
    full: bool = False,
    memory: int | None = DEFAULT_MEMORY,
    engine: str = "local",
    export: Path | IO[str] | Any | None = None,
    spool: bool = False,
    progress: bool = False,
    split_entries: int | None = None,
    generation: str = DEFAULT,
    on_state: Callable[[TopicState], None] | None = None,
    live: Any = None,
    values: Any = None,
    pick_engine: Callable[[int], str] | None = None,
    settings: Any = None,
    write: PhaseTwoSink | None = None,
) -> CompactionReport:
    """Compute the compaction of ``topic``; spool the entries when ``spool``.

    ``write``: called once phase one is done and phase two's metadata is known (the
    horizon, ``compacted_to``), with the report so far and an iterator of the compacted
    entries that runs phase two as it is consumed (:data:`PhaseTwoSink`); whatever it does
    not consume is read after it returns. An error of phase two (damage refused, a read
    that fails, its ``to`` not the one phase one found) is raised from that iterator, so
    the sink sees it while it writes. Not called when there is nothing to compact.

    ``export``: a text file object the compacted view's JSON lines are written to, an
    object whose ``write_row(row)`` takes each row (the Parquet view), or a path (an
    output of :mod:`pulsarctl_py.outputs`, committed when the compaction ends and dropped
    when it fails). ``values`` (:class:`pulsarctl_py.export.ValueOptions`): the topic's
    schemas, to give each row of the view its decoded value. ``pick_engine``, when given,
    names the engine from the plan's entries (``--engine auto``) instead of ``engine``.
    ``settings`` (:class:`~.settings.CompactorSettings`): the broker settings ``options``
    were made from, for the report; with them a topic whose entry filters (topic or
    namespace policies, ``allowOverrideEntryFilters``) would change the broker's result
    is refused.
    """
    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    if isinstance(export, (str, os.PathLike)):  # checked before the work, written during it
        from pulsarctl_py import outputs

        with outputs.prepare(export, outputs.COMPACTED_VIEW).open_text() as fh:
            return compact(
                topic,
                metadata_url=metadata_url,
                bookie_dirs=bookie_dirs,
                options=options,
                full=full,
                memory=memory,
                engine=engine,
                export=fh,
                spool=spool,
                progress=progress,
                split_entries=split_entries,
                generation=generation,
                on_state=on_state,
                live=live,
                values=values,
                pick_engine=pick_engine,
                settings=settings,
                write=write,
            )
    options = options or CompactionOptions()
    started = time.monotonic()
    url = str(resolve_metadata_url(metadata_url))
    dirs = [str(d) for d in resolve_bookie_dirs(bookie_dirs)]
    # without a bookie directory the entries come from the running bookies; one session
    # of the stores for the run: the topic's state, the horizon walk, and the splits this
    # process reads (reader.adopt; the broker's compactor, too, reads through the topic's
    # open managed ledger)
    with LedgerSource.open(
        url, dirs, need_metadata=True, need_bookie=True, live=live, tiered=True
    ) as source:
        try:
            return _compact_on(
                source,
                topic,
                started,
                url=url,
                dirs=dirs,
                options=options,
                full=full,
                memory=memory,
                engine=engine,
                export=export,
                spool=spool,
                progress=progress,
                split_entries=split_entries,
                generation=generation,
                on_state=on_state,
                values=values,
                pick_engine=pick_engine,
                settings=settings,
                write=write,
            )
        finally:
            close_sources()  # before the run's source closes: the splits may hold it


def _compact_on(
    source: Any,
    topic: str,
    started: float,
    *,
    url: str,
    dirs: list[str],
    options: CompactionOptions,
    full: bool,
    memory: int | None,
    engine: str,
    export: IO[str] | Any | None,
    spool: bool,
    progress: bool,
    split_entries: int | None,
    generation: str,
    on_state: Callable[[TopicState], None] | None,
    values: Any,
    pick_engine: Callable[[int], str] | None,
    settings: Any,
    write: PhaseTwoSink | None = None,
) -> CompactionReport:
    """:func:`compact` on the run's open ``source``."""
    gaps = Gaps()
    state = topic_state(source, topic)
    if settings is not None:
        from .settings import topic_entry_filters

        topic_entry_filters(source, state.topic, settings)
    live = source.live_options
    scanned = _scanned_ledgers(state, full)
    for ledger_id, _entries, _size in state.ledgers:
        if ledger_id in scanned:
            past = source.ledger(ledger_id).past_last
            if past is not None:  # read by no reader: phase one stops before them
                gaps.entries_past_last(ledger_id, *past)
    if on_state is not None:
        on_state(state)
    report = CompactionReport(
        state.topic, engine, options.order, options.format, full or state.compacted_ledger is None
    )
    report.previous_compacted_ledger = state.compacted_ledger
    if settings is not None:
        report.settings = settings.to_json()
    report.horizon = state.last
    report.gaps = gaps
    if state.last is None:
        report.notes.append("the topic has no entries: nothing to compact")
        report.seconds = time.monotonic() - started
        return report
    if pick_engine is not None:
        plan, _ = plan_compaction(
            state,
            full=full,
            metadata_url=url,
            bookie_dirs=dirs,
            split_entries=split_entries,
            live=live,
        )
        report.engine = engine = pick_engine(plan.entries)
    runner = get_engine(engine)
    spool_file: IO[bytes] | None = None
    export_file: Any = None  # a text file, or an object with write_row (Parquet)
    tracker = Progress(progress, 0)
    # the local engine runs every split in this process: phase two takes the entries phase
    # one read when they fit, instead of reading them again
    # and phase two reads only the entries it keeps something of (reader.SparseReads)
    sparse = None
    if engine == "local" and SparseReads.applies(options):
        sparse = SparseReads()
    keep = None
    if engine == "local":
        budget = min(int((memory or DEFAULT_MEMORY) * KEEP_SHARE), KEEP_MOST)
        keep = KeptEntries(budget, sparse is not None)
    try:
        one = run_phase_one(
            runner,
            state,
            options,
            full=full,
            metadata_url=url,
            bookie_dirs=dirs,
            live=live,
            memory=memory,
            split_entries=split_entries,
            progress=tracker,
            keep=keep,
            source=source,
            sparse=sparse,
        )
        table, plan, options = one.table, one.plan, one.options
        report.plan, report.notes = plan, one.notes
        report.transactions, report.max_read = one.transactions, one.max_read
        report.horizon = one.horizon
        incremental = not report.full
        if (
            incremental
            and state.horizon is not None
            and (one.horizon is None or one.horizon <= state.horizon)
        ):
            # the broker skips such a compaction (its reader has nothing available); the
            # view is still computed from the compacted ledger, for the report
            report.nothing_new = True
            report.horizon = state.horizon
            report.notes.append(
                "nothing the broker dispatches since the horizon: the broker would not compact"
            )
        elif one.horizon is None:
            table.close()
            report.horizon = None
            report.plan = None
            report.notes.append(
                "the topic has no entry the broker dispatches (only markers, aborted or "
                "ongoing transactions): nothing to compact"
            )
            report.seconds = time.monotonic() - started
            return report
        try:
            report.spilled = table.spilled
            report.keys, report.tombstoned = one.keys, one.tombstoned
            if spool:
                fd, name = tempfile.mkstemp(prefix="ledgerctl-compacted-", suffix=".spool")
                report.spool = Path(name)
                spool_file = os.fdopen(fd, "wb")
            export_file = export
            # phase one's "to" (pulsar/compactedTo) before phase two, as the broker knows it
            report.compacted_to = phase_one_to(plan.splits, options)
            stats = report.stats
            seen: list[CompactedEntry] = []  # the last entry phase two produced

            def phase_two() -> Iterator[CompactedEntry]:
                tracker.total = plan.entries
                tracker.start("phase two")
                for item in runner.map_splits(
                    plan,
                    functools.partial(phase_two_split, options=options, keep=keep, sparse=sparse),
                    table,
                ):
                    if isinstance(item, Stats):
                        stats.add(item)
                        tracker.count(stats.entries_in)
                        continue
                    seen[:] = [item]
                    if spool_file is not None:
                        spool_file.write(_SPOOL.pack(*item.position, len(item.data)))
                        spool_file.write(item.data)
                    if export_file is not None:
                        for row in export_lines(item, options.retain_null_key, values):
                            if hasattr(export_file, "write_row"):
                                export_file.write_row(row)
                            else:
                                export_file.write(json.dumps(row, sort_keys=True) + "\n")
                    yield item
                tracker.close()
                # before the sink's last step (a ledger's close): a mismatch fails the write
                _check_phase_two_to(
                    stats, report.compacted_to, sparse is not None and sparse.skipped
                )

            entries = phase_two()
            try:
                if write is not None:
                    write(report, entries)
                for _ in entries:  # what the sink did not take: phase two still ends
                    pass
            finally:
                entries.close()
        finally:
            table.close()
        last = seen[0] if seen else None
        report.last = last_position(last.data if last is not None else None, generation)
        if stats.chunks_kept:
            report.notes.append(
                f"{stats.chunks_kept} leading chunk(s) kept so that chunked messages can be "
                "reassembled (--keep-chunks); Pulsar's compactor keeps only each message's "
                "last chunk"
            )
        if stats.chunked_cut:
            report.warnings.append(
                f"{stats.chunked_cut} chunked message(s) keep only their last chunk, as the "
                "broker's compactor keeps them: a reader of the compacted topic drops such a "
                "chunk and gets nothing for its key; --keep-chunks keeps every chunk so that "
                "readers reassemble them"
            )
        if stats.broker_failure_at is not None:
            report.notes.append(
                "a Pulsar 4.0 or 4.1 broker's own compaction of this topic fails at "
                f"{format_position(*stats.broker_failure_at)} ({stats.broker_failures} "
                "batch(es)): RawBatchConverter sizes the rebuilt batch by the compressed entry "
                "and throws IndexOutOfBoundsException (apache/pulsar#26290, fixed by Pulsar "
                "4.2's LightProto); this compaction has no such limit"
            )
        if stats.aborted:
            report.notes.append(
                f"{stats.aborted} entries of aborted transactions left out, as the broker "
                "never dispatches them"
            )
    except BaseException:
        if spool_file is not None:
            spool_file.close()
            spool_file = None
        if report.spool is not None:
            report.spool.unlink(missing_ok=True)
            report.spool = None
        # a view cut short is no view: the output ``export`` writes to is discarded by its
        # owner (outputs.Output, or the caller's own file) when this error reaches it
        raise
    finally:
        tracker.close()
        if spool_file is not None:
            spool_file.close()
        close_sources()
        runner.close()
    report.seconds = time.monotonic() - started
    return report
