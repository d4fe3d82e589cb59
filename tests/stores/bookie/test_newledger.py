"""Where the offline writer puts a new ledger in a stopped bookie with several ledger
directories, and that it takes back exactly what it wrote (the restarted sandbox bookie
reads such ledgers in tests/cluster/sandbox/test_writes.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.stores.bookie.newledger import (
    ledger_dirs_in_order,
    sign_safe_mod,
    target_dir,
)


def _java_sign_safe_mod(dividend: int, divisor: int) -> int:
    # MathUtils.signSafeMod: Java's %, which truncates toward zero, then + divisor if < 0
    mod = abs(dividend) % divisor * (1 if dividend >= 0 else -1)
    return mod + divisor if mod < 0 else mod


@given(st.integers(-(2**63), 2**63 - 1), st.integers(1, 64))
def test_sign_safe_mod_is_bookkeepers(dividend: int, divisor: int) -> None:
    assert sign_safe_mod(dividend, divisor) == _java_sign_safe_mod(dividend, divisor)


COOKIE = (
    "5\n"
    'bookieHost: "10.0.0.7:3181"\n'
    'journalDir: "/data/journal"\n'
    'ledgerDirs: "3\\t{0}/l0\\t{0}/l1\\t{0}/l2"\n'
    'instanceId: "abc"\n'
)


def _bookie(root: Path, base: Path | None = None) -> list[Path]:
    dirs = []
    for name in ("l0", "l1", "l2"):
        current = root / name / "current"
        current.mkdir(parents=True)
        (current / "VERSION").write_text(COOKIE.format(base or root))
        dirs.append(current)
    return dirs


def test_the_cookie_orders_the_directories_and_signsafemod_picks_one(tmp_path) -> None:
    dirs = _bookie(tmp_path)
    shuffled = [dirs[2], dirs[0], dirs[1]]
    assert ledger_dirs_in_order(shuffled) == dirs
    for ledger_id in range(12):
        assert target_dir(shuffled, "db", ledger_id) == dirs[ledger_id % 3]


def test_moved_directories_match_by_their_names(tmp_path) -> None:
    dirs = _bookie(tmp_path / "copy", base=Path("/var/lib/bookkeeper"))
    assert ledger_dirs_in_order(list(reversed(dirs))) == dirs


def test_a_missing_directory_is_refused(tmp_path) -> None:
    dirs = _bookie(tmp_path)
    with pytest.raises(LedgerctlError, match="give every ledger directory"):
        ledger_dirs_in_order(dirs[:2])


def test_several_directories_without_a_cookie_are_refused(tmp_path) -> None:
    dirs = _bookie(tmp_path)
    for d in dirs:
        (d / "VERSION").unlink()
    with pytest.raises(LedgerctlError, match="no cookie"):
        ledger_dirs_in_order(dirs)
    assert ledger_dirs_in_order(dirs[:1]) == dirs[:1]


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("LOG")
    }


def test_written_files_are_taken_back_exactly(tmp_path) -> None:
    """A new entry log, lastId and index keys; undo leaves the directory as it was."""
    from pulsarctl_py.stores.bookie import open_bookie
    from pulsarctl_py.stores.bookie.newledger import OfflineFiles, plan_files, write_files
    from pulsarctl_py.stores.bookie.writers import write_db_ledger_dir

    current = tmp_path / "ledgers" / "current"
    write_db_ledger_dir(current, [], b"\0" * 20)
    # RocksDB rewrites its own files (OPTIONS, MANIFEST) when opened: compare the data
    before = {k: v for k, v in _tree(current).items() if "/" not in k}
    files = plan_files(current, "db", 77)
    count, length = write_files(files, [b"a" * 10, b"b" * 20], DigestType.CRC32C, b"pw")
    assert (count, length) == (2, 30)
    with open_bookie([current]) as bookie:
        assert [e.entry_id for e in bookie.read_entries(77)] == [0, 1]
    restored = OfflineFiles.from_json(files.to_json())
    restored.undo()
    assert {k: v for k, v in _tree(current).items() if "/" not in k} == before
    with open_bookie([current]) as bookie:
        assert list(bookie.read_entries(77)) == []


def test_an_entry_over_the_frame_limit_is_not_packed() -> None:
    from pulsarctl_py.decoders import limits
    from pulsarctl_py.stores.bookie.newledger import pack_entries

    before = limits.max_message_size()
    limits.set_max_message_size(1024)
    try:
        cap = limits.max_frame()
        packed = list(pack_entries(7, [b"a" * (cap - 100)], DigestType.CRC32C, b""))
        assert len(packed[0][1]) <= cap  # read back by entrylog.check_entry_size
        with pytest.raises(LedgerctlError, match="over the limit"):
            list(pack_entries(7, [b"a" * 10, b"b" * cap], DigestType.CRC32C, b""))
    finally:
        limits.set_max_message_size(before)
