"""The ``ledgerctl`` command: one Typer app, one small module per verb in commands/.

Exit codes: 0 ok, 1 findings in the data, 2 usage or bad input, 3 a store could not be
reached or opened. A LedgerctlError ends as one line on stderr and its own exit code;
anything else is a bug and keeps its traceback. Heavy libraries are
imported only inside the commands that need them, so ``ledgerctl --help`` stays fast.
"""

from __future__ import annotations

import sys

import typer

from pulsarctl_py import __version__
from pulsarctl_py.commands import (
    bookie,
    compact,
    decode,
    demo,
    export,
    inspect,
    ledger,
    migrate,
    repair,
    seek,
    topic,
    verify,
)

app = typer.Typer(
    name="ledgerctl",
    help="Inspect and repair Apache Pulsar topic data where it is stored: BookKeeper "
    "ledgers and topic metadata, without a running broker.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ledgerctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Inspect and repair Apache Pulsar topic data where it is stored."""


decode.register(app)
inspect.register(app)
demo.register(app)
topic.register(app)
ledger.register(app)
bookie.register(app)
verify.register(app)
seek.register(app)
compact.register(app)
export.register(app)
repair.register(app)
migrate.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code instead of raising SystemExit.

    Typer handles usage errors (exit 2) and interrupts; a LedgerctlError from a command
    becomes one line on stderr and its ``exit_code`` (1 data, 2 input, 3 store).
    """
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="ledgerctl", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    except Exception as exc:
        # imported here: the error root lives with the decoders, which --help never needs
        from pulsarctl_py.errors import LedgerctlError

        if not isinstance(exc, LedgerctlError):
            raise
        _fail(exc.one_line())
        return exc.exit_code
    return 0


def _fail(message: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\x1b[31mledgerctl: error:\x1b[0m {message}\n")
    else:
        sys.stderr.write(f"ledgerctl: error: {message}\n")


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
