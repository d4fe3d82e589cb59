"""Entries read and wall time of `seek` against a linear scan, N = 10^3 .. 10^7 entries.

A synthetic ledger store (no bytes: heads computed from the entry number) counts reads,
so the figures measure the search itself. The topic is split into ledgers of 50,000
entries (the broker's default managedLedgerMaxEntriesPerLedger), one entry every 10 ms,
each ledger closed 1 ms after its last entry. For each N, targets spread over the topic
are sought with every rule: broker (close-time narrowing at the default 60 s skew, and
without it), kop, compacted (one compacted ledger of N entries) and by index. Each rule
reports its most reads against ceil(log2 M), M being the entries of the range it searched
(the whole topic but for the narrowed broker rule), and checks them against the rule's
bound (pulsarctl_py.seek.probe.READ_SLACK). The linear scan reads every head until the first at
or after the target (the whole topic for the last targets), as `--exact` does.

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

from pulsarctl_py.seek.heads import CachedReader, Head
from pulsarctl_py.seek.index import seek_compacted, seek_index
from pulsarctl_py.seek.probe import READ_SLACK, FlatTopic, SeekLedger, ceil_log2
from pulsarctl_py.seek.rules import DEFAULT_CLOCK_SKEW_MS, seek_time_broker, seek_time_kop

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


class Reads:
    """One rule's reads over the targets, against ceil(log2 M) for the range searched."""

    def __init__(self, rule: str) -> None:
        self.rule = rule
        self.reads: list[int] = []
        self.walls: list[float] = []
        self.over = -(10**9)
        self.range_max = 0
        self.ledgers_max = 0

    def add(self, reads: int, wall: float, range_entries: int, ledgers: int) -> None:
        self.reads.append(reads)
        self.walls.append(wall)
        self.over = max(self.over, reads - ceil_log2(range_entries))
        self.range_max = max(self.range_max, range_entries)
        self.ledgers_max = max(self.ledgers_max, ledgers)

    def report(self) -> dict[str, Any]:
        return {
            "targets": len(self.reads),
            "reads_max": max(self.reads),
            "reads_mean": round(sum(self.reads) / len(self.reads), 2),
            "range_entries_max": self.range_max,
            "ledgers_searched_max": self.ledgers_max,
            "ceil_log2_range_max": ceil_log2(self.range_max),
            "max_reads_over_ceil_log2_range": self.over,
            "bound_over_ceil_log2": READ_SLACK[self.rule],
            "within_bound": self.over <= READ_SLACK[self.rule],
            "wall_ms_mean": round(1000 * sum(self.walls) / len(self.walls), 3),
        }


def _ledgers_in(flat: FlatTopic, search_range: dict[str, Any] | None) -> int:
    if not search_range or search_range["start"] is None:
        return len(flat.used)
    first = int(search_range["start"].split(":")[0])
    last = int(search_range["end"].split(":")[0])
    return sum(1 for lg in flat.used if first <= lg.ledger_id <= last)


def measure(n: int, targets: int) -> dict[str, Any]:
    flat = topic(n)
    out: dict[str, Any] = {"entries": n, "ledgers": len(flat.used), "ceil_log2_n": ceil_log2(n)}
    picks = [(j * (n - 1)) // max(targets - 1, 1) for j in range(targets)]
    for name, skew in (("broker_narrowed", DEFAULT_CLOCK_SKEW_MS), ("broker_whole_topic", -1)):
        stats = Reads("broker")
        for k in picks:
            target = T0 + k * STEP_MS + 5  # between entries k and k + 1
            inner = SyntheticReader(PER_LEDGER)
            start = time.perf_counter()
            result, _ = seek_time_broker(flat, CachedReader(inner), target, skew)
            wall = time.perf_counter() - start
            got = None if result.head is None else result.head.index
            assert got == (k + 1 if k + 1 < n else None), (name, n, k, got)
            sr = result.search_range
            stats.add(inner.reads, wall, max(sr["entries"], 1), _ledgers_in(flat, sr))
        out[name] = stats.report()
    stats = Reads("kop")
    for k in picks:
        inner = SyntheticReader(PER_LEDGER)
        start = time.perf_counter()
        result, _ = seek_time_kop(flat, CachedReader(inner), T0 + k * STEP_MS + 5)
        wall = time.perf_counter() - start
        assert result.kafka_offset == k + 1, ("kop", n, k, result.kafka_offset)
        stats.add(inner.reads, wall, n, len(flat.used))
    out["kop"] = stats.report()
    stats = Reads("index")
    for k in picks:
        inner = SyntheticReader(PER_LEDGER)
        start = time.perf_counter()
        result, _ = seek_index(flat, CachedReader(inner), k)
        wall = time.perf_counter() - start
        assert result.head is not None and result.head.index == k, ("index", n, k)
        stats.add(inner.reads, wall, n, len(flat.used))
    out["index"] = stats.report()
    stats = Reads("compacted")
    for k in picks:
        inner = SyntheticReader(n)  # one compacted ledger (id 0) of n entries
        start = time.perf_counter()
        result, _ = seek_compacted(0, n, CachedReader(inner), T0 + k * STEP_MS + 5)
        wall = time.perf_counter() - start
        got = None if result.head is None else result.head.index
        assert got == (k + 1 if k + 1 < n else None), ("compacted", n, k, got)
        stats.add(inner.reads, wall, n, 1)
    out["compacted"] = stats.report()
    lin_reads, lin_wall = linear(n, T0 + n * STEP_MS)  # after the last: reads everything
    out["linear_scan"] = {"reads": lin_reads, "wall_s": round(lin_wall, 3)}
    seek_ms = out["broker_narrowed"]["wall_ms_mean"]
    out["speedup_wall"] = round(lin_wall * 1000 / seek_ms, 1) if seek_ms else None
    out["speedup_reads"] = round(lin_reads / out["broker_narrowed"]["reads_mean"], 1)
    return out


RULES = ("broker_narrowed", "broker_whole_topic", "kop", "index", "compacted")


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
            "reads_within_rule_bounds": {
                "target": "reads <= ceil(log2 M) + bound per rule (M: entries of the range "
                "searched; bounds: broker, kop, index 3, compacted 1)",
                "measured": {
                    rule: max(r[rule]["max_reads_over_ceil_log2_range"] for r in results)
                    for rule in RULES
                },
                "pass": all(r[rule]["within_bound"] for r in results for rule in RULES),
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
