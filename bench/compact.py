"""Compaction benchmark: messages/s and peak RSS by messages and keys; JSON on stdout.

    python bench/compact.py                 # 10^5 and 10^6 messages, 10^2 .. 10^5 keys
    python bench/compact.py --quick         # a small run (the smoke test uses it)
    python bench/compact.py --messages 10000000 --keys 1000000 --memory 67108864
    python bench/compact.py --runs 5 --no-spill   # 5 runs of each, min/median/max ratios

Inputs: batches of 100 messages (LZ4, a key per message drawn uniformly from the key
space, 32-byte values, one message in 50 a tombstone), written once to a file of
length-prefixed entries and streamed from it. Each measured run is a fresh process (peak
RSS is that process's own ``VmHWM``) that runs phase one into the local engine's key table
(spilling past ``--memory``) and phase two (rebatching) over the file: the same code as
``ledgerctl compact`` after the bookie read. ``full_decode`` is the same process decoding
every entry down to its messages once, the baseline of the throughput goal (compaction reads
the entries twice and rebuilds batches: goal >= 25% of full-decode messages/s).
With ``--runs N`` each size is measured N times, compaction and full decode alternating;
the ratios are reported for the best run of each (best of several runs: the others measure
the machine's other jobs) and as min/median/max over the N paired runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._machine import machine, peak_rss_mib

BATCH = 100
_LEN = struct.Struct(">I")


def generate(path: Path, messages: int, keys: int, seed: int = 7) -> int:
    from pulsarctl_py.decoders.codecs import compress
    from pulsarctl_py.decoders.payload import build_batch
    from pulsarctl_py.decoders.pulsar import build_entry
    from pulsarctl_py.proto import pulsar_api_pb2 as api

    rnd = random.Random(seed)
    entries = 0
    with path.open("wb") as fh:
        for start in range(0, messages, BATCH):
            n = min(BATCH, messages - start)
            rows = []
            for _ in range(n):
                smm = api.SingleMessageMetadata(partition_key=f"key-{rnd.randrange(keys)}")
                value = b"" if rnd.random() < 0.02 else rnd.randbytes(32)
                rows.append((smm, value))
            plain = build_batch(rows)
            md = api.MessageMetadata(
                producer_name="bench", sequence_id=start, publish_time=1_700_000_000_000 + start
            )
            md.num_messages_in_batch = n
            md.compression = api.LZ4
            md.uncompressed_size = len(plain)
            data = build_entry(md, compress(api.LZ4, plain))
            fh.write(_LEN.pack(len(data)) + data)
            entries += 1
    return entries


def _stream(path: Path):  # type: ignore[no-untyped-def]
    from pulsarctl_py.compaction.reader import raw_entry
    from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry

    options = DecodeOptions(outer=Outer.PULSAR_ENTRY, depth=Depth.METADATA)
    with path.open("rb") as fh:
        entry_id = 0
        while head := fh.read(4):
            data = fh.read(_LEN.unpack(head)[0])
            yield raw_entry(decode_entry(data, options, (1, entry_id)))
            entry_id += 1


def child(path: Path, mode: str, memory: int | None) -> dict:
    from pulsarctl_py.compaction.core import CompactionOptions, Stats, phase_one_into, phase_two
    from pulsarctl_py.decoders import DecodeOptions, Outer, decode_entry
    from pulsarctl_py.engines.local import LocalKeyTable

    started = time.perf_counter()
    cpu_started = time.process_time()
    out: dict = {}
    if mode == "decode":
        options = DecodeOptions(outer=Outer.PULSAR_ENTRY)
        messages = 0
        with path.open("rb") as fh:
            while head := fh.read(4):
                messages += len(decode_entry(fh.read(_LEN.unpack(head)[0]), options).messages)
        out["messages"] = messages
    else:
        opts = CompactionOptions()
        table = LocalKeyTable(memory)
        # what the local engine runs: whole batches into the key table in native calls
        messages = phase_one_into(_stream(path), opts, table)
        table.finish()
        stats = Stats()
        for _ in phase_two(_stream(path), table, opts, stats):
            pass
        out.update(
            messages=messages,
            keys=len(table),
            kept=stats.kept,
            entries_out=stats.entries_out,
            spilled=table.spilled,
        )
        table.close()
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    out["seconds"] = round(seconds, 3)
    out["messages_per_s"] = round(out["messages"] / seconds)
    # CPU time too: on a shared machine wall time measures the other jobs as much as this one
    out["cpu_seconds"] = round(cpu, 3)
    out["messages_per_cpu_s"] = round(out["messages"] / cpu)
    # VmHWM, not ru_maxrss: the parent generated the inputs, and Linux carries its peak over
    # fork and exec into a child's ru_maxrss
    out["peak_rss_mib"] = peak_rss_mib()
    return out


def _best(runs: list[dict]) -> dict:
    """The run with the highest CPU rate, with every run's rates alongside."""
    best = dict(max(runs, key=lambda r: r["messages_per_cpu_s"]))
    best["all_messages_per_s"] = [r["messages_per_s"] for r in runs]
    best["all_messages_per_cpu_s"] = [r["messages_per_cpu_s"] for r in runs]
    return best


