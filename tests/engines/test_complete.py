"""Complete or say it is not: every scan counts what it could not read, on every engine.

The behaviour suite of the engines (the ``engine`` fixture: local, then Spark on the
suite's shared session) on stores that lack something: a ledger the storage holds none of,
an index that cannot be read, an entry missing inside a ledger, an entry that cannot be
read, entries stored past a closed ledger's last entry. ``export`` writes what it can,
lists what it could not in its summary (``complete`` false, ``errors``) and exits 1; both
engines give the same summary and the same rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import damage
from tests.support.cli_helpers import run
from tests.support.verify_world import ORDERS, PAYLOAD_DAMAGE, PLAIN, World, build_world

#: worlds whose payload at 40:1 verifies (digest, checksum) and does not decode
PAYLOAD = sorted(PAYLOAD_DAMAGE)
VARIANTS = [
    None,
    "ledger-missing-storage",
    "entry-missing",
    "entry-unreadable",
    "entry-past-last",
    *PAYLOAD,
]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str | None, World]:
    root = tmp_path_factory.mktemp("complete")
    return {v: build_world(root / (v or "healthy"), v) for v in VARIANTS}


@pytest.fixture(scope="module")
def damaged_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo with bytes flipped in its ``locations`` index (a bad sector)."""
    from pulsarctl_py.demo import create_demo

    root = tmp_path_factory.mktemp("complete-demo") / "demo"
    create_demo(root)
    damage.flip_locations_bytes(root)
    return root


def _flags(world: World) -> list[str]:
    return ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]


