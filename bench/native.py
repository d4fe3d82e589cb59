"""What each native entry point pays: the command as a user types it, with the entry point
on and with it off (``LEDGERCTL_PURE_PYTHON=<entry point>``), on bench/cli.py's data.

The entry points are those decoders/speedups.py can turn off one by one (``STAND_INS``):
every function of ``_speedups`` a caller can do without (``bind``, ``key_table`` and
``mac_available`` are the plumbing of the others). Off, an entry point answers what its
callers take as "not regular", so they run their Python path for every input.

Which command calls which entry point is not assumed: every *cell* (a command on a row of
bench/cli.py's data, a storage layout x a digest type) is first run once with every entry
point counted (a hook wraps ``speedups.native`` as it is loaded), and an entry point is
measured on the cells that call it (``--cells``, by default one cell per command and row
below). Then, for every (entry point, cell) pair, ``--runs`` rounds of the pair's two runs,
on and off, in a fresh process each, their order alternating between rounds (on/off,
off/on, ...) and the pairs interleaved within a round, so that both runs of a pair meet
the same load on a shared machine. Each run's output is read (a pipe) and its lines
counted: on and off must write the same number of lines with the same exit code as
bench/cli.py expects of the row (verify: its findings; inspect: one line per entry), or
the run is rejected.

The figures are wall seconds (what a user waits for: the process from its start to its
exit, start-up included) and CPU seconds (user + system of the child), min / median / max
over the rounds, and the ratio off / on, paired (each round's off over its on; min /
median / max) and as median over median. An entry point *pays* on a cell when the paired
wall ratio's minimum is above ``--noise`` (default 1.05): every round faster with it on
by more than the noise. Prints one JSON object: one item per entry point (entry point,
command, layout, seconds on/off, ratio), and the cells.

Commands (``--commands``; the names of bench/cli.py, plus ``compact``):

* ``verify``: ``ledgerctl verify TOPIC --engine local -o jsonl``;
* ``entry_jsonl``: ``ledgerctl inspect LEDGER --depth entry -o jsonl``;
* ``jsonl``: ``ledgerctl inspect LEDGER -o jsonl`` (entries decoded to their messages);
* ``compact``: ``ledgerctl compact TOPIC`` (the compaction computed and reported, nothing
  written: the command without ``--apply``);
* ``compaction@KEYS``: what ``ledgerctl compact`` runs after the bookie read, on
  bench/compact.py's input of ``--messages`` messages with keys drawn from KEYS (its child
  process: phase one into the local engine's key table, phase two rebatching). bench/cli.py's
  ledger repeats a pool of 300 entries, so its keys recur and few batches are kept whole;
  this input has batches kept whole (many keys) and batches mostly dropped (few keys);
* ``compaction-spill@KEYS``: the same on a tenth of the messages with the key table spilled
  past 4 MiB (``--memory``): the only path that calls ``compact_rebuild`` (an in-memory
  native table rebuilds inside ``compact_keep``).

    python bench/native.py --data DIR                       # 10^5 entries, 5 rounds
    python bench/native.py --entries 20000 --runs 3         # while developing
    python bench/native.py --only split_batch,entry_doc     # some entry points
    python bench/native.py --quick                          # 500 entries, 1 round (smoke)
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

import cli  # bench/cli.py: the data, the rows, running a command
from _machine import machine  # bench/ is on sys.path when a bench script runs

COMMANDS = ("verify", "entry_jsonl", "jsonl", "compact")
#: the rows whose data the cells read (every native path of a directory layout, and the
#: bookie protocol through the test bookie)
ROWS = ("db/crc32c", "db/crc32", "db/dummy", "interleaved/crc32c", "scan/crc32c", "live/crc32c")
#: the commands on them (``jsonl`` and ``compact`` decode every message: on the db row
#: only, where they call what they call on every row, so as to keep the run short), and
#: bench/compact.py's compaction with few keys and with nearly every key distinct
DEFAULT_CELLS = (
    *(
        f"{command}@{row}"
        for row in ROWS
        for command in COMMANDS
        if command in ("verify", "entry_jsonl") or row == "db/crc32c"
    ),
    "compaction@100",
    "compaction@10000000",
    "compaction-spill@10000000",
)
#: the key table's budget in the spill cells (bench/compact.py's default), whose input has a
#: tenth of the messages (a spilled table answers through RocksDB, about 15x slower)
SPILL_MEMORY = 4 * 1024 * 1024
PURE_PYTHON_ENV = "LEDGERCTL_PURE_PYTHON"
CALLS_ENV = "BENCH_NATIVE_CALLS_FILE"
NOISE = 1.05

# every entry point of ``speedups.native`` counted: the module is wrapped as it is loaded,
# before any module binds its functions; the counts are written to a file at exit. Then
# ``ledgerctl``'s entry point (_PROBE), or bench/compact.py's child (_PROBE_COMPACTION).
_HOOK = f"""
import atexit, importlib.machinery, json, os, sys
NAME = "pulsarctl_py.decoders.speedups"
counts = {{}}
class Counted:
    def __init__(self, module, names):
        self._module, self._names = module, names
    def __getattr__(self, name):
        value = getattr(self._module, name)
        if name not in self._names:
            return value
        def counted(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return value(*args, **kwargs)
        return counted
class Hook:
    def find_spec(self, name, path, target=None):
        if name != NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            if module.native is not None:
                module.native = Counted(module.native, set(module.STAND_INS))
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Hook())
def _write():
    with open(os.environ["{CALLS_ENV}"], "w", encoding="ascii") as out:
        json.dump(counts, out)
