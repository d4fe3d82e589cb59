"""The long fuzz run of every command's options and paths (not in CI).

    python scripts/fuzz_cli.py --cases 100000 --workers 2 --seed 1 [--seconds 3600]

Cases are drawn by tests/support/cli_fuzz.py from the app's own declared options (huge, negative
and non-integer numbers, unicode, bytes that are not UTF-8, markup, empty values, special
paths, and ZooKeeper that does not answer), split over ``--workers`` worker processes,
each running its cases in-process with a memory limit and per-case limits of CPU time
and wall-clock time (so a busy machine slows the run but calls nothing hung). Every
outcome is judged (tests/support/cli_fuzz.py ``judge``); each distinct problem is written to
``--report-dir`` with one argument list that shows it. Prints one JSON object with the
figures (cases, exit codes, problems, time), the ones docs/hostile-inputs.md quotes.
``--seconds`` ends the run early (between rounds of cases) with the figures so far.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


#: cases Hypothesis draws per round of a worker (each round its own seed): the run can
#: stop between rounds when --seconds is spent
ROUND = 100


def _run_share(args: tuple[int, int, int, float, bool, str, float | None]) -> dict[str, Any]:
    """One worker's share of the cases: generate with Hypothesis, run, judge; in rounds of
    :data:`ROUND` cases, none started after ``until`` (a time.time() deadline)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from tests.support import cli_fuzz

    index, cases, base_seed, timeout, slow, report_dir, until = args
    root = Path(tempfile.mkdtemp(prefix=f"ledgerctl-clifuzz-{index}-"))
    world = cli_fuzz.build_world(root)
    commands = cli_fuzz.command_specs()
    codes: collections.Counter[str] = collections.Counter()
    per_command: collections.Counter[str] = collections.Counter()
    problems: dict[str, dict[str, Any]] = {}
    retried: list[dict[str, Any]] = []
    slowest = (0.0, [])
    started = time.monotonic()
    worker = cli_fuzz.Worker(world, timeout)
    paths = {c.path for c in commands}

    def one(argv: list[str]) -> None:
        nonlocal slowest
        outcome = worker.run(argv)
        done = sum(codes.values()) + 1
        if done % 1000 == 0:
            minutes = (time.monotonic() - started) / 60
            print(f"worker {index}: {done} cases in {minutes:.1f} min", file=sys.stderr)
        codes[str(outcome.code if not outcome.crash else outcome.crash)] += 1
        if outcome.retried:
            retried.append({"argv": argv, "first": outcome.retried[:300]})
        named = argv[2:] if argv[:1] == ["--max-message-size"] else argv
        path = next((named[:n] for n in (2, 1) if tuple(named[:n]) in paths), ["(no command)"])
        per_command[" ".join(path)] += 1
        if outcome.seconds > slowest[0]:
            slowest = (outcome.seconds, argv)
        for wrong in cli_fuzz.judge(outcome):
            key = wrong[:120]
            item = problems.setdefault(key, {"problem": key, "count": 0, "argv": argv})
            item["count"] += 1
            if item["count"] == 1:
                name = f"{index}-{len(problems)}.txt"
                (Path(report_dir) / name).write_text(
                    json.dumps(argv) + f"\nexit {outcome.code}\n{outcome.err}\n{outcome.detail}"
                )
                item["file"] = name

    stopped_early = False
    try:
        for number in range(-(-cases // ROUND)):
            if until is not None and time.time() >= until:
                stopped_early = True
                break
            size = min(ROUND, cases - number * ROUND)
            round_ = settings(
                max_examples=size,
                phases=[Phase.generate],
                database=None,
                deadline=None,
                derandomize=False,
                suppress_health_check=list(HealthCheck),
            )(given(cli_fuzz.cases(world, commands, slow=slow))(one))
            hypothesis_seed((base_seed * 1000 + index) * 100_000 + number)(round_)()
    finally:
        worker.close()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "cases": sum(codes.values()),
        "codes": dict(codes),
        "per_command": dict(per_command),
        "problems": list(problems.values()),
        "retried": retried,
        "seconds": time.monotonic() - started,
        "stopped_early": stopped_early,
        "slowest": {"seconds": round(slowest[0], 2), "argv": slowest[1]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--case-seconds", type=float, default=20.0, help="CPU seconds a case may take"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="stop starting rounds of cases after this long and report the figures so far",
    )
    parser.add_argument("--no-slow", action="store_true", help="no ZooKeeper that does not answer")
    parser.add_argument(
        "--report-dir", default=str(Path(tempfile.gettempdir()) / "ledgerctl-clifuzz-report")
    )
    args = parser.parse_args()
    Path(args.report_dir).mkdir(parents=True, exist_ok=True)
    share = -(-args.cases // args.workers)
    until = None if args.seconds is None else time.time() + args.seconds
    jobs = [
        (i, share, args.seed, args.case_seconds, not args.no_slow, args.report_dir, until)
        for i in range(args.workers)
    ]
    started = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        results = pool.map(_run_share, jobs)
    codes: collections.Counter[str] = collections.Counter()
    per_command: collections.Counter[str] = collections.Counter()
    problems: dict[str, dict[str, Any]] = {}
    for result in results:
        codes.update(result["codes"])
        per_command.update(result["per_command"])
        for item in result["problems"]:
            known = problems.setdefault(item["problem"], {**item, "count": 0})
            known["count"] += item["count"]
    seconds = time.monotonic() - started
    cases = sum(codes.values())
    print(
        json.dumps(
            {
                "cases": cases,
                "cases_asked": args.cases,
                "stopped_early": any(r["stopped_early"] for r in results),
                "seed": args.seed,
                "workers": args.workers,
                "exit_codes": dict(sorted(codes.items())),
                "tracebacks": codes.get("traceback", 0),
                "hangs": codes.get("hang", 0),
                "problems": sorted(problems.values(), key=lambda p: -p["count"]),
                # a worker died or hung after many cases and a fresh one ran the case clean
                "not_reproduced": [r for result in results for r in result["retried"]],
                "per_command": dict(sorted(per_command.items())),
                "seconds": round(seconds, 1),
                "cases_per_second": round(cases / seconds, 1),
                "slowest": max((r["slowest"] for r in results), key=lambda s: s["seconds"]),
            },
            indent=2,
        )
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
