"""The ``ledgerctl`` command: one Typer app, one small module per verb in commands/.

Exit codes: 0 ok, 1 findings in the data, 2 usage or bad input, 3 a store could not be
reached or opened, 141 the output pipe was closed early, 130 interrupted (Ctrl-C: one line,
"ledgerctl: interrupted"). A LedgerctlError ends as one line
on stderr and its own exit code; so does an OS error on a named file (exit 3); anything
else is a bug and keeps its traceback. Heavy libraries are
imported only inside the commands that need them, so ``ledgerctl --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer

from pulsarctl_py import __version__
from pulsarctl_py.commands import (
    bookie,
    compact,
    config,
    decode,
    demo,
    export,
    inspect,
    ledger,
    migrate,
    repair,
    schema,
    seek,
    topic,
    verify,
)

#: exit status when the reader of our output went away (``ledgerctl ... | head``), as a
#: process killed by SIGPIPE reports it in a shell
EXIT_BROKEN_PIPE = 141

EXIT_CODES_HELP = (
    "Exit status: 0 ok; 1 findings in the data (a check failed, damaged data, a name that "
    "does not exist); 2 usage or bad input; 3 a store could not be reached, opened or read "
    "(permission denied included); 141 the output pipe was closed early "
    "(ledgerctl ... | head); 130 interrupted (Ctrl-C)."
)

app = typer.Typer(
    name="ledgerctl",
    help="Inspect and repair Apache Pulsar topic data where it is stored: BookKeeper "
    "ledgers and topic metadata, without a running broker.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    epilog=EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ledgerctl {__version__}")
        raise typer.Exit()


def _max_message_size(value: str | None) -> str | None:
    """Set the process's maximum message size from the flag or its variable, before any
    command runs (imported only then: the default needs no import)."""
    if value is not None or os.environ.get("LEDGERCTL_MAX_MESSAGE_SIZE"):
        from pulsarctl_py import limits

        try:
            size = limits.resolve(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--max-message-size") from None
        limits.configure(size)
    return value


def _no_color(value: bool) -> bool:
    """--no-color: as NO_COLOR=1 for this run (https://no-color.org), which Rich's consoles
    and the error line read."""
    if value:
        os.environ["NO_COLOR"] = "1"
    return value


def colour_enabled() -> bool:
    """Colour on stderr: a terminal, and NO_COLOR unset or empty (--no-color sets it)."""
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    no_color: bool = typer.Option(
        False,
        "--no-color",
        callback=_no_color,
        is_eager=True,
        help="No colour in any output (also when NO_COLOR is set to a non-empty value).",
    ),
    max_message_size: str = typer.Option(
        None,
        "--max-message-size",
        metavar="SIZE",
        callback=_max_message_size,
        help="The largest message any command accepts from stored or received bytes (5MiB, "
        "512m, 1g or bytes): a payload's uncompressed_size, a chunked message joined, a "
        "bookie frame (plus 10 KiB). Larger ones are reported as errors, never allocated. "
        "Default: $LEDGERCTL_MAX_MESSAGE_SIZE, else the broker's default maxMessageSize, "
        "5MiB; raise it as far as your brokers' maxMessageSize.",
        show_default=False,
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
schema.register(app)
repair.register(app)
migrate.register(app)
config.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code instead of raising SystemExit.

    Typer handles usage errors (exit 2) and interrupts; a LedgerctlError from a command
    becomes one line on stderr and its ``exit_code`` (1 data, 2 input, 3 store).
    """
    command = typer.main.get_command(app)
    try:
        return _main(command, argv)
    finally:
        _reset_limits()


def _reset_limits() -> None:
    """Back to the default maximum message size after a run (``main`` may run again in
    this process); nothing to do when no run loaded the limits."""
    limits = sys.modules.get("pulsarctl_py.decoders.limits")
    if limits is not None:
        limits.set_max_message_size(limits.DEFAULT_MAX_MESSAGE_SIZE)


#: exit status after Ctrl-C, as a shell reports a process ended by SIGINT (128 + 2)
EXIT_INTERRUPTED = 130


class Interrupted(BaseException):
    """Ctrl-C, raised by our SIGINT handler: a BaseException that is not
    KeyboardInterrupt, so that Click does not turn it into "Aborted!" and exit 1."""


def _on_sigint(signum: int, frame: Any) -> None:
    raise Interrupted()


def _main(command: Any, argv: list[str] | None) -> int:
    import signal
    import threading

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        return _run_command(command, argv)
    except Interrupted:
        _say("interrupted")
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _run_command(command: Any, argv: list[str] | None) -> int:
    try:
        command.main(args=argv, prog_name="ledgerctl", standalone_mode=True)
    except SystemExit as exc:
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            # click met EPIPE writing our output and wrapped stdout to hush it
            sys.stdout = getattr(sys.stdout, "wrapped", sys.stdout)
            return _broken_pipe()
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    except BrokenPipeError:
        return _broken_pipe()
    except OSError as exc:
        if exc.filename is None:
            raise
        # a file the OS refuses to read (permission, I/O error) that no store wrapped
        _fail(f"cannot read {exc.filename}: {exc.strerror or exc}")
        return 3
    except Exception as exc:
        # imported here: the error root lives with the decoders, which --help never needs
        from pulsarctl_py.errors import LedgerctlError

        if not isinstance(exc, LedgerctlError):
            raise
        _fail(exc.one_line())
        return exc.exit_code
    return 0


def _broken_pipe() -> int:
    """Stop writing quietly: what is still buffered for stdout goes to /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass
    return EXIT_BROKEN_PIPE


def _fail(message: str) -> None:
    if colour_enabled():
        sys.stderr.write(f"\x1b[31mledgerctl: error:\x1b[0m {message}\n")
    else:
        sys.stderr.write(f"ledgerctl: error: {message}\n")


def _say(message: str) -> None:
    """A one-line note on stderr that is not an error (Ctrl-C)."""
    try:
        # on a terminal, after the echoed ^C
        sys.stderr.write(f"{chr(10) if sys.stderr.isatty() else ''}ledgerctl: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def run() -> None:
    code = main()
    try:
        sys.stdout.flush()  # here, not at interpreter exit, where EPIPE prints a warning
    except BrokenPipeError:
        code = _broken_pipe()
    sys.exit(code)


if __name__ == "__main__":
    run()
