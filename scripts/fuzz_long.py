"""The long fuzz run (not in CI): mutate real inputs and feed them to every target.

    python scripts/fuzz_long.py --cases 100000 --seed 1

Seeds are the project's own test data (entries the official clients and BookKeeper wrote,
ledger metadata, entry logs, journals, shell hex dumps) plus entries with text that is
not UTF-8. Each case picks a target (tests/fuzz_targets.py), a seed and 1-4 mutations (bit
flips, byte sets, cuts, inserts, splices, length fields set to huge values). A case may
raise only LedgerctlError; a crash, a case slower than --case-seconds, or MemoryError under
--memory-mib is written to tests/data/fuzz-crashes/ as ``<target>-<sha256 prefix>.bin``
with a ``.txt`` saying what happened. Prints one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import signal
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fuzz_targets import CRASHES, DATA, TARGETS, run_target  # noqa: E402

BIG = [0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 1 << 24, 0x10000]


def seeds() -> dict[str, list[bytes]]:
    """Per target, the real inputs mutations start from."""
    bk = DATA / "bookkeeper"
    entries = [p.read_bytes() for p in sorted((DATA / "real-client").glob("*/*.bin"))]
    entries += [p.read_bytes() for p in sorted((bk / "offline" / "digest").glob("*/*.entry"))]
    entries += [p.read_bytes() for p in sorted((DATA / "upstream").rglob("raw*.bin"))]
    entries += _not_utf8_entries()
    texts = [
        p.read_bytes()[:4096]
        for p in sorted((bk / "live-dbledgerstorage" / "bk-shell").glob("*.txt"))
    ]
    texts += [e.hex().encode() for e in entries[:8]] + [_xxd(e) for e in entries[:8]]
    metadata = [p.read_bytes() for p in sorted((bk / "offline" / "ledger-metadata").glob("*.bin"))]
    logs = [p.read_bytes() for p in sorted(bk.rglob("*.log")) if p.stat().st_size < 1 << 20]
    journals = [p.read_bytes()[: 256 << 10] for p in sorted(bk.rglob("*.txn"))]
    indexes = [p.read_bytes() for p in sorted(bk.rglob("*.idx"))] or [bytes(1100)]
    ml = _ml_seeds()
    return {
        "entry": entries,
        "text": texts,
        "ledger-metadata": metadata,
        "ml": ml,
        "entrylog": logs,
        "journal": journals,
        "index": indexes,
    }


def _xxd(data: bytes) -> bytes:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        groups = " ".join(chunk[j : j + 2].hex() for j in range(0, len(chunk), 2))
        lines.append(f"{i:08x}: {groups}  ..")
    return "\n".join(lines).encode()


def _not_utf8_entries() -> list[bytes]:
    from tests.test_render_text import batched_entry, single_entry

    return [
        single_entry(b"k\xff", [(b"p\xfe", b"v")]),
        batched_entry([(b"\xc3", [(b"[/]", b"\xff")]), (None, [])]),
    ]


def _ml_seeds() -> list[bytes]:
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

    info = mlpb.ManagedLedgerInfo()
    info.ledgerInfo.add(ledgerId=3, entries=10, size=1234, timestamp=1)
    info.properties.add(key="index", value="9")
    cursor = mlpb.ManagedCursorInfo(cursorsLedgerId=-1, markDeleteLedgerId=3, markDeleteEntryId=4)
    return [
        info.SerializeToString(),
        cursor.SerializeToString(),
        mld.build_position_info(mlpb.PositionInfo(ledgerId=3, entryId=4)),
    ]


def mutate(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        n = len(buf)
        if op == 0 and n:  # flip a bit
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # set a byte
            buf[rng.randrange(n)] = rng.choice([0, 0xFF, 0x80, 0x0E, 0x01, rng.randrange(256)])
        elif op == 2 and n:  # cut
            buf = buf[: rng.randrange(n)]
        elif op == 3:  # insert
            at = rng.randrange(n + 1)
            buf[at:at] = rng.randbytes(rng.randint(1, 16))
        elif op == 4 and n:  # delete a span
            at = rng.randrange(n)
            del buf[at : at + rng.randint(1, 16)]
        elif op == 5 and n >= 4:  # a length field claims a lot
            at = rng.randrange(n - 3)
            buf[at : at + 4] = struct.pack(">I", rng.choice(BIG))
        elif op == 6 and pool:  # splice another seed in
            other = rng.choice(pool)
            at = rng.randrange(len(buf) + 1)
            buf[at:] = other[rng.randrange(len(other) + 1) :]
    return bytes(buf)


class Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout


def save(target: str, data: bytes, what: str) -> Path:
    CRASHES.mkdir(parents=True, exist_ok=True)
    name = f"{target}-{hashlib.sha256(data).hexdigest()[:12]}"
    path = CRASHES / f"{name}.bin"
    path.write_bytes(data)
    (CRASHES / f"{name}.txt").write_text(what)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--case-seconds", type=float, default=5.0)
    parser.add_argument("--memory-mib", type=int, default=2048)
    parser.add_argument("--targets", default=",".join(TARGETS))
    args = parser.parse_args()

    limit = args.memory_mib << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(args.seed)
    pool = seeds()
    targets = [t for t in args.targets.split(",") if pool.get(t)]
    counts = dict.fromkeys(targets, 0)
    crashes: list[dict[str, str]] = []
    slowest = 0.0
    started = time.monotonic()
    for case in range(args.cases):
        target = targets[case % len(targets)]
        data = mutate(rng.choice(pool[target]), rng, pool[target])
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, args.case_seconds)
        try:
            run_target(target, data, random.Random(case))
        except Timeout:
            path = save(target, data, f"slower than {args.case_seconds} s (case {case})\n")
            crashes.append({"target": target, "file": path.name, "error": "timeout"})
        except Exception as exc:  # the point: anything but LedgerctlError is a crash
            what = "".join(traceback.format_exception(exc))
            path = save(target, data, f"case {case}, seed {args.seed}\n{what}")
            crashes.append({"target": target, "file": path.name, "error": repr(exc)[:200]})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.monotonic() - t0)
        counts[target] += 1
    seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {
                "cases": args.cases,
                "seed": args.seed,
                "per_target": counts,
                "crashes": crashes,
                "seconds": round(seconds, 1),
                "cases_per_second": round(args.cases / seconds, 1),
                "slowest_case_seconds": round(slowest, 3),
                "peak_rss_mib": round(peak / (1 << 20), 1),
            },
            indent=2,
        )
    )
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
