"""`repair missing-ledgers --recreate`: a ledger whose metadata is gone while a stopped
bookie's directory still holds its entries gets its metadata back, as a plan, verified by
reading it back; and the ensemble order found from the copies, for any round-robin
placement. The verify world's ledger 11 of orders (4 entries, CRC32C, empty password)
lost its metadata in the variant ``ledger-missing-metadata`` (``ledger-lost``: its
entries too)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.errors import DataError
from pulsarctl_py.repair.recreate import Copy, Found, ensemble_order
from tests.support.cli_helpers import run
from tests.support.demo_env import isolate
from tests.support.verify_world import BOOKIE, World, build_world

LOST = 11


@pytest.fixture(autouse=True)
def _no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)


def _without_cookie(world: World) -> None:
    """The world's bookie directory without its cookie, and the BookKeeper root without
    the bookie's registration: which bookie it is cannot be told."""
    from pulsarctl_py.stores.metadata import open_metadata_store

    (world.bookie_dir / "current" / "VERSION").unlink()
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        node = store.get(f"/ledgers/cookies/{BOOKIE}")
        assert node is not None
        store.delete(f"/ledgers/cookies/{BOOKIE}", node.stat.version)


def _flags(world: World) -> list[str]:
    return ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]


@pytest.fixture
def lost(tmp_path: Path) -> World:
    return build_world(tmp_path / "w", "ledger-missing-metadata")


def _original(tmp_path: Path) -> lm.LedgerMetadata:
    """Ledger 11's metadata as the healthy world holds it."""
    healthy = build_world(tmp_path / "healthy")
    with healthy.source() as source:
        view = source.ledger(LOST)
    assert view.metadata is not None
    return view.metadata


def test_recreate_plans_the_metadata_the_ledger_had(
    capsys: pytest.CaptureFixture[str], lost: World, tmp_path: Path
) -> None:
    plan = tmp_path / "recreate.json"
    r = run(
        capsys, "repair", "missing-ledgers", "orders", "--recreate", *_flags(lost),
        "--plan", plan, "-o", "json",
    )  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(plan.read_text())
    (change,) = doc["changes"]
    assert change["action"] == "create" and change["key"] == "/ledgers/00/0000/L0011"
    new = lm.parse(base64.b64decode(change["new_base64"]), LOST)
    old = _original(tmp_path)
    for name in (
        "ensemble_size",
        "write_quorum_size",
        "ack_quorum_size",
        "state",
        "ensembles",
        "last_entry_id",
        "length",
        "digest_type",
        "password",
        "custom_metadata",
    ):
        assert getattr(new, name) == getattr(old, name), name
    (rec,) = doc["repairs"][0]["recreated"]
    assert rec["verified_entries"] == 4
    assert (
        rec["sources"]["password"] == "the password of ledger 10 (its master key is the bookie's)"
    )
    assert rec["data"]["copies"][0]["bookie"] == BOOKIE
    assert doc["repairs"][0]["ledgers"] == []  # nothing dropped
    assert doc["unreachable"]["ledgers"] == []
    # applied, the topic verifies clean and ledger 11 reads; undo takes it away again
    r = run(capsys, "apply", plan, "--yes", "-o", "table")
    assert r.code == 0, r.err
    assert f"store: {lost.metadata_url} (ledger metadata under /ledgers)" in r.err
    r = run(capsys, "verify", "orders", *_flags(lost), "-o", "json")
    assert r.code == 0, r.err
    assert r.json()["findings"] == []
    r = run(capsys, "inspect", "11", *_flags(lost), "-o", "json")
    assert r.code == 0, r.err
    assert len(r.json()["entries"]) == 4
    r = run(capsys, "undo", plan, "--yes")
    assert r.code == 0, r.err
    r = run(capsys, "verify", "orders", *_flags(lost), "-o", "json")
    assert [f["check"] for f in r.json()["findings"]] == ["ledger-missing-metadata"]


