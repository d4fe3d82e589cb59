"""The long run of plan mutations (not in CI): the in-suite fuzz (tests/plans/test_fuzz.py)
for many more cases.

    python scripts/fuzz_plans.py --cases 100000 --seed 1 [--index db|idx]

Builds a verify world in a temporary directory (Pulsar's RocksDB metadata store and a
stopped bookie's directory, plus files outside it that mutations aim at), then for each
case mutates the world's valid plan (tests/support/plan_mutations.py), applies it, undoes it when
it applied, and checks that nothing outside the plan's store changed, that a refused plan
left nothing behind, that an applied one was undone to the original state, and that only
LedgerctlError escaped. A violation is written to ``--out`` (default
./plan-fuzz-violations) as ``plan-<sha256 prefix>.json`` (the mutant, whose paths name
the run's temporary world) with a ``.txt`` saying what happened; the world is then built
again. Rerunning the same ``--seed`` and ``--index`` replays the same mutants in the same
order. Prints one JSON object with the figures.

The temporary world's name does not start with ``ledgerctl-``: other tools clean up
their own ``/tmp/ledgerctl-*`` directories, and a world removed under the run shows up as
a violation.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.plan_mutations import Arena, Violation, mutate  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--index", choices=["db", "idx"], default="db")
    parser.add_argument("--out", type=Path, default=Path("plan-fuzz-violations"))
    args = parser.parse_args()
    started = time.monotonic()
    stages: collections.Counter[str] = collections.Counter()
    violations = 0
    with tempfile.TemporaryDirectory(prefix="plan-mutations-") as tmp:
        arena = Arena.build(Path(tmp), index=args.index)
        for case in range(args.cases):
            if case and case % 500 == 0:
                print(f"{case} cases, {dict(stages)}, {violations} violations", file=sys.stderr)
            rng = random.Random(f"{args.seed}:{case}")
            doc = mutate(arena, rng)
            try:
                stages[arena.run(doc).stage] += 1
            except Violation as exc:
                violations += 1
                text = json.dumps(doc, indent=1, default=repr)
                name = "plan-" + hashlib.sha256(text.encode()).hexdigest()[:16]
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / f"{name}.json").write_text(text)
                (args.out / f"{name}.txt").write_text(f"case {case} seed {args.seed}: {exc}\n")
                # start again from a clean world: the violation may have changed it
                arena = Arena.build(Path(tempfile.mkdtemp(dir=tmp)), index=args.index)
    report = {
        "cases": args.cases,
        "seed": args.seed,
        "index": args.index,
        "refused_at_load": stages["load"],
        "refused_at_apply": stages["apply"],
        "applied_and_undone": stages["applied"],
        "violations": violations,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(report))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
