"""Compaction by ledgerctl next to the broker's own compactor, on the same topic of the same
cluster (scripts/sandbox); JSON on stdout.

    python bench/compact_vs_broker.py --quick                     # the smoke test's size
    python bench/compact_vs_broker.py --sandbox DIR --messages 100000 --keys 1000 \\
        --compression NONE --compression LZ4 --engine local --engine spark
    python bench/compact_vs_broker.py --sandbox DIR --messages 1000000 --keys 1000 \\
        --keys 1000000 --spark-standalone       # the issue's sizes: only on a quiet machine

Each topic (``--messages`` x ``--keys`` x ``--compression``) is produced with the official
Java client (bench/java/CompactProducer.java, compiled against the sandbox's jars): batches
of ``--batch`` messages cut by count, ``--value-size``-byte values (``--values text``
compresses well, ``random`` does not), ``--tombstones`` percent empty values, keys drawn
uniformly from ``--keys``; every topic in one JVM first, each unloaded after (its ledger
closed: both compactors see the same entries). Then, in this order, on each topic:

* ``ledgerctl compact TOPIC --full --plan FILE --unload`` for each ``--engine`` (local;
  spark: ``--spark-master local[2]``; spark-standalone: a standalone master and two
  one-core workers on loopback, the executors reading the bookies themselves): the work
  the broker does (read the topic from the bookies, both phases, write the compacted ledger
  to the running bookies with the broker's quorums from its broker.conf), without
  committing it: ``--plan`` writes the ledger and saves the plan, which is never applied,
  so the topic's metadata (its ``__compaction`` cursor) stays the broker's. The topic is
  not loaded then (unloaded after it was produced, and before the broker's compaction
  loads it): the write gate asks the broker, as on any live cluster, and ``--unload``
  would unload a topic a broker had loaded meanwhile (``--force-owned`` no longer passes
  a loaded topic: it is only for brokers that cannot be asked). The command
  runs in a child interpreter; reported: wall time (interpreter start included, as an
  operator runs it), the interpreter's own CPU time and peak RSS (``VmHWM``), and for the
  whole process tree (Spark's JVMs and Python workers) CPU and the peak of the summed RSS,
  sampled from /proc every 0.2 s.
* the broker's compaction: ``PUT /admin/v2/persistent/.../compaction``, then ``GET`` the
  same path every 0.1 s until it says SUCCESS or ERROR (``lastError`` kept), the broker
  process dies, or ``--broker-timeout`` passes (a stall). Reported: wall time, the broker's
  own ``lastCompactionDurationTimeInMills`` (topic stats), the broker process's CPU time
  (/proc), and its heap in use during it: ``jstat -gc PID 200`` of the sandbox's JDK, one
  attached sampler for the whole run (``jcmd PID GC.heap_info`` reads the same counters,
  but each sample would start a JVM beside the broker): the sum of the used survivor,
  eden and old spaces, its maximum and the old space's, the committed heap, the young and
  full collections and their time. ``OutOfMemoryError`` lines the broker logged meanwhile
  are counted.
* the views compared message by message where the broker's compaction succeeded: every
  retained message of the broker's compacted ledger and of each ledgerctl ledger (message
  id, key, value) in order, and the placeholders; otherwise the engines' ledgers with each
  other. Entries byte for byte are counted too (LZ4 and ZSTD differ there by design: the
  broker's encoder is aircompressor's).

``interpreter`` is what every ledgerctl run pays before its work (the CLI imported, ``compact
--help``: peak RSS and CPU), and ``rss_above_interpreter_bytes_per_key`` a run's peak RSS
above it per distinct key (the goal: at most 64 at 10^6 keys and more). ledgerctl's modules
are compiled into their bytecode cache first, as pip does when it installs them.
Every compacted ledger ledgerctl wrote is deleted afterwards (``ledgerctl undo PLAN
--unload``: the broker's compaction loaded the topic); each run says whether (``undone``).
``ratio_broker_over_ledgerctl`` is the broker's wall time over ledgerctl's. The machine's
load average is reported before and after each topic: on a shared machine every figure
measures the other jobs too.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._machine import machine  # noqa: E402
from bench._sandbox import ensure_running, sandbox  # noqa: E402

JAVA_SOURCE = ROOT / "bench" / "java" / "CompactProducer.java"
NAMESPACE = "public/bench-compact"
ENGINES = ("local", "spark", "spark-standalone")
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


# -- the child: ledgerctl in an interpreter of its own, measured from inside ----------------


def _child(out: Path, argv: list[str]) -> None:
    """Run ``ledgerctl ARGV`` in this interpreter; at exit write its CPU time and VmHWM."""

    def report() -> None:
        times = os.times()
        hwm = 0
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
        out.write_text(json.dumps({"cpu_seconds": times.user + times.system, "vmhwm": hwm}))

    atexit.register(report)
    sys.argv = ["ledgerctl", *argv]
    from pulsarctl_py.cli import run

    run()


# -- processes measured from outside --------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def _proc(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, RSS bytes) of one process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[21]) * PAGE


class TreeSampler:
    """CPU time and summed RSS of a process and its descendants, sampled every ``every`` s
    in a thread (the peak RSS is the largest sum seen; each process's CPU its last value).
    ``others``: processes that ran before (Spark's standalone workers, whose executors are
    their children): their trees are counted too, CPU from what they had used at the start.
    """

    def __init__(self, root: int, others: Sequence[int] = (), every: float = 0.2) -> None:
        self.roots, self.every = [root, *others], every
        self.cpu: dict[int, float] = {}
        self.before: dict[int, float] = {}
        self.peak_rss = 0
        if others:
            saved, self.roots = self.roots, list(others)
            self.sample()
            self.before, self.cpu, self.peak_rss, self.roots = dict(self.cpu), {}, 0, saved
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)

    def sample(self) -> None:
        tree = _children()
        todo, rss = list(self.roots), 0
        while todo:
            pid = todo.pop()
            got = _proc(pid)
            if got is not None:
                self.cpu[pid] = got[0]
                rss += got[1]
            todo.extend(tree.get(pid, []))
        self.peak_rss = max(self.peak_rss, rss)

    @property
    def cpu_seconds(self) -> float:
        return sum(cpu - self.before.get(pid, 0.0) for pid, cpu in self.cpu.items())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _mib(n: float) -> float:
    return round(n / 2**20, 1)


# -- the cluster ------------------------------------------------------------------------------


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.state: dict[str, Any] = json.loads((directory / "cluster.json").read_text())
        # the children use the bytecode cache (warm_bytecode), as an installed ledgerctl
        # does: compiling every module at each start would be measured as the command's
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.env["LEDGERCTL_METADATA_URL"] = self.state["metadata_url"]
        self.env["LEDGERCTL_BOOKKEEPER_METADATA_URL"] = self.state["bookkeeper_metadata_url"]
        self.env["LEDGERCTL_BROKER_CONF"] = self.state["broker"]["conf"]

    @property
    def broker_pid(self) -> int:
        return int(json.loads((self.dir / "cluster.json").read_text())["broker"]["pid"])

    def admin(self, method: str, path: str, ok: tuple[int, ...] = (200, 204)) -> Any:
        req = urllib.request.Request(self.state["web_url"] + "/admin/v2" + path, method=method)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        if status not in ok:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {raw[:300]!r}")
        return json.loads(raw) if raw.strip() else None

    @staticmethod
    def path(topic: str) -> str:
        return "/persistent/" + topic.split("://", 1)[1]


def java_classes(classpath: str) -> Path:
    source = JAVA_SOURCE.read_bytes()
    out = Path(tempfile.gettempdir()) / (
        "ledgerctl-bench-compactproducer-" + hashlib.sha256(source).hexdigest()[:12]
    )
    if not (out / "CompactProducer.class").is_file():
        tmp = Path(tempfile.mkdtemp(prefix="ledgerctl-bench-java-"))
        done = subprocess.run(
            ["javac", "-nowarn", "-cp", classpath, "-d", str(tmp), str(JAVA_SOURCE)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"javac CompactProducer.java: {done.stderr.strip()[-2000:]}")
        with contextlib.suppress(OSError):
            tmp.rename(out)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def produce(
    cluster: Cluster, classes: Path, classpath: str, args: Any, topics: list[dict[str, Any]]
) -> None:
    """Produce every topic of ``topics`` (dicts with topic, messages, keys, compression) in
    one JVM; each gets its producer's answer under "produced"."""
    log4j = cluster.dir / "conf" / "log4j2.xml"
    command = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-cp", f"{classes}{os.pathsep}{classpath}"]
    command += [f"-Dlog4j2.configurationFile={log4j}", "CompactProducer"]
    command += [cluster.state["service_url"], str(args.value_size), str(args.batch)]
    command += [str(args.tombstones), args.values, str(args.key_size), str(args.seed)]
    command += [args.key_draw]
    for t in topics:
        command += [t["topic"], str(t["messages"]), str(t["keys"]), t["compression"]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=7200)
    answers = {
        a["topic"]: a
        for a in (
            json.loads(ln.split(" ", 1)[1])
            for ln in done.stdout.splitlines()
            if ln.startswith("COMPACTPRODUCER ")
        )
    }
    if done.returncode != 0 or len(answers) != len(topics):
        raise SystemExit(f"CompactProducer: {(done.stdout + done.stderr).strip()[-2000:]}")
    for t in topics:
        t["produced"] = answers[t["topic"]]
        # its ledger closed: both compactions see the same entries
        cluster.admin("PUT", Cluster.path(t["topic"]) + "/unload")


# -- ledgerctl ------------------------------------------------------------------------------


def ledgerctl(cluster: Cluster, topic: str, engine: str, plan: Path, args: Any) -> dict[str, Any]:
    """``ledgerctl compact --full --plan`` on one engine, measured; its report."""
    argv = ["compact", topic, "--full", "--plan", str(plan), "--unload", "-o", "json"]
    argv += ["--engine", "local" if engine == "local" else "spark"]
    if engine == "spark":
        argv += ["--spark-master", "local[2]"]
    elif engine == "spark-standalone":
        argv += ["--spark-master", args.standalone_url]
    if args.memory:
        argv += ["--memory", args.memory]
    with tempfile.NamedTemporaryFile(prefix="ledgerctl-bench-child-", suffix=".json") as out:
        command = [sys.executable, __file__, "--child", out.name, "--", *argv]
        started = time.perf_counter()
        proc = subprocess.Popen(
            command, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        sampler = TreeSampler(
            proc.pid, args.standalone_pids if engine == "spark-standalone" else []
        )
        stdout, stderr = proc.communicate(timeout=7200)
        wall = time.perf_counter() - started
        sampler.stop()
        if proc.returncode != 0:
            raise SystemExit(
                f"ledgerctl {' '.join(argv)}: exit {proc.returncode}: {stderr[-2000:]}"
            )
        inside = json.loads(Path(out.name).read_text())
    report = json.loads(stdout)
    return {
        "engine": engine,
        "seconds": round(wall, 3),
        "cpu_seconds": round(inside["cpu_seconds"], 3),
        "peak_rss_mib": _mib(inside["vmhwm"]),
        "tree_cpu_seconds": round(sampler.cpu_seconds, 3),
        "tree_peak_rss_mib": _mib(sampler.peak_rss),
        # the goal: <= 64 bytes per distinct key above the interpreter, at 10^6 keys and more
        "rss_above_interpreter_bytes_per_key": round(
            (inside["vmhwm"] - args.interpreter["peak_rss_mib"] * 2**20) / max(report["keys"], 1)
        ),
        "keys": report["keys"],
        "kept": report["kept"],
        "tombstoned": report["tombstoned"],
        "entries_in": report["entries_in"],
        "entries_out": report["entries_out"],
        "spilled": report.get("spilled"),
        "horizon": report["horizon"],
        "compacted_ledger": report["compacted_ledger"],
        "broker_compaction_fails_at": report.get("broker_compaction_fails_at"),
        "command": "ledgerctl " + " ".join(argv),
    }


def undo(cluster: Cluster, plan: Path) -> bool:
    """``ledgerctl undo PLAN --unload``: the ledger the plan wrote deleted (the broker's
    compaction has loaded the topic meanwhile: the gate refuses without --unload)."""
    done = subprocess.run(
        [sys.executable, "-m", "pulsarctl_py.cli", "undo", str(plan), "--unload", "--yes"],
        env=cluster.env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"warning: ledgerctl undo {plan}: {done.stderr.strip()[-500:]}", file=sys.stderr)
    return done.returncode == 0


def warm_bytecode() -> None:
    """ledgerctl's modules compiled into their bytecode cache once (pip does it when it
    installs a package; an editable checkout run with PYTHONDONTWRITEBYTECODE never is)."""
    import pulsarctl_py
    import pulsarctl_py.commands
    import pulsarctl_py.decoders
    import pulsarctl_py.proto

    dirs = [
        p
        for m in (pulsarctl_py, pulsarctl_py.commands, pulsarctl_py.decoders, pulsarctl_py.proto)
        for p in m.__path__
    ]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *sorted(set(dirs))],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def interpreter() -> dict[str, float]:
    """Peak RSS and CPU time of the child interpreter that imports ledgerctl's CLI and
    prints ``compact --help``: what every run pays before its work."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [sys.executable, __file__, "--child", out.name, "--", "compact", "--help"],
            capture_output=True,
            check=True,
            env=env,
        )
        inside = json.loads(Path(out.name).read_text())
    return {"peak_rss_mib": _mib(inside["vmhwm"]), "cpu_seconds": round(inside["cpu_seconds"], 3)}


# -- the broker -----------------------------------------------------------------------------


def broker_heap(pid: int) -> str | None:
    """The broker JVM's -Xmx (the last one given wins, as in the JVM: scripts/sandbox puts
    $LEDGERCTL_SANDBOX_JVM_OPTS after its own)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    found = [a.decode() for a in args if a.startswith(b"-Xmx")]
    return found[-1] if found else None