def _export(capsys: Any, engine: Any, to: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    res = run(capsys, "export", *args, "--to", to, "-o", "json", "--engine", engine.name)
    return res.code, res.json(), res.err


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _positions(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted({(r["ledger_id"], r["entry_id"]) for r in rows})


def test_export_of_a_whole_topic_is_complete(capsys, engine, worlds, tmp_path):
    code, summary, err = _export(
        capsys, engine, tmp_path / "o.jsonl", ORDERS, *_flags(worlds[None])
    )
    assert code == 0, err
    assert summary["complete"] is True and summary["errors"] == []
    assert summary["rows"] == 26 and summary["entries_missing"] == 0


def test_export_with_a_damaged_index_is_not_zero_rows_ok(capsys, engine, damaged_index, tmp_path):
    """issue 24: `export` exited 0 with "rows": 0 on a topic of 50 messages whose index
    was damaged."""
    from tests.support.demo_world import demo_flags

    to = tmp_path / "batched.jsonl"
    code, summary, err = _export(capsys, engine, to, "batched", *demo_flags(damaged_index))
    assert code == 1
    assert summary["complete"] is False and summary["rows"] == 0
    assert summary["ledgers_missing"] == [4, 9]
    assert all("locations" in e and "not read" in e for e in summary["errors"])
    assert err.count("error: ledger ") == 2


def test_export_with_a_ledger_missing_from_storage_says_so(capsys, engine, worlds, tmp_path):
    """issue 24: `export` wrote 10 of 15 rows when a ledger was missing from storage, and
    exited 0."""
    world = worlds["ledger-missing-storage"]
    to = tmp_path / "o.jsonl"
    code, summary, err = _export(capsys, engine, to, ORDERS, *_flags(world))
    assert code == 1
    assert summary["complete"] is False and summary["ledgers_missing"] == [11]
    assert summary["errors"] == ["ledger 11 (4 entries) is not read: no entry of it is in storage"]
    assert "ledger 11 (4 entries) is not read" in err
    assert {lid for lid, _ in _positions(_rows(to))} == {10, 12}


def test_export_of_a_missing_entry_has_a_row_saying_so(capsys, engine, worlds, tmp_path):
    world = worlds["entry-missing"]
    to = tmp_path / "o.jsonl"
    code, summary, _ = _export(capsys, engine, to, ORDERS, *_flags(world))
    assert code == 1
    assert summary["entries_missing"] == 1 and summary["complete"] is False
    assert summary["errors"] == ["entry 10:2 is not in storage"]
    (gap,) = [r for r in _rows(to) if r["problems"]]
    assert (gap["ledger_id"], gap["entry_id"]) == (10, 2)
    assert gap["problems"] == ["error: storage: entry 10:2 is not in storage"]
    assert summary["rows_with_errors"] == 1


def test_export_of_an_unreadable_entry_counts_it(capsys, engine, worlds, tmp_path):
    world = worlds["entry-unreadable"]
    code, summary, _ = _export(capsys, engine, tmp_path / "o.jsonl", ORDERS, *_flags(world))
    assert code == 1
    assert summary["entries_unreadable"] == 1 and summary["entries_missing"] == 0
    assert summary["errors"][0].startswith("entry 11:1 could not be read: ")


def test_export_skips_entries_past_a_closed_ledgers_last_entry(capsys, engine, worlds, tmp_path):
    """issue 24: `export` exported entries past a closed ledger's last entry; they are
    skipped, as compaction skips them, and listed. Issue 30: they are no part of the topic
    (adds in flight when a ledger was closed, as after every unload under load), so the
    export is complete: a note, exit 0."""
    world = worlds["entry-past-last"]
    to = tmp_path / "o.jsonl"
    code, summary, err = _export(capsys, engine, to, ORDERS, *_flags(world))
    assert code == 0, err
    assert summary["entries_past_last"] == 2 and summary["complete"] is True
    assert summary["errors"] == []
    assert summary["skipped"] == [
        "entries 10:3..4 are stored past the closed ledger's last entry 2: skipped "
        "(adds in flight when it was closed; readers never get them)"
    ]
    positions = _positions(_rows(to))
    assert (10, 2) in positions and (10, 3) not in positions and (10, 4) not in positions
    assert summary["rows_with_errors"] == 0 and "10:3..4" in err


def test_both_engines_write_the_same_incomplete_file(capsys, spark, worlds, tmp_path):
    world = worlds["entry-missing"]
    out = {}
    for name in ("local", "spark"):
        to = tmp_path / f"{name}.jsonl"
        res = run(capsys, "export", ORDERS, "--to", to, "-o", "json", "--engine", name,
                  "--split-entries", "2", *_flags(world))  # fmt: skip
        assert res.code == 1, res.err
        doc = res.json()
        assert [f["path"] for f in doc.pop("files")] == [str(to)]  # the one file written
        out[name] = (doc.pop("engine"), doc.pop("to"), doc, to.read_bytes())
    assert out["local"][2] == out["spark"][2]
    assert out["local"][3] == out["spark"][3]


def test_a_data_source_read_of_a_topic_with_a_missing_ledger_is_refused(spark, worlds):
    from pulsarctl_py.errors import DataError
    from pulsarctl_py.spark import LedgerctlReader, full_schema, plan_for

    world = worlds["ledger-missing-storage"]
    options = {"topic": ORDERS, "metadata-url": world.metadata_url}
    reader = LedgerctlReader({**options, "bookie-dir": str(world.bookie_dir)}, full_schema())
    with pytest.raises(DataError, match=r"ledger 11 \(4 entries\) is not read"):
        plan_for(reader)


# -- verify: what the decoders reject -----------------------------------------------------------


@pytest.mark.parametrize("variant", PAYLOAD)
def test_verify_reports_batches_the_decoders_reject(capsys, engine, worlds, variant, tmp_path):
    """issue 24: `verify` said ok on batches that compaction, inspect and export call
    undecodable (a count of 2^31, payload_size 2^31, a wrong uncompressed_size)."""
    world = worlds[variant]
    res = run(capsys, "verify", PLAIN, "-o", "json", "--engine", engine.name, *_flags(world))
    assert res.code == 1, res.err
    (found,) = res.json()["findings"]
    assert found["check"] == "entry-undecodable" and found["severity"] == "error"
    assert (found["ledger_id"], found["entry_id"]) == (40, 1)
    assert "does not decode" in found["message"] and "--accept-damage" in found["hint"]
    # the readers of messages reject the same entry
    inspected = run(capsys, "inspect", "40:1", "-o", "json", *_flags(world))
    assert inspected.code == 1
    (entry,) = inspected.json()["entries"]
    assert entry["ok"] is False and entry["messages"] == []
    code, summary, _ = _export(capsys, engine, tmp_path / "p.jsonl", PLAIN, *_flags(world))
    assert code == 1 and summary["rows_with_errors"] == 1


def test_verify_reports_entries_past_a_closed_ledgers_last_entry(capsys, engine, worlds):
    """What a ledger closed with adds in flight holds: information, not an error (the
    sandbox shows the broker leaving them: test_sandbox_verify)."""
    world = worlds["entry-past-last"]
    res = run(capsys, "verify", ORDERS, "-o", "json", "--engine", engine.name, *_flags(world))
    assert res.code == 0, res.err
    (found,) = res.json()["findings"]
    assert (found["check"], found["severity"]) == ("entry-past-last", "info")
    assert found["details"] == {"last_entry_id": 2, "last_stored": 4, "count": 2}


# -- compaction and migration: damage is refused unless accepted -----------------------------


def _fresh(tmp_path: Path, variant: str) -> World:
    return build_world(tmp_path / variant, variant)


@pytest.mark.parametrize("variant", ["checksum-mismatch", *PAYLOAD])
def test_compact_refuses_damage_unless_accepted(capsys, engine, worlds, variant, tmp_path):
    """issue 24: a Pulsar checksum mismatch under a valid BookKeeper digest was copied by
    `compact` without a note; batches the decoders reject were copied whole, as the
    broker copies them, with only a line on stderr."""
    world = worlds.get(variant) or _fresh(tmp_path, variant)
    before = world.digest()
    export = tmp_path / "view.jsonl"
    args = ["compact", PLAIN, "-o", "json", "--engine", engine.name, *_flags(world)]
    refused = run(capsys, *args, "--export", export)
    assert refused.code == 1 and refused.out == ""
    assert refused.err.startswith("ledgerctl: error: 40:1: ") and refused.err.count("\n") == 1
    assert "--accept-damage" in refused.err
    assert not export.exists()  # no view cut short is left behind
    accepted = run(capsys, *args, "--export", export, "--accept-damage")
    assert accepted.code == 1, accepted.err
    report = accepted.json()
    assert [d["position"] for d in report["damaged"]] == ["40:1"]
    assert report["damaged_count"] == 1 and "error: damaged 40:1: " in accepted.err
    rows = _rows(export)
    assert any(r["position"].startswith("40:1") for r in rows)
    assert world.digest() == before


def test_compact_apply_refuses_damage_and_writes_nothing(capsys, tmp_path):
    world = _fresh(tmp_path, "checksum-mismatch")
    before = world.digest()
    res = run(capsys, "compact", PLAIN, "--apply", "-o", "json", *_flags(world))
    assert res.code == 1 and "refusing to copy a damaged entry" in res.err
    assert world.digest() == before
    plan = tmp_path / "plan.json"  # not ./ledgerctl-plan-<time>.json in the working directory
    res = run(capsys, "compact", PLAIN, "--apply", "--accept-damage", "--plan", plan, "-o", "json",
              *_flags(world))  # fmt: skip
    assert res.code == 1, res.err
    assert plan.exists()
    report = res.json()
    assert report["applied"] is True and report["damaged"][0]["position"] == "40:1"


def test_compact_skips_entries_past_a_closed_ledgers_last_entry(capsys, engine, worlds):
    world = worlds["entry-past-last"]
    res = run(capsys, "compact", ORDERS, "--full", "-o", "json", "--engine", engine.name,
              *_flags(world))  # fmt: skip
    assert res.code == 0, res.err  # no part of the topic: skipped, complete (a note)
    report = res.json()
    assert report["entries_past_last"] == 2 and report["complete"] is True
    assert "note: entries 10:3..4 are stored past the closed ledger's last entry 2" in res.err


def test_migrate_index_refuses_a_checksum_mismatch_unless_accepted(capsys, tmp_path):
    """issue 24: `migrate index` copied an entry whose Pulsar checksum does not match under
    a valid BookKeeper digest, without a note."""
    world = _fresh(tmp_path, "checksum-mismatch")
    before = world.digest()
    plan = tmp_path / "plan.json"
    args = ["migrate", "index", PLAIN, "--plan", plan, "-o", "json", *_flags(world)]
    refused = run(capsys, *args)
    assert refused.code == 1 and "40:1: checksum: CRC32C mismatch" in refused.err
    assert "--accept-damage" in refused.err
    assert not plan.exists() and world.digest() == before
    accepted = run(capsys, *args, "--accept-damage")
    assert accepted.code == 1, accepted.err
    saved = json.loads(plan.read_text())
    (record,) = [r for r in saved["repairs"] if r.get("repair") == "migrate-index"]
    assert [d["position"] for d in record["damaged"]] == ["40:1"]
    assert "CRC32C mismatch" in record["damaged"][0]["problem"]
    assert any("damaged entries are copied as stored" in w for w in saved["warnings"])


# -- seek: never a position that was not read ---------------------------------------------------


def _heads(world: World) -> list[Any]:
    from pulsarctl_py.seek.heads import StoreReader
    from pulsarctl_py.topics import topic_info

    with world.source() as source:
        reader = StoreReader(source)
        return [
            h
            for li in topic_info(source, ORDERS).ledgers
            if li.entries
            for h in reader.stream(li.ledger_id, 0, li.entries - 1)
        ]


def _seek(capsys: Any, world: World, *args: str) -> tuple[int, dict[str, Any], str]:
    res = run(capsys, "seek", ORDERS, "-o", "json", *args, *_flags(world))
    return res.code, res.json() if res.out else {}, res.err


def test_seek_exact_with_a_ledger_missing_from_storage_has_no_answer(capsys, engine, worlds):
    """issue 24: `seek --exact` answered confidently around a ledger missing from storage."""
    t = _heads(worlds[None])[6].timestamp  # 11:1 in the healthy world
    code, doc, err = _seek(capsys, worlds["ledger-missing-storage"], "--time", str(t),
                           "--exact", "--engine", engine.name)  # fmt: skip
    assert code == 1, err
    exact = doc["exact"]
    assert exact["first_at_or_after"] is None and exact["complete"] is False
    assert exact["answer_range"] == {"first": "11:0", "last": "12:0"}
    assert exact["not_read"] == ["ledger 11 (4 entries): not in the given bookie storage"]
    assert any(f.startswith("--exact cannot be answered exactly") for f in doc["findings"])


def test_seek_exact_around_an_unreadable_entry_has_no_answer(capsys, engine, worlds):
    """issue 24: `seek --exact` answered confidently around an unreadable entry."""
    t = _heads(worlds[None])[6].timestamp
    code, doc, err = _seek(capsys, worlds["entry-unreadable"], "--time", str(t), "--exact",
                           "--rule", "kop", "--engine", engine.name)  # fmt: skip
    assert code == 1, err
    assert doc["exact"]["first_at_or_after"] is None
    assert doc["exact"]["answer_range"]["first"] == "11:1"
    assert doc["exact"]["unreadable"] == 1


@pytest.mark.parametrize("rule", ["broker", "kop"])
def test_seek_never_answers_a_position_it_did_not_read(capsys, worlds, rule):
    """issue 24: the answer was an entry that could not be read; now there is none, only
    where it lies and what was not read."""
    t = _heads(worlds[None])[6].timestamp
    code, doc, err = _seek(capsys, worlds["entry-unreadable"], "--time", str(t), "--rule",
                           rule, "--clock-skew", "-1")  # fmt: skip
    assert code == 1, err
    assert doc["position"] is None and doc["ledger_id"] is None and doc["kafka_offset"] is None
    assert any(t.startswith("entry 11:1: ") for t in doc["not_read"])
    assert doc["findings"][0].startswith("cannot be answered exactly: the answer lies between")
    first, last = doc["answer_range"]["first"], doc["answer_range"]["last"]
    assert first <= "11:1" <= last


def test_seek_a_position_in_a_ledger_missing_from_storage(capsys, worlds):
    code, doc, _ = _seek(capsys, worlds["ledger-missing-storage"], "--position", "11:1")
    assert code == 1
    assert doc["position"] is None
    assert doc["findings"] == [
        "entry 11:1 could not be read: ledger 11: not in the given bookie storage"
    ]


@pytest.mark.parametrize("exact", [False, True])
def test_seek_exits_3_when_the_bookie_cannot_be_reached(capsys, worlds, exact):
    """issue 24: seek exited 1 instead of 3 when the bookie could not be reached, and
    printed "answer 10:0" when nothing was read."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    world = worlds[None]
    res = run(capsys, "seek", ORDERS, "--time", "0", "-o", "json", "--metadata-url",
              world.metadata_url, "--bookie-address", f"127.0.0.1:3181=127.0.0.1:{port}",
              "--bookie-timeout", "1", *(["--exact"] if exact else []))  # fmt: skip
    assert res.code == 3, res.err
    assert res.out == "" and res.err.startswith("ledgerctl: error: ") and res.err.count("\n") == 1


# -- inspect over a topic --------------------------------------------------------------------


@pytest.mark.parametrize("depth", ["entry", "messages"])
def test_inspect_of_a_topic_says_what_it_could_not_read(capsys, worlds, depth):
    """The same counts through the head path (--depth entry) and the general path."""
    args = ["inspect", "--topic", ORDERS, "-o", "json", "--depth", depth]
    res = run(capsys, *args, *_flags(worlds["entry-missing"]))
    assert res.code == 1
    summary = res.json()["summary"]
    assert summary["complete"] is False and summary["entries_missing"] == 1
    assert {
        "check": "entry-missing",
        "ledger_id": 10,
        "message": "entry 10:2 is not in storage",
    } in (summary["problems"])
    res = run(capsys, *args, *_flags(worlds["entry-past-last"]))
    assert res.code == 0, res.err  # skipped as no part of the topic: a note
    doc = res.json()
    assert doc["summary"]["entries_past_last"] == 2 and doc["summary"]["complete"] is True
    assert {e["position"] for e in doc["entries"]}.isdisjoint({"10:3", "10:4"})
    assert "note: entry-past-last: entries 10:3..4" in res.err
    res = run(capsys, *args, *_flags(worlds["ledger-missing-storage"]))
    assert res.code == 1 and res.json()["summary"]["complete"] is False
    res = run(capsys, *args, *_flags(worlds[None]))
    assert res.code == 0 and res.json()["summary"]["complete"] is True


@pytest.mark.parametrize("depth", ["entry", "messages"])
def test_inspect_of_a_ledger_reads_no_entry_past_its_last(capsys, worlds, depth, tmp_path):
    """Read as a ledger too (not only as a topic's), what is stored past a closed ledger's
    last entry is no message: skipped and said; one such entry asked for by name is a
    one-line answer saying why, and -o raw still writes its stored bytes."""
    flags = _flags(worlds["entry-past-last"])
    res = run(capsys, "inspect", "10", "-o", "json", "--depth", depth, *flags)
    assert res.code == 0, res.err
    doc = res.json()
    assert [e["position"] for e in doc["entries"]] == ["10:0", "10:1", "10:2"]
    assert doc["summary"]["entries_past_last"] == 2
    assert "note: entry-past-last: entries 10:3..4" in res.err
    res = run(capsys, "inspect", "10:4", "-o", "json", "--depth", depth, *flags)
    assert res.code == 1 and res.out == ""
    assert res.err == (
        "ledgerctl: error: entry 10:4 is stored past ledger 10's last entry 2 (the ledger was "
        "closed while it was being added): no reader gets it; -o raw writes its stored bytes\n"
    )
    if depth != "entry":
        return  # the stored bytes once: -o raw reads no layer
    raw = tmp_path / "entry.bin"
    with raw.open("wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "pulsarctl_py.cli", "inspect", "10:4", "-o", "raw", *flags],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert raw.read_bytes()[:16] == (10).to_bytes(8, "big") + (4).to_bytes(8, "big")


def test_migrate_index_does_not_copy_entries_past_a_closed_ledgers_last_entry(capsys, tmp_path):
    world = _fresh(tmp_path, "entry-past-last-plain")
    res = run(capsys, "migrate", "index", PLAIN, "-o", "json", *_flags(world))
    assert res.code == 0, res.err  # not copied: no part of the topic (a note)
    doc = res.json()
    assert doc["past_last_not_copied"] == ["40:3..3"] and doc["entries"] == 3
    assert "entries 40:3..3 are stored past the closed ledger's last entry" in res.err