atexit.register(_write)
"""
_PROBE = (
    _HOOK
    + """
sys.argv[0] = "ledgerctl"
from pulsarctl_py.cli import run
sys.exit(run())
"""
)
_PROBE_COMPACTION = (
    _HOOK
    + """
import runpy
sys.argv[0] = sys.argv[1]
del sys.argv[1]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
)


def entry_points() -> list[str]:
    """The entry points that can be turned off one by one (decoders/speedups.py)."""
    from pulsarctl_py.decoders import speedups

    if speedups.native is None:
        raise SystemExit("bench/native.py: the native module is not built (or turned off)")
    return sorted(speedups.STAND_INS)


class CompactionInput:
    """bench/compact.py's input (batches of 100 keyed messages, LZ4) in a file: the
    compaction of ``ledgerctl compact`` after the bookie read, in bench/compact.py's child
    process (phase one into the local engine's key table, phase two rebatching)."""

    layout = "bench/compact.py input"

    def __init__(self, root: Path, messages: int, keys: int, memory: int | None) -> None:
        self.root = root
        self.messages = messages
        self.keys = keys
        self.memory = memory
        self.path = root / f"compaction-m{messages}-k{keys}.bin"

    @property
    def name(self) -> str:
        return f"compaction of {self.messages} messages, {self.keys} keys"

    @property
    def digest(self) -> str:
        spill = f", key table spilled past {self.memory} bytes" if self.memory else ""
        return f"{self.messages} messages, keys drawn from {self.keys}{spill}"

    def prepare(self) -> None:
        if not self.path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _GENERATE,
                    str(self.path),
                    str(self.messages),
                    str(self.keys),
                ],
                check=True,
                cwd=cli.ROOT,
            )


_GENERATE = """
import sys
from pathlib import Path
sys.path.insert(0, "bench")
import compact
compact.generate(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
"""


def command_argv(command: str, row: Any) -> list[str]:
    """The command line of a cell, after the interpreter's ``-c CODE``."""
    if command == "compaction":
        memory = ["--memory", str(row.memory)] if row.memory else []
        return [str(cli.ROOT / "bench" / "compact.py"), "--child", str(row.path), *memory]
    if command == "compact":
        return ["compact", row.topic, *row.argv()]
    argv, _ = cli.command_argv(command, row)
    return argv[3:]  # [python, -c, _LAUNCH, ...]


def expected(command: str, row: Any, entries: int, lines: int, code: int) -> bool:
    """What the cell's command must answer (bench/cli.py's rule; compact: a report, exit 0,
    or 1 on the lost index of the scan layout; compaction: its one JSON line)."""
    if command == "compaction":
        return lines == 1 and code == 0
    if command == "compact":
        return lines > 0 and code in (0, 1)
    return cli.expected(command, row, entries, lines, code)