def _jstat(lines: list[str]) -> dict[str, Any]:
    """jstat -gc samples: heap in use (S0U+S1U+EU+OU), its max and the old space's, the
    collections counted over the run."""
    rows = []
    header: list[str] | None = None
    for line in lines:
        cols = line.split()
        if not cols:
            continue
        if cols[0] == "S0C":
            header = cols
            continue
        if header is None or len(cols) != len(header):
            continue
        with contextlib.suppress(ValueError):  # "-": a collector this JVM does not run
            rows.append({h: float(c) for h, c in zip(header, cols, strict=True) if c != "-"})
    if not rows:
        return {"samples": 0}
    used = [r["S0U"] + r["S1U"] + r["EU"] + r["OU"] for r in rows]
    first, last = rows[0], rows[-1]
    return {
        "samples": len(rows),
        "heap_used_mib_first": round(used[0] / 1024, 1),
        "heap_used_mib_max": round(max(used) / 1024, 1),
        "old_used_mib_max": round(max(r["OU"] for r in rows) / 1024, 1),
        "heap_capacity_mib": round((last["S0C"] + last["S1C"] + last["EC"] + last["OC"]) / 1024, 1),
        "young_gcs": int(last["YGC"] - first["YGC"]),
        "full_gcs": int(last["FGC"] - first["FGC"]),
        "gc_seconds": round(last["GCT"] - first["GCT"], 3),
    }


