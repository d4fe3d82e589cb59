"""The broker's view beside the stored one (:mod:`pulsarctl_py.broker_view`), on documents.

The broker's side is the shape of the internal stats the real broker answered on the
sandbox (Pulsar 4.0.7, ``GET .../internalStats`` of a compacted topic with one subscription);
tests/cluster/sandbox/test_broker_view.py compares with the live broker.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pulsarctl_py.broker_view import (
    BrokerLookup,
    BrokerView,
    compare,
    follow_source,
    stats_summary,
)

#: what the sandbox's broker answered (trimmed of counters the comparison does not read)
STATS: dict[str, Any] = {
    "entriesAddedCounter": 5,
    "numberOfEntries": 15,
    "totalSize": 795,
    "currentLedgerEntries": 5,
    "currentLedgerSize": 265,
    "lastConfirmedEntry": "8:4",
    "state": "LedgerOpened",
    "ledgers": [
        {"ledgerId": 4, "entries": 10, "size": 530, "offloaded": False},
        {"ledgerId": 8, "entries": 0, "size": 0, "offloaded": False},
    ],
    "cursors": {
        "__compaction": {
            "markDeletePosition": "8:4",
            "readPosition": "8:5",
            "cursorLedger": 11,
            "state": "Open",
            "properties": {"CompactedTopicLedger": 10},
        },
        "sub1": {
            "markDeletePosition": "8:4",
            "readPosition": "8:5",
            "cursorLedger": 9,
            "state": "Open",
            "properties": {},
        },
    },
    "compactedLedger": {"ledgerId": 10, "entries": 3, "size": 183},
}

#: the same topic as storage holds it while the broker has it loaded: the current ledger 8
#: recorded without counts, the cursors persisted a little behind the broker
STORED: dict[str, Any] = {
    "ledgers": [
        {"ledger_id": 4, "entries": 10, "size": 530, "open": False},
        {"ledger_id": 8, "entries": None, "size": None, "open": True},
    ],
    "cursors": {"__compaction": "8:4", "sub1": "8:2"},
    "compacted_ledger": 10,
}


def _findings(stored: dict[str, Any], stats: dict[str, Any], exists: Any = None) -> list[str]:
    return [d.check for d in compare(stored, stats, exists) if d.severity is not None]


def test_a_healthy_live_topic_is_clean() -> None:
    differences = compare(STORED, STATS, lambda lid: True)
    # the broker ahead of a persisted cursor is expected: shown, no finding
    assert [(d.check, d.severity, d.details["cursor"]) for d in differences] == [
        ("broker-cursor-differs", None, "sub1")
    ]
    assert differences[0].to_json()["expected"] is True


def test_the_current_ledger_counts_are_not_compared() -> None:
    stats = copy.deepcopy(STATS)
    stats["ledgers"][1].update(entries=5, size=265)  # what a broker shows after a roll race
    stored = copy.deepcopy(STORED)
    stored["ledgers"][1].update(entries=0, size=0, open=False)
    assert _findings(stored, stats) == []


def test_a_ledger_the_broker_lists_and_storage_does_not() -> None:
    stored = copy.deepcopy(STORED)
    stored["ledgers"] = [stored["ledgers"][1]]  # ledger 4 dropped behind the broker's back
    found = compare(stored, STATS, lambda lid: True)
    assert [(d.check, d.severity, d.ledger_id) for d in found if d.severity] == [
        ("broker-ledger-not-stored", "error", 4)
    ]
    # and BookKeeper no longer has it: reads fail
    assert _findings(stored, STATS, lambda lid: lid != 4) == ["broker-ledger-gone"]
    # cannot tell: no claim that it is gone
    assert _findings(stored, STATS, lambda lid: None) == ["broker-ledger-not-stored"]


def test_a_shadow_topics_broker_follows_its_source() -> None:
    """A shadow's broker lists the source's new ledger before the shadow's own node is
    resynced (ShadowManagedLedgerImpl follows the source): no stale list; a ledger neither
    the shadow nor its source stores still is one."""
    stored = copy.deepcopy(STORED)
    stored["ledgers"] = [stored["ledgers"][0]]  # the shadow's node lags: ledger 8 not yet
    assert _findings(stored, STATS) == ["broker-ledger-not-stored"]
    assert _findings(follow_source(stored, [4, 8]), STATS) == []
    assert _findings(follow_source(stored, [4]), STATS) == ["broker-ledger-not-stored"]


def test_a_ledger_storage_lists_and_the_broker_does_not() -> None:
    stored = copy.deepcopy(STORED)
    stored["ledgers"].insert(1, {"ledger_id": 6, "entries": 3, "size": 9, "open": False})
    found = [d for d in compare(stored, STATS) if d.severity]
    assert [(d.check, d.severity, d.ledger_id) for d in found] == [
        ("broker-ledger-not-listed", "error", 6)
    ]


def test_closed_ledger_counts_differ() -> None:
    stored = copy.deepcopy(STORED)
    stored["ledgers"][0]["entries"] = 9
    found = [d for d in compare(stored, STATS) if d.severity]
    assert [(d.check, d.severity) for d in found] == [("broker-ledger-differs", "warning")]
    assert found[0].details == {
        "stored": {"entries": 9, "size": 530},
        "broker": {"entries": 10, "size": 530},
    }


@pytest.mark.parametrize(
    ("stored_ledger", "broker_ledger"),
    [(12, 10), (None, 10), (12, -1), (12, None)],
)
def test_a_compaction_the_broker_has_not_picked_up(
    stored_ledger: int | None, broker_ledger: int | None
) -> None:
    stored = dict(STORED, compacted_ledger=stored_ledger)
    stats = copy.deepcopy(STATS)
    if broker_ledger is None:
        del stats["compactedLedger"]
    else:
        stats["compactedLedger"]["ledgerId"] = broker_ledger
    found = [d for d in compare(stored, stats) if d.severity]
    assert [(d.check, d.severity) for d in found] == [("broker-compaction-stale", "error")]
    assert found[0].details == {
        "stored": stored_ledger,
        "broker": None if broker_ledger in (None, -1) else broker_ledger,
    }


def test_no_compaction_on_either_side_is_no_difference() -> None:
    stats = copy.deepcopy(STATS)
    stats["compactedLedger"]["ledgerId"] = -1
    assert _findings(dict(STORED, compacted_ledger=None), stats) == []


def test_a_stored_cursor_ahead_of_the_broker_or_unknown_to_it() -> None:
    stored = copy.deepcopy(STORED)
    stored["cursors"]["sub1"] = "8:5"  # written behind its back
    stored["cursors"]["gone"] = "4:0"
    found = [d for d in compare(stored, STATS) if d.severity]
    assert sorted((d.check, d.severity, d.details["cursor"]) for d in found) == [
        ("broker-cursor-differs", "info", "gone"),
        ("broker-cursor-differs", "info", "sub1"),
    ]
    # cursors the broker has and storage does not (readers' non-durable ones) are no finding
    stats = copy.deepcopy(STATS)
    stats["cursors"]["reader-1234"] = {"markDeletePosition": "8:1"}
    assert _findings(STORED, stats) == []


def test_the_summary_keeps_what_the_view_shows() -> None:
    summary = stats_summary(STATS)
    assert summary["lastConfirmedEntry"] == "8:4"
    assert summary["state"] == "LedgerOpened"
    assert summary["compactedLedger"] == {"ledgerId": 10, "entries": 3, "size": 183}
    assert summary["cursors"]["sub1"]["markDeletePosition"] == "8:4"
    assert [li["ledgerId"] for li in summary["ledgers"]] == [4, 8]


class _Admin:
    """A broker admin client's answers, for the lookup's rules (the client itself is
    tested against the sandbox's broker)."""

    def __init__(self, url: str, loaded: set[str], answers: list[dict[str, Any]]) -> None:
        self.url = url
        self._loaded = loaded
        self._answers = answers
        self.asked: list[str] = []

    def loaded_topics(self) -> set[str]:
        return self._loaded

    def internal_stats(self, topic: str) -> dict[str, Any]:
        self.asked.append(topic)
        return self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]

    def compaction_status(self, topic: str) -> dict[str, Any]:
        return {"status": "SUCCESS", "lastError": ""}


