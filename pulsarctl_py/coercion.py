"""Typer's coercion of a parameter's value, without Pydantic where the answer is known.

Typer (0.29 and later) coerces every parameter's value through a Pydantic ``TypeAdapter``
it builds on first use, including a value that was not given (``None``) or is already of
the parameter's type (a default, a string argument): importing Pydantic and building an
adapter for each of a command's options cost ``ledgerctl compact`` about a fifth of its
start. :func:`install` gives a parameter a coercion that answers those values as Typer's
adapter would, unchanged, and hands every other value to Typer's own (built then, once):
a number to parse, a path, a choice given as text, a constraint to check, a custom parser.
``tests/test_coercion.py`` holds the two equal on every kind of parameter ledgerctl has.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

#: the annotations whose values of exactly that type Typer's adapters return unchanged
#: (``bool`` is Typer's own shortcut too; ``int`` and ``float`` only without bounds; an
#: Enum member of the parameter's Enum comes back as it is)
_PLAIN = (str, int, float, bool)


class _Known:
    """A parameter's runtime coercion (Typer's ``RuntimeParam`` interface: ``coerce``)."""

    __slots__ = ("_build", "_choices", "_empty_list", "_path", "_real", "_same")

    def __init__(
        self,
        build: Any,
        same: type | None,
        empty_list: bool,
        choices: dict[str, Any] | None,
        path: Any = None,
    ) -> None:
        self._build = build
        self._same = same  # a value of exactly this type is the answer
        self._empty_list = empty_list  # an empty list or tuple is the answer []
        self._choices = choices  # a case-sensitive Enum's members by their text
        self._path = path  # Typer's coerce_cli_path for a Path parameter, or None
        self._real: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # as Typer's RuntimeParam.coerce, for every kind
            return () if param.multiple or param.nargs == -1 else None
        if self._same is not None and type(value) is self._same:
            return value
        if self._empty_list and isinstance(value, (tuple, list)) and not value:
            return []
        if (
            self._choices is not None
            and type(value) is str
            and value in self._choices
            and getattr(ctx, "token_normalize_func", None) is None
        ):
            # Typer's choice coercion: the first member whose value's text is the given
            # text, compared as it is (case-sensitive, no token normalisation)
            return self._choices[value]
        if self._path is not None and type(value) is str and _plain_path(value):
            # Typer's path coercion checks the text it was given and returns a Path of it;
            # its own first makes the Path through Pydantic, the same Path for plain text
            info = param.type_descriptor.parameter_info
            return Path(self._path(value, info, path_type=None, param=param, ctx=ctx))
        if self._real is None:
            self._real = self._build()
        return self._real.coerce(value, param=param, ctx=ctx)


def install(param: Any) -> None:
    """Give a Typer parameter the coercion above. A value Typer's adapter would return
    unchanged is answered here; any other goes to Typer's own (a file, a custom parser,
    bounds, a path, text for a number or a choice)."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or getattr(param, "_runtime_param", False) is not None:
        return  # not a Typer parameter of the kind this knows, or already built
    try:
        from typer._coercion import build_runtime_param
    except ImportError:  # a Typer whose coercion lives elsewhere: its own, unchanged
        return

    info = descriptor.parameter_info
    annotation = descriptor.annotation
    plain = descriptor.file_annotation is None and getattr(info, "parser", None) is None
    multi = param.multiple or param.nargs == -1
    same = empty_list = choices = path = None
    if plain and multi and getattr(annotation, "__origin__", None) is list:
        (leaf,) = getattr(annotation, "__args__", (None,))
        empty_list = _unchanged(leaf, info) or (isinstance(leaf, type) and issubclass(leaf, Path))
    elif plain and _unchanged(annotation, info):
        same = annotation
        if issubclass(annotation, Enum) and getattr(info, "case_sensitive", False):
            choices = {}
            for member in annotation:
                choices.setdefault(str(member.value), member)
    elif plain and not multi and annotation is Path and getattr(info, "path_type", 0) is None:
        path = _path_checks()
    param._runtime_param = _Known(
        lambda: build_runtime_param(descriptor), same, bool(empty_list), choices, path
    )


def _path_checks() -> Any:
    """Typer's checks of a path parameter's text (exists, file or directory, readable,
    writable, resolved: ``coerce_cli_path``, which with no ``path_type`` returns the
    checked text); None where this Typer has none."""
    try:
        from typer._param_types import coerce_cli_path
    except ImportError:
        return None
    return coerce_cli_path


def _plain_path(text: str) -> bool:
    """Text that names the file its Path names, so that checking either is the same: not
    empty (``Path("")`` is the working directory), not ``-`` (a dash is standard input
    to a check of text, never to a check of a Path) and already in Path's normal form (no
    doubled or trailing slash, no ``.`` component: ``file/`` is no file, ``Path("file/")``
    is)."""
    return text not in ("", "-") and str(Path(text)) == text


def _unchanged(annotation: Any, info: Any) -> bool:
    """Whether Typer's adapter returns a value of exactly ``annotation`` as it is."""
    if annotation in (int, float):
        return all(getattr(info, name, None) is None for name in ("min", "max"))
    if annotation in _PLAIN:
        return True
    return isinstance(annotation, type) and issubclass(annotation, Enum)


def install_help(command: Any) -> None:
    """The same for the ``--help`` option Click makes for ``command`` when it parses (a
    flag whose value is not given: without this, Typer built its adapter, Pydantic
    imported, on every run)."""
    made = getattr(command, "get_help_option", None)
    if made is None:
        return

    def get_help_option(ctx: Any) -> Any:
        option = made(ctx)
        if option is not None:
            install(option)
        return option

    command.get_help_option = get_help_option
