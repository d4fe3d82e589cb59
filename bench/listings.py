"""`topic list` and `ledger list` on many topics, against the floor of reading their nodes.

Generates (or reuses, ``--data DIR``) a RocksDB metadata store of N topics
(``persistent://public/bench-list/t-NNNNNN``, 10^5 by default), each with one closed ledger
of 10 entries (its ledger znode too) and one cursor, written with ledgerctl's own builders;
no bookie data (both commands read metadata only).

Measured on the same store, every measurement in a fresh process, the rounds interleaved;
CPU time is the child's user + system time (``os.wait4``), peak RSS its own ``VmHWM``
(written by the child at exit, as in bench/cli.py):

* ``topic_list``: ``ledgerctl topic list -o jsonl``; its lines are counted (one per topic);
* ``ledger_list``: ``ledgerctl ledger list -o jsonl`` (one line per ledger);
* ``topic_floor``: the floor of ``topic list``: with the metadata store client alone
  (``pulsarctl_py.stores.metadata``: ``children`` and ``get``, as the commands call
  them), list the folders of managed ledgers and every topic in them, and read each
  topic's znode, list its children and read each cursor's znode. The bytes only: nothing
  is decoded and nothing written;
* ``topic_scan``: what ``topic list`` reads since it scans (the floor of the way it reads
  now): the same client lists each folder (``children``) and reads it, topics and cursors,
  in one ordered pass (``scan_children``); nothing decoded;
* ``ledger_floor``: the floor of ``ledger list`` (its "own floor"): list every ledger
  znode under /ledgers with the store client and read each;
* ``raw_scan``: context, not a floor of either: one RocksDB iterator (rocksdict) over every
  key under /managed-ledgers and /ledgers, reading each value.

Ratios (min CPU of each): ``topic_list/ledger_floor`` (the goal of issue 24: <= 2),
``topic_list/topic_floor``, ``topic_list/topic_scan``, ``ledger_list/ledger_floor``.
Prints one JSON object.

    python bench/listings.py                  # 10^5 topics, 3 rounds
    python bench/listings.py --quick          # 2,000 topics, 1 round (smoke)
    python bench/listings.py --data DIR       # generate there once, reuse on the next run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine

NAMESPACE = "public/bench-list"
LAYOUT_VERSION = 1  # of the generated store (bench-listings.json); bump when it changes
INFO_FILE = "bench-listings.json"
GOALS: dict[str, tuple[str, float]] = {"topic_list/ledger_floor": ("<=", 2.0)}
PEAK_ENV = "BENCH_LISTINGS_PEAK_RSS_FILE"


# -- generation ---------------------------------------------------------------------------


def generate(root: Path, topics: int) -> dict[str, Any]:
    """Write the metadata store of ``topics`` topics under ``root/metadata``."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.decoders.checksums import DigestType
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata, LedgerState
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.stores.metadata import create_metadata_store

    start = time.perf_counter()
    with create_metadata_store(root / "metadata") as store:
        txn, pending = store.transaction(), 0
        for i in range(topics):
            name = mld.TopicName.parse(f"persistent://{NAMESPACE}/t-{i:06d}")
            ledger_id = 1000 + i
            info = mlpb.ManagedLedgerInfo()
            info.ledgerInfo.add(ledgerId=ledger_id, entries=10, size=1000, timestamp=1)
            cursor = mlpb.ManagedCursorInfo(
                cursorsLedgerId=-1, markDeleteLedgerId=ledger_id, markDeleteEntryId=4
            )
            md = LedgerMetadata(
                ensemble_size=1,
                write_quorum_size=1,
                ack_quorum_size=1,
                state=LedgerState.CLOSED,
                ensembles={0: ["127.0.0.1:3181"]},
                last_entry_id=9,
                length=1000,
                digest_type=DigestType.CRC32C,
                password=b"",
                ctime=1,
                custom_metadata=lm.pulsar_custom_metadata(name.persistence_name),
            )
            txn.create(name.ml_path, mld.build_info(info))
            txn.create(name.cursor_path("sub"), mld.build_info(cursor))
            txn.create(lm.ledger_path(ledger_id), lm.build(md))
            pending += 3
            if pending >= 30_000:
                txn.commit()
                txn, pending = store.transaction(), 0
        if pending:
            txn.commit()
    return {"topics": topics, "seconds": round(time.perf_counter() - start, 1)}


