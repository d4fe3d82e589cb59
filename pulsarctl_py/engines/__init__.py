"""Engines run a scan plan: the same work in-process (local) or on Apache Spark.

The contract (docs/architecture.md, "Engines"):

* A :class:`~pulsarctl_py.engines.base.ScanPlan` is the whole of a scan, decided before any
  entry is read: an ordered tuple of :class:`~pulsarctl_py.engines.base.Split` (one ledger,
  an inclusive entry range, and where the bytes are: bookie directories and the metadata
  URL, as plain strings), with the totals of entries and bytes that the managed-ledger
  metadata gives. Splits are frozen and picklable, so an executor can open the stores
  itself. ``split.ordinal`` is the plan order (ascending topic position; a compacted
  ledger, when the plan starts from one, comes first).
* An :class:`~pulsarctl_py.engines.base.Engine` has a ``name`` and two operations:

  - ``map_splits(plan, fn, winners=None)`` calls ``fn(split)`` (or ``fn(split, view)`` with
    a :class:`~pulsarctl_py.engines.base.KeyTable` given as ``winners``, where ``view``
    answers ``keeps(key, rank)`` and ``get(key)``) for every split and yields what the
    calls yield, **in plan order**, whatever ran them in parallel. ``fn`` must be
    picklable (a module-level function or a ``functools.partial`` of one) and must open
    its own stores.
  - ``latest_per_key(plan, fn, memory=...)`` reduces the ``(key, rank, tombstone)``
    records that ``fn(split)`` yields to one record per key, the one with the greatest
    ``rank`` (bytes, compared as bytes: callers encode ranks big-endian so that byte order
    is their order). The result is a :class:`KeyTable`; tombstones that win stay in it, so
    callers count them and treat them as absent. With ``fold=f`` the records of a key are
    folded in plan order instead (``state = f(state, rank, tombstone)``, state None at
    first): for order-dependent rules such as EventTimeOrderCompactor's.

* Results are identical across engines: the behaviour suite runs the same cases on each.

:class:`~pulsarctl_py.engines.local.LocalEngine` streams splits in-process, and its key
table spills to an embedded RocksDB (rocksdict) past its memory budget. The Spark engine
(``pulsarctl_py.engines.spark``) implements the same protocol and imports pyspark only when
it is built.
"""

from __future__ import annotations

from .base import (
    DEFAULT_SPLIT_ENTRIES,
    Engine,
    Fold,
    KeyRecord,
    KeyState,
    KeyTable,
    ScanPlan,
    Split,
    WinnerView,
    build_scan_plan,
    max_rank,
)
from .local import LocalEngine, LocalKeyTable


def get_engine(name: str = "local", **options: object) -> Engine:
    """The engine called ``name`` (``local``; ``spark`` once it is installed)."""
    if name == "local":
        return LocalEngine(**options)  # type: ignore[arg-type]
    if name == "spark":
        try:
            from .spark import SparkEngine  # type: ignore[import-not-found]
        except ImportError as exc:
            from pulsarctl_py.errors import LedgerctlError

            raise LedgerctlError(f"the spark engine is not available: {exc}") from None
        return SparkEngine(**options)  # type: ignore[no-any-return]
    from pulsarctl_py.errors import LedgerctlError

    raise LedgerctlError(f"unknown engine {name!r}: use local or spark")


__all__ = [
    "DEFAULT_SPLIT_ENTRIES",
    "Engine",
    "Fold",
    "KeyRecord",
    "KeyState",
    "KeyTable",
    "LocalEngine",
    "LocalKeyTable",
    "ScanPlan",
    "Split",
    "WinnerView",
    "build_scan_plan",
    "get_engine",
    "max_rank",
]
