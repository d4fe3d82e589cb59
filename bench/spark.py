"""Export of one topic on the local engine and on Spark ``local[1]`` and ``local[2]``, and
the crossover of ``--engine auto``.

Generates, deterministically and with ledgerctl's own writers, topics of ``--entries``
entries (and of each of ``--sizes``) in ``--ledgers`` ledgers (a RocksDB metadata store
with its managed ledger and BookKeeper ledger metadata, and a DbLedgerStorage bookie
directory). Every entry is a batch of ``--batch`` messages (keys of 10^4 values, values of
40-200 bytes, LZ4), with broker entry metadata; a pool of distinct Pulsar entries is built
once and only the bookie header and digest differ per entry.

Each run is a fresh interpreter (``--child``), as a command would be, that exports the
whole topic to Parquet with :func:`pulsarctl_py.export.export_plan` and reports its wall
time, the Spark session's start-up, the driver's join of the part files, rows, its own
peak RSS, the load average, and the CPU time of every process: the driver, the JVM and
each Spark Python worker (from /proc, before the session stops).

* Scaling: ``--entries`` on Spark ``local[1]`` and ``local[2]``: ``local_2_vs_local_1``
  from wall times, and ``local_2_vs_local_1_on_idle_cores`` from CPU times (the serial
  driver work, the busiest worker, the JVM's share of the cores): the figure that does
  not depend on what other jobs took of a shared machine.
* Compaction (``compact`` without --apply: phase one, phase two's rebatching) of the
  ``--entries`` topic on the same three engines; every engine's report must be the same.
* Crossover: at each of ``--sizes`` the local engine and Spark ``local[*]`` (what ``auto``
  starts), each total counted from the interpreter's start (imports, session start-up,
  plan, export). ``crossover_entries`` is where Spark's wall time beats the local one's
  (interpolated between sizes), ``crossover_entries_on_idle_cores`` the same from CPU
  times, and ``..._extrapolated`` where the lines through the two largest sizes cross.

    python bench/spark.py                 # the figures in docs/performance.md
    python bench/spark.py --quick         # smoke: 400 entries, local and local[2] (export),
                                          # local (compaction)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import machine, peak_rss_mib  # bench/ is on sys.path when a bench script runs

TOPIC = "persistent://public/default/bench"
SEED = 20261123
POOL = 200


def generate(root: Path, entries: int, ledgers: int, batch: int) -> dict[str, Any]:
    from pulsarctl_py.decoders import bookkeeper
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
    from pulsarctl_py.decoders.checksums import DigestType, master_key
    from pulsarctl_py.decoders.codecs import compress
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata, LedgerState
    from pulsarctl_py.decoders.payload import build_batch
    from pulsarctl_py.decoders.pulsar import build_entry
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.proto import pulsar_api_pb2 as api
    from pulsarctl_py.stores.bookie import write_db_ledger_dir
    from pulsarctl_py.stores.metadata import create_metadata_store

    rnd = random.Random(SEED)
    t0 = 1_790_000_000_000
    pool = []
    for p in range(POOL):
        records = []
        for i in range(batch):
            smm = api.SingleMessageMetadata(payload_size=0, sequence_id=p * batch + i)
            smm.partition_key = f"key-{rnd.randrange(10_000)}"
            value = bytes(rnd.getrandbits(8) for _ in range(8)) * rnd.randrange(5, 25)
            records.append((smm, value))
        plain = build_batch(records)
        md = api.MessageMetadata(
            producer_name="bench",
            sequence_id=p * batch,
            publish_time=t0 + p,
            num_messages_in_batch=batch,
            compression=api.LZ4,
            uncompressed_size=len(plain),
        )
        pool.append((md, compress(api.LZ4, plain)))
    name = mld.TopicName.parse(TOPIC)
    info = mlpb.ManagedLedgerInfo()
    stored: list[bytes] = []
    per_ledger = -(-entries // ledgers)
    index = -1
    nodes: dict[str, bytes] = {}
    done = 0
    for n in range(ledgers):
        ledger_id = 10 + n
        count = min(per_ledger, entries - done)
        if count <= 0:
            break
        length = 0
        for entry_id in range(count):
            md, payload = pool[(done + entry_id) % POOL]
            index += batch
            bem = api.BrokerEntryMetadata(broker_timestamp=t0 + done + entry_id, index=index)
            data = build_entry(md, payload, checksum=True, broker_entry_metadata=bem)
            length += len(data)
            header = BookieEntryHeader(ledger_id, entry_id, entry_id - 1, length)
            stored.append(bookkeeper.build(header, data, DigestType.CRC32C, b""))
        done += count
        info.ledgerInfo.add(ledgerId=ledger_id, entries=count, size=length, timestamp=t0)
        nodes[lm.ledger_path(ledger_id)] = lm.build(
            LedgerMetadata(
                ensemble_size=1,
                write_quorum_size=1,
                ack_quorum_size=1,
                state=LedgerState.CLOSED,
                ensembles={0: ["127.0.0.1:3181"]},
                last_entry_id=count - 1,
                length=length,
                digest_type=DigestType.CRC32C,
                password=b"",
                ctime=t0,
                custom_metadata=lm.pulsar_custom_metadata(name.persistence_name),
            )
        )
    nodes[name.ml_path] = mld.build_info(info)
    store = create_metadata_store(root / "metadata")
    try:
        for path in sorted(nodes):
            parts = path.split("/")
            for i in range(2, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in nodes and store.exists(parent) is None:
                    store.put(parent, b"")
            store.put(path, nodes[path])
    finally:
        store.close()
    write_db_ledger_dir(root / "bookie" / "current", stored, master_key(b""))
    return {
        "entries": done,
        "messages": done * batch,
        "ledgers": len(info.ledgerInfo),
        "stored_bytes": sum(len(e) for e in stored),
    }


def _proc_cpu(pid: int) -> tuple[str, float]:
    """(command, CPU seconds) of a live process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        stat = f.read()
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return name, (int(fields[11]) + int(fields[12])) / ticks


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (the JVM, its Python daemon and workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for kid in children.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out


def cpu_by_process() -> dict[str, Any]:
    """CPU seconds of this (driver) process and of each live descendant, by kind."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, Any] = {"driver": round(usage.ru_utime + usage.ru_stime, 2)}
    workers = []
    jvm = 0.0
    for pid in _descendants(os.getpid()):
        try:
            name, cpu = _proc_cpu(pid)
        except OSError:
            continue
        if name.startswith("java"):
            jvm += cpu
        else:
            workers.append(round(cpu, 2))
    if jvm or workers:
        out["jvm"] = round(jvm, 2)
        out["python_workers"] = sorted(workers, reverse=True)
    return out


def child(
    root: Path,
    engine: str,
    master: str | None,
    split_entries: int,
    conf: list[tuple[str, str]],
    task: str = "export",
) -> None:
    start = time.perf_counter()
    startup = 0.0
    from pulsarctl_py.engines import LocalEngine
    from pulsarctl_py.export import export_plan, topic_plan
    from pulsarctl_py.ledgers import LedgerSource

    url, dirs = f"rocksdb://{root / 'metadata'}", [str(root / "bookie")]
    if engine == "spark":
        from pulsarctl_py.engines.spark import SparkEngine
        from pulsarctl_py.spark.session import get_session

        session = get_session(master, conf)
        startup = time.perf_counter() - start
        runner: Any = SparkEngine(session)
    else:
        runner = LocalEngine()
    if task == "compact":
        compaction(engine, master, url, dirs, split_entries, start, startup)
        return
    with LedgerSource.open(url, dirs) as source:
        plan = topic_plan(
            source, TOPIC, metadata_url=url, bookie_dirs=dirs, split_entries=split_entries
        )
    import pulsarctl_py.export as export_module

    joined: dict[str, float] = {}
    join = export_module._join

    def timed_join(*args: Any, **kwargs: Any) -> None:
        # the driver's serial part: the part files joined into one file, in plan order
        t = time.perf_counter()
        join(*args, **kwargs)
        joined["join_s"] = time.perf_counter() - t

    export_module._join = timed_join
    before = cpu_by_process()
    begin = time.perf_counter()
    result = export_plan(plan, runner, root / f"out-{os.getpid()}.parquet")
    end = time.perf_counter()
    after = cpu_by_process()
    os.unlink(root / f"out-{os.getpid()}.parquet")
    print(
        json.dumps(
            {
                "engine": engine,
                "master": master,
                "rows": result.rows,
                "splits": result.splits,
                "startup_s": round(startup, 2),
                "export_s": round(end - begin, 2),
                "join_s": round(joined.get("join_s", 0.0), 2),
                **figures(before, after, start, end),
            }
        )
    )


def figures(
    before: dict[str, Any], after: dict[str, Any], start: float, end: float
) -> dict[str, Any]:
    """What every run reports besides its own time: CPU per process during the task, CPU
    before it (imports, the session, the plan), the load, the total, the driver's RSS."""
    return {
        "cpu_s": {
            "driver": round(after["driver"] - before["driver"], 2),
            "jvm": round(after.get("jvm", 0.0) - before.get("jvm", 0.0), 2),
            "python_workers": after.get("python_workers", []),
        },
        "startup_cpu_s": round(before["driver"] + before.get("jvm", 0.0), 2),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "total_s": round(end - start, 2),
        "driver_peak_rss_mib": peak_rss_mib(),
    }


def compaction(
    engine: str,
    master: str | None,
    url: str,
    dirs: list[str],
    split_entries: int,
    start: float,
    startup: float,
) -> None:
    """Compute the topic's compaction (phase one, phase two's rebatching; nothing applied)
    on the engine this child started; print its figures and a digest of its report."""
    import hashlib

    from pulsarctl_py.compaction import compact

    before = cpu_by_process()
    begin = time.perf_counter()
    report = compact(
        TOPIC, metadata_url=url, bookie_dirs=dirs, engine=engine, split_entries=split_entries
    )
    end = time.perf_counter()
    after = cpu_by_process()
    doc = report.to_json()
    doc.pop("engine")
    doc.pop("seconds", None)
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    print(
        json.dumps(
            {
                "engine": engine,
                "master": master,
                "kept": report.stats.kept,
                "report_sha256": digest,
                "startup_s": round(startup, 2),
                "compact_s": round(end - begin, 2),
                **figures(before, after, start, end),
            }
        )
    )


def run_child(
    root: Path,
    engine: str,
    master: str,
    split_entries: int,
    conf: list[str],
    task: str = "export",
) -> dict[str, Any]:
    """One export (or compaction) in a fresh interpreter (and, on Spark, a fresh
    session); its JSON."""
    command = [sys.executable, __file__, "--child", str(root), engine, master]
    command += ["--split-entries", str(split_entries), "--task", task]
    for item in conf:
        command += ["--spark-conf", item]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{engine} {master} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def on_idle_cores(run: dict[str, Any], cores: int) -> float:
    """What a run would take with its cores to itself, from the CPU time of its processes.

    The start-up and the driver's own work (the plan, the join of the parts) are serial;
    the Python workers run side by side, so the busiest one is the critical path (the
    daemon that forks them is one of the list, and idle meanwhile); the JVM's scheduling
    shares the cores with them. On a machine shared with other jobs this is the figure
    that does not depend on how much of the cores the others took.
    """
    cpu = run["cpu_s"]
    workers = cpu["python_workers"]
    busiest = max(workers) if workers else 0.0
    return round(run["startup_cpu_s"] + cpu["driver"] + busiest + cpu["jvm"] / cores, 2)


def crossover(sizes: list[int], local: list[float], spark: list[float]) -> int | None:
    """The entries from which Spark's total (start-up included) beats the local engine's.

    Between the largest size where local wins and the next one, where Spark wins, the
    difference of the two totals is interpolated linearly; None when Spark never wins,
    and the smallest size when it already wins there.
    """
    for i, n in enumerate(sizes):
        if spark[i] < local[i]:
            if i == 0:
                return n
            d0, d1 = spark[i - 1] - local[i - 1], spark[i] - local[i]
            return int(sizes[i - 1] + (n - sizes[i - 1]) * d0 / (d0 - d1))
    return None


def extrapolated(sizes: list[int], local: list[float], spark: list[float]) -> int | None:
    """Where the lines through the two largest sizes' totals cross, past the largest size
    (Spark's start-up over the difference of the per-entry times); None when Spark is not
    faster per entry there."""
    if len(sizes) < 2:
        return None
    dn = sizes[-1] - sizes[-2]
    a, b = (local[-1] - local[-2]) / dn, (spark[-1] - spark[-2]) / dn
    if b >= a:
        return None
    return int(sizes[-1] + (spark[-1] - local[-1]) / (a - b))


def compactions(root: Path, masters: list[tuple[str, str, str]], args: Any) -> dict[str, Any]:
    """The topic's compaction on each engine: the same report everywhere, and the scaling
    of local[2] against local[1] (wall and idle cores, as for the export)."""
    runs = {
        label: run_child(root, engine, master, args.split_entries, args.spark_conf, "compact")
        for label, engine, master in masters
    }
    if len({r["report_sha256"] for r in runs.values()}) != 1:
        raise SystemExit(f"the compaction reports differ between engines: {runs}")
    out: dict[str, Any] = {"runs": runs}
    one, two = runs.get("spark_local_1"), runs.get("spark_local_2")
    if one is not None and two is not None:
        out["local_2_vs_local_1"] = round(one["compact_s"] / two["compact_s"], 2)
        idle = [
            on_idle_cores(one, 1) - one["startup_cpu_s"],
            on_idle_cores(two, 2) - two["startup_cpu_s"],
        ]
        out["local_2_vs_local_1_on_idle_cores"] = round(idle[0] / idle[1], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 10^6 entries of 10 messages: the 10^7 messages the Spark issue's goals are set at
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument(
        "--sizes",
        default="10000,100000,300000,1000000",
        help="topic sizes (entries) where the local engine and Spark local[*] are timed",
    )
    ap.add_argument("--ledgers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--split-entries", type=int, default=5_000)
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--child", nargs=3, metavar=("ROOT", "ENGINE", "MASTER"))
    ap.add_argument("--task", choices=("export", "compact"), default="export")
    ap.add_argument(
        "--no-compact", action="store_true", help="skip the compaction runs (phase one, two)"
    )
    args = ap.parse_args()
    if args.child:
        root, engine, master = args.child
        child(
            Path(root),
            engine,
            None if master == "-" else master,
            args.split_entries,
            [tuple(c.split("=", 1)) for c in args.spark_conf],
            args.task,
        )
        return
    sizes = sorted({int(n) for n in args.sizes.split(",") if n})
    if args.quick:  # one tiny topic, one Spark session: the smoke test
        args.entries, args.split_entries, sizes = 400, 100, []
    root = Path(tempfile.mkdtemp(prefix="ledgerctl-bench-spark-", dir=args.tmp))
    topics: dict[int, tuple[Path, dict[str, Any]]] = {}

    def topic(n: int) -> tuple[Path, dict[str, Any]]:
        if n not in topics:
            where = root / f"topic-{n}"
            start = time.perf_counter()
            inputs = generate(where, n, args.ledgers, args.batch)
            inputs["generation_s"] = round(time.perf_counter() - start, 2)
            topics[n] = (where, inputs)
        return topics[n]

    def export(n: int, engine: str, master: str) -> dict[str, Any]:
        where, inputs = topic(n)
        out = run_child(where, engine, master, args.split_entries, args.spark_conf)
        if out["rows"] != inputs["messages"]:
            raise SystemExit(f"{engine} {master}: {out['rows']} rows, not {inputs['messages']}")
        return out

    try:
        masters = [("local", "local", "-"), ("spark_local_2", "spark", "local[2]")]
        if not args.quick:
            masters.insert(1, ("spark_local_1", "spark", "local[1]"))
        runs = {label: export(args.entries, engine, master) for label, engine, master in masters}
        report: dict[str, Any] = {
            "benchmark": "spark-export",
            "machine": machine(),
            "inputs": topic(args.entries)[1],
            "split_entries": args.split_entries,
            "spark_conf": args.spark_conf,
            "runs": runs,
        }
        if "spark_local_1" in runs:
            one, two = runs["spark_local_1"], runs["spark_local_2"]
            report["local_2_vs_local_1"] = round(one["export_s"] / two["export_s"], 2)
            # the same on idle cores, from CPU times (start-up left out, as export_s does)
            idle = [
                on_idle_cores(one, 1) - one["startup_cpu_s"],
                on_idle_cores(two, 2) - two["startup_cpu_s"],
            ]
            report["local_2_vs_local_1_on_idle_cores"] = round(idle[0] / idle[1], 2)
        report["spark_2_vs_local"] = round(
            runs["local"]["export_s"] / runs["spark_local_2"]["export_s"], 2
        )
        if not args.no_compact:  # --quick: on the local engine only
            chosen = masters[:1] if args.quick else masters
            report["compaction"] = compactions(topic(args.entries)[0], chosen, args)
        # the crossover: what `--engine auto` weighs, each run as a command would be (a
        # fresh interpreter; on Spark a fresh local[*] session, its start-up included)
        points = []
        cores = os.cpu_count() or 1
        for n in sizes:
            local = export(n, "local", "-")
            spark = export(n, "spark", "local[*]")
            points.append(
                {
                    "entries": n,
                    "local_s": local["total_s"],
                    "spark_s": spark["total_s"],
                    "spark_startup_s": spark["startup_s"],
                    "spark_driver_peak_rss_mib": spark["driver_peak_rss_mib"],
                    "local_peak_rss_mib": local["driver_peak_rss_mib"],
                    "local_on_idle_cores_s": on_idle_cores(local, 1),
                    "spark_on_idle_cores_s": on_idle_cores(spark, cores),
                    "load_average": spark["load_average"],
                }
            )
        report["sizes"] = points
        entries = [p["entries"] for p in points]
        report["crossover_entries"] = crossover(
            entries, [p["local_s"] for p in points], [p["spark_s"] for p in points]
        )
        idle_local = [p["local_on_idle_cores_s"] for p in points]
        idle_spark = [p["spark_on_idle_cores_s"] for p in points]
        report["crossover_entries_on_idle_cores"] = crossover(entries, idle_local, idle_spark)
        report["crossover_entries_on_idle_cores_extrapolated"] = extrapolated(
            entries, idle_local, idle_spark
        )
        print(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