def broker_compaction(cluster: Cluster, topic: str, timeout: float) -> dict[str, Any]:
    """The broker's compaction of ``topic`` through the admin REST API, measured."""
    pid = cluster.broker_pid
    log = cluster.dir / "logs" / "broker.log"
    log_at = log.stat().st_size if log.exists() else 0
    path = Cluster.path(topic) + "/compaction"
    jstat = subprocess.Popen(
        ["jstat", "-gc", str(pid), "200"], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(jstat.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    deadline = time.monotonic() + 60
    while len(lines) < 2 and time.monotonic() < deadline:  # a first sample before the work
        time.sleep(0.05)
    cpu_before = _proc(pid)
    started = time.perf_counter()
    cluster.admin("PUT", path)
    outcome: dict[str, Any] = {}
    while True:
        if _proc(pid) is None:
            outcome = {"status": "BROKER_DIED", "lastError": None}
            break
        if time.perf_counter() - started > timeout:
            outcome = {"status": "STALLED", "lastError": None}
            break
        try:
            status = cluster.admin("GET", path)
        except (RuntimeError, OSError) as exc:
            status = {"status": "UNANSWERED", "lastError": str(exc)}
        if status["status"] not in ("RUNNING", "UNANSWERED"):
            outcome = status
            break
        time.sleep(0.1)
    wall = time.perf_counter() - started
    cpu_after = _proc(pid)
    seen = len(lines)
    deadline = time.monotonic() + 5
    while len(lines) == seen and time.monotonic() < deadline:  # a sample after the work
        time.sleep(0.05)
    jstat.terminate()
    jstat.wait()
    reader.join(timeout=5)
    text = log.read_bytes()[log_at:].decode(errors="replace") if log.exists() else ""
    out: dict[str, Any] = {
        "status": outcome.get("status"),
        "last_error": outcome.get("lastError") or None,
        "seconds": round(wall, 3),
        "cpu_seconds": (
            round(cpu_after[0] - cpu_before[0], 3) if cpu_before and cpu_after else None
        ),
        "heap": _jstat(lines),
        "out_of_memory_lines": len(re.findall(r"OutOfMemoryError", text)),
        "command": f"PUT {path}; GET {path} until SUCCESS or ERROR",
    }
    if out["status"] == "SUCCESS":
        stats = cluster.admin("GET", Cluster.path(topic) + "/stats")
        compaction = stats.get("compaction") or {}
        out["broker_duration_ms"] = compaction.get("lastCompactionDurationTimeInMills")
        internal = cluster.admin("GET", Cluster.path(topic) + "/internalStats")
        out["compacted_ledger"] = internal["compactedLedger"]["ledgerId"]
        out["horizon"] = internal["cursors"]["__compaction"]["markDeletePosition"]
    return out


# -- the views ------------------------------------------------------------------------------


def _entries(source: Any, ledger_id: int) -> Iterator[bytes]:
    """A compacted ledger's entries: the RawMessage framing (the bookie header and digest
    taken off)."""
    from pulsarctl_py.decoders import bookkeeper

    view = source.ledger(ledger_id)
    lac = view.lac
    if lac is None or lac < 0:
        return
    for stored in source.raw_entries(view, 0, lac):
        data = bytes(stored.data)
        _layer, _header, at = bookkeeper.parse(data, 0, len(data), view.digest_type, view.password)
        yield data[at:]


def _rows(source: Any, ledger_id: int) -> Iterator[tuple[Any, ...]]:
    """(ledger, entry, batch index, key, value digest, placeholder) of every message of a
    compacted ledger, in order: what a readCompacted reader gets, and the placeholders."""
    from pulsarctl_py.decoders import DecodeOptions, Outer, decode_entry

    options = DecodeOptions(outer=Outer.COMPACTED)
    for data in _entries(source, ledger_id):
        entry = decode_entry(data, options)
        ledger, entry_id = entry.message_position
        rows = []
        if not entry.messages and not entry.placeholders:
            rows.append((ledger, entry_id, -1, None, _digest(entry.payload), False))
        for m in entry.messages:
            rows.append((ledger, entry_id, m.batch_index, m.key, _digest(m.value), False))
        for index in entry.placeholders:
            rows.append((ledger, entry_id, index, None, None, True))
        yield from sorted(rows, key=lambda r: r[2])


def _digest(value: Any) -> str:
    return hashlib.blake2b(bytes(value or b""), digest_size=12).hexdigest()


@contextlib.contextmanager
def ledger_source(cluster: Cluster) -> Iterator[Any]:
    """A :class:`~pulsarctl_py.ledgers.LedgerSource` on the sandbox's stores."""
    from pulsarctl_py.ledgers import LedgerSource

    keys = ("LEDGERCTL_METADATA_URL", "LEDGERCTL_BOOKKEEPER_METADATA_URL")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: cluster.env[k] for k in keys})
    try:
        with LedgerSource.open() as source:
            yield source
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def compare(cluster: Cluster, reference: int, other: int) -> dict[str, Any]:
    """Two compacted ledgers message by message (and entry by entry, byte for byte)."""
    with ledger_source(cluster) as a, ledger_source(cluster) as b:
        return compare_views(
            _rows(a, reference), _rows(b, other), _entries(a, reference), _entries(b, other)
        )


