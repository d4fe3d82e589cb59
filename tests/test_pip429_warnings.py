"""Where the C++ and Python clients crash, every command that writes or plans pip-429
batches says so, in its report or plan and on stderr: compact's dry run and --apply,
migrate compacted's dry run and plan (and apply, which repeats the plan's warnings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_helpers import run
from tests.support.demo_world import demo_flags, make_demo

TOPIC = "batched"
CRASH = "crash on such batches (segmentation fault)"


@pytest.fixture()
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # compact --apply saves its plan in the working directory
    return make_demo(tmp_path)


def test_compact_dry_run_and_apply_warn(demo: Path, capsys) -> None:
    r = run(capsys, "compact", TOPIC, "--format", "pip-429", "-o", "json", *demo_flags(demo))
    assert r.code == 0, r.err
    assert any(CRASH in w for w in r.json()["warnings"]) and not r.json()["applied"]
    assert "warning: --format pip-429 writes field 31" in r.err and CRASH in r.err
    r = run(capsys, "compact", TOPIC, "--format", "classic", "-o", "json", *demo_flags(demo))
    assert r.code == 0, r.err
    assert r.json()["warnings"] == [] and CRASH not in r.err
    r = run(
        capsys, "compact", TOPIC, "--apply", "--format", "pip-429", "-o", "json", *demo_flags(demo)
    )
    assert r.code == 0, r.err
    assert r.json()["applied"] and any(CRASH in w for w in r.json()["warnings"])
    assert CRASH in r.err


def test_migrate_compacted_to_pip429_warns_in_report_and_plan(
    demo: Path, capsys, tmp_path: Path
) -> None:
    r = run(capsys, "compact", TOPIC, "--apply", "--format", "classic", *demo_flags(demo))
    assert r.code == 0, r.err
    r = run(capsys, "migrate", "compacted", TOPIC, "--format", "classic", *demo_flags(demo))
    assert r.code == 0, r.err
    assert r.json()["warnings"] == [] and CRASH not in r.err
    r = run(capsys, "migrate", "compacted", TOPIC, "--format", "pip-429", *demo_flags(demo))
    assert r.code == 0, r.err
    assert any(CRASH in w for w in r.json()["warnings"]) and CRASH in r.err
    plan = tmp_path / "pip429.json"
    r = run(
        capsys, "migrate", "compacted", TOPIC, "--format", "pip-429", "--plan", plan,
        *demo_flags(demo),
    )  # fmt: skip
    assert r.code == 0, r.err
    assert any(CRASH in w for w in json.loads(plan.read_text())["warnings"])
    r = run(capsys, "apply", plan, "--yes")
    assert r.code == 0, r.err
    assert CRASH in r.err.replace("\n", " ")
