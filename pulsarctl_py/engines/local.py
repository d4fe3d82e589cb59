"""The local engine: splits run in-process, one after the other, streaming.

Its key table lives in a dict until an estimate of its size passes the memory budget;
then the dict is merged into an embedded RocksDB (rocksdict, raw bytes) in a temporary
directory and emptied, and so on until the scan ends, when the last buffer is merged.
Memory therefore grows with keys up to the budget and no further; the disk holds the rest.

The in-memory part is the native module's ``KeyTable`` (decoders/_speedups_compact.c: an
index, an array of entries and one byte arena, no Python object per key, about 38 bytes a
short key; it reports the bytes it holds)
when the module is built, else a dict of key -> (rank, tombstone) with an estimate of its
size. Both answer the same methods (``_DictBuffer`` and ``_NativeBuffer`` below).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from .base import Fold, KeyRecord, KeyTable, ScanPlan, Split

T = TypeVar("T")

#: default budget for a key table (the CLI's --memory default)
DEFAULT_MEMORY = 512 * 1024 * 1024
#: what one buffered key costs beyond its key and rank bytes: two bytes objects' headers
#: (2 x 33), the (rank, tombstone) tuple (56) and the dict's index and entry (about 100
#: with its spare room); measured, not guessed: see docs/performance.md
_SLOT_OVERHEAD = 230
#: the share of the budget the in-memory buffer may take; RocksDB's memtables and cache
#: take at most 5/32 more (see _open_db), the rest is left for RocksDB's table readers,
#: compactions and the allocators' slack (measured: docs/performance.md)
_BUFFER_SHARE = 0.4
#: puts per RocksDB write batch when spilling, and the most bytes one holds: a sixteenth of
#: the budget (a batch is a copy of its keys and values outside RocksDB's memtables: 50,000
#: puts of 1,000-byte keys held 50 MB whatever --memory said)
_WRITE_BATCH = 50_000
_WRITE_BATCH_SHARE = 16


#: keys per chunk when the native table is read out (spill, items)
_SCAN_CHUNK = 4096


class _DictBuffer(dict[bytes, tuple[bytes, bool]]):
    """The pure-Python buffer: a dict of key -> (rank, tombstone), with an estimate of its
    size in ``nbytes`` (key and rank bytes plus a measured per-key overhead)."""

    nbytes = 0

    @property
    def budget_bytes(self) -> int:
        """What counts against the buffer's share of the budget."""
        return self.nbytes

    def offer(self, key: bytes, rank: bytes, tombstone: bool) -> bool:
        old = self.get(key)
        if old is None:
            self[key] = (rank, tombstone)
            self.nbytes += len(key) + len(rank) + _SLOT_OVERHEAD
            return True
        if rank > old[0]:
            self[key] = (rank, tombstone)
        return False

    def put(self, key: bytes, rank: bytes, tombstone: bool) -> bool:
        fresh = key not in self
        self[key] = (rank, tombstone)
        if fresh:
            self.nbytes += len(key) + len(rank) + _SLOT_OVERHEAD
        return fresh

    @property
    def live(self) -> int:
        return sum(1 for _, tomb in self.values() if not tomb)

    def min_rank(self) -> bytes | None:
        return min((rank for rank, _ in self.values()), default=None)

    def records(self) -> Iterator[tuple[bytes, bytes, bool]]:
        for key, (rank, tomb) in self.items():
            yield key, rank, tomb


