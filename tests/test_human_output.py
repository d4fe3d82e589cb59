"""Human output of every command on the demo data: no Python reprs (b'..', None, True).

Issue 7 point 7. The views for people print "-" for unknown, yes/no for flags, hex for
bytes and escaped text for text that is not UTF-8.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pulsarctl_py.demo import create_demo
from tests.support.cli_helpers import run

TOPIC = "persistent://public/default/orders-partition-0"
COMMANDS = [
    ["topic", "list", "-o", "table"],
    ["topic", "info", TOPIC, "-o", "tree"],
    ["topic", "info", TOPIC, "-o", "table"],
    ["ledger", "list", "-o", "table"],
    ["ledger", "meta", "1", "-o", "tree"],
    ["ledger", "meta", "1", "-o", "table"],
    ["bookie", "logs", "-o", "table"],
    ["bookie", "log", "0", "-o", "tree", "--decode"],
    ["bookie", "journal", "-o", "table"],
    ["bookie", "check", "-o", "table"],
    ["inspect", "--topic", TOPIC, "-o", "tree", "--hex"],
    ["inspect", "--topic", TOPIC, "-o", "table"],
    ["decode", "--sample", "bookie-entry-crc32c", "-o", "table", "--hex"],
    ["decode", "--sample", "bookie-entry-crc32c", "-o", "tree"],
]
#: Python reprs; hex dumps' ASCII columns are dropped before looking
REPRS = re.compile(r"\bNone\b|\bTrue\b|\bFalse\b|(?<![0-9A-Za-z])b'|(?<![0-9A-Za-z])b\"")
HEX_LINE = re.compile(r"^[\s│|]*[0-9a-f]{8}  ")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create_demo(tmp_path_factory.mktemp("human") / "demo").directory


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]) + " " + a[-1])
def test_no_python_reprs_for_people(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    demo: Path,
    args: list[str],
) -> None:
    monkeypatch.chdir(demo)
    result = run(capsys, *args)
    assert result.code in (0, 1), result.err
    shown = [
        line
        for line in (result.out + result.err).splitlines()
        if not HEX_LINE.match(line) and "0x" not in line
    ]
    bad = [line for line in shown if REPRS.search(line)]
    assert bad == [], bad[:5]
