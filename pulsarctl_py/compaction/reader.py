"""Reading a split's entries as the compactor's raw reader sees them, and the per-split
functions the engines run (module-level, picklable; each opens its stores from the split).

Stores opened by a process are kept in a small cache for the run (a split is small, opening
RocksDB for each one would dominate); :func:`close_sources` closes them.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
from pulsarctl_py.decoders.compaction_head import compaction_head
from pulsarctl_py.decoders.errors import DataError
from pulsarctl_py.engines.base import KIND_COMPACTED, KeyRecord, Split, WinnerView

from .core import (
    ORDER_PUBLISHING,
    CompactedEntry,
    CompactionOptions,
    RawEntry,
    Stats,
    phase_one,
    phase_one_into,
    phase_two,
    refuse,
)

_SOURCES: dict[tuple[str | None, tuple[str, ...], Any, Any], Any] = {}
_STACK = contextlib.ExitStack()
_PARTITIONS: dict[str, int] = {}


def source_for(split: Split) -> Any:
    """A LedgerSource for the split's stores, opened once per process and run."""
    from pulsarctl_py.limits import apply_split
    from pulsarctl_py.topicpolicies import install as install_topic_policies

    apply_split(split)
    install_topic_policies()
    key = _source_key(split)
    source = _SOURCES.get(key)
    if source is None:
        from pulsarctl_py.ledgers import LedgerSource

        source = _STACK.enter_context(
            LedgerSource.open(
                split.metadata_url,
                list(split.bookie_dirs) or None,
                need_bookie=True,
                live=split.live,
                **split.source_options(),
            )
        )
        _SOURCES[key] = source
    return source


def adopt(split: Split, source: Any) -> None:
    """Let the splits of ``split``'s stores read through ``source``, the run's own open
    LedgerSource (one metadata-store session and one set of bookie connections for the
    run), when it was opened the way :func:`source_for` would open it; its owner closes
    it, after :func:`close_sources`."""
    same = (
        split.live == source.live_options
        and split.tiered is not None
        and split.tiered[:3] == (source.offload_url, source.s3_endpoint, source.prefer)
        and split.tiered[3] in (None, source.broker_conf)
        and source.bookie is not None
        and source.metadata is not None
    )
    if same:
        _SOURCES.setdefault(_source_key(split), source)


def _source_key(split: Split) -> tuple[str | None, tuple[str, ...], Any, Any]:
    return (split.metadata_url, split.bookie_dirs, split.live, split.tiered)


def close_sources() -> None:
    """Close every store this process opened for splits."""
    global _STACK
    try:
        _STACK.close()
    finally:
        _SOURCES.clear()
        _STACK = contextlib.ExitStack()


def _partition(topic: str) -> int:
    found = _PARTITIONS.get(topic)
    if found is None:
        from pulsarctl_py.stores.metadata import resolve_topic

        found = _PARTITIONS[topic] = resolve_topic(topic).partition_index
    return found


def raw_entry(entry: Any, partition: int = -1, accept_damage: bool = False) -> RawEntry:
    """A decoded bookie entry (depth METADATA) as a :class:`RawEntry`.

    An entry that fails an integrity check of any layer decoded so far (its BookKeeper
    digest or ids, the compacted framing, broker entry metadata, the producer's CRC32C,
    its MessageMetadata) is refused (:func:`~.core.refuse`), or with ``accept_damage``
    read as stored, with the reason in ``RawEntry.damage``."""
    errors = [p for p in entry.problems if p.severity == "error"]
    damage = None
    if errors:
        damage = f"{errors[0].layer}: {errors[0].message}"
        if not accept_damage:
            raise refuse(entry.position or (-1, -1), damage)
    start = 0
    message_id = None
    bem = b""
    for layer in entry.layers:
        if layer.name == "bookie-entry":
            start = layer.offset + layer.length
        elif layer.name == "compacted":
            start = layer.offset + layer.length
            raw = bytes(layer.raw)
            message_id = raw[4:-4]
        elif layer.name == "broker-entry-metadata":
            bem = bytes(layer.raw)
    data = bytes(memoryview(entry.data)[start:])
    payload_at = len(data) - len(entry.payload) if entry.payload is not None else len(data)
    position = entry.message_position or entry.position
    return RawEntry(position, data, entry.metadata, payload_at, bem, message_id, partition, damage)