def prepare(data: Path | None, topics: int) -> tuple[Path, dict[str, Any], bool]:
    """The store's folder (generated unless ``data`` holds the same layout); temporary?"""
    if data is not None:
        info_path = data / INFO_FILE
        want = {"layout": LAYOUT_VERSION, "topics": topics}
        if info_path.exists():
            info = json.loads(info_path.read_text())
            if {k: info.get(k) for k in want} == want:
                return data, info, False
        if data.exists():
            shutil.rmtree(data)
        data.mkdir(parents=True)
        info = {**want, "generation": generate(data, topics)}
        info_path.write_text(json.dumps(info))
        return data, info, False
    root = Path(tempfile.mkdtemp(prefix="bench-listings-"))
    return root, {"topics": topics, "generation": generate(root, topics)}, True


# -- the floors, run in a child process ----------------------------------------------------

_FLOOR = """
import atexit, os, sys
def _peak():
    with open("/proc/self/status", encoding="ascii") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["{env}"], "w", encoding="ascii") as out:
        out.write(str(kib))
atexit.register(_peak)
kind, url = sys.argv[1], sys.argv[2]
count = 0
if kind == "raw_scan":
    import rocksdict
    read_only = rocksdict.AccessType.read_only()
    opts = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(url[len("rocksdb://"):], opts, access_type=read_only)
    for prefix, end in ((b"/ledgers/", b"/ledgers0"), (b"/managed-ledgers/", b"/managed-ledgers0")):
        it = db.iter()
        it.seek(prefix)
        while it.valid() and it.key() < end:
            count += len(it.value()) > 0
            it.next()
        del it
    db.close()
else:
    from pulsarctl_py.stores.metadata import open_metadata_store
    from pulsarctl_py.stores.metadata.base import join
    with open_metadata_store(url) as store:
        if kind == "topic_floor":
            from pulsarctl_py.stores.metadata import managed_ledger_dirs
            for _, folder in managed_ledger_dirs(store):
                for topic in store.children(folder):
                    path = join(folder, topic)
                    store.get(path)
                    for cursor in store.children(path):
                        store.get(join(path, cursor))
                    count += 1
        elif kind == "topic_scan":
            from pulsarctl_py.stores.metadata import managed_ledger_dirs
            for _, folder in managed_ledger_dirs(store):
                store.children(folder)
                for group in store.scan_children(folder):
                    count += group.data is not None
        else:
            from pulsarctl_py.stores.metadata import iter_ledger_paths
            for _, path in iter_ledger_paths(store):
                store.get(path)
                count += 1
print(count)
"""

# ``ledgerctl``'s entry point, reporting its own peak RSS at exit (as bench/cli.py's)
_LAUNCH = """
import atexit, os, sys
def _peak():
    with open("/proc/self/status", encoding="ascii") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["{env}"], "w", encoding="ascii") as out:
        out.write(str(kib))
atexit.register(_peak)
sys.argv[0] = "ledgerctl"
from pulsarctl_py.cli import run
run()
"""