def compare_views(
    rows: Iterator[tuple[Any, ...]],
    other_rows: Iterator[tuple[Any, ...]],
    entries: Iterator[bytes],
    other_entries: Iterator[bytes],
) -> dict[str, Any]:
    """Two compacted views (:func:`_rows`) row by row, and their entries byte for byte."""
    messages = placeholders = differ = missing = 0
    first: Any = None
    for x, y in _zip(rows, other_rows):
        if x is None or y is None:
            missing += 1
        elif x != y:
            differ += 1
        elif x[5]:
            placeholders += 1
        else:
            messages += 1
        if x != y and first is None:
            first = {"reference": x, "other": y}
    same_bytes = count = 0
    for x, y in _zip(entries, other_entries):
        count += 1
        same_bytes += x == y
    return {
        "same_view": differ == 0 and missing == 0,
        "messages_equal": messages,
        "placeholders_equal": placeholders,
        "rows_differing": differ,
        "rows_only_in_one": missing,
        "first_difference": first,
        "entries": count,
        "entries_byte_identical": same_bytes,
    }


def _zip(a: Iterator[Any], b: Iterator[Any]) -> Iterator[tuple[Any, Any]]:
    sentinel = object()
    while True:
        x, y = next(a, sentinel), next(b, sentinel)
        if x is sentinel and y is sentinel:
            return
        yield (None if x is sentinel else x), (None if y is sentinel else y)


