"""The commands as users run them, end to end, against the library loops and the floors.

Generates (or reuses, ``--data DIR``) a data directory that the CLI opens like a real one:
a DbLedgerStorage bookie directory holding one ledger of N entries, written by
ledgerctl's own writer from the entries of ``bench/scan.py`` (the same deterministic
pool: small Pulsar entries with a CRC32C digest and broker entry metadata, half single
values, half batches of 2-5, a quarter LZ4), and a RocksDB metadata store naming that
ledger (closed, CRC32C digest) as the only ledger of the topic
``persistent://public/bench/cli``. Two such directories are built: N entries (the large
ledger, 10^6 by default) and N/10 (the small one, for the peak RSS ratio).

Measured on the same files in the same run, every measurement in a fresh process, the
rounds interleaved, CPU time of that process:

* commands, end to end, as a user runs them (``ledgerctl`` in a child process; CPU time
  is the child's user + system time from ``os.wait4``, interpreter start-up and imports
  included; peak RSS is the child's own VmHWM, written by the child at exit: not
  ``ru_maxrss``, which Linux floors at this script's RSS when it starts the child):

  - ``verify``: ``ledgerctl verify TOPIC --engine local -o jsonl`` (in this process, as
    ``--engine auto`` runs it unless a Spark threshold is set);
  - ``entry_jsonl``: ``ledgerctl inspect LEDGER --depth entry -o jsonl``;
  - ``jsonl``: ``ledgerctl inspect LEDGER -o jsonl``;
  - ``table``: ``ledgerctl inspect LEDGER -o table`` written to a pseudo-terminal of
    ``--columns`` columns (COLUMNS and the terminal's window size);
  - ``startup``: ``ledgerctl --version`` (what every command pays before its work).

  Every command's output is read by this script (a pipe, or the terminal) and its lines
  counted: one line per entry (table: at least one), or the run is rejected.

* library loops and floors, in a worker process of this script, timed around the loop
  only (``time.process_time``):

  - ``full_decode_loop``: ``BookieStore.read_entries`` + ``decode_entry`` at the default
    depth (bench/scan.py's full decode);
  - ``head_scan``: ``BookieStore.read_heads`` (bench/scan.py's (a));
  - ``floor``: bench/scan.py's read-and-split floor (mmap the entry log, split the
    ``[u32 size][entry]`` records in Python, one bytes object per entry);
  - ``read_once``: read each entry log with one ``read()``.

Every measurement runs ``--runs`` times; the report gives min/median/max CPU seconds and
uses the min (best) for the ratios, named as the goals of the issue:

* ``verify/floor``: entries/s of ``verify`` over those of the floor (goal >= 0.25);
* ``entry_jsonl/floor``: the same for ``inspect --depth entry -o jsonl`` (goal >= 0.10);
* ``jsonl/full_decode_loop``: ``inspect -o jsonl`` over the full decode loop (>= 0.50);
* ``table/jsonl``: CPU of ``-o table`` over that of ``-o jsonl`` (goal <= 1.5);
* ``rss_large/rss_small``: per command, peak RSS on N entries over that on N/10 (flat:
  <= 1.25, the bound of bench/scan.py).

The files are in the page cache (just written or just read), so the floors are CPU
costs, not the disk's. Prints one JSON object on stdout.

    python bench/cli.py                       # 10^6 and 10^5 entries, 3 rounds
    python bench/cli.py --quick               # 2,000 and 200 entries, 1 round (smoke)
    python bench/cli.py --data DIR            # generate there once, reuse on the next run
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import json
import os
import pty
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import scan  # bench/scan.py: the entry pool and the library scans
from _machine import machine  # bench/ is on sys.path when a bench script runs

SEED = scan.SEED
LEDGER_ID = scan.LEDGER_ID
TOPIC = "persistent://public/bench/cli"
LAYOUT_VERSION = 1  # of the generated directory (bench-cli.json); bump when it changes
INFO_FILE = "bench-cli.json"
COLUMNS = 160
GOALS: dict[str, tuple[str, float]] = {
    "verify/floor": (">=", 0.25),
    "entry_jsonl/floor": (">=", 0.10),
    "jsonl/full_decode_loop": (">=", 0.50),
    "table/jsonl": ("<=", 1.5),
    "rss_large/rss_small": ("<=", 1.25),
}
COMMANDS = ("verify", "entry_jsonl", "jsonl", "table")
LOOPS = ("full_decode_loop", "head_scan", "floor", "read_once")


# -- generation ---------------------------------------------------------------------------


def generate(root: Path, entries: int, seed: int) -> dict[str, Any]:
    """Write the bookie directory and the metadata store of one ledger under ``root``."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.decoders.bookkeeper import HEADER
    from pulsarctl_py.decoders.checksums import master_key
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.stores.bookie import write_db_ledger_dir
    from pulsarctl_py.stores.metadata import create_metadata_store

    start = time.perf_counter()
    pool = scan.build_pool(seed)
    last: list[bytes] = []

    def entries_kept() -> Any:
        for data in scan.ledger_entries(pool, LEDGER_ID, entries, seed):
            last[:] = [data]
            yield data

    current = root / "bookie" / "current"
    summary = write_db_ledger_dir(current, entries_kept(), master_key(b""))
    log_ids = list(summary.log_ids)
    del summary
    length = HEADER.unpack_from(last[0], 0)[3]
    messages = scan._messages(pool, entries, seed)
    topic = mld.TopicName.parse(TOPIC)
    metadata = lm.LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        state=lm.LedgerState.CLOSED,
        ensembles={0: ["127.0.0.1:3181"]},
        last_entry_id=entries - 1,
        length=length,
        digest_type=scan.DIGEST,
        password=b"",
        ctime=scan.BASE_TIME - 1000,
        custom_metadata=lm.pulsar_custom_metadata(topic.persistence_name),
    )
    info = mlpb.ManagedLedgerInfo()
    info.ledgerInfo.add(
        ledgerId=LEDGER_ID, entries=entries, size=length, timestamp=scan.BASE_TIME + 5 * entries
    )
    info.properties.add(key=mld.PROPERTY_INDEX, value=str(messages - 1))
    store = create_metadata_store(root / "metadata")
    try:
        for path, data in (
            (lm.ledger_path(LEDGER_ID), lm.build(metadata)),
            (topic.ml_path, mld.build_info(info)),
        ):
            parts = path.split("/")
            for i in range(2, len(parts)):
                parent = "/".join(parts[:i])
                if store.exists(parent) is None:
                    store.put(parent, b"")
            store.put(path, data)
    finally:
        store.close()
    logs = [current / f"{log_id:x}.log" for log_id in log_ids]
    description = {
        "layout_version": LAYOUT_VERSION,
        "entries": entries,
        "messages": messages,
        "seed": seed,
        "ledger_id": LEDGER_ID,
        "topic": TOPIC,
        "entry_log_bytes": sum(p.stat().st_size for p in logs),
        "generation_seconds": round(time.perf_counter() - start, 2),
    }
    (root / INFO_FILE).write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    return description