def read_split(
    split: Split, accept_damage: bool = False, only: list[int] | None = None
) -> Iterator[RawEntry]:
    """The split's entries in order; a missing entry is an error, not a silent gap; a
    damaged one is refused unless ``accept_damage`` (:func:`raw_entry`). ``only``: just
    these entry ids of the split (rising), asked for together (``raw_entries_at``)."""
    from pulsarctl_py.ledgers import id_runs

    source = source_for(split)
    view = source.ledger(split.ledger_id)
    if split.kind == KIND_COMPACTED:
        view.kind = "compacted"
    options = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY,
        digest_type=view.digest_type,
        password=view.password,
        depth=Depth.METADATA,
        verify=True,
    )
    partition = _partition(split.topic)
    runs = [(split.first_entry, split.last_entry)] if only is None else list(id_runs(only))
    if view.tiered is not None:
        # an offloaded ledger: the broker's entry bytes, read by entry id through the
        # offload's index; an entry the offload lacks or cannot give raises
        for first, last in runs:
            for entry in source.entries(view, first, last, depth=Depth.METADATA, join_chunks=False):
                yield raw_entry(entry, partition, accept_damage)
        return
    # a data ledger's regular entries: only what compaction needs, checked the same way
    fast = split.kind != KIND_COMPACTED
    if only is None:
        stored_entries = source.raw_entries(view, split.first_entry, split.last_entry)
    else:
        stored_entries = source.raw_entries_at(view, only)
    count = len(only) if only is not None else split.entries
    at = 0
    for stored in stored_entries:
        want = (only[at] if only is not None else split.first_entry + at) if at < count else -1
        if stored.entry_id != want:
            gap_end = want if only is not None else stored.entry_id - 1
            raise DataError(
                f"entry {split.ledger_id}:{want} is not in the bookie storage read"
                f"{_why_absent(source, view, want, gap_end)}; a compaction without it would "
                "be wrong"
            )
        at += 1
        yield _stored_entry(stored, view, options, partition, fast, accept_damage)
    if at < count:
        first = only[at] if only is not None else split.first_entry + at
        last = only[-1] if only is not None else split.last_entry
        raise DataError(
            f"entries {split.ledger_id}:{first}..{last} are not in the bookie storage read"
            f"{_why_absent(source, view, first, last)}; a compaction without them would be "
            "wrong"
        )


def _stored_entry(
    stored: Any,
    view: Any,
    options: DecodeOptions,
    partition: int,
    fast: bool,
    accept_damage: bool,
) -> RawEntry:
    """A bookie's stored entry as the raw reader gives it: a regular one parsed only as far
    as compaction needs (``fast``), any other (damaged, compacted framing, a MAC without
    its password...) by the full decoder, which says what it is."""
    position = (view.ledger_id, stored.entry_id)
    head = fast and compaction_head(
        stored.data, view.digest_type, view.password, position, stored.verified
    )
    if head:
        start, md, payload_at, bem = head
        data = bytes(memoryview(stored.data)[start:])
        return RawEntry(position, data, md, payload_at, bem, None, partition)
    entry = decode_entry(stored.data, options, position)
    return raw_entry(entry, partition, accept_damage)


def _why_absent(source: Any, view: Any, first: int, last: int) -> str:
    """`` (on none of their bookies)`` when proven missing (stores/absence), else the
    bookies not read."""
    absence = source.absence_judge(view)(first, last)
    if absence.uncovered_count:
        return f" ({absence.unread_text()}: read every bookie of the ensemble)"
    return " (on none of their bookies)"


def phase_one_split(split: Split, options: CompactionOptions) -> Iterator[KeyRecord]:
    """Phase one over one split (for ``Engine.latest_per_key``)."""
    yield from phase_one(read_split(split, options.accept_damage), options)


def _split_key(split: Split) -> tuple[Any, ...]:
    return (split.kind, split.ledger_id, split.first_entry, split.last_entry, split.topic)


#: how often the keep asks itself whether it is worth its memory (each LOOKS-th of its
#: budget), and the least chance that a kept entry holds a winner for it to go on
LOOKS = 8
WORTH_IT = 0.05


def _likeliest_keys(draws: int, seen: int) -> float:
    """K such that ``draws`` records drawn alike from K keys bring ``seen`` distinct keys
    on average: K(1 - exp(-draws/K)) = seen, for 0 < seen < draws (bisection)."""
    low, high = float(seen), float(seen) * 2.0
    while high * -math.expm1(-draws / high) < seen:
        low, high = high, high * 2.0
    for _ in range(60):
        mid = (low + high) / 2.0
        if mid * -math.expm1(-draws / mid) < seen:
            low = mid
        else:
            high = mid
    return high


