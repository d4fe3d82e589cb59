"""read_entries reads ahead in entry logs: same bytes and same errors as one read per entry."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from pulsarctl_py.decoders import bookkeeper, entrylog
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.errors import CorruptEntryError
from pulsarctl_py.stores.bookie import (
    EntryLogWriter,
    ledger_data,
    open_bookie,
    write_db_index,
    write_db_ledger_dir,
)
from pulsarctl_py.stores.bookie import store as store_module

KEY = b"k" * 20


def _entry(ledger_id: int, entry_id: int, size: int) -> bytes:
    payload = random.Random(f"{ledger_id}-{entry_id}").randbytes(size)
    header = BookieEntryHeader(ledger_id, entry_id, entry_id - 1, size)
    return bookkeeper.build(header, payload, DigestType.CRC32C)


def _interleaved() -> list[bytes]:
    """Two ledgers taking turns; mostly small entries, some larger than the read-ahead."""
    rng = random.Random(5)
    out = []
    for entry_id in range(120):
        for ledger_id in (1, 2):
            size = rng.choice((20, 90, 300, 1500)) if entry_id % 17 else 9000
            out.append(_entry(ledger_id, entry_id, size))
    return out


def _plain(store: object, ledger_id: int) -> list[bytes]:
    return [
        store.read_at_location(ledger_id, entry_id, location)  # type: ignore[attr-defined]
        for entry_id, location in store.iter_locations(ledger_id)  # type: ignore[attr-defined]
    ]


@pytest.fixture
def small_read_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4 KiB read-ahead: chunks end inside entries, some entries exceed a chunk."""
    monkeypatch.setattr(store_module, "READ_AHEAD", 4096)


@pytest.mark.parametrize("read_ahead", ["default", "small"])
def test_interleaved_ledgers_over_several_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_ahead: str
) -> None:
    if read_ahead == "small":
        monkeypatch.setattr(store_module, "READ_AHEAD", 4096)
    entries = _interleaved()
    summary = write_db_ledger_dir(tmp_path / "current", entries, KEY, log_size_limit=96 * 1024)
    assert len(summary.log_ids) > 2
    with open_bookie(tmp_path / "current") as store:
        for ledger_id in (1, 2):
            expected = [e for e in entries if int.from_bytes(e[:8], "big") == ledger_id]
            got = [e.data for e in store.read_entries(ledger_id)]
            assert got == expected == _plain(store, ledger_id)
            assert [e.data for e in store.read_entries(ledger_id, 30, 70)] == expected[30:71]


def test_descending_offsets_are_read_exactly(tmp_path: Path, small_read_ahead: None) -> None:
    """Entries written newest first: every location is behind the last one read."""
    current = tmp_path / "current"
    current.mkdir()
    entries = [_entry(3, entry_id, 50 + entry_id * 7) for entry_id in range(60)]
    with EntryLogWriter(current / "0.log") as writer:
        for entry in reversed(entries):
            writer.add(entry)
    write_db_index(
        current,
        {3: ledger_data(KEY)},
        ((3, eid, loc) for (_, eid), loc in sorted(writer.locations.items())),
    )
    with open_bookie(current) as store:
        assert [e.data for e in store.read_entries(3)] == entries


def _error(fn: object) -> str:
    with pytest.raises(CorruptEntryError) as caught:
        fn()  # type: ignore[operator]
    return str(caught.value)


def _written(tmp_path: Path) -> tuple[Path, list[bytes], dict[tuple[int, int], int]]:
    entries = [_entry(4, entry_id, 200) for entry_id in range(50)]
    summary = write_db_ledger_dir(tmp_path / "current", entries, KEY)
    return tmp_path / "current", entries, summary.locations


@pytest.mark.parametrize("damage", ["truncated", "wrong-id", "bad-size", "missing-log"])
def test_damage_raises_what_a_single_read_raises(
    tmp_path: Path, small_read_ahead: None, damage: str
) -> None:
    current, entries, locations = _written(tmp_path)
    log = current / entrylog.log_file_name(0)
    offset = locations[(4, 30)] & 0xFFFFFFFF
    if damage == "truncated":
        os.truncate(log, offset + 100)
    elif damage == "missing-log":
        log.unlink()
    else:
        with open(log, "r+b") as f:
            if damage == "wrong-id":
                f.seek(offset + 8)
                f.write((99).to_bytes(8, "big"))
            else:
                f.seek(offset - 4)
                f.write((3).to_bytes(4, "big"))
    bad = 0 if damage == "missing-log" else 30
    with open_bookie(current) as store:
        seen = []

        def scan() -> None:
            for e in store.read_entries(4):
                seen.append(e.data)

        assert _error(scan) == _error(lambda: store.read_entry(4, bad))
        assert seen == entries[:bad]
        assert [e.data for e in store.read_entries(4, 0, bad - 1)] == entries[:bad]


def test_entries_spread_over_more_logs_than_held_open(
    tmp_path: Path, small_read_ahead: None
) -> None:
    """Entry i in log i % 11: more logs than a pass keeps open, every read switches log."""
    current = tmp_path / "current"
    current.mkdir()
    entries = [_entry(5, entry_id, 64 + entry_id) for entry_id in range(99)]
    writers = [EntryLogWriter(current / entrylog.log_file_name(i)) for i in range(11)]
    for entry_id, entry in enumerate(entries):
        writers[entry_id % 11].add(entry)
    locations = {}
    for writer in writers:
        writer.close()
        locations.update(writer.locations)
    write_db_index(
        current, {5: ledger_data(KEY)}, ((5, e, loc) for (_, e), loc in sorted(locations.items()))
    )
    with open_bookie(current) as store:
        assert [e.data for e in store.read_entries(5)] == entries
        assert [e.data for e in store.read_entries(5, 40, 60)] == entries[40:61]


@pytest.mark.parametrize("damage", ["truncated", "wrong-id"])
def test_damage_met_by_an_exact_read(tmp_path: Path, small_read_ahead: None, damage: str) -> None:
    """Descending offsets (no read-ahead): the damaged entry raises the single-read error."""
    current = tmp_path / "current"
    current.mkdir()
    entries = [_entry(6, entry_id, 100) for entry_id in range(20)]
    with EntryLogWriter(current / "0.log") as writer:
        for entry in reversed(entries):
            writer.add(entry)
    write_db_index(
        current,
        {6: ledger_data(KEY)},
        ((6, e, loc) for (_, e), loc in sorted(writer.locations.items())),
    )
    offset = writer.locations[(6, 0)] & 0xFFFFFFFF  # entry 0 is last in the file
    if damage == "truncated":
        os.truncate(current / "0.log", offset + 50)
    else:
        with open(current / "0.log", "r+b") as f:
            f.seek(offset + 8)
            f.write((77).to_bytes(8, "big"))
    with open_bookie(current) as store:
        assert _error(lambda: list(store.read_entries(6))) == _error(lambda: store.read_entry(6, 0))
        assert [e.data for e in store.read_entries(6, 1)] == entries[1:]
