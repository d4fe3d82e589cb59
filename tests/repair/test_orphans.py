"""pulsarctl_py.repair.orphans: the listing ``ledgerctl orphans`` renders."""

from __future__ import annotations

from pathlib import Path

from pulsarctl_py.repair.orphans import list_orphans
from tests.support.verify_world import build_world


def test_list_orphans_opens_the_stores_and_splits_orphans_from_kept(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w", "orphan-ledger")
    listing = list_orphans(world.metadata_url, [world.bookie_dir])
    assert [o.ledger_id for o in listing.orphans] == [70] and listing.kept == []
    doc = listing.to_json()
    assert list(doc) == ["orphans", "kept", "min_age_ms"]
    assert [o["ledger_id"] for o in doc["orphans"]] == [70] and doc["min_age_ms"] == 0
    # a minimum age older than the ledger (made at T0): kept, with why
    kept = list_orphans(world.metadata_url, [world.bookie_dir], min_age_ms=100 * 365 * 86_400_000)
    assert kept.orphans == [] and [o.ledger_id for o in kept.kept] == [70]
    assert kept.kept[0].kept
    # without bookie storage the cursor ledger of orders cannot be read: orders keeps 70
    assert list_orphans(world.metadata_url, None).orphans == []
