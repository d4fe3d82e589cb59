"""docs/architecture.md names only modules that exist, so that the page cannot drift from
the code silently.

Every path the page names that starts at a source folder (``pulsarctl_py/...``,
``commands/...``, ``decoders/...``) is a path of the repository; one that starts at a
package of the library (``plans/apply.py``, ``stores/live/``, ``repair/repairs``) is one
under ``pulsarctl_py/``. A folder is named with its final ``/``; a module may be named
without its ``.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DOC = ROOT / "docs" / "architecture.md"
LIBRARY = "pulsarctl_py"
SOURCES = (LIBRARY, "commands", "decoders", "tests")


def _pattern(folders: list[str]) -> re.Pattern[str]:
    """A path that starts at one of ``folders``; a word that only ends in one
    (``pulsarctl_py.commands``, the ``live/`` of ``stores/live/``) is not matched."""
    names = "|".join(map(re.escape, folders))
    return re.compile(rf"(?<![\w./-])(?:{names})/[\w./-]*")


def named_paths(text: str, root: Path = ROOT) -> list[str]:
    """The paths ``text`` names, in order, each from the repository's root (a library
    package's path with ``pulsarctl_py/`` before it), without a sentence's final dot."""
    packages = sorted(p.name for p in (root / LIBRARY).iterdir() if (p / "__init__.py").is_file())
    found = []
    for match in _pattern([*SOURCES, *packages]).finditer(text):
        name = match.group(0).rstrip(".")
        found.append(name if name.split("/")[0] in SOURCES else f"{LIBRARY}/{name}")
    return found


def missing_paths(text: str, root: Path = ROOT) -> list[str]:
    """The paths ``text`` names that ``root`` does not hold."""
    missing = []
    for name in named_paths(text, root):
        path = root / name
        if name.endswith("/"):
            ok = path.is_dir()
        else:
            ok = path.exists() or (path.suffix == "" and path.with_suffix(".py").is_file())
        if not ok:
            missing.append(name)
    return missing


def test_every_path_in_the_architecture_page_exists() -> None:
    text = DOC.read_text()
    # the page names the layers' modules by path: a pattern that found none checks nothing
    assert len(named_paths(text)) > 100
    assert missing_paths(text) == []


def test_a_path_that_is_gone_is_reported() -> None:
    text = (
        "`pulsarctl_py/plans/apply.py` applies; `pulsarctl_py/seek.py` was split; the\n"
        "commands live in `commands/`, the decoders in decoders/entry.py; plans/draft.py,\n"
        "repair/topic_state, stores/live/ and seek/nowhere.py; `decoders/nowhere/` and\n"
        "`plans/undo` are gone. Not paths: pulsarctl_py.commands, live/, verify.\n"
    )
    assert named_paths(text) == [
        "pulsarctl_py/plans/apply.py",
        "pulsarctl_py/seek.py",
        "commands/",
        "decoders/entry.py",
        "pulsarctl_py/plans/draft.py",
        "pulsarctl_py/repair/topic_state",
        "pulsarctl_py/stores/live/",
        "pulsarctl_py/seek/nowhere.py",
        "decoders/nowhere/",
        "pulsarctl_py/plans/undo",
    ]
    assert missing_paths(text) == [
        "pulsarctl_py/seek.py",
        "pulsarctl_py/seek/nowhere.py",
        "decoders/nowhere/",
        "pulsarctl_py/plans/undo",
    ]


def test_every_module_over_800_lines_says_why_it_stays_whole():
    """The table "Modules over 800 lines, and why" lists every library module past 800
    lines (a new one is split or given its reason), with its length within a tenth."""
    import subprocess

    section = DOC.read_text().split("## Modules over 800 lines, and why", 1)[1]
    section = section.split("\n## ", 1)[0]
    listed = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^\| `([\w/.]+\.py)` \| (\d+) \|", section, re.MULTILINE)
    }
    files = subprocess.run(
        ["git", "ls-files", "pulsarctl_py/*.py", "commands/*.py", "decoders/*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    lengths = {f: len((ROOT / f).read_text().splitlines()) for f in files}
    long = {f for f, n in lengths.items() if n > 800}
    assert long <= set(listed), f"over 800 lines, not in the table: {sorted(long - set(listed))}"
    for module, said in listed.items():
        assert abs(lengths[module] - said) <= said / 10, (module, said, lengths[module])
