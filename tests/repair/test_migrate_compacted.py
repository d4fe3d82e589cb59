"""`migrate compacted TOPIC --format` on the demo data (RocksDB metadata, DbLedgerStorage).

The demo topic `batched` is compacted with `compact --apply --format pip-429`; the
migration rewrites the compacted ledger with placeholders (classic) and back, each time
through a plan: the retained messages stay the same, `compact --status --deep` finds
nothing wrong, undo restores the cursor exactly, and a locked bookie is refused.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.repair.test_repairs import snapshot
from tests.support.cli_helpers import run
from tests.support.demo_world import demo_flags, holding_lock, make_demo

TOPIC = "batched"


@pytest.fixture()
def demo(tmp_path: Path) -> Path:
    return make_demo(tmp_path)


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "LOG" not in p.name and not p.name.endswith(".json")
    }


def _ledger(capsys, root: Path, ledger: int) -> tuple[list, list]:
    """(kept messages as (id, key, value), the batch layers) of a compacted ledger."""
    r = run(capsys, "inspect", str(ledger), "-o", "json", *demo_flags(root))
    assert r.code == 0, r.err
    entries = r.json()["entries"]
    assert all(e["ok"] for e in entries)
    messages = [(m["message_id"], m["key"], m["value"]) for e in entries for m in e["messages"]]
    batches = [
        (layer["fields"], next(x for x in e["layers"] if x["layer"] == "message-metadata"))
        for e in entries
        for layer in e["layers"]
        if layer["layer"] == "batch"
    ]
    return messages, batches


def _status(capsys, root: Path, generation: str = "pre-pip-429") -> dict:
    """The compaction's status, as a broker of ``generation`` answers GetLastMessageId (a
    PIP-429 compacted ledger only for a broker that knows field 31)."""
    r = run(
        capsys,
        "compact",
        TOPIC,
        "--status",
        "--deep",
        "--as-broker",
        generation,
        "-o",
        "json",
        *demo_flags(root),
    )
    assert r.code == 0, r.err
    return r.json()


def test_migrate_between_formats_plan_apply_undo(demo: Path, capsys, tmp_path: Path) -> None:
    r = run(
        capsys,
        "compact",
        TOPIC,
        "--apply",
        "--plan",
        tmp_path / "c.json",
        "--format",
        "pip-429",
        "-o",
        "json",
        *demo_flags(demo),
    )
    assert r.code == 0, r.err
    first = r.json()["compacted_ledger"]
    kept, batches = _ledger(capsys, demo, first)
    assert batches and all(md["fields"].get("compacted_batch_indexes") for _, md in batches)

    # a dry run reads only
    before = _files(demo)
    r = run(capsys, "migrate", "compacted", TOPIC, "--format", "classic", *demo_flags(demo))
    assert r.code == 0, r.err
    assert r.json()["compacted_ledger"] == first and r.json()["batches"].get("pip-429")
    assert _files(demo) == before

    plan = tmp_path / "classic.json"
    r = run(
        capsys,
        "migrate",
        "compacted",
        TOPIC,
        "--format",
        "classic",
        "--plan",
        plan,
        "-o",
        "json",
        *demo_flags(demo),
    )
    assert r.code == 0, r.err
    migration = r.json()["repairs"][0]
    second = migration["migration"]["written_ledger"]
    assert migration["to_ledger"] == second and migration["from_ledger"] == first
    assert _status(capsys, demo, "pip-429")["compacted_ledger"] == first  # not applied yet
    r = run(capsys, "apply", plan)
    assert r.code == 0, r.err
    st = _status(capsys, demo)
    assert st["compacted_ledger"] == second and st["checks"] == []
    messages, batches = _ledger(capsys, demo, second)
    assert messages == kept
    assert batches and all(
        fields.get("compacted_out") and not md["fields"].get("compacted_batch_indexes")
        for fields, md in batches
    )

    # and back to PIP-429, applied at once
    plan2 = tmp_path / "pip429.json"
    r = run(
        capsys,
        "migrate",
        "compacted",
        TOPIC,
        "--format",
        "pip-429",
        "--plan",
        plan2,
        "--apply",
        "-o",
        "json",
        *demo_flags(demo),
    )
    assert r.code == 0, r.err
    third = _status(capsys, demo, "pip-429")["compacted_ledger"]
    assert third not in (first, second)
    messages, batches = _ledger(capsys, demo, third)
    assert messages == kept
    assert all(md["fields"].get("compacted_batch_indexes") for _, md in batches)

    # undo both: the cursor points to the first ledger again; the new ledgers are deleted
    # (their metadata and the files written into the stopped bookie), not left as orphans
    assert run(capsys, "undo", plan2).code == 0
    assert run(capsys, "undo", plan).code == 0
    assert _status(capsys, demo, "pip-429")["compacted_ledger"] == first
    r = run(capsys, "orphans", "--min-age", "0", "-o", "json", *demo_flags(demo))
    assert not {second, third} & {o["ledger_id"] for o in r.json()["orphans"]}
    for gone in (second, third):
        shown = run(capsys, "ledger", "meta", str(gone), "-o", "json", *demo_flags(demo))
        assert shown.code != 0 or shown.json().get("metadata") is None


def test_migrate_refuses_a_locked_bookie_and_a_topic_without_compaction(
    demo: Path, capsys, tmp_path: Path
) -> None:
    r = run(capsys, "migrate", "compacted", TOPIC, "--format", "classic", *demo_flags(demo))
    assert r.code == 1 and "no compacted ledger" in r.err
    plan = tmp_path / "c.json"
    assert run(capsys, "compact", TOPIC, "--apply", "--plan", plan, *demo_flags(demo)).code == 0
    lock = next((demo / "bookkeeper").rglob("locations/LOCK"))
    with holding_lock(lock):
        before = _files(demo / "bookkeeper"), snapshot(f"rocksdb://{demo / 'metadata'}")
        r = run(
            capsys,
            "migrate",
            "compacted",
            TOPIC,
            "--format",
            "pip-429",
            "--plan",
            demo / "p.json",
            *demo_flags(demo),
        )
        assert r.code == 3 and "holds its lock" in r.err, r.err
        assert "Traceback" not in r.err
        assert (_files(demo / "bookkeeper"), snapshot(f"rocksdb://{demo / 'metadata'}")) == before