class _NativeBuffer(Mapping[bytes, tuple[bytes, bool]]):
    """The native ``KeyTable`` with the buffer's methods (its own, bound once) and the
    read-only mapping of key -> (rank, tombstone) that ``memory_table`` promises.
    ``native`` is the table itself, which the compaction's native helpers take."""

    __slots__ = ("get", "native", "offer", "put")

    def __init__(self, table: Any) -> None:
        self.native = table
        self.offer = table.offer
        self.put = table.put
        self.get = table.get  # type: ignore[method-assign]

    def __getitem__(self, key: bytes) -> tuple[bytes, bool]:
        found = self.native.get(key)
        if found is None:
            raise KeyError(key)
        return found  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self.native)

    def __iter__(self) -> Iterator[bytes]:
        for key, _rank, _tomb in self.records():
            yield key

    @property
    def nbytes(self) -> int:
        return self.native.nbytes  # type: ignore[no-any-return]

    @property
    def budget_bytes(self) -> int:
        """What counts against the budget: the most the table may hold at once when it next
        grows (a rehash holds the old and the new index), not only what it holds now,
        so that no growth in the middle of a batch passes the budget."""
        return self.native.peak_nbytes  # type: ignore[no-any-return]

    @property
    def live(self) -> int:
        return self.native.live  # type: ignore[no-any-return]

    def min_rank(self) -> bytes | None:
        return self.native.min_rank()  # type: ignore[no-any-return]

    def records(self) -> Iterator[tuple[bytes, bytes, bool]]:
        """Every (key, rank, tombstone), in no particular order; no offer meanwhile."""
        pos = 0
        while pos >= 0:
            pos, chunk = self.native.scan(pos, _SCAN_CHUNK)
            yield from chunk


def _new_buffer() -> _DictBuffer | _NativeBuffer:
    from pulsarctl_py.decoders.speedups import native

    if native is None:
        return _DictBuffer()
    return _NativeBuffer(native.key_table())


#: mallopt's parameter for the most malloc arenas (glibc malloc.h)
_M_ARENA_MAX = -8


