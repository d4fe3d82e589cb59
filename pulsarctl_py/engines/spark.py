"""The Spark engine: the same scan plans as the local engine, run on Spark executors.

* ``map_splits``: one Spark partition per split; partitions run in waves of a few times
  the cluster's parallelism (``sc.runJob`` over a range of partitions, two waves in flight
  so that no core waits for the end of a wave), and the waves' results come back in plan
  order, so the driver holds two or three waves' results at a time, never the whole scan.
  With ``winners`` (phase two of a compaction), the winners are broadcast to the
  executors as a dict.
* ``latest_per_key``: a distributed reduction (``reduceByKey`` keeping the greatest rank;
  with ``fold``, the key's records sorted into plan order and folded on the executor) into
  reduce partitions run in waves of one per core and streamed back as ``map_splits``' into
  a :class:`~pulsarctl_py.engines.local.LocalKeyTable`, which spills to disk past its
  memory budget like the local engine's.

pyspark is imported when this module is; ``pulsarctl_py.engines.get_engine("spark")`` is
the only importer in the CLI's paths.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from .base import Fold, KeyRecord, KeyState, ScanPlan, Split
from .local import DEFAULT_MEMORY, LocalKeyTable

T = TypeVar("T")

#: waves of map_splits in flight at once (each a Spark job of 2 x parallelism partitions)
AHEAD = 2
#: splits whose keys one reduce partition of ``latest_per_key`` gathers (at most)
SPLITS_PER_REDUCER = 8


class DictView:
    """Phase one's winners on an executor: keeps(key, rank) and get(key) over a dict."""

    def __init__(self, table: dict[bytes, tuple[bytes, bool]]) -> None:
        self.table = table

    def get(self, key: bytes) -> tuple[bytes, bool] | None:
        return self.table.get(key)

    def keeps(self, key: bytes, rank: bytes) -> bool:
        found = self.table.get(key)
        return found is not None and not found[1] and found[0] == rank


def _run_splits(fn: Callable[..., Iterable[Any]], splits: Iterator[Split]) -> Iterator[Any]:
    for split in splits:
        yield from fn(split)


def _run_splits_with(
    fn: Callable[..., Iterable[Any]], winners: Any, splits: Iterator[Split]
) -> Iterator[Any]:
    view = DictView(winners.value)
    for split in splits:
        yield from fn(split, view)


def _keyed(fn: Callable[[Split], Iterable[KeyRecord]], split: Split) -> Iterator[Any]:
    for key, rank, tomb in fn(split):
        yield key, (rank, tomb)


def _keyed_in_order(fn: Callable[[Split], Iterable[KeyRecord]], split: Split) -> Iterator[Any]:
    for seq, (key, rank, tomb) in enumerate(fn(split)):
        yield key, (split.ordinal, seq, rank, tomb)


def _greater(a: tuple[bytes, bool], b: tuple[bytes, bool]) -> tuple[bytes, bool]:
    return b if b[0] > a[0] else a


def _fold_in_order(fold: Fold, records: Iterable[tuple[int, int, bytes, bool]]) -> KeyState:
    state: KeyState = None
    for _ordinal, _seq, rank, tomb in sorted(records):
        new = fold(state, rank, tomb)
        state = state if new is None else new
    return state


def _identity(it: Iterator[Any]) -> Iterator[Any]:
    return it


