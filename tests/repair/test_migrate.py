"""pulsarctl_py.repair.migrate: what undoing a migration's plan leaves behind."""

from __future__ import annotations

from pulsarctl_py.plans import Plan
from pulsarctl_py.plans.written import Written
from pulsarctl_py.repair.migrate import ledgers_undo_keeps


def test_undo_keeps_the_ledgers_a_migration_wrote_outside_the_plans_records() -> None:
    plan = Plan(
        "zk://localhost:2181",
        repairs=[
            {"repair": "index", "new_ledgers": {"10": 31, "11": 30}},
            {"repair": "compaction", "migration": {"written_ledger": 40}},
            {"repair": "compaction", "migration": {"written_ledger": None}},
            {"repair": "clamp-cursors", "cursors": []},
        ],
        written=[Written(30, "/ledgers/00/0000/L0030")],
    )
    # 30 is in the plan's records: the undo deletes it; the others stay
    assert ledgers_undo_keeps(plan) == [31, 40]
    assert ledgers_undo_keeps(Plan("zk://localhost:2181")) == []
