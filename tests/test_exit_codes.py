"""Exit codes scripts can rely on (issue 7, point 6): 0 ok, 1 findings, 2 usage or bad
input, 3 a store that cannot be reached or read, 141 a closed output pipe, quietly."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_helpers import ledgerctl_script, run
from tests.support.demo_env import demo, demo_root

#: the shared demo fixtures this module's tests use
FIXTURES = (demo, demo_root)

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide.md"


def test_root_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    for phrase in (
        "Exit status: 0 ok",
        "1 findings in the data",
        "2 usage or bad input",
        "3 a store could not be reached, opened or read",
        "4 a write refused: a broker has the topic loaded",
        "5 a write refused: the store changed since the plan was made",
        "141 the output pipe was closed early",
    ):
        assert phrase in text


def test_the_guide_documents_them_near_the_top() -> None:
    lines = GUIDE.read_text().splitlines()
    heading = lines.index("## Exit codes")
    assert heading < 15, "the exit codes come before the runbooks"
    section = "\n".join(lines[heading : heading + 20])
    for code in ("0", "1", "2", "3", "4", "5", "141"):
        assert re.search(rf"^\| {code} \| \S", section, re.M), code


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["topic", "list"], 0),
        (["inspect", "4"], 0),
        (["topic", "info", "no-such-topic"], 1),
        (["ledger", "meta", "424242"], 1),
        (["inspect", "4", "--since", "yesterday-ish"], 2),
        (["inspect", "4", "--no-such-option"], 2),
        (["verify"], 2),
        (["topic", "list", "--metadata-url", "rocksdb://no-such-dir"], 3),
        (["bookie", "logs", "--bookie-dir", "no-such-dir"], 3),
    ],
)
def test_each_kind_of_end_has_its_code(
    capsys: pytest.CaptureFixture[str], demo: Path, args: list[str], code: int
) -> None:
    result = (
        run(capsys, *args, "-o", "json") if "--no-such-option" not in args else run(capsys, *args)
    )
    assert result.code == code, result.err
    if code:
        assert "Traceback" not in result.err
        assert result.err.strip(), "a failure says why"


@pytest.mark.parametrize(
    "args",
    [
        ["ledger", "list", "-o", "json"],
        ["ledger", "list", "-o", "jsonl"],
        ["topic", "list", "-o", "table"],
        ["inspect", "--topic", "batched", "-o", "tree"],
        ["inspect", "4", "-o", "jsonl"],
        ["verify", "--all", "-o", "json"],
        ["bookie", "logs", "-o", "table"],
        ["--help"],
    ],
)
def test_a_closed_pipe_ends_quietly(demo: Path, args: list[str]) -> None:
    """``ledgerctl ... | head`` when head has already gone: exit 141, nothing on stderr
    but what the command prints there anyway, no traceback, no "Exception ignored"."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [ledgerctl_script(), *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=demo,
            env={**os.environ, "XDG_CONFIG_HOME": str(demo / "no-user-config")},
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    for noise in ("Traceback", "Exception ignored", "BrokenPipeError", "Broken pipe"):
        assert noise not in proc.stderr
    assert "ledgerctl: error" not in proc.stderr


def test_a_pipe_to_head_keeps_what_was_read(demo: Path) -> None:
    proc = subprocess.run(
        ["bash", "-c", f"set -o pipefail; '{ledgerctl_script()}' ledger list -o jsonl | head -1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=demo,
    )
    assert proc.stdout.count("\n") == 1 and '"ledger_id":0' in proc.stdout
    assert proc.returncode in (0, 141)  # 141 when head left before ledgerctl was done
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_the_guide_says_first_which_commands_write() -> None:
    """The guide's first paragraph says that reading commands never write and names every
    command that does, before anything else."""
    lines = GUIDE.read_text().splitlines()
    first = " ".join(lines[2 : lines.index("", 2)])
    assert first.startswith("Reading commands never write")
    for writer in ("`apply`", "`undo`", "`compact --apply`", "`repair ... --apply`",
                   "`orphans --delete --apply`", "`migrate ... --apply`"):  # fmt: skip
        assert writer in first, writer
