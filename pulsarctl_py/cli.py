"""The ``ledgerctl`` command: one Typer app, one small module per verb in commands/.

Exit codes: 0 ok, 1 findings in the data, 2 usage or bad input, 3 a store could not be
reached or opened, 4 a write refused because a broker has the topic loaded (or cannot be
asked), 5 a write refused because the store changed since the plan was made, 141 the
output pipe was closed early, 130 interrupted (Ctrl-C: one line,
"ledgerctl: interrupted"). A usage error (pulsarctl_py.usage) and a LedgerctlError end as
one line on stderr and their exit code; so does an OS error on a named file (exit 3 when
the OS refuses it, 2 for a wrong path); anything else is a bug and keeps its traceback.
Heavy libraries are imported only inside the commands that need them, so ``ledgerctl
--help`` stays fast.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
from typing import Any

import typer

from pulsarctl_py import __version__

#: every command, in the order ``ledgerctl --help`` lists them (Typer's: commands, then
#: groups), and the module of pulsarctl_py.commands that registers it. Only the module of
#: the command being run is imported (:class:`_LazyGroup`); tests/test_cli_lazy.py holds
#: this table equal to what the modules register.
COMMANDS: dict[str, str] = {
    "decode": "decode",
    "inspect": "inspect",
    "demo": "demo",
    "verify": "verify",
    "seek": "seek",
    "compact": "compact",
    "export": "export",
    "orphans": "repair",
    "apply": "repair",
    "undo": "repair",
    "config": "config",
    "topic": "topic",
    "ledger": "ledger",
    "bookie": "bookie",
    "schema": "schema",
    "repair": "repair",
    "migrate": "migrate",
}

#: the modules in the order they register their commands on the whole app
_MODULES = (
    "decode",
    "inspect",
    "demo",
    "topic",
    "ledger",
    "bookie",
    "verify",
    "seek",
    "compact",
    "export",
    "schema",
    "repair",
    "migrate",
    "config",
)

#: exit status when the reader of our output went away (``ledgerctl ... | head``), as a
#: process killed by SIGPIPE reports it in a shell
EXIT_BROKEN_PIPE = 141

EXIT_CODES_HELP = (
    "Exit status: 0 ok; 1 findings in the data (a check failed, damaged data, a name that "
    "does not exist); 2 usage or bad input; 3 a store could not be reached, opened or read "
    "(permission denied included); 4 a write refused: a broker has the topic loaded (pass "
    "--unload), or cannot be asked; 5 a write refused: the store changed since the plan was "
    "made (nothing written); 141 the output pipe was closed early "
    "(ledgerctl ... | head); 130 interrupted (Ctrl-C)."
)


def _new_app(**settings: Any) -> typer.Typer:
    """The root Typer app with its options (:func:`root`) and no command."""
    new = typer.Typer(
        name="ledgerctl",
        help="Inspect and repair Apache Pulsar topic data where it is stored: BookKeeper "
        "ledgers and topic metadata, without a running broker.",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        epilog=EXIT_CODES_HELP,
        context_settings={"help_option_names": ["-h", "--help"]},
        **settings,
    )
    new.callback()(root)
    return new


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ledgerctl {__version__}")
        raise typer.Exit()


def _max_message_size(value: str | None) -> str | None:
    """Check the flag's value where it is parsed; the command applies it
    (:func:`_apply_settings`)."""
    if value is not None:
        from pulsarctl_py import limits

        try:
            limits.parse_limit(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--max-message-size") from None
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
        "512m, 1g or bytes): a payload's uncompressed_size, a bookie frame (plus 10 KiB); a "
        "chunked message joined may hold four times it. Larger ones are reported as errors, "
        "never allocated. "
        "Default: $LEDGERCTL_MAX_MESSAGE_SIZE, max_message_size in the nearest "
        "ledgerctl.toml, the broker configuration's maxMessageSize, else the broker's "
        "default, 5MiB; raise it as far as your brokers' maxMessageSize.",
        show_default=False,
    ),
) -> None:
    """Inspect and repair Apache Pulsar topic data where it is stored."""


def _register(target: typer.Typer, module: str) -> None:
    import importlib

    importlib.import_module(f"pulsarctl_py.commands.{module}").register(target)


@functools.cache
def _whole_app() -> typer.Typer:
    """The app with every command registered (every command module imported): what
    scripts/clidocs.py and the tests walk as ``pulsarctl_py.cli.app``."""
    whole = _new_app()
    for module in _MODULES:
        _register(whole, module)
    return whole


def __getattr__(name: str) -> Any:
    if name == "app":
        return _whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _LazyGroup(typer.core.TyperGroup):
    """The root command: it knows its commands' names (:data:`COMMANDS`) and imports a
    command's module when the command is asked for (click's lazy-group pattern), so that
    ``ledgerctl compact`` does not import the code of every other command. ``--help``,
    shell completion and the usage errors ask for every command, as before."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        module = COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            # the module's commands built as on the whole app: a group of its own with the
            # root's Typer settings (the help's markup mode among them)
            part = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
            part.callback()(root)
            _register(part, module)
            built = typer.main.get_command(part)
            for name, sub in built.commands.items():  # type: ignore[attr-defined]
                if COMMANDS.get(name) == module and name not in self.commands:
                    self.commands[name] = _prepare(sub)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """``ledgerctl --help`` lists every command: built in one go, as the whole app."""
        whole = typer.main.get_command(_whole_app())
        for name, sub in whole.commands.items():  # type: ignore[attr-defined]
            if name not in self.commands:
                self.commands[name] = _prepare(sub)
        super().format_commands(ctx, formatter)


