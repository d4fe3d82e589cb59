"""The disposable cluster of scripts/sandbox, as the bench scripts drive it (shared by
bench/live.py and bench/cli.py)."""

from __future__ import annotations

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
