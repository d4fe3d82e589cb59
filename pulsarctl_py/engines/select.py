"""Choosing the engine of a scan: ``--engine auto|local|spark``, from the plan's size.

``auto`` runs a plan on Spark (a local session, every core, unless ``--spark-master``
names a cluster) when the managed-ledger metadata says it holds at least
:data:`DEFAULT_SPARK_THRESHOLD` entries, and in-process below that; without Java it
stays local. The threshold is the crossover measured by ``bench/spark.py``
(docs/performance.md, "Spark engine"); ``--spark-threshold`` or
``$LEDGERCTL_SPARK_THRESHOLD`` changes it.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from typing import Any

from pulsarctl_py.errors import LedgerctlError

#: entries from which auto picks Spark: the measured crossover (docs/performance.md)
DEFAULT_SPARK_THRESHOLD = 2_000_000
ENV_SPARK_THRESHOLD = "LEDGERCTL_SPARK_THRESHOLD"


class EngineChoice(enum.StrEnum):
    auto = "auto"
    local = "local"
    spark = "spark"


def spark_threshold(explicit: int | None = None) -> int:
    """The auto threshold: explicit, then the environment, then the measured default."""
    if explicit is not None:
        value: int | str = explicit
    else:
        value = os.environ.get(ENV_SPARK_THRESHOLD, "") or DEFAULT_SPARK_THRESHOLD
    try:
        threshold = int(value)
    except ValueError:
        raise LedgerctlError(
            f"{ENV_SPARK_THRESHOLD}={value!r}: expected a number of entries"
        ) from None
    if threshold < 0:
        raise LedgerctlError(f"the Spark threshold must not be negative, not {threshold}")
    return threshold


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
