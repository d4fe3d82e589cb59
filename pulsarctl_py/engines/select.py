"""Choosing the engine of a scan: ``--engine auto|local|spark``, from the plan's size.

``auto`` runs a plan on Spark (a local session, every core, unless ``--spark-master``
names a cluster) when the managed-ledger metadata says it holds at least
:data:`DEFAULT_SPARK_THRESHOLD` entries, and in-process below that; without Java it
stays local. The default is the crossover ``bench/spark.py`` measured (docs/performance.md,
"Spark engine"): from CPU times on 2 cores, Spark ``local[*]`` (its start-up included)
beats the local engine from 203,448 entries of an export (207,334 in another run). On a
machine whose cores other jobs keep busy there is no crossover (Spark's second core is not
free), so ``--spark-threshold``, ``$LEDGERCTL_SPARK_THRESHOLD`` or ``spark_threshold`` in
ledgerctl.toml changes it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

#: entries from which auto picks Spark: the measured crossover, rounded (docs/performance.md)
DEFAULT_SPARK_THRESHOLD = 200_000
#: the variable of the spark_threshold setting (pulsarctl_py.precedence)
ENV_SPARK_THRESHOLD = "LEDGERCTL_SPARK_THRESHOLD"


class EngineChoice(enum.StrEnum):
    auto = "auto"
    local = "local"
    spark = "spark"


def spark_threshold(explicit: int | None = None) -> int:
    """The auto threshold: the flag, the variable, ledgerctl.toml, the measured default
    (:mod:`pulsarctl_py.precedence`)."""
    from pulsarctl_py import precedence
    from pulsarctl_py.errors import LedgerctlError

    found = precedence.resolve(precedence.SPARK_THRESHOLD, explicit)
    if found.value < 0:
        raise LedgerctlError(
            f"the Spark threshold must not be negative, not {found.value} ({found.source})"
        )
    return int(found.value)


def threshold_given(explicit: int | None = None) -> bool:
    """Whether a flag, the variable or ledgerctl.toml sets the threshold."""
    from pulsarctl_py import precedence

    return precedence.resolve(precedence.SPARK_THRESHOLD, explicit).is_set


def pick(choice: EngineChoice | str, entries: int, threshold: int | None = None) -> str:
    """``local`` or ``spark`` for a plan of ``entries`` entries."""
    choice = EngineChoice(choice)
    if choice is not EngineChoice.auto:
        return choice.value
    if entries < spark_threshold(threshold):
        return "local"
    from pulsarctl_py.spark.session import java_executable

    return "spark" if java_executable() is not None else "local"


def open_engine(
    name: str,
    *,
    master: str | None = None,
    conf: Sequence[tuple[str, str]] = (),
    console: Any = None,
    label: str = "scanning on Spark",
) -> Any:
    """The engine called ``name``; a Spark one starts (or joins) its session here."""
    if name == "local":
        from .local import LocalEngine

        return LocalEngine()
    from .spark import SparkEngine

    return SparkEngine(master=master, conf=conf, console=console, label=label)


def listed_entries(source: Any, topics: Sequence[str] | None, limit: int | None = None) -> int:
    """The entries the managed-ledger metadata lists for ``topics`` (None: every topic).

    What ``auto`` weighs for verify and seek before any entry is read; a name without a
    managed ledger of its own (a partitioned topic's parent) counts its partitions. The
    count stops once it reaches ``limit`` (the threshold: no need to read further).
    """
    from pulsarctl_py.stores.metadata import (
        list_managed_ledgers,
        read_managed_ledger,
        resolve_topic,
    )

    store = source.metadata
    if store is None:
        return 0
    if topics is None:
        names: list[Any] = [ref.topic for ref in list_managed_ledgers(store)]
    else:
        names = list(topics)
    total = 0
    for name in names:
        if limit is not None and total >= limit:
            break
        record = read_managed_ledger(store, name, with_cursors=False)
        if record is None and topics is not None:
            prefix = resolve_topic(name).full_name + "-partition-"
            total += sum(
                listed_entries(source, [ref.topic])
                for ref in list_managed_ledgers(store)
                if ref.topic.full_name.startswith(prefix)
            )
            continue
        if record is not None and record.info is not None:
            total += sum(li.entries for li in record.info.message.ledgerInfo)
    return total


class ScanReads:
    """The engine of a verify or seek --exact scan, as a context manager.

    ``__enter__`` gives an :class:`~pulsarctl_py.engines.reads.EngineReads` on Spark, or
    None when the scan stays in this process (``local``, or ``auto`` below the threshold);
    ``entries(threshold)`` (the scan's entries, counted up to the threshold at least) is
    called only for ``auto``. Unlike export and compaction, ``auto`` keeps these scans in
    this process unless a threshold is given (``--spark-threshold`` or the environment):
    their in-process path is the head scan, which no local Spark session beats.
    """

    def __init__(
        self,
        choice: EngineChoice | str,
        entries: Any,
        *,
        location: Any,
        master: str | None = None,
        conf: Sequence[str] = (),
        threshold: int | None = None,
        console: Any = None,
        label: str = "scanning on Spark",
    ) -> None:
        self.choice = EngineChoice(choice)
        self.entries = entries
        self.location = location
        self.master = master
        self.conf = conf
        self.threshold = threshold
        self.console = console
        self.label = label
        self.engine: Any = None

    def __enter__(self) -> Any:
        count = 0
        if self.choice is EngineChoice.auto:
            if not threshold_given(self.threshold):
                # no measured crossover for these scans: the in-process head scan checks an
                # entry in about a microsecond, less than the Python work the Spark driver
                # still does per entry, so a local session never wins (docs/performance.md)
                return None
            count = self.entries(spark_threshold(self.threshold))
        if pick(self.choice, count, self.threshold) == "local":
            return None
        from pulsarctl_py.spark.session import parse_conf

        from .reads import EngineReads

        conf = parse_conf(list(self.conf))
        self.engine = open_engine(
            "spark", master=self.master, conf=conf, console=self.console, label=self.label
        )
        return EngineReads(self.engine, self.location)

    def __exit__(self, *exc: object) -> None:
        if self.engine is not None:
            self.engine.close()
