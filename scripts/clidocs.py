"""Generate docs/cli.md from the CLI's own --help, or check that it is current.

python scripts/clidocs.py          # rewrite docs/cli.md
python scripts/clidocs.py --check  # exit 1 when docs/cli.md differs from --help
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "cli.md"
ENV = {"COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1", "LINES": "50"}


def command_paths() -> list[list[str]]:
    """Every command and subcommand of ledgerctl, as argument lists, depth first."""
    import typer

    from pulsarctl_py.cli import app

    root = typer.main.get_command(app)
    paths: list[list[str]] = [[]]

    def walk(cmd: object, prefix: list[str]) -> None:
        for name in sorted(getattr(cmd, "commands", {}) or {}):
            sub = cmd.commands[name]  # type: ignore[attr-defined]
            if getattr(sub, "hidden", False):
                continue
            paths.append([*prefix, name])
            walk(sub, [*prefix, name])

    walk(root, [])
    return paths


def help_text(path: list[str]) -> str:
    code = "from pulsarctl_py.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run(
        [sys.executable, "-c", code, *path, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        timeout=60,
        check=True,
    ).stdout
    return "\n".join(line.rstrip() for line in out.splitlines()).strip("\n")


def render() -> str:
    parts = [
        "# CLI reference",
        "",
        "Generated from `--help` by `python scripts/clidocs.py`; the tests fail when it is stale.",
        "",
    ]
    for path in command_paths():
        title = " ".join(["ledgerctl", *path])
        parts += [f"## `{title}`", "", "```text", help_text(path), "```", ""]
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print("docs/cli.md is stale: run python scripts/clidocs.py")
            return 1
        print("docs/cli.md is current")
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