# -- Spark standalone -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def standalone(workers: int = 2) -> Iterator[tuple[str, list[int]]]:
    """pyspark's standalone master and ``workers`` one-core workers on loopback: its URL
    and the workers' pids."""
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = str(home / "bin" / "spark-class")
    env = dict(os.environ, SPARK_HOME=str(home), PYSPARK_PYTHON=sys.executable)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    logs = Path(tempfile.mkdtemp(prefix="ledgerctl-bench-spark-"))
    procs = []
    try:
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master += ["--port", str(port), "--webui-port", str(_free_port())]
        procs.append(_spawn([spark_class, *master], env, logs / "master.log"))
        deadline = time.monotonic() + 120
        while "I have been elected leader" not in _read(logs / "master.log"):
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the Spark master did not start: {_read(logs / 'master.log')[-1500:]}"
                )
            time.sleep(0.5)
        for i in range(workers):
            worker = ["org.apache.spark.deploy.worker.Worker", url, "--cores", "1"]
            worker += ["--memory", "1g", "--webui-port", str(_free_port())]
            worker += ["--work-dir", str(logs / f"work-{i}")]
            procs.append(_spawn([spark_class, *worker], env, logs / f"worker-{i}.log"))
        while _read(logs / "master.log").count("Registering worker") < workers:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the Spark workers did not register: {_read(logs / 'master.log')[-1500:]}"
                )
            time.sleep(0.5)
        yield url, [p.pid for p in procs[1:]]
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(logs, ignore_errors=True)


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("wb") as fh:
        return subprocess.Popen(command, env=env, stdout=fh, stderr=subprocess.STDOUT)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