def run_child(argv: list[str], floor: bool = False) -> dict[str, Any]:
    """Run ``argv`` with stdout on a pipe; its exit code, CPU, peak RSS and lines."""
    peak = tempfile.NamedTemporaryFile(prefix="bench-listings-rss-", delete=False)
    peak.close()
    env = {**os.environ, PEAK_ENV: peak.name}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as installed
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env
        )
        assert proc.stdout is not None
        lines = size = 0
        last = b""
        while chunk := proc.stdout.read(1 << 20):
            lines += chunk.count(b"\n")
            size += len(chunk)
            last = chunk
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    wall = time.perf_counter() - started
    own = Path(peak.name).read_text(encoding="ascii").strip()
    os.unlink(peak.name)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[3:]} exit {proc.returncode}: {stderr[-2000:]}")
    return {
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "wall_seconds": wall,
        "peak_rss_kib": int(own) if own else usage.ru_maxrss,
        "lines": lines,
        "count": int(last.strip().splitlines()[-1]) if floor else None,
    }


FLOOR_CODE = _FLOOR.replace("{env}", PEAK_ENV)
LAUNCH_CODE = _LAUNCH.replace("{env}", PEAK_ENV)


def command_argv(name: str, url: str) -> list[str]:
    if name in ("topic_floor", "topic_scan", "ledger_floor", "raw_scan"):
        return [sys.executable, "-c", FLOOR_CODE, name, url]
    what = {"topic_list": "topic", "ledger_list": "ledger"}[name]
    return [sys.executable, "-c", LAUNCH_CODE, what, "list", "-o", "jsonl", "--metadata-url", url]


MEASUREMENTS = (
    "topic_list",
    "ledger_list",
    "topic_floor",
    "topic_scan",
    "ledger_floor",
    "raw_scan",
)


def measure(url: str, topics: int, runs: int) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in MEASUREMENTS}
    want_lines = {"topic_list": topics, "ledger_list": topics}  # one JSON line each
    for _ in range(runs):
        for name in MEASUREMENTS:
            result = run_child(command_argv(name, url), floor=name not in want_lines)
            want = want_lines.get(name)
            if want is not None and result["lines"] != want:
                raise RuntimeError(f"{name} wrote {result['lines']} lines, not {want}")
            if name in ("topic_floor", "topic_scan", "ledger_floor") and result["count"] != topics:
                raise RuntimeError(f"{name} read {result['count']} topics or ledgers")
            results[name].append(result)
    out: dict[str, Any] = {}
    for name, rows in results.items():
        cpu = [r["cpu_seconds"] for r in rows]
        out[name] = {
            "cpu_seconds": {
                "min": round(min(cpu), 3),
                "median": round(statistics.median(cpu), 3),
                "max": round(max(cpu), 3),
            },
            "wall_seconds_min": round(min(r["wall_seconds"] for r in rows), 3),
            "peak_rss_mib": round(max(r["peak_rss_kib"] for r in rows) / 1024, 1),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 topics, 1 round")
    parser.add_argument("--data", type=Path, help="generate the store here once and reuse it")
    args = parser.parse_args(argv)
    topics, runs = (2_000, 1) if args.quick else (args.topics, args.runs)
    root, info, temporary = prepare(args.data, topics)
    try:
        load_before = os.getloadavg()
        figures = measure(f"rocksdb://{root / 'metadata'}", topics, runs)
        load_after = os.getloadavg()
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)

    def cpu(name: str) -> float:
        return max(figures[name]["cpu_seconds"]["min"], 1e-9)

    ratios = {
        "topic_list/ledger_floor": round(cpu("topic_list") / cpu("ledger_floor"), 3),
        "topic_list/topic_floor": round(cpu("topic_list") / cpu("topic_floor"), 3),
        "topic_list/topic_scan": round(cpu("topic_list") / cpu("topic_scan"), 3),
        "ledger_list/ledger_floor": round(cpu("ledger_list") / cpu("ledger_floor"), 3),
    }
    goals = {
        name: {
            "goal": f"{op} {bound}",
            "value": ratios[name],
            "pass": ratios[name] <= bound if op == "<=" else ratios[name] >= bound,
        }
        for name, (op, bound) in GOALS.items()
    }
    report = {
        "benchmark": "listings",
        "quick": args.quick,
        "machine": machine(),
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "store": info,
        "runs": runs,
        "measurements": figures,
        "ratios": ratios,
        "goals": goals,
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
