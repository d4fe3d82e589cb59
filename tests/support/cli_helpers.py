"""Running the real CLI in tests: in process (fast) or as a subprocess (the installed script)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent.parent / "data"
REAL_CLIENT = DATA / "real-client"
KEYS = REAL_CLIENT / "keys"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """Run ``ledgerctl ARGS`` in this process through its real entry point."""
    from pulsarctl_py.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def ledgerctl_script() -> str:
    """The installed console script next to this interpreter, else on PATH."""
    local = Path(sys.executable).parent / "ledgerctl"
    if local.exists():
        return str(local)
    found = shutil.which("ledgerctl")
    if found is None:
        pytest.fail("the ledgerctl console script is not installed")
    return found


def run_script(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> Result:
    """Run the installed ``ledgerctl`` as a subprocess."""
    proc = subprocess.run(
        [ledgerctl_script(), *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    return Result(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def run_on_terminal(
    *args: str,
    stdout_tty: bool = True,
    stderr_tty: bool = True,
    cwd: Path | None = None,
    columns: int = 200,
) -> tuple[int, bytes, bytes]:
    """Run the installed ``ledgerctl`` with stdout and/or stderr on a pseudo-terminal.

    Returns the exit code, what went to a pipe (stdout when it is not the terminal) and
    everything the terminal received.
    """
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [ledgerctl_script(), *map(str, args)],
        cwd=cwd,
        stdout=follower if stdout_tty else subprocess.PIPE,
        stderr=follower if stderr_tty else subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": str(columns), "TERM": "xterm"},
    )
    os.close(follower)
    screen = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not chunk:
            break
        screen.extend(chunk)
    piped = proc.stdout.read() if proc.stdout is not None else b""
    code = proc.wait(timeout=60)
    os.close(leader)
    return code, piped, bytes(screen)


BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def run_bench(script: str, *args: str, timeout: float) -> dict[str, Any]:
    """Run ``bench/<script>`` in a fresh interpreter; it must exit 0 and print one JSON
    report, which is returned."""
    proc = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
