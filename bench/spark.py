"""Export of one topic on the local engine and on Spark ``local[1]`` and ``local[2]``.

Generates, deterministically and with ledgerctl's own writers, a topic of ``--entries``
entries in ``--ledgers`` ledgers (a RocksDB metadata store with its managed ledger and
BookKeeper ledger metadata, and a DbLedgerStorage bookie directory). Every entry is a
batch of ``--batch`` messages (keys of 10^4 values, values of 40-200 bytes, LZ4), with
broker entry metadata; a pool of distinct Pulsar entries is built once and only the
bookie header and digest differ per entry.

Each run is a fresh interpreter (``--child``) that exports the whole topic to Parquet with
:func:`pulsarctl_py.export.export_plan` and reports its wall time, the Spark session's
start-up time, rows, and its own peak RSS (the driver's Python process; the JVM and the
Python workers are other processes). From the local time per entry ``a``, Spark's time
per entry ``b`` and its start-up ``s``, the crossover is ``s / (a - b)`` entries (none
when Spark is not faster per entry). Prints one JSON object.

    python bench/spark.py                 # the figures in docs/performance.md
    python bench/spark.py --quick         # smoke run: 2,000 entries
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

from _machine import machine  # bench/ is on sys.path when a bench script runs

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


def child(root: Path, engine: str, master: str | None, split_entries: int) -> None:
    start = time.perf_counter()
    startup = 0.0
    from pulsarctl_py.engines import LocalEngine
    from pulsarctl_py.export import export_plan, topic_plan
    from pulsarctl_py.ledgers import LedgerSource

    url, dirs = f"rocksdb://{root / 'metadata'}", [str(root / "bookie")]
    if engine == "spark":
        from pulsarctl_py.engines.spark import SparkEngine
        from pulsarctl_py.spark.session import get_session

        session = get_session(master)
        startup = time.perf_counter() - start
        runner: Any = SparkEngine(session)
    else:
        runner = LocalEngine()
    with LedgerSource.open(url, dirs) as source:
        plan = topic_plan(
            source, TOPIC, metadata_url=url, bookie_dirs=dirs, split_entries=split_entries
        )
    begin = time.perf_counter()
    result = export_plan(plan, runner, root / f"out-{os.getpid()}.parquet")
    end = time.perf_counter()
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
                "total_s": round(end - start, 2),
                "driver_peak_rss_mib": round(
                    resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
                ),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--ledgers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--split-entries", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--child", nargs=3, metavar=("ROOT", "ENGINE", "MASTER"))
    args = ap.parse_args()
    if args.child:
        root, engine, master = args.child
        child(Path(root), engine, None if master == "-" else master, args.split_entries)
        return
    if args.quick:
        args.entries, args.split_entries = 2_000, 500
    root = Path(tempfile.mkdtemp(prefix="ledgerctl-bench-spark-", dir=args.tmp))
    try:
        gen_start = time.perf_counter()
        inputs = generate(root, args.entries, args.ledgers, args.batch)
        inputs["generation_s"] = round(time.perf_counter() - gen_start, 2)
        runs = {}
        for label, engine, master in (
            ("local", "local", "-"),
            ("spark_local_1", "spark", "local[1]"),
            ("spark_local_2", "spark", "local[2]"),
        ):
            proc = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    str(root),
                    engine,
                    master,
                    "--split-entries",
                    str(args.split_entries),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise SystemExit(f"{label} failed: {proc.stderr.strip().splitlines()[-1:]}")
            runs[label] = json.loads(proc.stdout.strip().splitlines()[-1])
            if runs[label]["rows"] != inputs["messages"]:
                raise SystemExit(f"{label}: {runs[label]['rows']} rows, not {inputs['messages']}")
        n = inputs["entries"]
        a = runs["local"]["export_s"] / n
        b = runs["spark_local_2"]["export_s"] / n
        s = runs["spark_local_2"]["startup_s"]
        report = {
            "benchmark": "spark-export",
            "machine": machine(),
            "inputs": inputs,
            "split_entries": args.split_entries,
            "runs": runs,
            "local_2_vs_local_1": round(
                runs["spark_local_1"]["export_s"] / runs["spark_local_2"]["export_s"], 2
            ),
            "spark_2_vs_local": round(
                runs["local"]["export_s"] / runs["spark_local_2"]["export_s"], 2
            ),
            "crossover_entries": None if b >= a else int(s / (a - b)),
        }
        print(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
