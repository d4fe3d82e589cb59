"""Usage errors in one style: one line ``ledgerctl: error: ...``, the option named, exit 2.

Click (inside Typer) reports a bad option in its own words, over three or four lines
(usage, a hint, then ``Error: Invalid value for '--limit': Input should be a valid
integer, unable to parse string as an integer``). The CLI runs Click without its own
error display and hands every usage error to :func:`usage_line`, which says it in one
line, names the option as it is spelled on the command line, and suggests the closest
name for a mistyped subcommand, option or choice (:func:`did_you_mean`, difflib).

:func:`guard` also checks every option and argument value once Click has converted it,
whatever its command: an integer must fit the signed 64-bit range (BookKeeper's ledger
and entry ids are Java longs, and no count or offset of Pulsar's is wider), a number
must be finite, text must not hold a NUL character (the OS refuses it in paths and
arguments) nor, unless it is a path, a lone surrogate (bytes that are not UTF-8 on the
command line, which no topic name, address or key can hold), and a path must not be
empty (``Path("")`` is the working directory). A value refused here is a usage error.

Nothing here imports Typer or Click at module level beyond what the CLI has already
loaded; the Click exception classes are found on the installed Typer (which vendors
Click from 0.23 on) or on Click itself.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable
from pathlib import PurePath
from typing import Any

from pulsarctl_py import coercion

#: a Java long's range: BookKeeper ledger and entry ids, Pulsar's offsets and counts
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_SURROGATE = re.compile("[\ud800-\udfff]")
#: Typer's words for a path the OS does not let us read or write
_DENIED = re.compile(r"is not (readable|writable)\.?$")


def click_exceptions() -> Any:
    """The module holding Click's exception classes, as the installed Typer uses them."""
    try:
        from typer._click import exceptions  # Typer >= 0.23 vendors Click
    except ImportError:  # pragma: no cover - an older Typer on top of Click
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


def did_you_mean(word: str, candidates: Iterable[str], cutoff: float = 0.6) -> str:
    """`` (did you mean X?)`` for the closest candidate to ``word``, or ``""``."""
    import difflib

    names = [c for c in dict.fromkeys(candidates) if c != word]
    found = difflib.get_close_matches(word, names, n=1, cutoff=cutoff)
    return f" (did you mean {found[0]}?)" if found else ""


def option_name(param: Any) -> str:
    """How the user spells a parameter: its long option (``--output``), or an argument's
    metavar (``TOPIC``)."""
    opts = [o for o in getattr(param, "opts", []) or [] if o.startswith("-")]
    if opts:
        long = [o for o in opts if o.startswith("--")]
        return (long or opts)[0]
    name = getattr(param, "metavar", None) or getattr(param, "name", None) or "argument"
    return str(name).strip("{}[].").upper()


def _choices(param: Any) -> list[str] | None:
    """A parameter's allowed values as typed on the command line, or None."""
    descriptor = getattr(param, "type_descriptor", None)
    found = getattr(descriptor, "choices", None) if descriptor is not None else None
    if found is None:
        found = getattr(getattr(param, "type", None), "choices", None)
    if not found:
        return None
    return [str(c.value if isinstance(c, enum.Enum) else c) for c in found]


def _annotation(param: Any) -> Any:
    descriptor = getattr(param, "type_descriptor", None)
    return getattr(descriptor, "annotation", None)


def _is_path(param: Any) -> bool:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        if getattr(descriptor, "is_path", False) or getattr(descriptor, "is_file", False):
            return True
        annotation = getattr(descriptor, "annotation", None)
        args = getattr(annotation, "__args__", ()) or ()
        return any(isinstance(a, type) and issubclass(a, PurePath) for a in args)
    return type(getattr(param, "type", None)).__name__ in ("Path", "File")


def _kind(param: Any) -> str:
    """``an integer``, ``a number``: what a parameter takes, in words (for messages)."""
    annotation = _annotation(param)
    args = getattr(annotation, "__args__", ()) or ()
    kinds = [annotation, *args]
    if int in kinds:
        return "a whole number"
    if float in kinds:
        return "a number"
    name = getattr(getattr(param, "type", None), "name", "")
    return {"integer": "a whole number", "float": "a number"}.get(name, "a valid value")