def one_malloc_arena() -> bool:
    """Ask glibc's malloc for one arena for the whole process (``mallopt(M_ARENA_MAX, 1)``);
    False where the C library has no mallopt (musl, macOS). Called before a compaction
    starts its threads: each thread that allocates otherwise gets an arena of its own, and
    the live read path's threads allocate every entry they read, which the main thread frees;
    the arenas keep what was freed. At 10^5 keys of 1,000 characters (110 KB entries) the
    run peaked at 141.5 MiB with --memory 16MiB, 110.8 MiB with one arena, for the same CPU
    time (docs/performance.md)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, 1))


def _pack(rank: bytes, tombstone: bool) -> bytes:
    return rank + (b"\x01" if tombstone else b"\x00")


def _unpack(value: bytes) -> tuple[bytes, bool]:
    return value[:-1], value[-1:] == b"\x01"


class LocalKeyTable:
    """Greatest-rank record per key, in memory up to ``memory`` bytes, then in RocksDB."""

    def __init__(
        self,
        memory: int | None = DEFAULT_MEMORY,
        spill_dir: str | None = None,
        fold: Fold | None = None,
    ) -> None:
        self.memory = memory
        self.fold = fold
        self._spill_parent = spill_dir
        self._buffer = _new_buffer()
        self._db: Any = None
        self._dir: str | None = None
        self._count: int | None = None
        self._live: int | None = None
        self._disk_max: bytes | None = None  # the greatest rank written to disk
        #: the buffer's share of the budget (None: never spill)
        self._limit = None if memory is None else int(memory * _BUFFER_SHARE)
        self.spills = 0
        #: keys the last batch ``offer_batch`` took added to the in-memory table (None: the
        #: last record came through ``offer``)
        self.new_keys: int | None = None
        #: records ``offer_batch`` offered, and keys they added, since the table was made
        self.offered = 0
        self.added = 0

    # -- building ---------------------------------------------------------------------------

    def offer(self, key: bytes, rank: bytes, tombstone: bool) -> None:
        self.new_keys = None
        if self.fold is not None:
            self._offer_fold(key, rank, tombstone)
        elif self._buffer.offer(key, rank, tombstone):
            self._check_budget()

    def _check_budget(self) -> None:
        if self._limit is not None and self._buffer.budget_bytes > self._limit:
            self._spill()

    def offer_batch(
        self,
        plain: bytes,
        count: int,
        indexes: list[int] | None,
        key_prefix: bytes,
        rank_prefix: bytes,
    ) -> int | None:
        """``offer`` for every keyed record of a batch in Pulsar's batch format, in one
        native call (``_speedups.compact_offer``): key ``key_prefix`` + the record's key,
        rank ``rank_prefix`` + its batch index + 1 (uint32 BE), tombstone when its payload is
        empty. The number of records offered, or None (nothing offered) when the native
        table is absent, the table folds, or the batch is not regular."""
        buf = self._buffer
        if self.fold is not None or not isinstance(buf, _NativeBuffer):
            return None
        from pulsarctl_py.decoders.speedups import native

        done = native.compact_offer(plain, count, indexes, key_prefix, rank_prefix, buf.native)
        if done is None:
            return None
        offered, new_keys = done
        self.new_keys = new_keys
        self.offered += offered
        self.added += new_keys
        if new_keys:
            self._check_budget()
        return offered  # type: ignore[no-any-return]

    def _offer_fold(self, key: bytes, rank: bytes, tombstone: bool) -> None:
        assert self.fold is not None
        buf = self._buffer
        state = buf.get(key)
        fresh = state is None
        if fresh and self._db is not None:
            # records arrive in plan order, so the disk holds the state before this one
            raw = self._db.get(key)
            state = None if raw is None else _unpack(raw)
        new = self.fold(state, rank, tombstone)
        if new is None:
            new = state
        if new is None:
            return
        if buf.put(key, new[0], new[1]):
            self._check_budget()

    def _open_db(self) -> Any:
        if self._db is None:
            import rocksdict

            self._dir = tempfile.mkdtemp(prefix="ledgerctl-keys-", dir=self._spill_parent)
            options = rocksdict.Options(raw_mode=True)
            options.create_if_missing(True)
            # RocksDB's own memory counts against the budget (its defaults, 64 MiB memtables
            # and an 8 MiB cache, would pass a small one): memtables together at most an
            # eighth of it, the block cache (index and filter blocks included) a 32nd
            budget = self.memory or DEFAULT_MEMORY
            memtables = max(2 << 20, min(128 << 20, budget // 8))
            options.set_write_buffer_size(memtables // 2)
            options.set_max_write_buffer_number(2)
            options.set_db_write_buffer_size(memtables)
            options.set_max_open_files(64)
            table = rocksdict.BlockBasedOptions()
            table.set_block_cache(rocksdict.Cache(max(1 << 20, min(32 << 20, budget // 32))))
            table.set_cache_index_and_filter_blocks(True)
            table.set_bloom_filter(10, False)  # phase two looks up keys mostly not on disk
            options.set_block_based_table_factory(table)
            self._db = rocksdict.Rdict(self._dir, options)
        return self._db

    def _spill(self) -> None:
        """Merge the buffer into the on-disk table, in write batches, and empty it.

        When every buffered record is newer than everything already on disk (records come
        in topic order, so that is the usual case) the buffer is written without reading
        the disk; otherwise each key's disk state is read and the greater rank kept.
        """
        import rocksdict

        db = self._open_db()
        buffer = self._buffer
        blind = self.fold is not None  # a fold buffer already holds the newer state
        if not blind:
            oldest = buffer.min_rank() or b""
            blind = self._disk_max is None or oldest > self._disk_max
        newest = self._disk_max
        batch = rocksdict.WriteBatch(raw_mode=True)
        pending = pending_bytes = 0
        most_bytes = self.write_batch_bytes
        for key, rank, tomb in buffer.records():
            if not blind:
                old = db.get(key)
                if old is not None and rank <= old[:-1]:
                    continue
            batch.put(key, _pack(rank, tomb))
            if newest is None or rank > newest:
                newest = rank
            pending += 1
            pending_bytes += len(key) + len(rank) + 1
            if pending >= _WRITE_BATCH or pending_bytes >= most_bytes:
                db.write(batch)
                batch = rocksdict.WriteBatch(raw_mode=True)
                pending = pending_bytes = 0
        if pending:
            db.write(batch)
        self._disk_max = newest
        self._buffer = _new_buffer()
        self.spills += 1

    @property
    def write_batch_bytes(self) -> int:
        """The most key and value bytes one spill's RocksDB write batch holds."""
        return max(64 << 10, (self.memory or DEFAULT_MEMORY) // _WRITE_BATCH_SHARE)

    def finish(self) -> LocalKeyTable:
        """End of the reduction: merge what is buffered, count keys."""
        if self._db is not None:
            if self._buffer:
                self._spill()
            count = live = 0
            for _, value in self._db.items():
                count += 1
                live += value[-1:] != b"\x01"
            self._count, self._live = count, live
        else:
            self._count = len(self._buffer)
            self._live = self._buffer.live
        return self

    # -- KeyTable -------------------------------------------------------------------------

    @property
    def spilled(self) -> bool:
        return self._db is not None

    def get(self, key: bytes) -> tuple[bytes, bool] | None:
        found = self._buffer.get(key)
        if self.fold is not None and found is not None:
            return found
        if self._db is not None:
            raw = self._db.get(key)
            if raw is not None:
                disk = _unpack(raw)
                if found is None or disk[0] > found[0]:
                    found = disk
        return found

    def memory_table(self) -> Mapping[bytes, tuple[bytes, bool]] | None:
        """The whole table as a mapping of key -> (rank, tombstone) when nothing spilled,
        for callers that look up every record (phase two; its ``native`` attribute, when
        there is one, is the native table); None when part of it is on disk."""
        return self._buffer if self._db is None else None

    def keeps_many(self, keys: list[bytes], ranks: list[bytes]) -> list[bool]:
        """``keeps`` for many keys at once: one RocksDB multi-get when the table spilled."""
        if self._db is None:
            return [self.keeps(key, rank) for key, rank in zip(keys, ranks, strict=True)]
        buffer = self._buffer
        folded = self.fold is not None
        out = []
        for key, rank, raw in zip(keys, ranks, self._db.get(keys), strict=True):
            found = buffer.get(key)
            if raw is not None and not (folded and found is not None):
                disk = _unpack(raw)
                if found is None or disk[0] > found[0]:
                    found = disk
            out.append(found is not None and not found[1] and found[0] == rank)
        return out

    def keeps(self, key: bytes, rank: bytes) -> bool:
        if self._db is None:  # all in memory: one dict look-up (phase two's hot path)
            found = self._buffer.get(key)
            return found is not None and found[0] == rank and not found[1]
        found = self.get(key)
        return found is not None and not found[1] and found[0] == rank

    def __len__(self) -> int:
        if self._count is None:
            self.finish()
        return self._count or 0

    @property
    def live(self) -> int:
        if self._live is None:
            self.finish()
        return self._live or 0

    def records(self) -> Iterator[tuple[bytes, bytes, bool]]:
        """Every ``(key, rank, tombstone)`` in no particular order, streamed: for a caller
        that counts or picks records (phase one's totals and transactions). ``items`` sorts
        an in-memory table first, which holds a tuple and two bytes objects per key at once
        (some 160 bytes a key, three times the table: 10^6 keys took 246 MiB above the
        interpreter against the table's 50)."""
        if self._db is None:
            yield from self._buffer.records()
            return
        yield from self.items()

    def items(self) -> Iterator[tuple[bytes, bytes, bool]]:
        if self._db is None:
            yield from sorted(self._buffer.records())
            return
        if self._buffer:
            self._spill()
        for key, value in self._db.items():
            rank, tomb = _unpack(value)
            yield bytes(key), rank, tomb

    def close(self) -> None:
        self._buffer = _new_buffer()
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> LocalKeyTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalEngine:
    """Runs every split in this process, in plan order."""

    name = "local"

    def __init__(self, spill_dir: str | None = None) -> None:
        self.spill_dir = spill_dir

    def map_splits(
        self,
        plan: ScanPlan,
        fn: Callable[..., Iterable[T]],
        winners: KeyTable | None = None,
    ) -> Iterator[T]:
        for split in plan.splits:
            if winners is None:
                yield from fn(split)
            else:
                yield from fn(split, winners)

    def latest_per_key(
        self,
        plan: ScanPlan,
        fn: Callable[[Split], Iterable[KeyRecord]],
        *,
        memory: int | None = DEFAULT_MEMORY,
        progress: Callable[[Split], None] | None = None,
        fold: Fold | None = None,
    ) -> LocalKeyTable:
        table = LocalKeyTable(memory, self.spill_dir, fold)
        # a function with ``into(split, table)`` offers its records itself (phase one of
        # compaction: whole batches in one native call); fn(split) gives the same records
        into = getattr(fn, "into", None)
        try:
            for split in plan.splits:
                if into is not None:
                    into(split, table)
                else:
                    offer = table.offer
                    for key, rank, tomb in fn(split):
                        offer(key, rank, tomb)
                if progress is not None:
                    progress(split)
            return table.finish()
        except BaseException:
            table.close()
            raise

    def close(self) -> None:
        return None
