"""Everyday conveniences of the CLI (issue 7.8): completion, whole topic names in
tables, one-line errors for huge ids, and a demo directory git ignores."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pulsarctl_py.demo import create_demo
from tests.support.cli_helpers import ledgerctl_script, run, run_on_terminal, run_script

ROOT = Path(__file__).resolve().parent.parent


def test_completion_is_offered_and_completes_commands_and_choices() -> None:
    helped = run_script("--help")
    assert "--install-completion" in helped.out and "--show-completion" in helped.out
    shown = run_script("--show-completion", "bash")
    assert shown.code == 0 and "_LEDGERCTL_COMPLETE" in shown.out
    env = {"_LEDGERCTL_COMPLETE": "complete_bash", "COMP_WORDS": "ledgerctl ins", "COMP_CWORD": "1"}
    assert run_script(env=env).out.split() == ["inspect"]
    env.update(COMP_WORDS="ledgerctl inspect -o ", COMP_CWORD="3")
    assert "raw" in run_script(env=env).out.split()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("conveniences") / "demo"
    create_demo(target)
    return target


def _table_on_a_narrow_terminal(demo: Path, *args: str) -> str:
    """The command's table as an 50-column terminal shows it, escapes removed."""
    code, _, screen = run_on_terminal(*args, "-o", "table", stderr_tty=False, cwd=demo, columns=50)
    assert code == 0
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode())


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["topic", "list"], ["persistent://public/default/batched-shadow"]),
        (["ledger", "list"], ["persistent://public/default/orders-partition-0"]),
    ],
)
def test_tables_keep_topic_names_whole(demo: Path, args: list[str], names: list[str]) -> None:
    screen = _table_on_a_narrow_terminal(demo, *args)
    for name in names:
        assert name in screen, screen


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "99999999999999999999"],
        ["ledger", "meta", "99999999999999999999"],
        ["inspect", "99999999999999999999:0"],
    ],
)
def test_huge_ids_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], demo: Path, monkeypatch: pytest.MonkeyPatch, args
) -> None:
    monkeypatch.chdir(demo)
    result = run(capsys, *args)
    assert result.code == 2
    assert result.err.count("\n") == 1 and "2^63-1" in result.err


@pytest.mark.parametrize("args", [["bookie", "log", "0"], ["bookie", "journal"]])
def test_huge_ledger_filters_are_usage_errors(demo: Path, args: list[str]) -> None:
    proc = subprocess.run(
        [ledgerctl_script(), *args, "--ledger", "99999999999999999999"],
        cwd=demo,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr


def test_the_readme_demo_directory_is_ignored_by_git() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "ledgerctl demo --force demo-data" in readme
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    probe = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "demo-data/ledgerctl.toml"], timeout=30
    )
    assert probe.returncode == 0


@pytest.mark.parametrize(
    ("args", "label"),
    [
        (["topic", "list"], b"reading topics"),
        (["ledger", "list"], b"reading ledgers"),
        (["verify", "--all"], b"verify"),
    ],
)
def test_quiet_and_no_progress_on_the_listing_commands(
    capsys: pytest.CaptureFixture[str],
    demo: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    label: bytes,
) -> None:
    monkeypatch.chdir(demo)
    loud = run(capsys, *args, "-o", "table")
    quiet = run(capsys, *args, "-o", "table", "--quiet")
    assert loud.code == quiet.code == 0
    assert loud.err.strip() and quiet.err == "" and quiet.out == loud.out
    loud = run(capsys, *args, "-o", "jsonl")
    # stderr on a terminal, the data piped: a progress line, unless told not to
    code, piped, screen = run_on_terminal(*args, "-o", "jsonl", stdout_tty=False, cwd=demo)
    assert code == 0 and label in screen and piped.decode() == loud.out
    code, piped, screen = run_on_terminal(
        *args, "-o", "jsonl", "--no-progress", stdout_tty=False, cwd=demo
    )
    assert code == 0 and label not in screen and piped.decode() == loud.out
