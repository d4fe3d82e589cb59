"""The guide's runbooks run as written.

Every ```sh block of ``docs/guide.md`` and ``docs/runbooks/*.md`` is executed, line by
line and in order, with ``bash``, in a fresh demo data directory per file (made by
``ledgerctl demo``; it holds ``ledgerctl.toml``, so no connection flags are needed), with
the ``ledgerctl`` of this test's interpreter first on PATH. The convention:

* a line may end with ``# exit N`` to state its expected exit code; the default is 0;
* a line ending with ``\\`` continues on the next; blank lines and ``#`` comments are skipped;
* lines of one file share the working directory and exported variables, as in one shell;
  pipelines fail when any part fails (``set -o pipefail``);
* ```text blocks (and any other fence than ```sh) are never run; nor are the rehearsals,
  ```sh rehearse blocks, which need a running sandbox: tests/cluster/sandbox/
  test_rehearsals.py runs those, with this parser and runner;
* a line calling an optional tool that is not installed (``jq``, ``xxd``) is skipped;
* a file that claims to be a runbook (it lives in ``docs/runbooks/`` or has a heading
  starting with "Runbook") but has no runnable block fails: its examples would go
  untested.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
OPTIONAL_TOOLS = ("jq", "xxd")
LINE_TIMEOUT_S = 120

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<info>[^`]*?)\s*$")
#: the info string of the blocks run here; ```sh rehearse blocks run on the sandbox
RUNNABLE = "sh"
_EXPECT = re.compile(r"\s#\s*exit\s+(?P<code>\d+)\s*$")
_RUNBOOK_HEADING = re.compile(r"^#{1,6}\s+runbook\b", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Step:
    """One command line of a runbook and the exit code it must end with."""

    lineno: int  # 1-based line in the Markdown file
    command: str
    expect: int


def runbook_files() -> list[Path]:
    pages = sorted((DOCS / "runbooks").glob("*.md")) if (DOCS / "runbooks").is_dir() else []
    return [DOCS / "guide.md", *pages]


def claims_runbook(path: Path, text: str) -> bool:
    return path.parent.name == "runbooks" or bool(_RUNBOOK_HEADING.search(text))


def parse_steps(text: str, info: str = RUNNABLE) -> list[Step]:
    """The command lines of every block whose info string is ``info`` (```sh), in order
    (see the module docstring)."""
    steps: list[Step] = []
    fence: str | None = None
    runnable = False
    indent = 0
    pending: list[str] = []
    pending_line = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(raw)
        if fence is None:
            if match:
                fence = match.group("fence")
                runnable = " ".join(match.group("info").split()) == info
                indent = len(match.group("indent"))
            continue
        if match and match.group("fence").startswith(fence) and not match.group("info"):
            if pending:
                raise ValueError(f"line {pending_line}: a continued line ends the block")
            fence = None
            continue
        if not runnable:
            continue
        line = raw[indent:] if raw[:indent].strip() == "" else raw.lstrip()
        if not pending:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            pending_line = lineno
        if line.rstrip().endswith("\\"):
            pending.append(line.rstrip()[:-1])
            continue
        pending.append(line)
        command = "\n".join(pending) if len(pending) == 1 else " ".join(pending)
        pending = []
        expect = 0
        found = _EXPECT.search(command)
        if found:
            expect = int(found.group("code"))
            command = command[: found.start()].rstrip()
        steps.append(Step(pending_line, command.strip(), expect))
    if fence is not None:
        raise ValueError("a code block is not closed")
    return steps


def _missing_tool(command: str) -> str | None:
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    for tool in OPTIONAL_TOOLS:
        if tool in words and shutil.which(tool) is None:
            return tool
    return None


@pytest.fixture(scope="module")
def demo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pulsarctl_py.demo import create_demo

    target = tmp_path_factory.mktemp("runbook-demo") / "demo"
    create_demo(target)
    return target


def _environment(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERCTL_")}
    env.update(extra or {})
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["HOME"] = str(home)  # no user config file can leak into the run
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "120"
    return env


def run_steps(
    steps: list[Step],
    workdir: Path,
    state_dir: Path,
    env: dict[str, str] | None = None,
    stop_at_failure: bool = False,
    timeout: float = LINE_TIMEOUT_S,
) -> list[str]:
    """Run every step (with ``env`` added to the environment; up to the first failure
    with ``stop_at_failure``); a list of failures (empty when all ended as stated)."""
    cwd_file = state_dir / "cwd"
    env_file = state_dir / "env"
    cwd_file.write_text(str(workdir))
    env_file.write_text("")
    env = _environment(state_dir, env)
    failures = []
    for step in steps:
        tool = _missing_tool(step.command)
        if tool is not None:
            print(f"line {step.lineno}: skipped, {tool} is not installed: {step.command}")
            continue
        script = (
            f"set -o pipefail\n"
            f"source {shlex.quote(str(env_file))}\n"
            f'cd "$(cat {shlex.quote(str(cwd_file))})" || exit 97\n'
            f"__runbook_save() {{ __rc=$?; pwd > {shlex.quote(str(cwd_file))}; "
            f"export -p > {shlex.quote(str(env_file))}; exit $__rc; }}\n"
            f"trap __runbook_save EXIT\n"
            f"{step.command}\n"
        )
        proc = subprocess.run(
            ["bash", "-c", script],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
        )
        if proc.returncode != step.expect:
            failures.append(
                f"line {step.lineno}: `{step.command}` exited {proc.returncode}, expected "
                f"{step.expect}\n  stdout: {proc.stdout.decode(errors='replace')[-1500:]}"
                f"\n  stderr: {proc.stderr.decode(errors='replace')[-1500:]}"
            )
            if stop_at_failure:
                break
    return failures


@pytest.mark.parametrize("page", runbook_files(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_runbook_runs_as_written(page: Path, demo_template: Path, tmp_path: Path) -> None:
    text = page.read_text(encoding="utf-8")
    steps = parse_steps(text)
    if not steps:
        if claims_runbook(page, text):
            pytest.fail(
                f"{page.relative_to(ROOT)} is a runbook but has no ```sh block to run: mark "
                "the examples that run on the demo data as ```sh, the others as ```text"
            )
        pytest.skip(f"{page.relative_to(ROOT)} has no runnable block")
    workdir = tmp_path / "demo"
    shutil.copytree(demo_template, workdir)
    state = tmp_path / "state"
    state.mkdir()
    failures = run_steps(steps, workdir, state)
    assert not failures, "\n".join(failures)


