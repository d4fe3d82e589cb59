"""Impossible questions and wrong places on the demo data: one line, exit 1 or 2, never
"0 entries, ok" (a batch index past the batch, reversed ranges, the metadata store given
as a bookie directory)."""

from __future__ import annotations

import pytest

from tests.support.cli_helpers import run
from tests.support.demo_env import demo, demo_root

#: the shared demo fixtures this module's tests use
FIXTURES = (demo, demo_root)


def _one_error(result, code: int) -> str:
    assert result.code == code, (result.code, result.err)
    assert result.out == ""
    (line,) = result.err.strip().splitlines()
    assert line.startswith("ledgerctl: error: ")
    return line


def test_a_batch_index_past_the_batch_is_no_message(capsys, demo) -> None:
    ok = run(capsys, "inspect", "4:2:4", "-o", "json")
    assert ok.code == 0, ok.err
    assert [m["batch_index"] for m in ok.json()["entries"][0]["messages"]] == [4]
    line = _one_error(run(capsys, "inspect", "4:2:9", "-o", "json"), 1)
    assert "no message 4:2:9: entry 4:2 holds 5 messages (batch indexes 0..4)" in line
    # a plain entry (topic plain, ledger 0) is one message, batch index 0
    assert run(capsys, "inspect", "0:1:0", "-o", "json").code == 0
    line = _one_error(run(capsys, "inspect", "0:1:1", "-o", "json"), 1)
    assert "entry 0:1 holds 1 message (batch index 0)" in line
    # the end of a range too
    line = _one_error(run(capsys, "inspect", "4", "--from", "1", "--to", "4:2:7"), 1)
    assert "no message 4:2:7" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["inspect", "4", "--from", "5", "--to", "2"], "--from 4:5 comes after --to 4:2"),
        (["inspect", "4", "--from", "4:2:3", "--to", "4:2:1"], "--from 4:2:3 comes after"),
        (
            ["inspect", "--topic", "batched", "--from", "9:1", "--to", "4:0"],
            "--from 9:1 comes after --to 4:0 in the topic's ledger order",
        ),
        (
            ["inspect", "4", "--since", "2026-01-02", "--until", "2025-01-01"],
            "--since 2026-01-02T00:00:00.000Z is not before --until 2025-01-01T00:00:00.000Z",
        ),
        (
            ["inspect", "4", "--since", "1763719200000", "--until", "1763719200000"],
            "is not before --until",
        ),
        (
            ["export", "batched", "--to", "x.jsonl", "--since", "2d", "--until", "3d"],
            "is not before --until",
        ),
    ],
)
def test_a_reversed_range_is_a_usage_error(capsys, demo, args, says) -> None:
    line = _one_error(run(capsys, *args), 2)
    assert says in line and "swapped?" in line
    assert not (demo / "x.jsonl").exists()


def test_ranges_in_order_still_answer(capsys, demo) -> None:
    result = run(capsys, "inspect", "--topic", "batched", "--from", "4:1", "--to", "9:0")
    assert result.code == 0, result.err
    result = run(capsys, "inspect", "4", "--from", "4:2:1", "--to", "4:2:3", "-o", "json")
    assert result.code == 0, result.err
    assert [m["batch_index"] for m in result.json()["entries"][0]["messages"]] == [1, 2, 3]


@pytest.mark.parametrize(
    "args", [["inspect", "4"], ["verify", "--all"], ["ledger", "meta", "4"], ["bookie", "check"]]
)
def test_the_metadata_store_is_no_bookie_directory(capsys, demo, args) -> None:
    line = _one_error(run(capsys, *args, "--bookie-dir", "metadata", "-o", "json"), 2)
    assert "metadata is a RocksDB database, not a bookie directory" in line
    assert "entry logs" not in line
    line = _one_error(
        run(capsys, *args, "--bookie-dir", "bookkeeper/current/locations", "-o", "json"), 2
    )
    assert "it is a bookie's locations index: give the bookie directory bookkeeper" in line
