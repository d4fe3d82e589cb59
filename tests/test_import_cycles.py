"""No import cycle among the project's own modules, and the library never imports the CLI.

Every import statement of every module is read with ``ast``: at module level, inside
functions, and under ``if TYPE_CHECKING:`` (an import written inside a function hides a
dependency from the module's header, it does not remove it). The modules are those of
the packages pyproject.toml installs (``pulsarctl_py``, with ``commands/``, ``decoders/``
and ``proto/`` installed as ``pulsarctl_py.commands`` etc., from ``package-dir``) and the
compiled extensions it builds (leaves: they import nothing of ours). Imports of
third-party packages are not looked at: a heavy one imported lazily (pyspark, kazoo,
rocksdict) keeps ``ledgerctl --help`` fast and makes no cycle of ours.

``from package import name`` is an edge to ``package.name`` when that is a module, else
to ``package`` (its ``__init__``). A cycle is reported as the modules of one strongly
connected component of the graph, with one path around it and the line of each import.
"""

from __future__ import annotations

import ast
import functools
import itertools
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: cycles tolerated while a rebuild is under way, each an exact strongly connected component
#: (a module more or less in it is a new cycle): none is left
ALLOWED: tuple[frozenset[str], ...] = ()
#: the CLI: the commands and the Typer app that gathers them; the library never imports it
COMMANDS = "pulsarctl_py.commands"
APP = "pulsarctl_py.cli"

Graph = dict[str, dict[str, int]]  # module -> {module it imports: line of the first import}


def project_modules(root: Path) -> tuple[dict[str, Path], set[str]]:
    """The project's Python modules by dotted name and the names of its compiled extension
    modules, from pyproject.toml: every ``.py`` file under each package's folder
    (``package-dir``, else the package's own path), subfolders included, so that a
    subpackage missing from ``packages`` is still looked at."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    folders = {p: p.replace(".", "/") for p in setuptools["packages"] if "." not in p}
    folders.update(setuptools.get("package-dir", {}))
    modules: dict[str, Path] = {}
    for package, folder in folders.items():
        for path in (root / folder).rglob("*.py"):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            # a folder mapped to a package of its own is that package's
            owner = max((p for p in folders if name == p or name.startswith(p + ".")), key=len)
            if owner == package:
                modules[name] = path
    extensions = {ext["name"] for ext in setuptools.get("ext-modules", [])}
    return modules, extensions


def _owner(name: str, known: set[str]) -> str | None:
    """``name`` or the closest package above it that is a project module."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(modules: Mapping[str, Path], extensions: Iterable[str] = ()) -> Graph:
    """Every module's imports of project modules, wherever the statement is written."""
    known = set(modules) | set(extensions)
    graph: Graph = {name: {} for name in known}
    for name, path in modules.items():
        is_package = path.stem == "__init__"
        package = name if is_package else name.rpartition(".")[0]
        edges = graph[name]
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_owner(alias.name, known) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in known else _owner(base, known))
            for target in targets:
                if target is not None and target != name:
                    edges.setdefault(target, node.lineno)
    return graph