def _prepare(command: Any) -> Any:
    """Every parameter's value checked (pulsarctl_py.usage.guard) and the settings
    applied when it runs (:func:`_apply_settings`)."""
    from pulsarctl_py import usage

    return _apply_settings(usage.guard(command))


@functools.cache
def _command() -> Any:
    """The Click command Typer builds from the root app (once per process); each command
    is built when it is first asked for (:class:`_LazyGroup`)."""
    from pulsarctl_py import usage

    # the root's own options checked; the settings are applied by each command it runs
    return usage.guard(typer.main.get_command(_new_app(cls=_LazyGroup)))


def _apply_settings(command: Any) -> Any:
    """Wrap each command so that, its arguments parsed (never for --help), the process's
    maximum message size is resolved as every setting is (pulsarctl_py.precedence: the
    command's --max-message-size, else ``ledgerctl --max-message-size``, the variable,
    ledgerctl.toml, the broker configuration its --broker-conf names or the settings do,
    the default) and is in effect, with the flag, while it runs."""
    subs = getattr(command, "commands", None)
    if subs:
        for sub in subs.values():
            _apply_settings(sub)
        return command
    inner = command.invoke

    def invoke(ctx: Any) -> Any:
        from pulsarctl_py import limits, precedence, topicpolicies

        topicpolicies.install()  # where offloaded ledgers are depends on topic policies

        flag = ctx.params.get("max_message_size")
        if flag is None:
            flag = ctx.find_root().params.get("max_message_size")
        if flag is not None:
            try:
                limits.parse_limit(flag)
            except ValueError as exc:
                raise typer.BadParameter(
                    str(exc), ctx=ctx, param_hint="--max-message-size"
                ) from None
        conf = ctx.params.get("broker_conf")
        with precedence.flags(broker_conf=None if conf is None else str(conf)):
            found = precedence.resolve(precedence.MAX_MESSAGE_SIZE, flag)
        if found.is_set:
            limits.configure(found.value)
        with precedence.flags(max_message_size=flag):
            return inner(ctx)

    command.invoke = invoke
    return command


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code instead of raising SystemExit.

    Click runs without its own error display: a usage error (a bad option value, a
    missing argument, an unknown option or command) becomes one line on stderr and exit
    2 (pulsarctl_py.usage); a LedgerctlError from a command becomes one line and its
    ``exit_code`` (1 data, 2 input, 3 store); an OS error on a named file is exit 3.
    """
    from pulsarctl_py import usage

    exceptions = usage.click_exceptions()
    _tolerant_stdout()
    command = _command()
    try:
        return _main(command, argv, exceptions)
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


def _main(command: Any, argv: list[str] | None, exceptions: Any) -> int:
    import signal
    import threading

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, _on_sigint)
    from pulsarctl_py import sessions

    try:
        with sessions.shared():  # one metadata-store session per store and mode
            return _run_command(command, argv, exceptions)
    except Interrupted:
        _say("interrupted")
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _run_command(command: Any, argv: list[str] | None, exceptions: Any) -> int:
    from pulsarctl_py import usage

    try:
        result = command.main(args=argv, prog_name="ledgerctl", standalone_mode=False)
    except exceptions.NoArgsIsHelpError as exc:
        exc.show()  # a bare ``ledgerctl`` or command group: its help, as before
        return exc.exit_code
    except exceptions.UsageError as exc:
        _fail(usage.usage_line(exc))
        return 2
    except exceptions.ClickException as exc:
        _fail(usage._one_line(exc.format_message()))
        return exc.exit_code
    except typer.Abort:
        _fail("aborted")
        return 1
    except BrokenPipeError:
        return _broken_pipe()
    except OSError as exc:
        if exc.filename is None:
            raise
        # a file no store or reader wrapped: the OS's own words (it may have been read or
        # written); refused (permission, I/O) is exit 3, a wrong path is bad input
        _fail(f"{os.fsdecode(exc.filename)}: {exc.strerror or exc}")
        return 3 if exc.errno in _REFUSED else 2
    except Exception as exc:
        # imported here: the error root lives with the decoders, which --help never needs
        from pulsarctl_py.errors import LedgerctlError

        if not isinstance(exc, LedgerctlError):
            raise
        _fail(exc.one_line())
        return exc.exit_code
    except SystemExit as exc:  # shell completion ends this way, and Click on EPIPE
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            # click met EPIPE writing our output and wrapped stdout to hush it
            sys.stdout = getattr(sys.stdout, "wrapped", sys.stdout)
            sys.stderr = getattr(sys.stderr, "wrapped", sys.stderr)
            return _broken_pipe()
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    # without standalone mode Click returns what the command returned (None), or the
    # code of a typer.Exit
    code = result if isinstance(result, int) and not isinstance(result, bool) else 0
    if code == EXIT_INTERRUPTED:
        # a KeyboardInterrupt that was not ours (PySpark's SIGINT handler cancels the
        # jobs, then raises it), which typer turns into a silent Exit(130); no command
        # returns 130 otherwise
        _say("interrupted")
    return code


def _tolerant_stdout() -> None:
    """Text the OS handed us as bytes that are not UTF-8 (a file name, an argument) is
    written back escaped (``\\udcff``, valid in JSON strings) rather than failing the
    whole output with UnicodeEncodeError."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None and getattr(sys.stdout, "errors", None) == "strict":
        try:
            reconfigure(errors="backslashreplace")
        except (ValueError, OSError):  # pragma: no cover - a stream that cannot
            pass


def _broken_pipe() -> int:
    """Stop writing quietly: what is still buffered for stdout goes to /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass
    return EXIT_BROKEN_PIPE


#: errors that say a path is there but the OS will not hand it over (exit 3)
_REFUSED = {errno.EACCES, errno.EPERM, errno.EIO, errno.EROFS, errno.ENOSPC, errno.EDQUOT}

#: characters a terminal would act on (escape sequences, carriage returns) or that would
#: break the one line: shown as escapes
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _fail(message: str) -> None:
    message = _CONTROL.sub(lambda m: repr(m.group())[1:-1], message)
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