# -- the run --------------------------------------------------------------------------------


def one_topic(cluster: Cluster, args: Any, row: dict[str, Any]) -> dict:
    """Both compactions of one produced topic, measured and compared (into ``row``)."""
    topic = row["topic"]
    row["load_before"] = _load()
    plans: list[Path] = []
    runs: list[dict[str, Any]] = []
    try:
        for engine in args.engine:
            plan = Path(tempfile.mkdtemp(prefix="ledgerctl-bench-plan-")) / "plan.json"
            plans.append(plan)
            runs.append(ledgerctl(cluster, topic, engine, plan, args))
        row["ledgerctl"] = runs
        if not args.no_broker:
            row["broker"] = broker = broker_compaction(cluster, topic, args.broker_timeout)
            if broker["status"] == "BROKER_DIED":
                sandbox("start", str(cluster.dir), "--broker")
            elif broker["status"] == "STALLED" or broker["out_of_memory_lines"]:
                # a broker whose heap gave out is no base for the next measurement
                sandbox("stop", str(cluster.dir), "--broker")
                sandbox("start", str(cluster.dir), "--broker")
        else:
            broker = {"status": None}
        compared = []
        if broker["status"] == "SUCCESS":
            reference, against = broker["compacted_ledger"], "broker"
            others = runs
        else:
            reference, against = runs[0]["compacted_ledger"], runs[0]["engine"]
            others = runs[1:]
        for run in others:
            result = compare(cluster, reference, run["compacted_ledger"])
            compared.append({"reference": against, "engine": run["engine"], **result})
        row["compared"] = compared
        if broker["status"] == "SUCCESS":
            for run in runs:
                run["ratio_broker_over_ledgerctl"] = round(broker["seconds"] / run["seconds"], 3)
    finally:
        for run, plan in zip(runs + [{}] * (len(plans) - len(runs)), plans, strict=True):
            run["undone"] = plan.exists() and undo(cluster, plan)
            shutil.rmtree(plan.parent, ignore_errors=True)
    row["load_after"] = _load()
    return row


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", type=Path, help="a sandbox's directory (default: a new one)")
    parser.add_argument("--quick", action="store_true", help="2,000 messages, 50 keys, NONE")
    parser.add_argument("--messages", type=int, action="append")
    parser.add_argument("--keys", type=int, action="append")
    parser.add_argument("--compression", action="append", choices=("NONE", "LZ4", "ZLIB", "ZSTD"))
    parser.add_argument("--engine", action="append", choices=ENGINES)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--values", choices=("text", "random"), default="text")
    parser.add_argument("--key-size", type=int, default=0, help="keys padded to this length")
    parser.add_argument(
        "--key-draw",
        choices=("uniform", "cycle"),
        default="uniform",
        help="keys drawn uniformly, or message i's key i mod --keys (every key distinct "
        "until --keys messages)",
    )
    parser.add_argument(
        "--messages-per-key",
        type=float,
        help="each topic's messages: this many times its --keys (instead of --messages)",
    )
    parser.add_argument(
        "--stop-at-broker-failure",
        action="store_true",
        help="no further topic once the broker's compaction fails (the search for the key "
        "count its heap gives out at: --keys in ascending order)",
    )
    parser.add_argument("--tombstones", type=float, default=2.0, help="percent")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--memory", help="ledgerctl compact --memory")
    parser.add_argument("--broker-timeout", type=float, default=1800)
    parser.add_argument("--no-broker", action="store_true", help="ledgerctl only")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.rest)
        return
    sizes = args.messages or ([2_000] if args.quick else [100_000])
    key_counts = args.keys or ([50] if args.quick else [1_000])
    codecs = args.compression or (["NONE"] if args.quick else ["NONE", "LZ4"])
    args.engine = args.engine or ["local"]
    directory = args.sandbox or Path(tempfile.mkdtemp(prefix="ledgerctl-bench-cvb-")) / "cluster"
    own = ensure_running(directory)
    report: dict[str, Any] = {"benchmark": "compact_vs_broker", "machine": machine()}
    try:
        cluster = Cluster(directory)
        cluster.admin("PUT", f"/namespaces/{NAMESPACE}", ok=(204, 409))
        classpath = sandbox("classpath").strip()
        classes = java_classes(classpath)
        warm_bytecode()
        report["interpreter"] = args.interpreter = interpreter()
        report["settings"] = {
            "batch": args.batch,
            "value_size": args.value_size,
            "values": args.values,
            "tombstones_percent": args.tombstones,
            "key_size": args.key_size,
            "broker_heap": broker_heap(cluster.broker_pid),
            "versions": {k: cluster.state.get(k) for k in ("pulsar_version", "bookkeeper_version")},
        }
        topics = []
        pairs = [(m, k) for m in sizes for k in key_counts]
        if args.messages_per_key:
            pairs = [(round(k * args.messages_per_key), k) for k in key_counts]
        for messages, keys in pairs:
            for codec in codecs:
                name = f"m{messages}-k{keys}-{codec.lower()}-{os.urandom(3).hex()}"
                topics.append(
                    {
                        "topic": f"persistent://{NAMESPACE}/{name}",
                        "messages": messages,
                        "keys": keys,
                        "compression": codec,
                    }
                )
        # a search produces each topic when it comes to it: it may stop before the largest
        search = args.stop_at_broker_failure
        if not search:
            produce(cluster, classes, classpath, args, topics)
        done = []
        with contextlib.ExitStack() as stack:
            if "spark-standalone" in args.engine:
                args.standalone_url, args.standalone_pids = stack.enter_context(standalone())
            for row in topics:
                if search:
                    produce(cluster, classes, classpath, args, [row])
                done.append(one_topic(cluster, args, row))
                # each topic's row as soon as it is measured: a search that ends early (a
                # full disk, a stalled broker killed by hand) keeps what it found
                print(json.dumps({"topic_done": row}), file=sys.stderr, flush=True)
                if search and (row.get("broker") or {}).get("status") != "SUCCESS":
                    break
        report["topics"] = done
    finally:
        if own:
            sandbox("down", str(directory))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
