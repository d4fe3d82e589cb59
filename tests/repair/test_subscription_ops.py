"""``repair cursor --skip / --clear-backlog / --all-subscriptions`` on the demo: the plan's
positions by the broker's rules (checked against the real broker in
tests/cluster/sandbox/test_subscription_ops.py), and the questions refused.

The demo's ``plain`` topic: ledgers 0 (5 entries) and 5 (4 entries); ``sub-1`` at mark-delete
0:2 with entry 0:4 acknowledged on its own. ``orders`` has 3 partitions and no subscription
a client made (partition 0 has the broker's ``__compaction`` cursor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_helpers import run
from tests.support.demo_env import demo, demo_root  # noqa: F401 (fixtures)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    result = run(capsys, "repair", "cursor", *args, "-o", "json")
    assert result.code == 0, result.err
    return result.json()


def test_skip_passes_over_entries_acknowledged_one_by_one(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
) -> None:
    plan = _plan(capsys, "plain", "sub-1", "--skip", "2")
    # 0:3 and 5:0 are the two entries skipped; the acknowledged 0:4 between them is passed
    assert [r["mark_delete"] for r in plan["repairs"]] == ["5:0"]
    (moved,) = plan["unreachable"]["cursors"]
    assert (moved["from"], moved["to"]) == ("0:2", "5:0")
    (change,) = plan["changes"]
    assert change["key"].endswith("/plain/sub-1")
    new = change["new"]["fields"]
    assert (new["mark_delete_ledger_id"], new["mark_delete_entry_id"]) == (5, 0)
    assert "individual_deleted_messages" not in new  # the ack at 0:4 is behind it now
    assert "individual_deleted_messages" in change["old"]["fields"]


def test_skip_past_the_end_stops_at_the_last_entry(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
) -> None:
    plan = _plan(capsys, "plain", "sub-1", "--skip", "100")
    assert [r["mark_delete"] for r in plan["repairs"]] == ["5:3"]


def test_clear_backlog_moves_to_the_last_entry(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
) -> None:
    plan = _plan(capsys, "plain", "--all-subscriptions", "--clear-backlog")
    assert [(r["cursor"], r["mark_delete"]) for r in plan["repairs"]] == [("sub-1", "5:3")]
    assert len(plan["changes"]) == 1


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["orders", "__compaction", "--skip", "1"], 2, "broker's compaction cursor"),
        (["orders", "sub", "--to", "1:0"], 2, "orders has 3 partitions"),
        (["orders", "--skip", "1"], 2, "give a subscription SUB or --all-subscriptions"),
        (["orders", "s", "--all-subscriptions", "--skip", "1"], 2, "not both"),
        (["plain", "sub-1", "--skip", "1", "--clear-backlog"], 2, "exactly one of"),
        (["orders", "--all-subscriptions", "--skip", "1"], 1, "no subscription to change"),
        (["plain", "nope", "--clear-backlog"], 1, "no cursor 'nope'"),
    ],
)
def test_questions_without_an_answer_are_refused(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
    args: list[str],
    code: int,
    words: str,
) -> None:
    result = run(capsys, "repair", "cursor", *args)
    assert result.code == code, result.err
    assert result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerctl: error:") and words in lines[0]
