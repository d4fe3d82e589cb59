"""Run ledgerctl read commands in one process and report how each ended (for damage tests).

``python -m tests.support.damage_runner`` reads a JSON list of argument lists on stdin and prints
one JSON object per command: its exit code, whether it ended in an exception (a traceback
for a user), and the last lines of its stderr. Used in process as root and as a
subprocess under an unprivileged user (``setpriv``), so that every command of a damage
costs one interpreter start, not one each.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from typing import Any


def run_one(args: list[str]) -> dict[str, Any]:
    from pulsarctl_py.cli import main

    out, err = io.StringIO(), io.StringIO()
    crash = None
    code: int | None = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
    except BaseException:
        crash = traceback.format_exc()
    return {
        "args": args,
        "code": code,
        "crash": crash,
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
    }


def main() -> None:
    commands = json.load(sys.stdin)
    json.dump([run_one(args) for args in commands], sys.stdout)


if __name__ == "__main__":
    main()
