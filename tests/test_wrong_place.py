"""No green result from the wrong place (issue 7, point 1).

A question asked of the wrong bookie directory, of a metadata store without Pulsar data,
or about a name that does not exist gets an error and a non-zero exit, never an empty
"ok". Runs the CLI in process on ``ledgerctl demo`` data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_helpers import Result, run
from tests.support.demo_env import demo, demo_root

#: the shared demo fixtures this module's tests use
FIXTURES = (demo, demo_root)


@pytest.fixture
def other_bookie(tmp_path: Path) -> Path:
    """A bookie's directory that holds none of the demo's ledgers (a fresh bookie)."""
    current = tmp_path / "other-bookie" / "current"
    current.mkdir(parents=True)
    (current / "lastId").write_text("0")
    return tmp_path / "other-bookie"


def one_line(result: Result, code: int) -> str:
    assert result.code == code, (result.code, result.err)
    assert result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerctl: error: "), result.err
    return lines[0]


@pytest.mark.parametrize("target", [["4"], ["--topic", "batched"]])
def test_inspect_of_the_wrong_bookie_dir_is_an_error(
    capsys: pytest.CaptureFixture[str], demo: Path, other_bookie: Path, target: list[str]
) -> None:
    result = run(capsys, "inspect", *target, "--bookie-dir", other_bookie, "-o", "json")
    assert result.code == 1, result.err
    summary = result.json()["summary"]
    assert summary["entries"] == 0 and summary["errors"] >= 1
    problems = summary["problems"]
    # the directory is not the demo bookie's (no cookie says whose it is): its lack of the
    # ledger's entries proves nothing, and it is not called missing
    assert problems and {p["check"] for p in problems} == {"storage-not-covered"}
    assert all(str(other_bookie / "current") in p["message"] for p in problems)
    assert all("wrong --bookie-dir?" in p["message"] for p in problems)
    # the table view says it too, on stderr
    table = run(capsys, "inspect", *target, "--bookie-dir", other_bookie, "-o", "table")
    assert table.code == 1
    assert "storage-not-covered" in table.err and "wrong --bookie-dir?" in table.err


def test_inspect_of_the_right_bookie_dir_is_clean(
    capsys: pytest.CaptureFixture[str], demo: Path
) -> None:
    result = run(capsys, "inspect", "4", "-o", "json")
    assert result.code == 0, result.err
    assert result.json()["summary"]["problems"] == []


def test_bookie_check_on_a_dir_that_is_not_a_bookie(
    capsys: pytest.CaptureFixture[str], demo: Path, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("not a bookie\n")
    line = one_line(run(capsys, "bookie", "check", "--bookie-dir", tmp_path), 3)
    assert f"no bookie data under {tmp_path}" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["ledger", "list", "--topic", "NOSUCH"], "topic persistent://public/default/NOSUCH"),
        (["topic", "list", "-n", "no/such"], "namespace no/such not found"),
        (["topic", "info", "NOSUCH"], "topic persistent://public/default/NOSUCH not found"),
        (["ledger", "meta", "999"], "ledger 999 not found"),
        (["verify", "NOSUCH"], "persistent://public/default/NOSUCH"),
        (["inspect", "999"], "ledger 999 not found"),
        (["inspect", "--topic", "NOSUCH"], "topic NOSUCH not found"),
        (["bookie", "log", "99"], "no entry log 63.log"),
    ],
)
def test_a_name_that_does_not_exist_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], demo: Path, args: list[str], says: str
) -> None:
    line = one_line(run(capsys, *args, "-o", "json"), 1)
    assert says in line


def test_an_existing_namespace_still_lists(capsys: pytest.CaptureFixture[str], demo: Path) -> None:
    result = run(capsys, "topic", "list", "-n", "public/default", "-o", "json")
    assert result.code == 0 and len(result.json()) > 0


@pytest.fixture
def empty_store(tmp_path: Path) -> str:
    """A RocksDB metadata store that holds no Pulsar data (one unrelated node)."""
    from pulsarctl_py.stores.metadata import create_metadata_store

    store = create_metadata_store(tmp_path / "empty-metadata")
    try:
        store.put("/unrelated", b"x")
    finally:
        store.close()
    return f"rocksdb://{tmp_path / 'empty-metadata'}"


@pytest.mark.parametrize("args", [["verify", "--all"], ["topic", "list"], ["ledger", "list"]])
def test_a_store_without_pulsar_data_is_not_an_empty_ok(
    capsys: pytest.CaptureFixture[str], demo: Path, empty_store: str, args: list[str]
) -> None:
    line = one_line(run(capsys, *args, "--metadata-url", empty_store, "-o", "json"), 1)
    assert f"no Pulsar data in {empty_store}" in line
    assert "/managed-ledgers" in line and "/ledgers" in line  # the paths looked at
    assert "its root holds /unrelated" in line


def test_the_demo_store_is_pulsar_data(capsys: pytest.CaptureFixture[str], demo: Path) -> None:
    for args in (["topic", "list"], ["ledger", "list"], ["verify", "--all"]):
        result = run(capsys, *args, "-o", "json")
        assert result.code == 0, (args, result.err)
        assert json.loads(result.out)
