"""A run of one command imports that command's module only (pulsarctl_py.cli._LazyGroup):
the fixed cost every ``ledgerctl`` process pays before it does anything."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from pulsarctl_py import cli

_SHOW_IMPORTED = (
    "import json, sys\n"
    "from pulsarctl_py.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "print(json.dumps({'code': code, 'modules': sorted(sys.modules)}), file=sys.stderr)\n"
)


def _imported(*argv: str, cwd: Path | None = None) -> tuple[int, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _SHOW_IMPORTED, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )
    last = done.stderr.strip().splitlines()[-1]
    found = json.loads(last)
    return found["code"], set(found["modules"])


@pytest.mark.parametrize(
    ("argv", "module"),
    [(["compact", "--help"], "compact"), (["topic", "list", "--help"], "topic")],
)
def test_a_command_imports_no_other_command_module(argv: list[str], module: str) -> None:
    code, modules = _imported(*argv)
    assert code == 0
    commands = set(cli.COMMANDS.values())
    loaded = {m.rsplit(".", 1)[1] for m in modules if m.startswith("pulsarctl_py.commands.")}
    assert module in loaded
    assert loaded & commands == {module}


def test_the_table_of_commands_is_what_the_modules_register() -> None:
    """Names, their modules and the order of ``ledgerctl --help``: as the whole app has
    them (every module imported)."""
    whole = typer.main.get_command(cli.app)
    assert list(whole.list_commands(None)) == list(cli.COMMANDS)  # type: ignore[attr-defined]
    for module in set(cli.COMMANDS.values()):
        part = typer.Typer()
        part.callback()(cli.root)
        cli._register(part, module)
        names = typer.main.get_command(part).commands  # type: ignore[attr-defined]
        assert {n: module for n in names} == {n: m for n, m in cli.COMMANDS.items() if m == module}


def test_giving_the_topic_policy_reader_imports_no_store() -> None:
    """The CLI gives the offload locator its topic-policy reader before every command
    (pulsarctl_py.topicpolicies.install): that must not open the stores' modules for
    commands that never read one."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pulsarctl_py import topicpolicies; topicpolicies.install(); "
            "from pulsarctl_py.stores.tiered import where; "
            "assert where.topic_policy_reader is topicpolicies.read_topic_policies; "
            "print(sorted(m for m in sys.modules if m.startswith('pulsarctl_py.')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = set(ast.literal_eval(done.stdout))
    assert "pulsarctl_py.ledgers" not in loaded
    # the errors every module raises, and no decoder layer or bookie store
    stores = {m for m in loaded if m.startswith(("pulsarctl_py.stores.", "pulsarctl_py.decoders."))}
    assert stores == {
        "pulsarctl_py.decoders.errors",
        "pulsarctl_py.stores.tiered",
        "pulsarctl_py.stores.tiered.where",
    }


def test_a_compaction_on_the_native_path_imports_no_crc32c_package(tmp_path: Path) -> None:
    """The crc32c package imports importlib.metadata, argparse and email when it loads
    (some 5 MB and a tenth of a second): decoders.checksums imports it at its first CRC
    computed in Python, which a compaction whose entries the native module checks never
    does. The demo's compaction goes through the decoders, the key table and the writer's
    plan."""
    from pulsarctl_py.decoders.speedups import native

    assert cli.main(["demo", str(tmp_path / "demo")]) == 0
    code, modules = _imported("compact", "batched", "-o", "json", cwd=tmp_path / "demo")
    assert code == 0
    assert "pulsarctl_py.compaction.core" in modules
    if native is not None:
        assert "crc32c" not in modules
        assert "importlib.metadata" not in modules
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pulsarctl_py.decoders.checksums import crc32c\nprint(hex(crc32c(b'123456789')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "0xe3069283"  # CRC-32C's check value


def test_crc32c_without_the_native_module_is_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    import crc32c as package

    from pulsarctl_py.decoders import checksums, speedups

    monkeypatch.setattr(speedups, "native", None)
    monkeypatch.setattr(checksums, "_crc32c", None)
    assert checksums.crc32c(b"123456789") == 0xE3069283
    assert checksums._crc32c is package.crc32c