def prepared(root: Path, entries: int, seed: int) -> dict[str, Any]:
    """The description of the directory at ``root``: reused when it matches, else rebuilt."""
    try:
        found = json.loads((root / INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        found = None
    if (
        isinstance(found, dict)
        and found.get("layout_version") == LAYOUT_VERSION
        and found.get("entries") == entries
        and found.get("seed") == seed
    ):
        return {**found, "reused": True}
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    args = ["--generate-into", str(root), "--entries", str(entries), "--seed", str(seed)]
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        check=False,
    )  # a process of its own: no measurement inherits the writer's memory
    if proc.returncode != 0:
        raise SystemExit(f"bench/cli.py: generation failed:\n{proc.stderr}")
    return {**json.loads(proc.stdout), "reused": False}


# -- the library loops (worker processes) ------------------------------------------------


def _read_once(current: Path, ledger_id: int) -> dict[str, Any]:
    """Each entry log read with one ``read()``: the bytes the commands start from."""
    names = sorted(n for n in os.listdir(current) if n.endswith(".log"))
    total = 0
    for name in names:
        with open(current / name, "rb") as f:
            total += len(f.read())
    return {"bytes": total, "entries": None}


WORKERS: dict[str, Callable[[Path, int], dict[str, Any]]] = {
    "full_decode_loop": scan.scan_full,
    "head_scan": scan.scan_entry,
    "floor": scan.scan_floor,
    "read_once": _read_once,
}


def worker(name: str, current: Path) -> dict[str, Any]:
    gc.collect()
    cpu = time.process_time()
    result = WORKERS[name](current, LEDGER_ID)
    result["cpu_seconds"] = time.process_time() - cpu
    result.pop("seconds", None)
    return result


# -- running a child and measuring it ----------------------------------------------------


#: the child's own peak RSS goes here (see _LAUNCH)
PEAK_FILE_ENV = "BENCH_CLI_PEAK_RSS_FILE"

# ``ledgerctl``'s entry point, run as the console script runs it, that writes the process's
# own peak RSS (VmHWM, which exec resets) to a file at exit: ``ru_maxrss`` from wait4 is
# floored at this script's RSS when it starts the child (Linux keeps it over fork and
# exec), so it cannot show a command smaller than this script.
_LAUNCH = f"""
import atexit, os, sys
def _peak():
    with open("/proc/self/status", encoding="ascii") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["{PEAK_FILE_ENV}"], "w", encoding="ascii") as out:
        out.write(str(kib))
atexit.register(_peak)
sys.argv[0] = "ledgerctl"
from pulsarctl_py.cli import run
sys.exit(run())
"""


def _ledgerctl() -> list[str]:
    """``ledgerctl``'s entry point in a fresh interpreter that reports its own peak RSS."""
    return [sys.executable, "-c", _LAUNCH]


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, float, int]:
    """Reap the child: exit code, CPU seconds (user + system), peak RSS KiB."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def run_child(argv: list[str], *, terminal: bool = False) -> dict[str, Any]:
    """Run ``argv`` with stdout on a pipe (or a pseudo-terminal); count what it writes."""
    env = {**os.environ, "COLUMNS": str(COLUMNS), "LINES": "50", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    # with the modules' bytecode cached, as an installed package has it: without the
    # cache every run compiles what it imports again (about 0.15 s of CPU per command)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    peak_file = tempfile.NamedTemporaryFile(prefix="bench-cli-rss-", delete=False)
    peak_file.close()
    env[PEAK_FILE_ENV] = peak_file.name
    with tempfile.TemporaryFile() as err:
        if terminal:
            leader, follower = pty.openpty()
            fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=err, env=env
            )
            os.close(follower)
            reader = leader
        else:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env
            )
            assert proc.stdout is not None
            reader = proc.stdout.fileno()
        lines = size = 0
        try:
            while True:
                try:
                    chunk = os.read(reader, 1 << 20)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                size += len(chunk)
                lines += chunk.count(b"\n")
        finally:
            if terminal:
                os.close(leader)
            code, cpu, rss = _finish(proc)
            if proc.stdout is not None:
                proc.stdout.close()
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    own = Path(peak_file.name).read_text(encoding="ascii").strip()
    os.unlink(peak_file.name)
    return {
        "code": code,
        "cpu_seconds": cpu,
        # the child's own peak (VmHWM); wait4's ru_maxrss only where /proc is missing
        "peak_rss_kib": int(own) if own else rss,
        "lines": lines,
        "stdout_bytes": size,
        "stderr": stderr,
    }


def command_argv(name: str, root: Path) -> tuple[list[str], bool]:
    """The command line of measurement ``name`` on the directory at ``root``."""
    stores = [
        "--metadata-url",
        f"rocksdb://{root / 'metadata'}",
        "--bookie-dir",
        str(root / "bookie"),
    ]
    ledger = str(LEDGER_ID)
    if name == "startup":
        return [*_ledgerctl(), "--version"], False
    if name == "verify":
        # the in-process engine, stated (--engine auto keeps verify in this process unless
        # a Spark threshold is set, which the environment could do)
        engine = ["--engine", "local"]
        return [*_ledgerctl(), "verify", TOPIC, *stores, *engine, "-o", "jsonl"], False
    if name == "entry_jsonl":
        return [*_ledgerctl(), "inspect", ledger, *stores, "--depth", "entry", "-o", "jsonl"], False
    if name == "jsonl":
        return [*_ledgerctl(), "inspect", ledger, *stores, "-o", "jsonl"], False
    if name == "table":
        return [*_ledgerctl(), "inspect", ledger, *stores, "-o", "table"], True
    raise ValueError(name)


def measure_command(name: str, root: Path, entries: int) -> dict[str, Any]:
    argv, terminal = command_argv(name, root)
    result = run_child(argv, terminal=terminal)
    if result["code"] != 0:
        raise SystemExit(
            f"bench/cli.py: {name} exited {result['code']}:\n{result['stderr'][-2000:]}"
        )
    lines = result["lines"]
    expected_ok = {
        "startup": lines == 1,
        "verify": True,  # a healthy topic: no findings, so no lines
        "entry_jsonl": lines == entries,
        "jsonl": lines == entries,
        "table": lines >= entries,
    }[name]
    if not expected_ok:
        raise SystemExit(f"bench/cli.py: {name} wrote {lines} lines for {entries} entries")
    if name == "verify" and lines:
        raise SystemExit(f"bench/cli.py: verify found problems in the generated topic ({lines})")
    del result["stderr"]
    return result


def measure_loop(name: str, root: Path, entries: int) -> dict[str, Any]:
    current = root / "bookie" / "current"
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--worker", name, str(current)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"bench/cli.py: {name} worker failed:\n{err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out)
    if result.get("entries") not in (None, entries) or result.get("bad"):
        raise SystemExit(f"bench/cli.py: {name} saw {result} of {entries} entries")
    return result


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 4),
        "median": round(statistics.median(values), 4),
        "max": round(max(values), 4),
    }


def run_all(root: Path, entries: int, runs: int, names: list[str]) -> dict[str, Any]:
    """Every measurement ``runs`` times, interleaved; CPU stats and peak RSS per name."""
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for _ in range(runs):
        for name in names:
            if name in LOOPS:
                samples[name].append(measure_loop(name, root, entries))
            else:
                samples[name].append(measure_command(name, root, entries))
    out: dict[str, Any] = {}
    for name, results in samples.items():
        cpu = [r["cpu_seconds"] for r in results]
        best = min(cpu)
        item: dict[str, Any] = {
            "cpu_seconds": _stats(cpu),
            "entries_per_cpu_s": round(entries / best) if best > 0 else None,
            "us_per_entry": round(best / entries * 1e6, 3),
        }
        if name not in LOOPS:
            item["peak_rss_mib"] = round(max(r["peak_rss_kib"] for r in results) / 1024, 1)
            item["stdout_bytes"] = results[0]["stdout_bytes"]
            item["lines"] = results[0]["lines"]
        out[name] = item
    return out


# -- the report ---------------------------------------------------------------------------


def _goal(name: str, measured: float, metric: str) -> dict[str, Any]:
    op, target = GOALS[name]
    ok = measured >= target if op == ">=" else measured <= target
    return {"metric": metric, "goal": f"{op} {target}", "measured": measured, "pass": ok}


#: goal name -> (numerator, denominator, what the ratio is): a speed ratio is the
#: denominator's CPU seconds over the numerator's; a cost ratio the other way round
RATIOS: dict[str, tuple[str, str, str]] = {
    "verify/floor": (
        "floor",
        "verify",
        "entries/s of `ledgerctl verify` over entries/s of the read-and-split floor",
    ),
    "entry_jsonl/floor": (
        "floor",
        "entry_jsonl",
        "entries/s of `inspect --depth entry -o jsonl` over the read-and-split floor's",
    ),
    "jsonl/full_decode_loop": (
        "full_decode_loop",
        "jsonl",
        "entries/s of `inspect -o jsonl` over the library's full decode loop's",
    ),
    "table/jsonl": (
        "table",
        "jsonl",
        "CPU seconds of `inspect -o table` (terminal) over those of `inspect -o jsonl`",
    ),
}


def ratios(large: dict[str, Any], small: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (above, below, metric) in RATIOS.items():
        value = large[above]["cpu_seconds"]["min"] / large[below]["cpu_seconds"]["min"]
        out[name] = _goal(name, round(value, 4), metric)
    rss = {
        name: round(large[name]["peak_rss_mib"] / small[name]["peak_rss_mib"], 3)
        for name in COMMANDS
    }
    metric = "peak RSS on the large ledger over the small one's, worst command"
    out["rss_large/rss_small"] = {
        **_goal("rss_large/rss_small", max(rss.values()), metric),
        "per_command": rss,
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--entries",
        type=int,
        help="entries of the large ledger (default 1000000; the small one has a tenth)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 2000 entries, 1 round")
    parser.add_argument("--runs", type=int, help="rounds per measurement (default 3; quick 1)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="generate the ledgers under DIR and keep them; a later run with the same "
        "--entries and --seed reuses them (default: a temporary directory, removed)",
    )
    parser.add_argument("--tmp", help="parent of the temporary directory (default: TMPDIR)")
    parser.add_argument("--worker", nargs=2, metavar=("LOOP", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--generate-into", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], Path(args.worker[1]))))
        return 0
    if args.generate_into:
        print(json.dumps(generate(Path(args.generate_into), args.entries, args.seed)))
        return 0
    entries = args.entries or (2000 if args.quick else 1_000_000)
    small_entries = max(1, entries // 10)
    runs = args.runs or (1 if args.quick else 3)
    keep = args.data is not None
    base = (
        Path(args.data)
        if keep
        else Path(tempfile.mkdtemp(prefix="ledgerctl-bench-cli-", dir=args.tmp))
    )
    try:
        data = {
            "large": prepared(base / f"n{entries}", entries, args.seed),
            "small": prepared(base / f"n{small_entries}", small_entries, args.seed),
        }
        large_names = ["startup", *COMMANDS, *LOOPS]
        large = run_all(base / f"n{entries}", entries, runs, large_names)
        small = run_all(base / f"n{small_entries}", small_entries, runs, list(COMMANDS))
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    command = argv if argv is not None else sys.argv[1:]
    report = {
        "benchmark": "cli",
        "command": " ".join(["python", "bench/cli.py", *command]),
        "quick": args.quick,
        "seed": args.seed,
        "runs": runs,
        "clock": "CPU seconds (user + system): the command's child process from os.wait4; "
        "library loops and floors around the loop only (time.process_time)",
        "machine": machine(),
        "terminal_columns": COLUMNS,
        "data": data,
        "large": {"entries": entries, "measurements": large},
        "small": {"entries": small_entries, "measurements": small},
        "ratios": ratios(large, small),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
