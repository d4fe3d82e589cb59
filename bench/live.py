"""Reading a ledger from a bookie over the network vs reading the same directory offline.

Generates, with ledgerctl's own writers, a DbLedgerStorage ledger dir holding one ledger
of N entries with 1 KiB payloads (CRC32C digest, empty password, as Pulsar writes them),
and a RocksDB metadata store whose ledger metadata names one bookie. Then, best of
``--runs``, in this process:

* offline: ``BookieStore.read_entries`` over the directory, with each entry's digest
  verified (``digest_ok``), as ``LiveBookieStore`` does;
* live: ``LiveBookieStore.read_entries`` through the test bookie (tests/support/live_bookie.py,
  run as a separate process serving the same directory), protocol v3, with pipelining
  (64 reads in flight, the default) and without (1 in flight); also v2 pipelined.

The test bookie runs in its own process. With ``--preload`` (the default) it holds the
ledger's entries in memory, like a bookie's read cache, with every answer to a read
encoded once, so serving a read is a look-up and a copy and the figures measure the
client (the test bookie's CPU lands on the same cores as the reader's; a real bookie's
does not). ``--no-preload`` makes it parse every request and read every entry from the
directory through the offline store.
Goal: live pipelined >= 50% of offline entries/s at 1 KiB entries. Prints one JSON object.

    python bench/live.py              # the figures in docs/performance.md (50k entries)
    python bench/live.py --quick      # smoke run (2k entries)

With ``--sandbox DIR``: real bookies, those of ``scripts/sandbox`` (started in DIR, and
stopped after, unless DIR already holds a running cluster). BookKeeper's own Java client
(bench/java/LedgerBench.java, compiled against the sandbox's jars) writes one ledger of N
entries of 1 KiB (CRC32C digest, the empty password, ensemble 3, write and ack quorum 3:
every bookie stores every entry), then, interleaved in the same run, ``--runs`` times:

* ``java``: BookKeeper's client reads it (``readEntries`` in batches of 1,000, every
  digest verified), timed in its JVM (one JVM for all runs: its JIT warms up as a
  long-running reader's would);
* ``live``: ledgerctl's ``LiveBookieStore.read_entries`` reads it from the bookies,
  every entry's digest verified (``digest_ok``);

and after stopping the bookies (started again after), ``offline``: ledgerctl's
``BookieStore.read_entries`` over the first bookie's ledger directories, digests verified.
Goal: live >= 50% of Java's entries/s (median over median; the min/median/max of every
variant are reported, with the load average).

    python bench/live.py --sandbox DIR --entries 1000000 --runs 3   # the issue's size
    python bench/live.py --sandbox DIR --entries 2000 --runs 1      # smoke (tests)
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

from _machine import machine  # bench/ is on sys.path when a bench script runs
from _sandbox import ensure_running
from _sandbox import sandbox as _sandbox

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.live_bookie, the test bookie

from pulsarctl_py.decoders import bookkeeper  # noqa: E402
from pulsarctl_py.decoders import ledger_metadata as lm  # noqa: E402
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader  # noqa: E402
from pulsarctl_py.decoders.checksums import DigestType, master_key  # noqa: E402
from pulsarctl_py.stores.bookie import open_bookie, write_db_ledger_dir  # noqa: E402
from pulsarctl_py.stores.live import ClientOptions, LiveBookieStore, digest_ok  # noqa: E402
from pulsarctl_py.stores.metadata import (  # noqa: E402
    create_ledger,
    create_metadata_store,
    open_metadata_store,
)

LEDGER_ID = 7
BOOKIE_ID = "bookie-0.example:3181"
PAYLOAD = 1024
PASSWORD = b""


def generate(root: Path, entries: int) -> tuple[Path, str, int]:
    """The bookie dir, the metadata URL, and the bytes of all stored entries."""
    total = 0

    def stored():
        nonlocal total
        length = 0
        for entry_id in range(entries):
            payload = (entry_id.to_bytes(8, "big") * (PAYLOAD // 8))[:PAYLOAD]
            length += len(payload)
            header = BookieEntryHeader(LEDGER_ID, entry_id, entry_id - 1, length)
            data = bookkeeper.build(header, payload, DigestType.CRC32C, PASSWORD)
            total += len(data)
            yield data

    bookie_dir = root / "bookie"
    write_db_ledger_dir(bookie_dir / "current", stored(), master_key(PASSWORD))
    md = lm.LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        state=lm.LedgerState.CLOSED,
        ensembles={0: [BOOKIE_ID]},
        last_entry_id=entries - 1,
        length=entries * PAYLOAD,
        digest_type=DigestType.CRC32C,
        password=PASSWORD,
    )
    with create_metadata_store(root / "metadata") as store:
        create_ledger(store, LEDGER_ID, md)
    return bookie_dir, f"rocksdb://{root / 'metadata'}", total


def read_offline(bookie_dir: Path) -> tuple[int, int, float, float]:
    with open_bookie([bookie_dir]) as store:
        cpu = time.process_time()
        start = time.perf_counter()
        count = size = 0
        for s in store.read_entries(LEDGER_ID):
            if digest_ok(s.data, LEDGER_ID, s.entry_id, DigestType.CRC32C, PASSWORD) is not True:
                raise SystemExit(f"offline entry {s.entry_id} does not verify")
            count += 1
            size += len(s.data)
        return count, size, time.perf_counter() - start, time.process_time() - cpu


def read_live(url: str, address: str, window: int, v2: bool) -> tuple[int, int, float, float]:
    options = ClientOptions(addresses=((BOOKIE_ID, address),), window=window, v2=v2)
    with open_metadata_store(url) as md, LiveBookieStore(md, options) as store:
        store.metadata_of(LEDGER_ID)  # metadata read outside the timing
        cpu = time.process_time()
        start = time.perf_counter()
        count = size = 0
        for s in store.read_entries(LEDGER_ID, 0, None):
            count += 1
            size += len(s.data)
        return count, size, time.perf_counter() - start, time.process_time() - cpu


def server_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) the test bookie process used so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def figures(
    count: int, size: int, seconds: float, cpu: float, server: float | None = None
) -> dict[str, Any]:
    out = {
        "entries": count,
        "seconds": round(seconds, 3),
        "entries_per_s": round(count / seconds),
        "mb_per_s": round(size / seconds / 1e6, 1),
        "reader_cpu_seconds": round(cpu, 3),  # this process only, not the test bookie
        "reader_cpu_us_per_entry": round(cpu / count * 1e6, 2),
    }
    if server is not None:
        out["bookie_cpu_seconds"] = round(server, 3)  # the test bookie process's share
        out["bookie_cpu_us_per_entry"] = round(server / count * 1e6, 2)
    return out


def _c_parser() -> bool:
    """Whether the live client parses v3 answers with the C extension."""
    from pulsarctl_py.stores.live import client

    return client._NATIVE is not None


# -- real bookies: the sandbox ---------------------------------------------------------------

JAVA_SOURCE = ROOT / "bench" / "java" / "LedgerBench.java"
#: entries per readEntries call of the Java reader (its reads of a call are in flight at once)
JAVA_BATCH = 1000


def _java(classes: Path, classpath: str, cluster: dict[str, Any], *args: str) -> Any:
    conf = Path(cluster["broker"]["conf"]).parent / "log4j2.xml"
    command = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-cp", f"{classes}{os.pathsep}{classpath}"]
    command += [f"-Dlog4j2.configurationFile={conf}", "LedgerBench"]
    command += [cluster["bookkeeper_metadata_url"], *args]  # BookKeeper's metadataServiceUri
    done = subprocess.run(command, capture_output=True, text=True, timeout=7200)
    if done.returncode != 0:
        raise SystemExit(f"LedgerBench {' '.join(args)}: {done.stderr.strip()[-2000:]}")
    # the client's log may share stdout: the answer is the line LedgerBench marks
    answer = [line for line in done.stdout.splitlines() if line.startswith("LEDGERBENCH ")]
    if not answer:
        raise SystemExit(f"LedgerBench {' '.join(args)} gave no answer: {done.stdout[-2000:]}")
    return json.loads(answer[-1].split(" ", 1)[1])


def read_live_cluster(url: str, ledger_id: int) -> tuple[int, int, float, float]:
    with open_metadata_store(url) as md, LiveBookieStore(md, ClientOptions()) as store:
        store.metadata_of(ledger_id)  # metadata read outside the timing
        cpu = time.process_time()
        start = time.perf_counter()
        count = size = 0
        for s in store.read_entries(ledger_id, 0, None):
            if digest_ok(s.data, ledger_id, s.entry_id, DigestType.CRC32C, PASSWORD) is not True:
                raise SystemExit(f"live entry {s.entry_id} does not verify")
            count += 1
            size += len(s.data)
        return count, size, time.perf_counter() - start, time.process_time() - cpu


def read_offline_dirs(dirs: list[Path], ledger_id: int) -> tuple[int, int, float, float]:
    with open_bookie(dirs) as store:
        cpu = time.process_time()
        start = time.perf_counter()
        count = size = 0
        for s in store.read_entries(ledger_id):
            if digest_ok(s.data, ledger_id, s.entry_id, DigestType.CRC32C, PASSWORD) is not True:
                raise SystemExit(f"offline entry {s.entry_id} does not verify")
            count += 1
            size += len(s.data)
        return count, size, time.perf_counter() - start, time.process_time() - cpu


def _spread(rates: list[float]) -> dict[str, int]:
    return {
        "min": round(min(rates)),
        "median": round(statistics.median(rates)),
        "max": round(max(rates)),
    }


def run_sandbox(directory: Path, entries: int, runs: int) -> dict[str, Any]:
    """The --sandbox benchmark (see the module's text); the report."""
    own = ensure_running(directory)
    classes = Path(tempfile.mkdtemp(prefix="ledgerctl-bench-java-"))
    try:
        cluster = json.loads((directory / "cluster.json").read_text())
        classpath = _sandbox("classpath").strip()
        javac = subprocess.run(
            ["javac", "-nowarn", "-cp", classpath, "-d", str(classes), str(JAVA_SOURCE)],
            capture_output=True,
            text=True,
        )
        if javac.returncode != 0:
            raise SystemExit(f"javac LedgerBench.java: {javac.stderr.strip()[-2000:]}")
        written = _java(
            classes, classpath, cluster, "write", str(entries), str(PAYLOAD), "3", "3", "3"
        )
        ledger_id = int(written["ledger_id"])
        url = cluster["bookkeeper_metadata_url"]
        rates: dict[str, list[float]] = {"java": [], "live": []}
        cpu: dict[str, list[float]] = {"java": [], "live": []}
        java_runs = _java(
            classes, classpath, cluster, "read", str(ledger_id), str(runs), str(JAVA_BATCH)
        )["runs"]
        for run in java_runs:
            if run["entries"] != entries:
                raise SystemExit(f"the Java client read {run['entries']} entries, not {entries}")
            rates["java"].append(run["entries"] / run["seconds"])
            cpu["java"].append(run["cpu_seconds"] / run["entries"] * 1e6)
        for _ in range(runs):
            count, _size, seconds, used = read_live_cluster(url, ledger_id)
            if count != entries:
                raise SystemExit(f"ledgerctl's live store read {count} entries, not {entries}")
            rates["live"].append(count / seconds)
            cpu["live"].append(used / count * 1e6)
        load_live = [round(x, 2) for x in os.getloadavg()]
        bookies = cluster["bookies"]
        for bookie in bookies:
            _sandbox("stop", str(directory), "--bookie", bookie["id"])
        try:
            dirs = [Path(d) for d in bookies[0]["ledger_dirs"]]
            rates["offline"], cpu["offline"] = [], []
            for _ in range(runs):
                count, _size, seconds, used = read_offline_dirs(dirs, ledger_id)
                if count != entries:
                    raise SystemExit(f"the offline store read {count} entries, not {entries}")
                rates["offline"].append(count / seconds)
                cpu["offline"].append(used / count * 1e6)
        finally:
            if not own:
                for bookie in bookies:
                    _sandbox("start", str(directory), "--bookie", bookie["id"])
        median = {name: statistics.median(r) for name, r in rates.items()}
        return {
            "benchmark": "live-sandbox",
            "machine": machine(),
            "ledger": {
                "ledger_id": ledger_id,
                "entries": entries,
                "payload_bytes": PAYLOAD,
                "digest_type": "CRC32C",
                "ensemble_write_ack": [3, 3, 3],
                "written_by": "BookKeeper Java client (bench/java/LedgerBench.java)",
                "write_seconds": round(written["seconds"], 2),
            },
            "bookkeeper_version": cluster.get("bookkeeper_version"),
            "runs": runs,
            "entries_per_s": {name: _spread(r) for name, r in rates.items()},
            "reader_cpu_us_per_entry": {
                name: round(statistics.median(c), 2) for name, c in cpu.items()
            },
            "live_vs_java": round(median["live"] / median["java"], 2),
            "live_vs_java_best": round(max(rates["live"]) / max(rates["java"]), 2),
            "offline_vs_java": round(median["offline"] / median["java"], 2),
            "goal": {
                "live_vs_java_at_least": 0.5,
                "met": median["live"] >= median["java"] / 2,
            },
            "load_average": {"reads": load_live, "end": [round(x, 2) for x in os.getloadavg()]},
        }
    finally:
        shutil.rmtree(classes, ignore_errors=True)
        if own:
            _sandbox("down", str(directory))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2k entries, one run")
    parser.add_argument("--preload", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--tmp", type=Path, default=None, help="where to generate")
    parser.add_argument(
        "--sandbox",
        type=Path,
        metavar="DIR",
        help="real bookies: the scripts/sandbox cluster in DIR (started there when absent)",
    )
    args = parser.parse_args(argv)
    if args.sandbox is not None:
        entries, runs = (2_000, 1) if args.quick else (args.entries, args.runs)
        print(json.dumps(run_sandbox(args.sandbox.resolve(), entries, runs), indent=1))
        return 0
    entries, runs = (2_000, 1) if args.quick else (args.entries, args.runs)
    root = Path(tempfile.mkdtemp(prefix="ledgerctl-bench-live-", dir=args.tmp))
    server = None
    try:
        started = time.perf_counter()
        bookie_dir, url, total = generate(root, entries)
        generation = round(time.perf_counter() - started, 2)
        cmd = [sys.executable, "-m", "tests.support.live_bookie", str(bookie_dir)]
        if args.preload:
            cmd += ["--preload", str(LEDGER_ID), "--no-record"]
        server = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None
        line = server.stdout.readline().split()
        if len(line) != 2 or line[0] != "port":
            raise SystemExit("the test bookie did not start")
        address = f"127.0.0.1:{line[1]}"
        variants = {
            "offline": lambda: read_offline(bookie_dir),
            "live_v3_pipelined": lambda: read_live(url, address, 64, False),
            "live_v3_one_in_flight": lambda: read_live(url, address, 1, False),
            "live_v2_pipelined": lambda: read_live(url, address, 64, True),
        }
        best: dict[str, tuple[Any, ...]] = {}
        rates: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(runs):  # interleaved, so load on the machine hits every variant
            for name, fn in variants.items():
                before = server_cpu(server.pid)
                result = fn()
                after = server_cpu(server.pid)
                if before is not None and after is not None and name != "offline":
                    result = (*result, after - before)
                if result[0] != entries:
                    raise SystemExit(f"{name} read {result[0]} entries, not {entries}")
                rates[name].append(result[0] / result[2])
                if name not in best or result[2] < best[name][2]:
                    best[name] = result
        report = {
            "benchmark": "live",
            "quick": args.quick,
            "machine": machine(),
            "ledger": {
                "entries": entries,
                "payload_bytes": PAYLOAD,
                "stored_bytes": total,
                "digest_type": "CRC32C",
                "generation_seconds": generation,
            },
            "server": {
                "preloaded": args.preload,
                "answers_encoded_once": args.preload,
                "process": "separate",
            },
            "c_parser": _c_parser(),
            "runs": runs,
            "reads": {name: figures(*r) for name, r in best.items()},
            # entries/s of every run (min, median, max): the spread load on the machine makes
            "entries_per_s_runs": {
                name: {
                    "min": round(min(r)),
                    "median": round(statistics.median(r)),
                    "max": round(max(r)),
                }
                for name, r in rates.items()
            },
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
        offline_rate = report["reads"]["offline"]["entries_per_s"]
        pipelined = report["reads"]["live_v3_pipelined"]["entries_per_s"]
        report["live_vs_offline"] = round(pipelined / offline_rate, 2)
        medians = report["entries_per_s_runs"]
        report["live_vs_offline_median"] = round(
            medians["live_v3_pipelined"]["median"] / medians["offline"]["median"], 2
        )
        # by the reader's own CPU per entry: what the client costs, whatever the load
        report["live_vs_offline_by_reader_cpu"] = round(
            report["reads"]["offline"]["reader_cpu_us_per_entry"]
            / report["reads"]["live_v3_pipelined"]["reader_cpu_us_per_entry"],
            2,
        )
        report["goal"] = {"live_vs_offline_at_least": 0.5, "met": pipelined >= offline_rate / 2}
        print(json.dumps(report, indent=1))
        return 0
    finally:
        if server is not None:
            if server.stdin is not None:
                server.stdin.close()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