def _child_env(off: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(PURE_PYTHON_ENV, None)
    if off is not None:
        env[PURE_PYTHON_ENV] = off
    return env


def run_cell(
    command: str, row: Any, entries: int, off: str | None, probe: bool = False
) -> dict[str, Any]:
    """One run of a cell's command; with ``off`` that entry point turned off; with
    ``probe`` the entry points counted (``calls``). Wall and CPU seconds, lines, code."""
    if command == "compaction":
        code_text = _PROBE_COMPACTION if probe else None
    else:
        code_text = _PROBE if probe else cli._LAUNCH
    head = [sys.executable] if code_text is None else [sys.executable, "-c", code_text]
    argv = [*head, *command_argv(command, row)]
    saved = dict(os.environ)
    calls_file = None
    try:
        os.environ.clear()
        os.environ.update(_child_env(off))
        if probe:
            handle, calls_file = tempfile.mkstemp(prefix="bench-native-calls-")
            os.close(handle)
            os.environ[CALLS_ENV] = calls_file
        start = time.perf_counter()
        result = cli.run_child(argv)
        result["wall_seconds"] = time.perf_counter() - start
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if not expected(command, row, entries, result["lines"], result["code"]):
        raise SystemExit(
            f"bench/native.py: {command} on {row.name} (off: {off}) exited {result['code']} "
            f"with {result['lines']} lines for {entries} entries:\n{result['stderr'][-2000:]}"
        )
    del result["stderr"]
    if calls_file is not None:
        result["calls"] = json.loads(Path(calls_file).read_text(encoding="ascii") or "{}")
        os.unlink(calls_file)
    return result


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 4),
        "median": round(statistics.median(values), 4),
        "max": round(max(values), 4),
    }


