"""The disposable cluster of scripts/sandbox, as the bench scripts drive it (shared by
bench/live.py and bench/cli.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SANDBOX = Path(__file__).resolve().parent.parent / "scripts" / "sandbox"


def sandbox(*args: str, timeout: float = 900) -> str:
    """``scripts/sandbox ARGS``; its stdout. A failure ends the benchmark with its stderr."""
    done = subprocess.run(
        [sys.executable, str(SANDBOX), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/sandbox {' '.join(args)}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def ensure_running(directory: Path) -> bool:
    """The sandbox in DIRECTORY running; whether this call started it from nothing (the
    caller then stops it with ``down`` when done).

    A new directory gets ``up``; one whose cluster a run stopped (its cluster.json kept)
    gets ``start``; a cluster with only some processes running gets the missing ones
    started and is left running after.
    """
    if not (directory / "cluster.json").exists():
        sandbox("up", str(directory))
        return True
    status = json.loads(sandbox("status", str(directory)))
    running = [status["zookeeper"], status["broker"], *status["bookies"].values()]
    if all(running):
        return False
    sandbox("start", str(directory))
    return not any(running)