# -- the runner itself ---------------------------------------------------------------


def test_parser_reads_the_convention() -> None:
    text = "\n".join(
        [
            "# Runbook: x",
            "```sh",
            "echo one",
            "# a comment",
            "",
            "false  # exit 1",
            "echo a \\",
            "  b",
            "```",
            "```text",
            "never run",
            "```",
            "1. inside a list:",
            "",
            "   ```sh",
            "   exit 3 # exit 3",
            "   ```",
            "```toml",
            'a = "b"',
            "```",
            "```sh rehearse",
            "scripts/sandbox produce x",
            "```",
        ]
    )
    assert parse_steps(text) == [
        Step(3, "echo one", 0),
        Step(6, "false", 1),
        Step(7, "echo a    b", 0),
        Step(16, "exit 3", 3),
    ]
    assert parse_steps(text, "sh rehearse") == [Step(22, "scripts/sandbox produce x", 0)]


def test_runner_reports_a_wrong_exit_code_and_keeps_state(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    state = tmp_path / "s"
    state.mkdir()
    steps = [
        Step(1, "cd sub && export GREETING=hi", 0),
        Step(2, 'test "$(basename "$PWD")" = sub && test "$GREETING" = hi', 0),
        Step(3, "false | cat", 1),  # pipefail
        Step(4, "true", 1),
    ]
    failures = run_steps(steps, work, state)
    assert len(failures) == 1 and failures[0].startswith("line 4:"), failures


def test_a_runbook_without_runnable_blocks_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "runbooks" / "x.md"
    assert claims_runbook(page, "# Anything\n```text\nledgerctl x\n```\n")
    assert claims_runbook(tmp_path / "notes.md", "## Runbook: fix it\n")
    assert not claims_runbook(tmp_path / "notes.md", "# Notes\nno runbook heading\n")
    assert parse_steps("## Runbook: fix it\n```text\nledgerctl x\n```\n") == []
