"""Entries read and wall time of `seek` against a linear scan, N = 10^3 .. 10^7 entries.

A synthetic ledger store (no bytes: heads computed from the entry number) counts reads,
so the figures measure the search itself. The topic is split into ledgers of 50,000
entries (the broker's default managedLedgerMaxEntriesPerLedger), one entry every 10 ms,
each ledger closed 1 ms after its last entry. For each N, targets spread over the topic
are sought with the broker rule (close-time narrowing at the default 60 s skew, and
without it), and by index; the linear scan reads every head until the first at or after
the target (the whole topic for the last targets), as `--exact` does.

    python bench/seek.py            # N = 10^3 .. 10^7
    python bench/seek.py --quick    # N = 10^3 .. 10^5

Prints one JSON report on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine

from pulsarctl_py.seek import (
    DEFAULT_CLOCK_SKEW_MS,
    CachedReader,
    FlatTopic,
    Head,
    SeekLedger,
    max_reads,
    seek_index,
    seek_time_broker,
)

PER_LEDGER = 50_000
STEP_MS = 10
T0 = 1_790_000_000_000


class SyntheticReader:
    """Entry k of the topic: time T0 + k * STEP_MS, one message, index k."""

    def __init__(self, per_ledger: int) -> None:
        self.per_ledger = per_ledger
        self.reads = 0

    def head(self, ledger_id: int, entry_id: int) -> Head:
        self.reads += 1
        k = ledger_id * self.per_ledger + entry_id
        ts = T0 + k * STEP_MS
        return Head(ledger_id, entry_id, publish_time=ts - 3, broker_timestamp=ts, index=k)


def topic(n: int) -> FlatTopic:
    ledgers = []
    for lid in range(math.ceil(n / PER_LEDGER)):
        count = min(PER_LEDGER, n - lid * PER_LEDGER)
        last = T0 + (lid * PER_LEDGER + count - 1) * STEP_MS
        ledgers.append(SeekLedger(lid, count, last + 1))
    return FlatTopic(ledgers)


def linear(n: int, target: int) -> tuple[int, float]:
    reader = SyntheticReader(PER_LEDGER)
    flat = topic(n)
    start = time.perf_counter()
    for lg in flat.used:
        for e in range(lg.entries):
            if reader.head(lg.ledger_id, e).timestamp >= target:
                return reader.reads, time.perf_counter() - start
    return reader.reads, time.perf_counter() - start


def measure(n: int, targets: int) -> dict[str, Any]:
    flat = topic(n)
    out: dict[str, Any] = {"entries": n, "ledgers": len(flat.used)}
    for name, skew in (("broker_narrowed", DEFAULT_CLOCK_SKEW_MS), ("broker_whole_topic", -1)):
        reads, walls, over = [], [], 0
        for j in range(targets):
            k = (j * (n - 1)) // max(targets - 1, 1)
            target = T0 + k * STEP_MS + 5  # between entries k and k + 1
            inner = SyntheticReader(PER_LEDGER)
            start = time.perf_counter()
            result, _ = seek_time_broker(flat, CachedReader(inner), target, skew)
            walls.append(time.perf_counter() - start)
            expected = k + 1
            got = None if result.head is None else result.head.index
            assert got == (expected if expected < n else None), (n, k, got)
            reads.append(inner.reads)
            budget = max_reads(max(result.search_range["entries"], 1))
            over = max(over, inner.reads - budget)
        out[name] = {
            "targets": targets,
            "reads_max": max(reads),
            "reads_mean": round(sum(reads) / len(reads), 2),
            "log2_n_plus_2": max_reads(n),
            "max_over_log2_range_plus_2": over,
            "wall_ms_mean": round(1000 * sum(walls) / len(walls), 3),
        }
    reads = []
    for j in range(targets):
        k = (j * (n - 1)) // max(targets - 1, 1)
        inner = SyntheticReader(PER_LEDGER)
        seek_index(flat, CachedReader(inner), k)
        reads.append(inner.reads)
    out["index"] = {"reads_max": max(reads), "log2_n_plus_2": max_reads(n)}
    lin_reads, lin_wall = linear(n, T0 + n * STEP_MS)  # after the last: reads everything
    out["linear_scan"] = {"reads": lin_reads, "wall_s": round(lin_wall, 3)}
    seek_ms = out["broker_narrowed"]["wall_ms_mean"]
    out["speedup_wall"] = round(lin_wall * 1000 / seek_ms, 1) if seek_ms else None
    out["speedup_reads"] = round(lin_reads / out["broker_narrowed"]["reads_mean"], 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N up to 10^5 only")
    parser.add_argument("--targets", type=int, default=50)
    args = parser.parse_args(argv)
    sizes = [10**3, 10**4, 10**5] if args.quick else [10**3, 10**4, 10**5, 10**6, 10**7]
    results = [measure(n, args.targets) for n in sizes]
    top = results[-1]
    report = {
        "benchmark": "seek",
        "quick": args.quick,
        "machine": machine(),
        "per_ledger": PER_LEDGER,
        "sizes": results,
        "targets": {
            "reads_within_log2_range_plus_3": {
                "target": "broker probes <= ceil(log2 M) + 3 (M: entries in the range searched)",
                "measured": max(
                    r["broker_narrowed"]["max_over_log2_range_plus_2"] for r in results
                ),
                "pass": all(
                    r[k]["max_over_log2_range_plus_2"] <= 1
                    for r in results
                    for k in ("broker_narrowed", "broker_whole_topic")
                ),
            },
            "speedup_at_largest_n": {
                "target": ">= 1000x the linear scan (wall time)",
                "entries": top["entries"],
                "measured": top["speedup_wall"],
                "pass": bool(top["speedup_wall"] and top["speedup_wall"] >= 1000),
            },
        },
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