class KeptEntries:
    """Phase one's entries kept in memory for phase two, so that a topic that fits is read
    (and parsed) once instead of twice; the broker's compactor reads the topic twice (phase
    one, then phase two from the start, ``TwoPhaseCompactor.phaseTwoSeekThenLoop``).

    All of the plan's entries or none: ``budget`` bytes at most (run.KEEP_MOST), and a
    topic larger than that keeps nothing, so that a large topic's peak memory is its key
    table's and not the keep's. (A topic of 10^6 keys is 100 MB and more; keeping its first
    64 MiB saved 9 % of the wall time and cost 106 bytes a key.) Nothing is kept once the key
    table has spilled to disk. Phase two takes each split's entries once (they are released
    as it goes). Only for the local engine: the splits run in this process."""

    def __init__(self, budget: int, sparse: bool = False) -> None:
        self.budget = budget
        self.used = 0
        self.full = budget <= 0
        #: phase two reads only what it keeps something of (SparseReads): the keep ends,
        #: and what it kept is dropped, at the first batch that adds no key to the table,
        #: or when the topic's size says its records will all be replaced (``worth_it``)
        self.sparse = sparse
        #: entries of the plan phase one reads (run_phase_one sets it), and read so far
        self.planned: int | None = None
        self.seen = 0
        #: ``used`` at the keep's last look at its worth (worth_it)
        self._looked = 0
        #: per split read whole: its entries
        self._kept: dict[tuple[Any, ...], list[RawEntry]] = {}

    def read(self, split: Split, accept_damage: bool, table: Any = None) -> Iterator[RawEntry]:
        """The split's entries (the kept ones when phase one runs again), keeping them
        while the budget allows."""
        key = _split_key(split)
        if key in self._kept:
            yield from self._kept[key]
            return
        out: list[RawEntry] | None = None if self.full else []
        for entry in read_split(split, accept_damage):
            if out is not None:
                size = len(entry.data)
                if getattr(table, "spilled", False) or self.used + size > self.budget:
                    out = None
                    self.release()  # the topic does not fit: phase two reads it again
                else:
                    out.append(entry)
                    self.used += size
            self.seen += 1
            yield entry
            if out is not None and self.sparse and getattr(table, "new_keys", None) == 0:
                # every key of that batch was seen before: the topic's keys stopped
                # growing, so its winners are the last of many values each, in entries
                # near its end that phase two reads (few, SparseReads); those kept so far
                # hold none of them
                out = None
                self.release()
            elif (
                out is not None
                and self.sparse
                and self.used - self._looked >= self.budget // LOOKS
                and not self.worth_it(table)
            ):
                out = None
                self.release()
        if out is not None and not getattr(table, "spilled", False):
            self._kept[key] = out

    def worth_it(self, table: Any) -> bool:
        """Whether the entries kept so far are likely to hold a winner when phase one ends
        (phase two then reads them; SparseReads skips an entry without one, kept or not).

        Keys drawn alike from K keys: a record is still its key's last after R more
        records with probability exp(-R/K), and an entry of b records holds one with
        1 - (1 - exp(-R/K))^b. K is the key count that n records drawn so far make k keys
        likeliest (k = K(1 - exp(-n/K))), R the records of the plan's entries not read
        yet. At 10^6 keys drawn 10^7 times (a keep of 64 MiB then) the first entries held
        a winner with probability under 1 % (phase two read 41 of the 5,613 entries
        kept): the keep was given up at its first look. At 10^5 keys drawn 10^5 times
        they are nearly all read again: kept. Called after each LOOKS-th of the budget
        kept. Keys drawn unevenly (a few hot ones) make K look smaller: the keep may then
        be given up where it would have saved reads, never with another result."""
        offered, added = getattr(table, "offered", None), getattr(table, "added", None)
        planned = self.planned
        self._looked = self.used
        if not isinstance(offered, int) or not isinstance(added, int) or planned is None:
            return True
        if self.seen == 0 or added <= 0 or added >= offered:
            return True  # nothing read, or no key seen twice: each record its key's last
        keys = _likeliest_keys(offered, added)
        per_entry = offered / self.seen
        remaining = max(planned - self.seen, 0) * per_entry
        last = math.exp(-remaining / keys)
        return 1.0 - (1.0 - last) ** max(per_entry, 1.0) >= WORTH_IT

    def take(self, split: Split) -> list[RawEntry] | None:
        """The split's entries, given up (None: nothing kept, read them)."""
        return self._kept.pop(_split_key(split), None)

    def release(self) -> None:
        """Keep nothing more, and drop what is kept."""
        self.full = True
        self._kept.clear()
        self.used = 0