def _lookup(admins: list[Any]) -> BrokerLookup:
    lookup = BrokerLookup(store=None, admin_url=None)  # type: ignore[arg-type]
    lookup._admins = admins
    return lookup


def test_a_race_seen_once_is_no_finding() -> None:
    """Storage read before a roll, the broker after it: the second comparison (both read
    again) does not see it, so it is not reported."""
    rolled = copy.deepcopy(STATS)
    rolled["ledgers"].append({"ledgerId": 12, "entries": 0, "size": 0})
    admin = _Admin("http://b:8080", {"persistent://t/n/x"}, [rolled, STATS])
    view = _lookup([admin]).view("persistent://t/n/x", lambda: STORED)
    assert view.asked and view.loaded
    assert view.findings == []
    assert admin.asked == ["persistent://t/n/x", "persistent://t/n/x"]
    assert view.compaction == {"status": "SUCCESS", "lastError": ""}


def test_a_topic_not_loaded_is_not_asked_about() -> None:
    admin = _Admin("http://b:8080", {"persistent://t/n/other"}, [STATS])
    view = _lookup([admin]).view("persistent://t/n/x", lambda: STORED)
    assert (view.asked, view.loaded, view.stats) == (True, False, None)
    assert admin.asked == []  # never loaded by looking
    assert "not loaded" in view.line()


def test_no_broker_is_not_asked() -> None:
    lookup = _lookup([])
    lookup.reason = "no admin URL"
    view = lookup.view("persistent://t/n/x", lambda: STORED)
    assert view.to_json()["asked"] is False
    assert view.line() == "broker: not asked (no admin URL)"
    assert isinstance(view, BrokerView)
