"""`ledgerctl verify`: every finding is seen on a world broken that one way, nothing on a
healthy one, and verifying never changes a byte of the data directory."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.verify import (
    MAX_LISTED,
    Finding,
    VerifyProgress,
    VerifyStats,
    verify_topics,
)
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, PARTS, VARIANTS, World, build_world, tree_digest

#: the severities each check may have (the rule decides which, see pulsarctl_py/verify.py)
SEVERITY = {
    "ledger-missing-metadata": {"error"},
    "ledger-metadata-unreadable": {"error"},
    "ledger-missing-storage": {"error"},
    "entry-missing": {"error"},
    "entry-corrupt": {"error"},
    "entry-undecodable": {"error"},
    "entry-past-last": {"info"},
    "digest-unverified": {"warning"},
    "entries-mismatch": {"error"},
    "size-mismatch": {"error", "warning"},
    "ledger-wrong-owner": {"error"},
    "ledger-not-closed": {"warning"},
    "ledger-list-unordered": {"info"},
    "ledger-list-duplicate": {"error"},
    "ml-unreadable": {"error"},
    "cursor-unreadable": {"error"},
    "cursor-ledger-missing": {"warning"},
    "cursor-beyond-lac": {"error"},
    "cursor-unknown-ledger": {"error", "warning"},
    "compacted-ledger-missing": {"error"},
    "compacted-ledger-wrong-topic": {"error", "warning"},
    "compacted-horizon-mismatch": {"warning"},
    "index-gap": {"error"},
    "index-per-entry": {"info"},
    "index-missing": {"warning"},
    "index-property-behind": {"error"},
    "index-property-invalid": {"error"},
    "timestamp-regression": {"warning"},
    "orphan-ledger": {"warning"},
    "shadow-source-missing": {"error"},
    "shadow-ledger-not-in-source": {"error"},
    "shadow-ledger-differs": {"warning"},
    "storage-not-checked": {"info"},
    "storage-not-covered": {"info"},
    "storage-index-unusable": {"error"},
    "storage-damaged": {"error"},
    "broker-ledger-not-stored": {"error"},
    "broker-ledger-not-listed": {"error"},
    "broker-ledger-gone": {"error"},
    "broker-ledger-differs": {"warning"},
    "broker-compaction-stale": {"error"},
    "broker-cursor-differs": {"info"},
    "offload-incomplete": {"error", "warning"},
    "offload-missing": {"error"},
    "offload-unreadable": {"error"},
    "offload-format-version": {"error"},
    "offload-data-lost": {"error"},
    "offload-index-mismatch": {"error"},
    "offload-metadata-mismatch": {"error", "warning"},
    "offload-data-mismatch": {"error", "warning"},
    "offload-entry-corrupt": {"error"},
    "offload-not-checked": {"info"},
}
#: checks about the bookie storage itself, tested on damaged demo data in test_damaged_stores
STORAGE_CHECKS = {"storage-not-checked", "storage-index-unusable", "storage-damaged"}
#: checks of the broker's view beside the stored one: tested on documents in
#: tests/test_broker_view.py and against the live broker in
#: tests/cluster/sandbox/test_broker_view.py
BROKER_CHECKS = {c for c in SEVERITY if c.startswith("broker-")}
#: checks of offloaded ledgers' tiered copies: tested on damaged copies of real offloads in
#: tests/verify/test_tiered.py and on the sandbox's offloads in
#: tests/cluster/sandbox/test_verify_offloaded.py
TIERED_CHECKS = {c for c in SEVERITY if c.startswith("offload-")}

#: variants whose severity is the less usual one
EXPECTED_SEVERITY = {
    "size-mismatch": "warning",
    "size-mismatch-bk": "error",
    "cursor-unknown-ledger": "error",
    "cursor-trimmed-ledger": "warning",
    "compacted-ledger-wrong-topic": "error",
    "compacted-ledger-untagged": "warning",
}


def _verify(world: World, topics: list[str] | None = None, **kw: object) -> list[Finding]:
    with world.source(**kw) as source:  # type: ignore[arg-type]
        return list(verify_topics(source, topics))


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("verify") / "healthy")


def test_every_check_of_the_module_docstring_is_tested() -> None:
    import pulsarctl_py.verify as verify

    rule = re.compile(r"^``([a-z-]+)`` \((error|warning|info)")
    documented = {
        m.group(1) for line in (verify.__doc__ or "").splitlines() if (m := rule.match(line))
    }
    seen = {check for checks in VARIANTS.values() for check in checks}
    seen |= STORAGE_CHECKS | BROKER_CHECKS | TIERED_CHECKS
    assert documented == set(SEVERITY)
    assert documented <= seen


def test_healthy_world_has_no_finding_and_is_not_changed(healthy: World) -> None:
    before = healthy.digest()
    stats = VerifyStats()
    with healthy.source() as source:
        findings = list(verify_topics(source, None, stats=stats))
    assert findings == []
    assert healthy.digest() == before
    assert stats.ok
    assert stats.topics == 5
    # the ledgers read and their entries: data ledgers and the compacted one (the shadow's
    # are checked under its source), counted as demo and ledger list count them
    assert stats.ledgers == 8
    assert stats.entries == 20
    assert stats.payload_bytes > 0


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_broken_world_shows_its_finding(tmp_path: Path, variant: str) -> None:
    world = build_world(tmp_path / "world", variant)
    before = world.digest()
    findings = _verify(world)
    assert sorted(f.check for f in findings) == sorted(VARIANTS[variant]), [
        (f.check, f.message) for f in findings
    ]
    for f in findings:
        assert f.severity in SEVERITY[f.check], f
        assert f.message
        json.dumps(f.to_json())
    main = next(f for f in findings if f.check == VARIANTS[variant][0])
    if variant in EXPECTED_SEVERITY:
        assert main.severity == EXPECTED_SEVERITY[variant]
    assert world.digest() == before


def test_findings_point_at_the_damage(tmp_path: Path) -> None:
    world = build_world(tmp_path / "gap", "index-gap")
    (gap,) = _verify(world)
    assert (gap.topic, gap.ledger_id, gap.entry_id) == (ORDERS, 11, 2)
    assert gap.details["gap"] == 5
    assert (
        gap.details["index"] - gap.details["num_messages"] == gap.details["previous"]["index"] + 5
    )

    world = build_world(tmp_path / "ts", "timestamp-regression")
    (region,) = _verify(world)
    assert (region.ledger_id, region.entry_id) == (11, 1)
    assert region.details["first"] == region.details["last"] == [11, 1]
    assert region.details["back_ms"] == 9000
    assert region.details["timestamp"] == ["broker_timestamp"]

    world = build_world(tmp_path / "missing", "entry-missing")
    (missing,) = _verify(world)
    assert missing.details["missing"] == [[2, 2]]

    world = build_world(tmp_path / "behind", "index-property-behind")
    (behind,) = _verify(world)
    assert behind.details == {
        "index_property": world.last_index[10],
        "last_index": world.last_index[11],
    }


def test_metadata_only_runs_the_metadata_checks(healthy: World, tmp_path: Path) -> None:
    findings = _verify(healthy, bookie=False)
    assert [(f.check, f.severity) for f in findings] == [("storage-not-checked", "info")]
    broken = build_world(tmp_path / "w", "cursor-unknown-ledger")
    assert sorted(f.check for f in _verify(broken, bookie=False)) == [
        "cursor-unknown-ledger",
        "storage-not-checked",
    ]


def test_topic_names_and_partitions(healthy: World) -> None:
    with healthy.source() as source:
        stats = VerifyStats()
        assert list(verify_topics(source, ["orders"], stats=stats)) == []
        assert stats.topics == 1
        stats = VerifyStats()
        assert list(verify_topics(source, [PARTS.split("://")[1]], stats=stats)) == []
        assert stats.topics == 2  # both partitions
        assert list(verify_topics(source, ["public/default/orders-shadow"])) == []
        with pytest.raises(LedgerctlError, match="no managed ledger"):
            list(verify_topics(source, ["public/default/nothing"]))


def test_orphans_need_all_topics(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "orphan-ledger")
    assert _verify(world, [ORDERS]) == []
    (orphan,) = _verify(world)
    assert orphan.ledger_id == 70
    assert orphan.details["owner"] == "public/default/persistent/orders"
    assert orphan.details["owner_exists"] is True


def test_progress_reports_topics_and_ledgers(healthy: World) -> None:
    events: list[VerifyProgress] = []
    with healthy.source() as source:
        list(verify_topics(source, None, progress=events.append))
    assert events[-1].stage == "done"
    assert {e.stage for e in events} >= {"topic", "ledger", "orphans", "done"}
    assert all(e.topics_total == 5 for e in events)
    assert events[-1].topics_done == 5


def test_entry_level_findings_are_listed_up_to_a_limit() -> None:
    from pulsarctl_py.verify import _Limiter

    limiter = _Limiter()
    findings = [Finding("warning", "timestamp-regression", ORDERS, 1, i, "back") for i in range(25)]
    listed = [f for f in findings if limiter.allow(f)]
    assert len(listed) == MAX_LISTED
    (summary,) = limiter.summary(ORDERS)
    assert summary.check == "timestamp-regression"
    assert summary.severity == "warning"
    assert summary.details == {"not_listed": 25 - MAX_LISTED, "total": 25}
    assert limiter.allow(Finding("error", "cursor-beyond-lac", ORDERS, 1, 1, "x"))


def test_demo_data_has_no_finding(tmp_path: Path) -> None:
    from pulsarctl_py.demo import create_demo

    demo = create_demo(tmp_path / "demo").directory
    before = tree_digest(demo)
    stats = VerifyStats()
    from pulsarctl_py.ledgers import LedgerSource

    with LedgerSource.open(
        f"rocksdb://{demo / 'metadata'}", [demo / "bookkeeper"], need_metadata=True
    ) as source:
        findings = list(verify_topics(source, None, stats=stats))
    # the only finding is planned: seek-times' producer clock went back (a warning)
    assert [(f.severity, f.check, f.ledger_id, f.entry_id) for f in findings] == [
        ("warning", "timestamp-regression", 14, 3)
    ], [(f.check, f.message) for f in findings]
    assert stats.entries > 0
    assert tree_digest(demo) == before


# -- the command ---------------------------------------------------------------------------


def _args(world: World, *extra: str) -> list[str]:
    return [
        "verify",
        *extra,
        "--metadata-url",
        world.metadata_url,
        "--bookie-dir",
        str(world.bookie_dir),
    ]


def test_cli_json_healthy(capsys: pytest.CaptureFixture[str], healthy: World) -> None:
    before = healthy.digest()
    result = run(capsys, *_args(healthy, "--all", "-o", "json"))
    assert result.code == 0, result.err
    doc = result.json()
    assert doc["findings"] == []
    assert doc["summary"]["ok"] is True
    assert doc["summary"]["topics"] == 5
    assert doc["summary"]["errors"] == 0
    assert "0 errors" in result.err
    assert healthy.digest() == before


def test_cli_exit_status_follows_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = build_world(tmp_path / "error", "cursor-beyond-lac")
    result = run(capsys, *_args(broken, ORDERS, "-o", "json"))
    assert result.code == 1
    (finding,) = result.json()["findings"]
    assert finding["check"] == "cursor-beyond-lac"
    assert finding["details"]["cursor"] == "sub"
    assert result.json()["summary"]["checks"] == {"cursor-beyond-lac": 1}

    warned = build_world(tmp_path / "warning", "timestamp-regression")
    result = run(capsys, *_args(warned, "--all", "-o", "jsonl"))
    assert result.code == 0
    lines = [json.loads(line) for line in result.out.splitlines()]
    assert [line["check"] for line in lines] == ["timestamp-regression"]
    assert "1 warnings" in result.err

    result = run(capsys, *_args(broken, "--all", "-o", "table"))
    assert result.code == 1
    assert "cursor-beyond-lac" in result.out and "error" in result.out


def test_cli_usage(capsys: pytest.CaptureFixture[str], healthy: World) -> None:
    assert run(capsys, *_args(healthy)).code == 2  # neither TOPIC nor --all
    assert run(capsys, *_args(healthy, ORDERS, "--all")).code == 2
    result = run(capsys, *_args(healthy, "nothing-here"))
    assert result.code == 1
    assert "no managed ledger" in result.err
    result = run(capsys, *_args(healthy, ORDERS, "--password-env", "LEDGERCTL_TEST_UNSET_VAR"))
    assert result.code == 2
    assert "LEDGERCTL_TEST_UNSET_VAR" in result.err


def test_cli_progress_on_a_terminal(
    capsys: pytest.CaptureFixture[str], healthy: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    result = run(capsys, *_args(healthy, "--all", "-o", "json"))
    assert result.code == 0
    assert result.json()["findings"] == []  # progress never reaches stdout


def test_a_damaged_last_entry_does_not_hide_the_ledger(tmp_path: Path) -> None:
    from pulsarctl_py.ledgers import LedgerSource
    from tests.support.verify_world import _truncate_entry

    world = build_world(tmp_path)
    _truncate_entry(world.bookie_dir / "current", 11, 3)  # ledger 11's last entry
    with LedgerSource.open(world.metadata_url, [world.bookie_dir]) as source:
        view = source.ledger(11)
        assert view.metadata is not None and view.last_stored == 3
        assert view.last_stored_lac is None
        assert view.last_entry_error is not None and "entry 3" in view.last_entry_error
        assert view.to_json()["bookie"]["last_entry_error"] == view.last_entry_error