def components(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def cycle_path(graph: Graph, members: list[str]) -> str:
    """One way around a component, shortest from its first module: ``a -> b (line 12) -> a
    (line 40)``, each line that of the import in the module before."""
    inside = set(members)
    start = members[0]
    previous: dict[str, str] = {}
    queue = [start]
    end = None
    while queue and end is None:
        node = queue.pop(0)
        for child in sorted(graph[node]):
            if child == start:
                previous[start], end = node, node
                break
            if child in inside and child not in previous:
                previous[child] = node
                queue.append(child)
    path = [start]
    node = previous[start]
    while node != start:
        path.append(node)
        node = previous[node]
    path.append(start)
    path.reverse()
    steps = [path[0]] + [f"{b} (line {graph[a][b]})" for a, b in itertools.pairwise(path)]
    return " -> ".join(steps)


def project_graph(root: Path) -> Graph:
    """The import graph of the project at ``root``."""
    modules, extensions = project_modules(root)
    return import_graph(modules, extensions)


#: this project's graph, read once for the tests below
_graph = functools.cache(lambda: project_graph(ROOT))


def cycles(
    root: Path, allowed: Iterable[frozenset[str]] = (), graph: Graph | None = None
) -> list[str]:
    """Each import cycle of the project at ``root`` not in ``allowed``, as a path."""
    graph = project_graph(root) if graph is None else graph
    skip = set(allowed)
    return [cycle_path(graph, c) for c in components(graph) if frozenset(c) not in skip]


def test_no_import_cycles() -> None:
    found = cycles(ROOT, ALLOWED, _graph())
    assert not found, "import cycles among the project's modules:\n" + "\n".join(found)


def stale_allowed(graph: Graph, allowed: Iterable[frozenset[str]]) -> list[list[str]]:
    """The allowed cycles that are no cycle of ``graph`` (any more, or not as listed)."""
    present = {frozenset(c) for c in components(graph)}
    return [sorted(c) for c in allowed if c not in present]


def test_allowed_cycles_still_exist() -> None:
    """The allow-list names cycles as they are: one that is gone must leave the list.
    Empty today; this keeps an entry added later honest (the check itself is shown on a
    small project in :func:`test_a_cycle_is_found`)."""
    assert stale_allowed(_graph(), ALLOWED) == []


def test_the_library_never_imports_the_cli() -> None:
    graph = _graph()
    wrong = [
        f"{name} imports {target} (line {line})"
        for name, edges in sorted(graph.items())
        if name not in (APP, COMMANDS) and not name.startswith(COMMANDS + ".")
        for target, line in sorted(edges.items())
        if target == COMMANDS or target.startswith(COMMANDS + ".")
    ]
    assert wrong == []


def test_a_cycle_is_found(tmp_path: Path) -> None:
    """The check on a small project of its own: a cycle through an import inside a
    function and a relative one, another through a TYPE_CHECKING import, and a module
    importing both that is in no cycle."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackages = ["demo", "demo.sub"]\n'
        '[tool.setuptools.package-dir]\ndemo = "src"\n'
        '[[tool.setuptools.ext-modules]]\nname = "demo._native"\nsources = []\n'
    )
    sub = tmp_path / "src" / "sub"
    sub.mkdir(parents=True)
    (tmp_path / "src" / "__init__.py").write_text("from . import _native\n")
    (tmp_path / "src" / "a.py").write_text("import json\n\nfrom demo.sub import b\n")
    (sub / "__init__.py").write_text("")
    (sub / "b.py").write_text("def f():\n    from ..a import x\n    return x\n")
    (sub / "c.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .d import D\n"
    )
    (sub / "d.py").write_text("from demo.sub.c import C\n")
    (tmp_path / "src" / "top.py").write_text("from demo import a\nfrom demo.sub import c, d\n")

    assert cycles(tmp_path) == [
        "demo.a -> demo.sub.b (line 3) -> demo.a (line 2)",
        "demo.sub.c -> demo.sub.d (line 4) -> demo.sub.c (line 1)",
    ]
    assert cycles(tmp_path, [frozenset({"demo.a", "demo.sub.b"})]) == [
        "demo.sub.c -> demo.sub.d (line 4) -> demo.sub.c (line 1)"
    ]
    allowed = [frozenset({"demo.a", "demo.sub.b"})]
    assert stale_allowed(project_graph(tmp_path), allowed) == []
    (sub / "b.py").write_text("import demo.sub.c\n")  # the cycle cut: none left there
    assert cycles(tmp_path) == ["demo.sub.c -> demo.sub.d (line 4) -> demo.sub.c (line 1)"]
    # its allow-list entry is stale now
    assert stale_allowed(project_graph(tmp_path), allowed) == [["demo.a", "demo.sub.b"]]
