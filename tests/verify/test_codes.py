"""verify's table of finding codes: it lists every documented check with its severities,
each finding names the repair of its code, `repair --from-verify` dispatches on the same
table, and `verify --all` and `ledgerctl orphans` share one orphan rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pulsarctl_py.verify as verify
from pulsarctl_py.plans import Draft
from pulsarctl_py.repair import from_verify
from pulsarctl_py.repair.orphans import find_orphans
from pulsarctl_py.verify import CODES, REPAIR_FOR_CHECK, repair_command, verify_topics
from pulsarctl_py.verify.codes import REPAIR_COMMANDS
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, VARIANTS, build_world
from tests.verify.test_driver import SEVERITY


def test_the_table_lists_every_documented_check_with_its_severities() -> None:
    rule = re.compile(r"^``([a-z-]+)`` \((error|warning|info)")
    documented = {
        m.group(1) for line in (verify.__doc__ or "").splitlines() if (m := rule.match(line))
    }
    assert set(CODES) == documented
    assert {c: set(code.severities) for c, code in CODES.items()} == SEVERITY
    families = {"core", "ledgers", "order", "cursors", "compaction", "shadow", "orphans", "broker"}
    families.add("tiered")
    assert {code.family for code in CODES.values()} == families


def test_repair_from_verify_uses_the_table() -> None:
    assert from_verify.REPAIR_FOR_CHECK is REPAIR_FOR_CHECK
    assert set(REPAIR_FOR_CHECK.values()) == set(REPAIR_COMMANDS)
    assert repair_command("ledger-missing-metadata", ORDERS) == (
        f"ledgerctl repair missing-ledgers {ORDERS}"
    )
    assert repair_command("orphan-ledger", None) == "ledgerctl orphans --delete"
    assert repair_command("index-gap", ORDERS) is None  # no repair fixes it
    assert repair_command("cursor-beyond-lac", None) is None  # a topic is needed


@pytest.mark.parametrize("variant", sorted(v for v in VARIANTS if VARIANTS[v]))
def test_each_finding_names_its_repair(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, variant: str
) -> None:
    world = build_world(tmp_path / "w", variant)
    url = ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]
    result = run(capsys, "verify", "--all", *url, "-o", "json")
    findings = result.json()["findings"]
    assert findings
    for f in findings:
        repair = CODES[f["check"]].repair
        if repair is None:
            assert f["repair"] is None, f
        else:
            assert f["repair"] == REPAIR_COMMANDS[repair].replace("{topic}", f["topic"] or ""), f
            assert f["repair"].startswith("ledgerctl ")


def test_verify_and_orphans_agree_on_what_an_orphan_is(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "orphan-ledger")
    with world.source() as source:
        found = [f.ledger_id for f in verify_topics(source, None) if f.check == "orphan-ledger"]
        assert source.metadata is not None
        listed = [o.ledger_id for o in find_orphans(Draft(source.metadata), source)]
    assert found == listed == [70]
