"""``compact --plan/--apply`` writes the compacted ledger while phase two runs, as the broker's
``TwoPhaseCompactor`` does (the ledger created after phase one, ``phaseTwoLoop`` adding each
entry as it is produced): the ledger is created before phase two starts and filled entry by
entry; phase two failing midway deletes it and leaves no plan naming it; and the ledger is
the one the compute-then-write (spool) path writes.

The world is the verify tests' (tests/support/verify_world.py): public/default/orders on one
stopped DbLedgerStorage bookie, metadata in RocksDB. The running bookies' writer takes the
same entries through the same sink (tests/cluster/sandbox/test_writes.py writes there).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

import pulsarctl_py.compaction.run as run_module
from pulsarctl_py.compaction.core import CompactedEntry
from pulsarctl_py.errors import DataError
from pulsarctl_py.plans.writing import PlanJournal
from pulsarctl_py.stores.bookie import newledger
from tests.compaction.test_planned import _bookie, _metadata
from tests.compaction.test_run import _args, _world
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, World, build_world


def _record(mp: pytest.MonkeyPatch, events: list[tuple[str, Any]], fail_after: int | None = None):
    """Record, in order: the ledger's creation (the plan journal's step), phase two's start
    and each entry it produces, and each entry the writer adds; with ``fail_after``, phase
    two fails as a bookie read would (a DataError) after that many entries."""
    real_split = run_module.phase_two_split
    real_pack = newledger.pack_entries
    real_creating = PlanJournal.creating

    def split(*args: Any, **kwargs: Any) -> Iterator[Any]:
        events.append(("phase two", None))
        for item in real_split(*args, **kwargs):
            if isinstance(item, CompactedEntry):
                if fail_after is not None and sum(k == "computed" for k, _ in events) >= fail_after:
                    raise DataError("entry 12:0: injected: the bookie's read failed")
                events.append(("computed", item.position))
            yield item

    def pack(ledger_id: int, payloads: Any, *args: Any) -> Iterator[Any]:
        for packed in real_pack(ledger_id, payloads, *args):
            events.append(("added", packed[0]))
            yield packed

    def creating(journal: Any, ledger_id: int, path: str, ctoken: int) -> None:
        events.append(("creating", ledger_id))
        real_creating(journal, ledger_id, path, ctoken)

    mp.setattr(run_module, "phase_two_split", split)
    mp.setattr(newledger, "pack_entries", pack)
    mp.setattr(PlanJournal, "creating", creating)


def _without_lease_parents(nodes: dict[str, bytes]) -> dict[str, bytes]:
    return {p: v for p, v in nodes.items() if not (p.startswith("/ledgerctl") and v == b"")}


def _ledgers(world: World) -> dict[int, Any]:
    """The world's ledgers by id, with their metadata."""
    from pulsarctl_py.stores.metadata import iter_ledger_paths, open_metadata_store, read_ledger

    with open_metadata_store(world.metadata_url) as store:
        place = store.bookkeeper()
        return {
            lid: read_ledger(place.store, lid, place.root).metadata
            for lid, _ in iter_ledger_paths(place.store, place.root)
        }


def _entries(world: World, ledger_id: int) -> list[bytes]:
    """The ledger's entries as stored, without what names the ledger: the ledger id and
    the digest (which covers it); entry id, LAC, length and payload stay."""
    from pulsarctl_py.decoders.bookkeeper import HEADER
    from pulsarctl_py.decoders.checksums import DIGESTS
    from pulsarctl_py.ledgers import LedgerSource

    with LedgerSource.open(
        world.metadata_url, [str(world.bookie_dir)], need_metadata=True, need_bookie=True
    ) as source:
        view = source.ledger(ledger_id)
        size = DIGESTS[view.metadata.digest_type].size
        return [
            bytes(s.data[8 : HEADER.size]) + bytes(s.data[HEADER.size + size :])
            for s in source.raw_entries(view, 0, None)
        ]