def measure(path: Path, mode: str, memory: int | None) -> dict:
    args = [sys.executable, __file__, "--child", str(path), "--mode", mode]
    if memory is not None:
        args += ["--memory", str(memory)]
    proc = subprocess.run(args, capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--messages", type=int, action="append")
    parser.add_argument("--keys", type=int, action="append")
    parser.add_argument("--memory", type=int, default=None, help="key table budget, bytes")
    parser.add_argument("--runs", type=int, default=1, help="measurements of each kind")
    parser.add_argument("--no-spill", action="store_true", help="skip the spill runs")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="compact", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.mode, args.memory)))
        return
    sizes = args.messages or ([20_000] if args.quick else [100_000, 1_000_000])
    key_counts = args.keys or ([100, 10_000] if args.quick else [100, 10_000, 100_000])
    spill_memory = args.memory or 4 * 1024 * 1024
    runs = []
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="ledgerctl-bench-") as tmp:
        for messages in sizes:
            for keys in key_counts:
                if keys > messages:
                    continue
                path = Path(tmp) / f"m{messages}-k{keys}.bin"
                generate(path, messages, keys)
                compact = []
                decode = []
                for _ in range(max(1, args.runs)):
                    compact.append(measure(path, "compact", None))
                    decode.append(measure(path, "decode", None))
                row = {
                    "messages": messages,
                    "keys": keys,
                    "file_bytes": os.path.getsize(path),
                    "in_memory": _best(compact),
                    "spill": None if args.no_spill else measure(path, "compact", spill_memory),
                    "full_decode": _best(decode),
                    "runs": len(compact),
                }
                best_c, best_d = row["in_memory"], row["full_decode"]
                row["throughput_vs_full_decode"] = round(
                    best_c["messages_per_s"] / best_d["messages_per_s"], 3
                )
                row["cpu_throughput_vs_full_decode"] = round(
                    best_c["messages_per_cpu_s"] / best_d["messages_per_cpu_s"], 3
                )
                for kind, rate in (("wall", "messages_per_s"), ("cpu", "messages_per_cpu_s")):
                    ratios = [c[rate] / d[rate] for c, d in zip(compact, decode, strict=True)]
                    row[f"{kind}_ratio_min_median_max"] = [
                        round(min(ratios), 3),
                        round(statistics.median(ratios), 3),
                        round(max(ratios), 3),
                    ]
                runs.append(row)
                path.unlink()
    report = {
        "benchmark": "compact",
        "quick": args.quick,
        "machine": machine(),
        # other jobs on the machine: the load average (1, 5, 15 min) before and after
        "load_average": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]},
        "batch_messages": BATCH,
        "spill_memory_bytes": spill_memory,
        "runs": runs,
        "targets": {
            "throughput_vs_full_decode_min": 0.25,
            "spill_peak_rss_note": "with spill, the key table stays under --memory; the "
            "process adds the interpreter and libraries (see the in-memory peak at 100 keys)",
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
