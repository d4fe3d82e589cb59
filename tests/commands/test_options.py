"""commands.options.option_set: one decorator gives a command a set of options.

The CLI sees each option as if written out (names, order after the command's own, help);
the command receives them as one object. The repair and migrate commands use it for
--metadata-url, --bookie-dir, --plan, --apply and -o (commands.repair.PlanFlags).
"""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from pulsarctl_py.commands.plans import PlanFlags, PlanOutput, plan_options

#: the parameter's default: the decorator replaces it, the CLI never sees it
NONE_GIVEN = PlanFlags()
PLAN_FLAGS = ["--metadata-url", "--bookie-dir", "--plan", "--apply", "--output"]


def _app() -> tuple[typer.Typer, list[tuple[str, PlanFlags]]]:
    app = typer.Typer()
    seen: list[tuple[str, PlanFlags]] = []

    @app.command()
    @plan_options
    def fix(
        topic: str = typer.Argument(..., metavar="TOPIC", help="The topic."),
        hard: bool = typer.Option(False, "--hard", help="Hard."),
        flags: PlanFlags = NONE_GIVEN,
    ) -> None:
        """Fix a topic."""
        seen.append((topic + ("!" if hard else ""), flags))

    return app, seen


def test_the_command_receives_the_set_as_one_object() -> None:
    app, seen = _app()
    r = CliRunner().invoke(
        app,
        [
            "t",
            "--bookie-dir",
            "a",
            "--bookie-dir",
            "b",
            "--plan",
            "p.json",
            "--apply",
            "-o",
            "json",
            "--hard",
        ],
    )
    assert r.exit_code == 0, r.output
    assert seen == [
        ("t!", PlanFlags(None, [Path("a"), Path("b")], Path("p.json"), True, PlanOutput.json))
    ]
    assert seen[0][1].given
    seen.clear()
    assert CliRunner().invoke(app, ["u"]).exit_code == 0
    assert seen == [("u", PlanFlags())] and not seen[0][1].given


def test_help_lists_the_set_after_the_commands_own_options() -> None:
    app, _ = _app()
    text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    at = [text.index(flag) for flag in ["--hard", *PLAN_FLAGS]]
    assert at == sorted(at), text
    assert "--flags" not in text
    assert "Save the plan (JSON) to FILE" in text  # the option's own help, unchanged