def test_without_recreate_a_ledger_whose_data_is_there_is_kept(
    capsys: pytest.CaptureFixture[str], lost: World
) -> None:
    """Only its metadata is lost: dropping it would lose the data, so it is kept, and the
    plan says where the data is and how to get the ledger back."""
    r = run(capsys, "repair", "missing-ledgers", "orders", *_flags(lost), "-o", "json")
    assert r.code == 0, r.err
    doc = r.json()
    (done,) = doc["repairs"]
    assert done["ledgers"] == []  # nothing dropped
    (kept,) = done["not_judged"]
    assert kept["ledger_id"] == LOST
    assert (
        "its entries are still on the bookies (entries 0..3 on 127.0.0.1:3181 (4))"
        in (kept["reason"])
    )
    assert any(
        "--recreate" in w and "ledger 11" in w and "not dropped" in w for w in doc["warnings"]
    )
    assert doc["changes"] == [] and doc["unreachable"]["ledgers"] == []


def test_a_ledger_lost_with_its_data_shows_the_close_time_bounds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world = build_world(tmp_path / "w", "ledger-lost")
    r = run(capsys, "repair", "missing-ledgers", "orders", *_flags(world), "-o", "json")
    assert r.code == 0, r.err
    u = r.json()["unreachable"]
    assert u["time_range_basis"] == ["close times"]
    assert not any("--recreate" in w for w in r.json()["warnings"])
    r = run(capsys, "repair", "missing-ledgers", "orders", *_flags(world), "--recreate")
    assert r.code == 1, r.err
    (line,) = r.err.strip().splitlines()
    assert "ledger 11 of persistent://public/default/orders has no BookKeeper metadata" in line
    assert "nothing to recreate it from" in line


def test_a_copy_no_cookie_names_is_not_guessed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world = build_world(tmp_path / "w", "ledger-missing-metadata")
    _without_cookie(world)
    r = run(capsys, "repair", "missing-ledgers", "orders", "--recreate", *_flags(world))
    assert r.code == 1, r.err
    (line,) = r.err.strip().splitlines()
    assert "cannot tell which bookie holds the copy" in line
    assert "no cookie current/VERSION" in line


# -- the ensemble order from the copies ------------------------------------------------------


def _copies(order: list[str], write_quorum: int, last: int) -> Found:
    held: dict[str, list[int]] = {b: [] for b in order}
    for e in range(last + 1):
        for i in range(write_quorum):
            held[order[(e + i) % len(order)]].append(e)
    copies = [Copy(b, "test", ids, read=lambda e: b"") for b, ids in sorted(held.items())]
    return Found(1, copies)


@given(
    st.integers(min_value=1, max_value=6).flatmap(
        lambda size: st.tuples(
            st.permutations([f"bookie-{i}:3181" for i in range(size)]),
            st.integers(min_value=1, max_value=size),
        )
    ),
    st.integers(min_value=0, max_value=40),
)
def test_the_order_found_puts_every_copy_on_its_write_set(
    placement: tuple[list[str], int], last: int
) -> None:
    order, write_quorum = placement
    found = _copies(list(order), write_quorum, last)
    holders = {c.bookie for c in found.copies if c.entries}
    if len(holders) < len(order):
        return  # a short ledger that never reached some bookie: another question
    got = ensemble_order(found, write_quorum)
    for copy in found.copies:
        for e in copy.entries:
            assert copy.bookie in {got[(e + i) % len(got)] for i in range(write_quorum)}
    if write_quorum < len(order) and last >= len(order) - 1:
        assert got == list(order)  # one order only: the writer's


def test_copies_of_two_ensembles_are_refused() -> None:
    found = _copies(["a:1", "b:1", "c:1"], 2, 8)
    found.copies[0].entries.append(10)  # an entry where round robin never puts it
    found.copies[1].entries.append(10)
    found.copies[2].entries.append(9)
    with pytest.raises(DataError, match="follow no single ensemble"):
        ensemble_order(found, 2)


def test_gaps_are_the_entries_no_copy_holds() -> None:
    found = Found(
        7,
        [
            Copy("a:1", "t", [0, 1, 4], read=lambda e: b""),
            Copy("b:1", "t", [1, 6], read=lambda e: b""),
        ],
    )
    assert found.gaps() == [(2, 3), (5, 5)]
    assert found.last == 6