def measure(
    pairs: list[tuple[str, str]],
    cells: dict[str, tuple[str, Any]],
    entries: int,
    runs: int,
    noise: float,
) -> list[dict[str, Any]]:
    """Every (entry point, cell) pair ``runs`` times, on and off, interleaved."""
    samples: dict[tuple[str, str], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for round_ in range(runs):
        for entry_point, cell in pairs:
            command, row = cells[cell]
            order = (None, entry_point) if round_ % 2 == 0 else (entry_point, None)
            got = {off: run_cell(command, row, entries, off) for off in order}
            on, off = got[None], got[entry_point]
            if (on["lines"], on["code"]) != (off["lines"], off["code"]):
                raise SystemExit(
                    f"bench/native.py: {cell} with {entry_point} off wrote {off['lines']} "
                    f"lines (exit {off['code']}), on {on['lines']} (exit {on['code']})"
                )
            samples.setdefault((entry_point, cell), []).append((on, off))
    items = []
    for (entry_point, cell), results in samples.items():
        command, row = cells[cell]
        item: dict[str, Any] = {
            "entry_point": entry_point,
            "command": command,
            "argv": ("python " if command == "compaction" else "ledgerctl ")
            + " ".join(_shown(command_argv(command, row), row)),
            "layout": row.layout,
            "digest": row.digest,
        }
        for clock in ("wall_seconds", "cpu_seconds"):
            on = [r[0][clock] for r in results]
            off = [r[1][clock] for r in results]
            item[clock] = {"on": _stats(on), "off": _stats(off)}
            item[clock]["ratio_off_over_on"] = {
                "paired": _stats([b / a for a, b in zip(on, off, strict=True)]),
                "median_over_median": round(statistics.median(off) / statistics.median(on), 4),
            }
        item["pays"] = item["wall_seconds"]["ratio_off_over_on"]["paired"]["min"] > noise
        item["lines"] = results[0][0]["lines"]
        item["cell"] = cell
        items.append(item)
    return items


def _shown(argv: list[str], row: Any) -> list[str]:
    """A command line with the row's paths made relative to its data directory."""
    root = str(row.root)
    return [a.replace(root + "/", "").replace(root, ".") for a in argv]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, help="entries of the ledger (default 100000)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 500 entries, 1 round")
    parser.add_argument("--runs", type=int, help="rounds of every pair (default 5; quick 1)")
    parser.add_argument("--seed", type=int, default=cli.SEED)
    parser.add_argument(
        "--cells",
        default=",".join(DEFAULT_CELLS),
        help="comma-separated COMMAND@LAYOUT/DIGEST (default: %(default)s)",
    )
    parser.add_argument(
        "--messages",
        type=int,
        help="messages of the compaction cells' input (default 1000000; quick 20000)",
    )
    parser.add_argument("--only", help="comma-separated entry points (default: every one)")
    parser.add_argument(
        "--noise", type=float, default=NOISE, help="paired wall ratio an entry point must beat"
    )
    parser.add_argument("--data", metavar="DIR", help="keep (and reuse) the data under DIR")
    parser.add_argument("--tmp", help="parent of the temporary directory (default: TMPDIR)")
    args = parser.parse_args(argv)
    entries = args.entries or (500 if args.quick else 100_000)
    runs = args.runs or (1 if args.quick else 5)
    messages = args.messages or (20_000 if args.quick else 1_000_000)
    names = entry_points()
    wanted = names
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown or not wanted:
            raise SystemExit(f"bench/native.py: unknown entry points {unknown}: {names}")
    keep = args.data is not None
    base = (
        Path(args.data)
        if keep
        else Path(tempfile.mkdtemp(prefix="ledgerctl-bench-native-", dir=args.tmp))
    )
    load_before = os.getloadavg()
    started = time.perf_counter()
    servers: list[subprocess.Popen[str]] = []
    try:
        cells: dict[str, tuple[str, Any]] = {}
        rows: dict[str, Any] = {}
        for cell in (c.strip() for c in args.cells.split(",") if c.strip()):
            command, _, key = cell.partition("@")
            if command in ("compaction", "compaction-spill") and key.isdigit():
                spill = command == "compaction-spill"
                command = "compaction"
                size = max(1, messages // 10) if spill else messages
                memory = SPILL_MEMORY if spill else None
                compaction = CompactionInput(base / "compaction", size, int(key), memory)
                compaction.prepare()
                cells[cell] = (command, compaction)
                continue
            layout, _, digest = key.partition("/")
            if command not in COMMANDS or layout not in cli.DEFAULT_LAYOUTS:
                raise SystemExit(f"bench/native.py: unknown cell {cell!r}")
            cli._names(digest, cli.DIGESTS, "digests")
            if key not in rows:
                where = base / f"n{entries}" / f"{cli._data_layout(layout)}-{digest}"
                cli.prepared(where, entries, args.seed, cli._data_layout(layout), digest)
                address = None
                if layout == "live":
                    server, address = cli.start_test_bookie(where / "bookie", entries)
                    servers.append(server)
                rows[key] = cli.Row(layout, digest, where, address)
            cells[cell] = (command, rows[key])
        # which entry points each cell calls: one counted run each
        calls = {
            cell: run_cell(command, row, entries, None, probe=True)["calls"]
            for cell, (command, row) in cells.items()
        }
        pairs = [(n, cell) for n in wanted for cell in cells if calls[cell].get(n)]
        items = measure(pairs, cells, entries, runs, args.noise)
        for item in items:
            item["calls"] = calls[item["cell"]][item["entry_point"]]
    finally:
        for server in servers:
            cli.stop_test_bookie(server)
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()
    command_line = argv if argv is not None else sys.argv[1:]
    report = {
        "benchmark": "native",
        "command": " ".join(["python", "bench/native.py", *command_line]),
        "quick": args.quick,
        "entries": entries,
        "seed": args.seed,
        "runs": runs,
        "noise": args.noise,
        "clock": "wall seconds of the command's process (start to exit, start-up included) "
        "and its CPU seconds (user + system, os.wait4); ratio: off over on",
        "machine": machine(),
        "load_average": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in load_after],
        },
        "seconds": round(time.perf_counter() - started, 1),
        "cells": {cell: dict(sorted(c.items())) for cell, c in calls.items()},
        "not_called": [n for n in wanted if not any(c.get(n) for c in calls.values())],
        "entry_points": items,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
