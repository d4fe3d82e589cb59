"""Docs are generated from the code and checked: the CLI reference, help texts, lint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "clidocs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_command_has_help_and_is_in_the_guide() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import typer
        from clidocs import command_paths

        from pulsarctl_py.cli import app
    finally:
        sys.path.pop(0)
    guide = (ROOT / "docs" / "guide.md").read_text()
    root = typer.main.get_command(app)
    paths = [p for p in command_paths() if p]
    assert paths
    for path in paths:
        cmd = root
        for name in path:
            cmd = cmd.commands[name]  # type: ignore[attr-defined]
        assert (cmd.help or "").strip(), f"ledgerctl {' '.join(path)} has no help text"
        assert f"ledgerctl {' '.join(path)}" in guide, f"ledgerctl {' '.join(path)} not in guide"


def test_readme_has_the_two_fresh_machine_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = readme.split("## On a fresh machine", 1)[1].split("## ", 1)[0]
    commands = [line for line in blocks.splitlines() if "python3 -m venv" in line]
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci  # CI runs exactly the README's test command


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff_is_clean(command: list[str]) -> None:
    """Lint and layout alike: ``ruff check`` and ``ruff format --check`` find nothing."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