class SparseReads:
    """Phase two reads only the entries it can keep something of (the local engine).

    Phase one notes, per split of the topic's ledgers, which entries are plain batches
    (:func:`~.core.phase_one_into`: every record keyed, offered in one native call) and
    their sizes; after phase one the run gives the positions of the entries that hold a
    winning record that is not a tombstone (:func:`~.run.scan_table`). Phase two of a
    plain batch without such a record keeps nothing, drops no keyless message and changes
    no count but ``entries_in`` and ``bytes_in``, which are taken from what phase one
    noted, so phase two reads only the other entries: at 10^3 keys in 10^7 messages, 52
    of 10^5. Phase one's ``to``, which phase two's reads no longer all see, is found
    before phase two (:func:`phase_one_to`). The broker's compactor reads every entry
    again (``TwoPhaseCompactor.phaseTwoSeekThenLoop``); the compacted ledger is the same.

    Only in publishing order (a rank is then the record's position), without
    ``--accept-damage`` or ``--keep-chunks`` (phase two then counts and keeps what phase
    one does not note)."""

    def __init__(self) -> None:
        #: per split: each entry's size when it is a plain batch, else 0
        self._plain: dict[tuple[Any, ...], array] = {}
        #: the entries of the splits noted, by (ledger, first entry); phase one's second
        #: run (up to the horizon) notes its splits again, which start where the first
        #: run's did, and replaces them
        self._spans: dict[tuple[int, int], int] = {}
        #: which noted entries hold a winner (:meth:`entry_bits`, filled by the run's
        #: scan of the key table); None: unknown, phase two reads every entry
        self.winners: EntryBits | None = None
        self.skipped = 0

    @staticmethod
    def applies(options: CompactionOptions) -> bool:
        return (
            options.order == ORDER_PUBLISHING
            and not options.accept_damage
            and not options.keep_chunks
        )

    def noting(self, split: Split) -> array | None:
        """Where phase one notes the split's entries (None: a split not of the topic's
        ledgers, read whole in phase two)."""
        if split.kind == KIND_COMPACTED:
            return None
        self._spans[split.ledger_id, split.first_entry] = split.entries
        noted = self._plain[_split_key(split)] = array("Q")
        return noted

    def entry_bits(self) -> EntryBits:
        """No bit set yet, one for each entry of the splits noted."""
        return EntryBits((ledger, first, n) for (ledger, first), n in self._spans.items())

    def needed(self, split: Split, stats: Stats) -> list[int] | None:
        """The entry ids of ``split`` phase two must read, the others counted into
        ``stats``; None: read them all (nothing noted, or no winners given)."""
        noted = self._plain.pop(_split_key(split), None)
        winners = self.winners
        if noted is None or winners is None or len(noted) != split.entries:
            return None
        first = split.first_entry
        at = winners.bit_of(split.ledger_id, first)
        if at is None:
            return None
        bits = winners.bits
        ids: list[int] = []
        skipped = skipped_bytes = 0
        for i, size in enumerate(noted):
            bit = at + i
            if size and not bits[bit >> 3] >> (bit & 7) & 1:
                skipped += 1
                skipped_bytes += size
            else:
                ids.append(first + i)
        stats.entries_in += skipped
        stats.bytes_in += skipped_bytes
        self.skipped += skipped
        return ids


