"""pulsarctl_py.coercion answers every parameter of every command as Typer's own coercion
does, and keeps Pydantic out of a command's start."""

from __future__ import annotations

import enum
import functools
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from typer._coercion import build_runtime_param

from pulsarctl_py import cli, coercion


def _params() -> list[tuple[str, Any]]:
    out = []

    def walk(name: str, cmd: Any) -> None:
        for param in cmd.params:
            if hasattr(param, "type_descriptor"):
                out.append((f"{name} {param.name}", param))
        for sub_name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(f"{name} {sub_name}".strip(), sub)

    walk("", typer.main.get_command(cli.app))
    return out


PARAMS = _params()


@functools.cache
def _ctx() -> Any:
    return typer.main.get_command(cli.app).make_context("ledgerctl", ["demo"])


def _with_ours(param: Any) -> Any:
    """A copy of ``param`` with pulsarctl_py.coercion's coercion installed (the original
    keeps Typer's own, still unbuilt)."""
    ours = param.__class__.__new__(param.__class__)
    ours.__dict__.update(param.__dict__)
    ours._runtime_param = None
    coercion.install(ours)
    return ours


def _values(param: Any) -> list[Any]:
    """What Click hands a parameter's coercion: nothing, its default, text from argv."""
    annotation = param.type_descriptor.annotation
    values: list[Any] = [None, (), [], "", "x", "3", "-1", "1.5", "true", ("a", "b"), ["7"]]
    if not callable(param.default):
        values.append(param.default)
    leaf = getattr(annotation, "__args__", (annotation,))[0]
    if isinstance(leaf, type) and issubclass(leaf, enum.Enum):
        values += list(leaf) + [m.value for m in leaf] + [(m,) for m in leaf]
    values += [3, 0, 2.5, True, False, Path("p")]
    # paths: a file, a directory, none, and text that is not in Path's normal form
    here = str(Path(__file__).resolve())
    values += [here, str(Path(here).parent), here + "/", "a//b", "./x", "x/.", "-", "/no/such"]
    return values


def _answer(coerce: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        got = coerce(value, param=param, ctx=ctx)
    except typer.BadParameter as exc:
        return "error", str(exc.message)
    except Exception as exc:
        return "raised", type(exc).__name__
    return type(got).__name__, got


def test_every_parameter_is_covered() -> None:
    assert len(PARAMS) > 300  # every command's options, the root's too


@pytest.mark.parametrize("name,param", PARAMS, ids=[n for n, _ in PARAMS])
def test_each_value_coerces_as_typers_own(name: str, param: Any) -> None:
    ctx = _ctx()
    ours = _with_ours(param)
    theirs = build_runtime_param(param.type_descriptor)
    for value in _values(param):
        expected = _answer(theirs.coerce, value, param, ctx)
        got = _answer(ours._runtime_param.coerce, value, ours, ctx)
        assert got == expected, (name, value)


def _checked_paths() -> list[Any]:
    """Path options with each of Typer's checks on (ledgerctl's own have few of them)."""
    app = typer.Typer()

    @app.command()
    def run(
        a: Annotated[Path, typer.Option(exists=True)] = Path("d"),
        b: Annotated[Path, typer.Option(dir_okay=False, exists=True)] = Path("d"),
        c: Annotated[Path, typer.Option(file_okay=False)] = Path("d"),
        d: Annotated[Path, typer.Option(resolve_path=True)] = Path("d"),
        e: Annotated[Path, typer.Option(allow_dash=True, exists=True)] = Path("d"),
        f: Annotated[Path, typer.Option(writable=True, readable=False)] = Path("d"),
    ) -> None:
        del a, b, c, d, e, f

    return [p for p in typer.main.get_command(app).params if p.name in tuple("abcdef")]


@pytest.mark.parametrize("param", _checked_paths(), ids=lambda p: p.name)
def test_each_path_check_coerces_as_typers_own(param: Any) -> None:
    ctx = _ctx()
    ours = _with_ours(param)
    assert ours._runtime_param._path is not None  # the path shortcut, not Typer's own
    theirs = build_runtime_param(param.type_descriptor)
    for value in _values(param):
        expected = _answer(theirs.coerce, value, param, ctx)
        got = _answer(ours._runtime_param.coerce, value, ours, ctx)
        assert got == expected, (param.name, value)


def test_known_values_never_build_typers_coercion() -> None:
    """None, an empty list and a value already of the parameter's type are answered
    without building Typer's adapter; text for a number is not."""
    by_kind = {}
    for _name, param in PARAMS:
        by_kind.setdefault(repr(param.type_descriptor.annotation), param)
    built = 0
    for param in by_kind.values():
        ours = _with_ours(param)
        known = ours._runtime_param
        known.coerce(None, ours, None)
        if param.type_descriptor.annotation is str:
            assert known.coerce("x", ours, None) == "x"
        if param.type_descriptor.annotation is Path and not param.multiple:
            assert known.coerce("no/such/plan.json", ours, None) == Path("no/such/plan.json")
        assert known._real is None, param.type_descriptor.annotation
        if param.type_descriptor.annotation is int:
            assert known.coerce("12", ours, None) == 12
            built += known._real is not None
    assert built  # an int option given as text went to Typer's own


@pytest.mark.parametrize(
    "argv",
    [
        ["compact", "persistent://public/default/t", "--metadata-url", "rocksdb:///nowhere"],
        ["compact", "public/default/t", "--plan", "p.json", "--metadata-url", "rocksdb:///no"],
        ["undo", "no/such/plan.json", "--yes"],
        ["topic", "list", "--metadata-url", "rocksdb:///nowhere", "-o", "json"],
        ["compact", "--help"],
    ],
    ids=["compact", "compact-plan", "undo", "topic-list", "help"],
)
def test_a_commands_start_imports_no_pydantic(argv: list[str]) -> None:
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.__stderr__.write("
        "'PYDANTIC=%s\\n' % ('pydantic' in sys.modules)))\n"
        f"sys.argv = ['ledgerctl', *{argv!r}]\n"
        "from pulsarctl_py.cli import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "PYDANTIC=False" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_a_typer_without_its_coercion_module_keeps_its_own(monkeypatch: Any) -> None:
    """Typer's coercion is private: where a release moves it, parameters keep Typer's own
    coercion and every command still starts."""
    monkeypatch.setitem(sys.modules, "typer._coercion", None)  # importing it now fails
    _name, param = PARAMS[0]
    assert _with_ours(param)._runtime_param is None
