"""Ledger write benchmark: ledgerctl's writer next to BookKeeper's own, on the same bookies.

    python bench/write.py                        # starts a sandbox, 3 rounds of 10^5 entries
    python bench/write.py --sandbox DIR          # a sandbox started by hand (scripts/sandbox up)
    python bench/write.py --entries 1000 --rounds 1 --no-bookkeeper   # the smoke test

Each round writes one compacted ledger of ``--entries`` entries to the sandbox's running
bookies with the code ``compact --apply`` runs after the compute
(:class:`pulsarctl_py.plans.writing.LedgerTarget` with the broker's settings from its
broker.conf: ensemble 3, write quorum 2, ack quorum 2, CRC32, the empty password), then
deletes it; then BookKeeper's benchmark writer (``org.apache.bookkeeper.benchmark
.BenchThroughputLatency`` from bookkeeper-benchmark, on the sandbox's classpath) sends the
same number of entries of the same mean size with the same quorums to the same bookies.
The entries are compacted-ledger entries as ``ledgerctl compact`` writes them (RawMessage
framing around a keyed message with a 100-byte value). Reported per round: entries/s and
MB/s of each, ledgerctl's CPU seconds, and the ratio ledgerctl / BookKeeper; then
min/median/max over the rounds, with the 1-minute load average before and after each
round (the machine is shared: the bookies and the writers compete for its cores).

BookKeeper's figure is its own report ("N completions in T milliseconds"), which leaves
out its JVM's start and its warm-up (10,000 entries sent first, so that the JIT has
compiled the client); ledgerctl's is the wall time of the write itself (connections,
metadata creation, every entry acknowledged, the close), which leaves out the Python
start. Each uses its own default window of outstanding adds: ledgerctl 1024 entries,
BookKeeper's benchmark 10,000 (``-throttle``; ``--bk-throttle N`` sets another).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._machine import machine  # noqa: E402

SANDBOX = ROOT / "scripts" / "sandbox"
VALUE = 100


def entries(count: int) -> list[bytes]:
    """Compacted-ledger entries: RawMessage framing around a keyed single message."""
    from pulsarctl_py.decoders import compacted
    from pulsarctl_py.decoders.pulsar import build_entry
    from pulsarctl_py.proto import pulsar_api_pb2 as api

    out = []
    value = bytes(range(VALUE))
    for i in range(count):
        md = api.MessageMetadata(
            producer_name="bench",
            sequence_id=i,
            publish_time=1_700_000_000_000 + i,
            partition_key=f"key-{i}",
            uncompressed_size=VALUE,
        )
        mid = api.MessageIdData(ledgerId=7, entryId=i)
        out.append(compacted.build(mid, build_entry(md, value)))
    return out


def _sandbox(args: argparse.Namespace) -> tuple[Path, bool]:
    if args.sandbox:
        return Path(args.sandbox), False
    directory = Path(tempfile.mkdtemp(prefix="ledgerctl-bench-write-")) / "cluster"
    subprocess.run(
        [sys.executable, str(SANDBOX), "up", str(directory)], check=True, stdout=subprocess.DEVNULL
    )
    return directory, True


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def ours(state: dict[str, Any], payloads: list[bytes]) -> dict[str, Any]:
    """One compacted ledger written the way compact --apply writes it; deleted after."""
    from pulsarctl_py.brokerconf import load_broker_conf
    from pulsarctl_py.plans.writing import LedgerTarget
    from pulsarctl_py.stores.metadata import open_metadata_store
    from pulsarctl_py.writesettings import resolve_write_settings

    settings = resolve_write_settings(broker_conf=load_broker_conf(state["broker"]["conf"]))
    config = settings.compacted_config({"component": b"compacted-ledger"})
    url = f"{state['metadata_url']} bookkeeper={state['bookkeeper_metadata_url']}"
    store = open_metadata_store(url, read_only=False)
    try:
        target = LedgerTarget(store)
        cpu, wall = time.process_time(), time.perf_counter()
        ledger = target.write(config, payloads)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        target.delete(ledger)
    finally:
        store.close()
    size = sum(len(p) for p in payloads)
    return {
        "entries": ledger.entries,
        "seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "entries_per_s": round(ledger.entries / wall),
        "mb_per_s": round(size / wall / 1e6, 2),
        "settings": ledger.config,
    }


_DONE = re.compile(r"(\d+) completions in (\d+) milliseconds: (\d+) ops/sec")


def bookkeeper(state: dict[str, Any], count: int, size: int, window: int | None) -> dict[str, Any]:
    """BookKeeper's BenchThroughputLatency: ``count`` entries of ``size`` bytes."""
    classpath = subprocess.run(
        [sys.executable, str(SANDBOX), "classpath"], check=True, capture_output=True, text=True
    ).stdout.strip()
    java = shutil.which("java") or "java"
    zk = state["zookeeper"]["address"]
    root = state["bookkeeper_metadata_url"].split("://", 1)[1].split("/", 1)[1]
    chroot = "/" + root.rsplit("/ledgers", 1)[0] if root.endswith("ledgers") else ""
    with tempfile.TemporaryDirectory(prefix="bench-write-bk-") as tmp:
        done = subprocess.run(
            [
                java,
                "-Xmx512m",
                "-cp",
                classpath,
                f"-Dlog4j2.configurationFile={Path(state['broker']['conf']).parent / 'log4j2.xml'}",
                "org.apache.bookkeeper.benchmark.BenchThroughputLatency",
                # BookKeeper's metadata under /bookkeeper/ledgers: the benchmark looks in
                # <chroot>/ledgers
                "-zookeeper",
                zk + chroot,
                "-entrysize",
                str(size),
                "-sendlimit",
                str(count),
                # the benchmark runs until this many seconds have passed, even once its
                # -sendlimit entries are acknowledged (seen with bookkeeper-benchmark 4.17.3:
                # 20,000 entries in 3 s, printed after the 60 s of -time 60); the rate it
                # prints is over the entries' own time. A budget of 1,000 entries/s and
                # 30 s for the JVM and the warm-up; were it short, fewer entries are counted
                "-time",
                str(30 + count // 1000),
                "-ensemble",
                "3",
                "-quorum",
                "2",
                "-ackQuorum",
                "2",
                *(["-throttle", str(window)] if window is not None else []),
                "-latencyFile",
                str(Path(tmp) / "latency.dat"),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp,
        )
    found = _DONE.search(done.stdout + done.stderr)
    if found is None:
        raise SystemExit(f"BenchThroughputLatency printed no result: {done.stderr[-2000:]}")
    n, ms = int(found.group(1)), int(found.group(2))
    return {
        "entries": n,
        "seconds": round(ms / 1000, 3),
        "entries_per_s": round(n / (ms / 1000)),
        "mb_per_s": round(n * size / (ms / 1000) / 1e6, 2),
        "entry_size": size,
        "throttle": window or 10000,
    }


def spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def main() -> None:
    from pulsarctl_py.stores.live.writer import DEFAULT_WRITE_WINDOW

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sandbox", help="a running sandbox's directory (default: start one)")
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-bookkeeper", action="store_true", help="only ledgerctl's writer")
    parser.add_argument("--bk-throttle", type=int, help="the benchmark's -throttle")
    args = parser.parse_args()

    directory, started = _sandbox(args)
    try:
        state = json.loads((directory / "cluster.json").read_text())
        payloads = entries(args.entries)
        size = round(sum(map(len, payloads)) / len(payloads))
        rounds = []
        for _ in range(args.rounds):
            row: dict[str, Any] = {"load_before": _load()}
            row["ledgerctl"] = ours(state, payloads)
            if not args.no_bookkeeper:
                row["bookkeeper"] = bookkeeper(state, args.entries, size, args.bk_throttle)
                row["ratio"] = round(
                    row["ledgerctl"]["entries_per_s"] / row["bookkeeper"]["entries_per_s"], 3
                )
            row["load_after"] = _load()
            rounds.append(row)
        report: dict[str, Any] = {
            "entries": args.entries,
            "mean_entry_size": size,
            "rounds": rounds,
            "ledgerctl_entries_per_s": spread([r["ledgerctl"]["entries_per_s"] for r in rounds]),
            "ledgerctl_mb_per_s": spread([r["ledgerctl"]["mb_per_s"] for r in rounds]),
            "load_average": spread([r["load_before"] for r in rounds] + [rounds[-1]["load_after"]]),
            "ledgerctl_window": DEFAULT_WRITE_WINDOW,
            "machine": machine(),
            "versions": {k: state.get(k) for k in ("pulsar_version", "bookkeeper_version")},
        }
        if not args.no_bookkeeper:
            report["bookkeeper_entries_per_s"] = spread(
                [r["bookkeeper"]["entries_per_s"] for r in rounds]
            )
            report["ratio"] = spread([r["ratio"] for r in rounds])
        print(json.dumps(report, indent=1))
    finally:
        if started:
            subprocess.run([sys.executable, str(SANDBOX), "down", str(directory)], check=False)


if __name__ == "__main__":
    main()