class EntryBits:
    """One bit for each entry of some spans of entries (ledger, first entry, count): the
    entries of phase one's splits that hold a winner (:class:`SparseReads`). 10^5 entries
    take 12.5 KB; a set of their positions took 10 MB, at the peak of a compaction of 10^6
    keys. The native key table sets the bits itself (``KeyTable.live_entries``, which reads
    :meth:`packed`); :meth:`add` is the same in Python."""

    __slots__ = ("_at", "_starts", "bits", "spans")

    def __init__(self, spans: Iterable[tuple[int, int, int]]) -> None:
        self.spans = sorted(spans)
        self._starts = [(ledger, first) for ledger, first, _ in self.spans]
        self._at: list[int] = []
        total = 0
        end = (-1, 0)  # where the span before ends: (ledger, its last entry + 1)
        for ledger, first, count in self.spans:
            if (ledger, first) < end:
                raise ValueError(f"overlapping spans of ledger {ledger}")
            end = (ledger, first + count)
            self._at.append(total)
            total += count
        self.bits = bytearray((total + 7) // 8)

    def packed(self) -> bytes:
        """The spans as ``live_entries`` takes them: three uint64 BE each."""
        return b"".join(_SPAN.pack(*span) for span in self.spans)

    def bit_of(self, ledger: int, entry: int) -> int | None:
        """The bit of entry ``ledger:entry``; None when no span holds it."""
        i = bisect.bisect_right(self._starts, (ledger, entry)) - 1
        if i < 0:
            return None
        span_ledger, first, count = self.spans[i]
        if span_ledger != ledger or entry - first >= count:
            return None
        return self._at[i] + entry - first

    def add(self, ledger: int, entry: int) -> None:
        """Set the bit of ``ledger:entry`` (nothing when no span holds it)."""
        bit = self.bit_of(ledger, entry)
        if bit is not None:
            self.bits[bit >> 3] |= 1 << (bit & 7)

    def __contains__(self, position: tuple[int, int]) -> bool:
        bit = self.bit_of(*position)
        return bit is not None and bool(self.bits[bit >> 3] >> (bit & 7) & 1)


_SPAN = struct.Struct(">QQQ")


class PhaseOneSplits:
    """Phase one per split for ``Engine.latest_per_key`` (picklable): called with a split it
    gives the split's records; ``into(split, table)`` offers them to a table directly, which
    the local engine prefers (a batch in one native call, no record tuples). With ``keep``
    (:class:`KeptEntries`, the local engine), ``into`` keeps the entries it read for phase
    two; with ``sparse`` (:class:`SparseReads`) it notes which entries phase two may skip."""

    def __init__(
        self,
        options: CompactionOptions,
        keep: KeptEntries | None = None,
        sparse: SparseReads | None = None,
    ) -> None:
        self.options = options
        self.keep = keep
        self.sparse = sparse

    def __call__(self, split: Split) -> Iterator[KeyRecord]:
        return phase_one_split(split, self.options)

    def into(self, split: Split, table: Any) -> int:
        accept = self.options.accept_damage
        if self.keep is not None:
            entries = self.keep.read(split, accept, table)
        else:
            entries = read_split(split, accept)
        noted = self.sparse.noting(split) if self.sparse is not None else None
        return phase_one_into(entries, self.options, table, noted)


def phase_two_split(
    split: Split,
    winners: WinnerView,
    options: CompactionOptions,
    keep: KeptEntries | None = None,
    sparse: SparseReads | None = None,
) -> Iterator[CompactedEntry | Stats]:
    """Phase two over one split (for ``Engine.map_splits``): its entries (those phase one
    kept, else read again; with ``sparse``, only those it can keep something of), then its
    stats."""
    stats = Stats()
    accept = options.accept_damage
    ids = sparse.needed(split, stats) if sparse is not None else None
    if ids is None:
        kept = keep.take(split) if keep is not None else None
        entries = iter(kept) if kept is not None else read_split(split, accept)
    else:
        entries = _needed_entries(split, ids, accept, keep)
    yield from phase_two(entries, winners, options, stats)
    yield stats


def _needed_entries(
    split: Split, ids: list[int], accept_damage: bool, keep: KeptEntries | None
) -> Iterator[RawEntry]:
    """The entries ``ids`` (rising) of ``split``: from ``keep`` when it holds the split,
    else read."""
    kept = keep.take(split) if keep is not None else None
    if kept is None:
        yield from read_split(split, accept_damage, ids)
        return
    wanted = set(ids)
    for entry in kept:
        if entry.position[1] in wanted:
            yield entry


class _NoWinners:
    """A :class:`WinnerView` in which no record wins: phase two over it keeps nothing and
    says only whether phase one counted an entry as deleted (``Stats.to``)."""

    def keeps(self, key: bytes, rank: bytes) -> bool:
        return False

    def keeps_many(self, keys: list[bytes], ranks: list[bytes]) -> list[bool]:
        return [False] * len(keys)

    def get(self, key: bytes) -> tuple[bytes, bool] | None:
        return None


def phase_one_to(splits: list[Split], options: CompactionOptions) -> tuple[int, int] | None:
    """Phase one's ``to`` (``Stats.to``: the last entry of the plan that phase one did not
    count as deleted, which the compacted ledger's ``pulsar/compactedTo`` names), found
    before phase two by reading the plan's entries backwards from its last one: usually
    one entry. Each entry is judged by :func:`~.core.phase_two` itself (markers, aborted
    transactions, batches of tombstones and dropped keyless messages are deleted), so the
    answer is the one a whole phase two gives; the broker's compactor, too, knows it when
    phase one ends (``TwoPhaseCompactor.phaseOne``)."""
    nobody = _NoWinners()
    for split in reversed(splits):
        for entry_id in range(split.last_entry, split.first_entry - 1, -1):
            one = replace(split, first_entry=entry_id, last_entry=entry_id)
            stats = Stats()
            for _ in phase_two(read_split(one, options.accept_damage), nobody, options, stats):
                pass
            if stats.to is not None:
                return stats.to
    return None