class SparkEngine:
    """Runs scan plans on a Spark session (local or a cluster)."""

    name = "spark"

    def __init__(
        self,
        session: Any = None,
        *,
        master: str | None = None,
        conf: Sequence[tuple[str, str]] = (),
        wave: int | None = None,
        console: Any = None,
        label: str = "scanning on Spark",
    ) -> None:
        from pulsarctl_py.spark.session import get_session

        self.session = session if session is not None else get_session(master, conf)
        self.wave = wave
        self.console = console
        self.label = label

    @property
    def parallelism(self) -> int:
        return int(self.session.sparkContext.defaultParallelism)

    def _progress(self) -> Any:
        from pulsarctl_py.spark.session import StageProgress

        return StageProgress(self.session, self.label, self.console)

    def map_splits(
        self,
        plan: ScanPlan,
        fn: Callable[..., Iterable[T]],
        winners: Any = None,
    ) -> Iterator[T]:
        splits = list(plan.splits)
        if not splits:
            return
        sc = self.session.sparkContext
        rdd = sc.parallelize(splits, len(splits))
        broadcast = None
        if winners is None:
            rdd = rdd.mapPartitions(functools.partial(_run_splits, fn))
        else:
            broadcast = sc.broadcast({k: (r, t) for k, r, t in winners.items()})
            rdd = rdd.mapPartitions(functools.partial(_run_splits_with, fn, broadcast))
        wave = self.wave or max(2, 2 * self.parallelism)
        waves = [list(range(i, min(len(splits), i + wave))) for i in range(0, len(splits), wave)]
        try:
            with self._progress():
                yield from self._waves(rdd, waves)
        finally:
            if broadcast is not None:
                broadcast.unpersist()

    def _waves(self, rdd: Any, waves: list[list[int]]) -> Iterator[Any]:
        """Run the waves of partitions as jobs, :data:`AHEAD` of them at a time, and yield
        their results in order: while the driver takes one wave's results, the executors
        already run the next wave's tasks, and a core that finishes its last task of a
        wave picks up one of the next (no core waits for a wave's slowest task)."""
        from pulsarctl_py.spark.session import job_error

        sc = self.session.sparkContext
        group = f"ledgerctl-{uuid.uuid4().hex}"

        def run(partitions: list[int]) -> list[Any]:
            sc.setJobGroup(group, self.label, interruptOnCancel=True)
            return list(sc.runJob(rdd, _identity, partitions))

        pool = concurrent.futures.ThreadPoolExecutor(AHEAD, thread_name_prefix="ledgerctl-wave")
        pending: collections.deque[concurrent.futures.Future[list[Any]]] = collections.deque()
        done = False
        try:
            for partitions in waves[:AHEAD]:
                pending.append(pool.submit(run, partitions))
            following = iter(waves[AHEAD:])
            while pending:
                try:
                    results = pending.popleft().result()
                except Exception as exc:
                    raise job_error(exc) from None
                partitions = next(following, None)
                if partitions is not None:
                    pending.append(pool.submit(run, partitions))
                yield from results
            done = True
        finally:
            if not done:  # a failure, or the caller stopped reading: stop what still runs
                for future in pending:
                    future.cancel()
                sc.cancelJobGroup(group)
            pool.shutdown(wait=True)

    def latest_per_key(
        self,
        plan: ScanPlan,
        fn: Callable[[Split], Iterable[KeyRecord]],
        *,
        memory: int | None = DEFAULT_MEMORY,
        progress: Callable[[Split], None] | None = None,
        fold: Fold | None = None,
    ) -> LocalKeyTable:

        table = LocalKeyTable(memory)
        splits = list(plan.splits)
        try:
            if splits:
                sc = self.session.sparkContext
                rdd = sc.parallelize(splits, len(splits))
                # a reduce partition per SPLITS_PER_REDUCER splits' keys, a whole number of
                # waves of one partition per core like map_splits' (toLocalIterator would
                # run them one job at a time, one core busy and the others idle; fewer
                # partitions, fewer shuffle blocks and tasks for the JVM to schedule)
                wave = self.parallelism
                reducers = wave * max(1, -(-len(splits) // (SPLITS_PER_REDUCER * wave)))
                if fold is None:
                    reduced = rdd.flatMap(functools.partial(_keyed, fn)).reduceByKey(
                        _greater, reducers
                    )
                else:
                    reduced = (
                        rdd.flatMap(functools.partial(_keyed_in_order, fn))
                        .groupByKey(reducers)
                        .mapValues(functools.partial(_fold_in_order, fold))
                        .filter(lambda kv: kv[1] is not None)
                    )
                waves = [list(range(i, min(reducers, i + wave))) for i in range(0, reducers, wave)]
                with self._progress():
                    for key, (rank, tomb) in self._waves(reduced, waves):
                        table.offer(key, rank, tomb)
            if progress is not None:
                for split in splits:
                    progress(split)
            return table.finish()
        except BaseException:
            table.close()
            raise

    def close(self) -> None:
        return None  # the session outlives the engine: callers stop it when they are done