def _shown(value: Any) -> str:
    """A value as a message quotes it: repr of text (quotes, escapes), str otherwise."""
    if isinstance(value, (list, tuple)):
        return ", ".join(_shown(v) for v in value)
    text = value if isinstance(value, str) else str(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return repr(text)


def check_value(param: Any, raw: Any, value: Any) -> None:
    """Refuse a converted value no command can use (see the module docstring)."""
    exceptions = click_exceptions()

    def bad(message: str) -> None:
        raise exceptions.BadParameter(message, param=param)

    for item in raw if isinstance(raw, (list, tuple)) else (raw,):
        if not isinstance(item, str):
            continue
        if "\x00" in item:
            bad(f"{_shown(item)} holds a NUL character")
        if _is_path(param):
            if item == "":
                bad("an empty path names nothing (give a file or directory)")
        elif _SURROGATE.search(item):
            bad(f"{_shown(item)} is not valid UTF-8 text")
    for item in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            bad(
                f"{item} is out of range: a signed 64-bit number ({INT64_MIN} to "
                f"{INT64_MAX}), as ledger and entry ids are"
            )
        if isinstance(item, float) and not math.isfinite(item):
            bad(f"{item} is not a finite number")


def guard(command: Any) -> Any:
    """Check every parameter of ``command`` and its subcommands (:func:`check_value`),
    and keep each bad value on the usage error it causes, for :func:`usage_line`."""
    exceptions = click_exceptions()
    seen: set[int] = set()

    def wrap(param: Any) -> None:
        coercion.install(param)
        inner = param.process_value

        def process_value(ctx: Any, value: Any) -> Any:
            try:
                converted = inner(ctx, value)
            except exceptions.BadParameter as exc:
                denied = _DENIED.search(str(exc.message))
                if denied is not None and _is_path(param):
                    # Typer checks that a path it is given can be read: the OS refusing
                    # is exit 3, as for any file or store ledgerctl may not read
                    from pulsarctl_py.errors import StoreUnavailable

                    verb = "read" if denied.group(1) == "readable" else "write"
                    raise StoreUnavailable(
                        f"{_where(ctx)}{option_name(param)}: cannot {verb} {_shown(value)}: "
                        "permission denied"
                    ) from None
                if not hasattr(exc, "ledgerctl_value"):
                    exc.ledgerctl_value = value  # type: ignore[attr-defined]
                if exc.param is None:
                    exc.param = param
                raise
            check_value(param, value, converted)
            return converted

        param.process_value = process_value

    def walk(cmd: Any) -> None:
        if id(cmd) in seen:
            return
        seen.add(id(cmd))
        for param in getattr(cmd, "params", []):
            wrap(param)
        coercion.install_help(cmd)
        for sub in (getattr(cmd, "commands", None) or {}).values():
            walk(sub)

    walk(command)
    return command


# Click's and pydantic's wording -> ours, keyed by the start of their message
_PYDANTIC = re.compile(r"^(?:Value error, )?Input should be (?:a )?(?:valid )?(?P<what>.*)$")


def _bad_value(exc: Any) -> str:
    param = exc.param
    # raised in a command's body (typer.BadParameter(..., param_hint="--x")): no param,
    # the hint names the option
    hint = getattr(exc, "param_hint", None)
    if isinstance(hint, (list, tuple)):
        hint = " / ".join(map(str, hint)) if hint else None
    name = option_name(param) if param is not None else (hint or "a value")
    value = getattr(exc, "ledgerctl_value", None)
    message = str(exc.message).strip()
    message = re.sub(r"^Value error, ", "", message)
    if param is None and (hint is None or message.startswith(str(hint))):
        # a command's own check: its message names the options ("--deep goes with
        # --status", "give exactly one of --to, --time...")
        return _one_line(message)
    choices = _choices(param) if param is not None else None
    if choices is not None and isinstance(value, (str, list, tuple)) and value != ():
        given = (
            value
            if isinstance(value, str)
            else next((v for v in value if str(v) not in choices), value[0])
        )
        if str(given) not in choices:
            return f"{name}: {_shown(given)} is not one of {', '.join(choices)}" + did_you_mean(
                str(given), choices
            )
    found = _PYDANTIC.match(message)
    if found is not None and value is not None:
        what = found.group("what").split(",")[0].strip().rstrip(".")
        words = {"integer": _kind(param), "number": "a number"}.get(what, what)
        return f"{name}: expected {words}, got {_shown(value)}"
    return f"{name}: {_one_line(message)}"


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _where(ctx: Any) -> str:
    """``inspect: `` for a subcommand's context (what the message is about), else ``""``."""
    if ctx is not None and getattr(ctx, "parent", None) is not None:
        return str(ctx.command_path).split(" ", 1)[-1] + ": "
    return ""


def usage_line(exc: Any) -> str:
    """The one line for a Click usage error (without the ``ledgerctl: error:`` prefix)."""
    exceptions = click_exceptions()
    ctx = getattr(exc, "ctx", None)
    where = _where(ctx)
    if isinstance(exc, exceptions.NoSuchOption):
        known: list[str] = []
        if ctx is not None:
            for param in ctx.command.params:
                known += [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
            known += list(getattr(ctx, "help_option_names", []))
        return f"{where}no such option {exc.option_name}" + did_you_mean(
            exc.option_name, [o for o in known if o.startswith("-")]
        )
    if isinstance(exc, exceptions.MissingParameter):
        param = exc.param
        kind = getattr(param, "param_type_name", "parameter")
        name = option_name(param) if param is not None else "a parameter"
        line = f"{where}missing {kind} {name}"
        choices = _choices(param) if param is not None else None
        if choices:
            line += f" (one of {', '.join(choices)})"
        return line
    if isinstance(exc, exceptions.BadParameter):
        return where + _bad_value(exc)
    message = _one_line(getattr(exc, "message", str(exc)))
    found = re.match(r"No such command (?P<name>.*?)\.(?: Did you mean .*)?$", message)
    if found is not None:
        import ast

        try:
            name = str(ast.literal_eval(found.group("name")))
        except (ValueError, SyntaxError):
            name = found.group("name")
        group = getattr(ctx, "command", None)
        listed = getattr(group, "list_commands", None)  # a lazy group's: not yet built
        commands = list(listed(ctx) if listed else getattr(group, "commands", {}) or {})
        hint = did_you_mean(name, commands)
        if not hint and commands:
            hint = f"; commands: {', '.join(sorted(commands))}"
        return f"{where}no such command {name!r}{hint}"
    message = re.sub(r"^Option '(?P<opt>[^']*)'", r"\g<opt>", message)
    return where + message[:1].lower() + message[1:].rstrip(".")