def test_the_ledger_is_created_after_phase_one_and_filled_while_phase_two_runs(
    tmp_path, capsys, monkeypatch
) -> None:
    world = build_world(tmp_path / "w")
    events: list[tuple[str, Any]] = []
    _record(monkeypatch, events)
    made = run(capsys, "compact", ORDERS, "--full", "--plan", tmp_path / "p.json", *_args(world))
    assert made.code == 0, made.err
    kinds = [k for k, _ in events]
    # created before phase two starts; then each entry added as soon as it is produced
    assert kinds[:2] == ["creating", "phase two"], kinds
    body = [k for k in kinds[2:] if k != "phase two"]
    assert len(body) >= 4 and body == ["computed", "added"] * (len(body) // 2), kinds
    assert "entry by entry as phase two computes it" in made.err
    assert f"({len(body) // 2} entries, " in made.err  # the final line counts them


@pytest.mark.parametrize("store_kind", ["rocksdb", "zookeeper"])
def test_phase_two_failing_midway_deletes_the_ledger_and_leaves_no_plan(
    tmp_path, capsys, monkeypatch, request, store_kind
) -> None:
    world = _world(tmp_path, store_kind, "db", request)
    before_md, before_bk = _metadata(world.metadata_url), _bookie(world)
    events: list[tuple[str, Any]] = []
    plan = tmp_path / "p.json"
    with monkeypatch.context() as mp:
        _record(mp, events, fail_after=1)
        failed = run(capsys, "compact", ORDERS, "--full", "--apply", "--plan", plan, *_args(world))
    assert failed.code == DataError.exit_code, failed.err
    assert failed.err.strip().splitlines()[-1] == (
        "ledgerctl: error: entry 12:0: injected: the bookie's read failed"
    )
    # the ledger was being written when phase two failed ...
    created = [v for k, v in events if k == "creating"]
    assert len(created) == 1 and ("added", 0) in events, events
    # ... and nothing of it is left: no metadata, no plan naming it, the stores as they were
    assert created[0] not in _ledgers(world)
    assert not plan.exists()
    # (ledgerctl's empty parent nodes of leases and their records may stay in ZooKeeper)
    assert _without_lease_parents(_metadata(world.metadata_url)) == before_md
    assert _bookie(world) == before_bk
    orphans = run(capsys, "orphans", "--min-age", "0", "-o", "json", *_args(world))
    assert orphans.code == 0, orphans.err
    assert orphans.json()["orphans"] == []


def test_the_written_ledger_is_the_spool_paths_and_no_spool_is_made(
    tmp_path, capsys, monkeypatch
) -> None:
    from pulsarctl_py import outputs
    from pulsarctl_py.compaction import compact
    from pulsarctl_py.compaction.planned import read_before, write_plan
    from pulsarctl_py.plans.writing import PlanFile

    world = build_world(tmp_path / "w")
    url, bookie = world.metadata_url, str(world.bookie_dir)
    # the compute-then-write path: phase two spooled, then the ledger written from the spool
    before = read_before(url, ORDERS)
    state: dict[str, Any] = {}
    report = compact(
        ORDERS,
        metadata_url=url,
        bookie_dirs=[bookie],
        full=True,
        spool=True,
        on_state=lambda s: state.update(s=s),
    )
    spool_plan = tmp_path / "spool.json"
    try:
        _, spooled = write_plan(
            before=before,
            report=report,
            state=state["s"],
            plan_file=PlanFile(
                outputs.prepare(spool_plan, outputs.PLAN), url, ORDERS, [bookie], "a ledger"
            ),
            bookie_dirs=[bookie],
            settings=None,
            options=None,
            delete_old=False,
        )
    finally:
        assert report.spool is not None
        report.spool.unlink()
    # the command: no spool file made, the ledger written while phase two runs
    made_temp: list[str] = []
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> Any:
        made_temp.append(str(kwargs.get("prefix", args[1] if len(args) > 1 else "")))
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    made = run(capsys, "compact", ORDERS, "--full", "--plan", tmp_path / "p.json", "-o", "json",
               *_args(world))  # fmt: skip
    assert made.code == 0, made.err
    assert not [p for p in made_temp if "compacted" in p], made_temp
    piped = made.json()["compacted_ledger"]
    assert piped != spooled.ledger_id
    ledgers = _ledgers(world)
    a, b = ledgers[spooled.ledger_id], ledgers[piped]
    # the same metadata but what names one ledger (its id, creation time and creator token)
    same = {k: v for k, v in a.to_json().items() if k not in ("ledger_id", "ctime", "ctoken")}
    assert same == {
        k: v for k, v in b.to_json().items() if k not in ("ledger_id", "ctime", "ctoken")
    }
    assert a.password == b.password
    assert list(a.custom_metadata) == list(b.custom_metadata)  # in the same order
    assert a.last_entry_id >= 1
    assert _entries(world, piped) == _entries(world, spooled.ledger_id)


def test_a_conflict_after_phase_two_still_saves_the_export(tmp_path, capsys, monkeypatch) -> None:
    """The --export view is complete once phase two ends: a compare-and-set that fails at
    the apply (a broker committed meanwhile) refuses the write (exit 5) and keeps the view,
    as when the write came after the compute."""
    import pulsarctl_py.compaction.planned as planned
    from pulsarctl_py.stores.metadata import open_metadata_store
    from tests.compaction.test_run import CURSOR

    world = build_world(tmp_path / "w")
    real = planned.write_compaction

    def committed_meanwhile(*args: Any, **kwargs: Any) -> Any:
        with open_metadata_store(world.metadata_url, read_only=False) as store:
            node = store.get(CURSOR)
            store.put(CURSOR, node.data, node.stat.version)
        return real(*args, **kwargs)

    monkeypatch.setattr(planned, "write_compaction", committed_meanwhile)
    view = tmp_path / "view.jsonl"
    done = run(capsys, "compact", ORDERS, "--full", "--apply", "--plan", tmp_path / "p.json",
               "--export", view, *_args(world))  # fmt: skip
    assert done.code == 5, done.err
    assert "the compacted ledger this plan wrote is deleted" in done.err
    assert len(view.read_text().splitlines()) >= 2
