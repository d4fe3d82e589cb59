"""``compact`` is one library call (:func:`pulsarctl_py.compaction.request.compact_topic`)
whose outcome the command renders: the command's JSON is the report the call returns, and
the command module runs none of the write protocol itself."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tests.support.cli_helpers import run
from tests.support.demo_world import demo_flags, make_demo

TOPIC = "batched"
COMMANDS = Path(__file__).resolve().parents[2] / "commands"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("compact"))


def test_the_command_prints_the_report_the_library_call_returns(demo: Path, capsys) -> None:
    from pulsarctl_py.compaction import CompactionOptions
    from pulsarctl_py.compaction.request import CompactRequest, SparkChoice, compact_topic
    from pulsarctl_py.compaction.settings import compactor_settings

    flags = demo_flags(demo)
    broker = compactor_settings(retain_null_key=None, order=None, keep_entry_metadata=None)
    said: list[tuple[str, str]] = []
    done = compact_topic(
        CompactRequest(
            TOPIC,
            flags[1],
            [flags[3]],
            CompactionOptions(
                retain_null_key=broker.retain_null_key,
                order=broker.order,
                keep_entry_metadata=broker.keep_entry_metadata,
            ),
            broker,
            SparkChoice("local"),
            512 << 20,
        ),
        say=lambda text, kind: said.append((text, kind)),
    )
    assert done.written is None  # a dry run writes nothing
    assert done.report.stats.entries_in > 0 and done.report.keys > 0
    r = run(capsys, "compact", TOPIC, "-o", "json", *flags)
    assert r.code == 0, r.err
    printed = json.loads(r.out)
    expected = done.report.to_json()
    for doc in (printed, expected):
        doc.pop("seconds", None)  # the one field that differs between two runs
    assert printed == expected


@pytest.mark.parametrize("module", ["compact.py", "export.py", "migrate.py"])
def test_the_command_module_runs_no_write_protocol_or_scan_itself(module: str) -> None:
    """The sequence (read-before, the write spine, the scan) is the library's: a command
    module names none of its steps."""
    steps = {
        "PlanFile",
        "read_before",
        "write_compaction",
        "write_compacted_ledger",
        "write_index_ledgers",
        "export_plan",
        "topic_plan",
        "open_engine",
        "LedgerSource",
    }
    tree = ast.parse((COMMANDS / module).read_text(encoding="utf-8"))
    named = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert not named & steps, f"commands/{module} runs {sorted(named & steps)} itself"
