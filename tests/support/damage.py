"""Ways to damage a copy of the demo data, as a failing disk, an operator or a crash would.

Each damage takes the root of a demo directory (made by ``ledgerctl demo``) and changes
it in place; :data:`DAMAGES` names them all. ``PERMISSION`` damages only matter to a user
who is not root (they ``chmod 000`` a file or directory); the others change bytes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

from pulsarctl_py.decoders import entrylog, journal

Damage = Callable[[Path], None]


def current(root: Path) -> Path:
    return root / "bookkeeper" / "current"


def entry_logs(root: Path) -> list[Path]:
    return sorted(current(root).glob("*.log"), key=lambda p: int(p.stem, 16))


def journal_file(root: Path) -> Path:
    (found,) = current(root).glob("*.txn")
    return found


def _sst(directory: Path) -> Path:
    return max(directory.glob("*.sst"), key=lambda p: p.stat().st_size)


def _flip(path: Path, offsets: list[int]) -> None:
    raw = bytearray(path.read_bytes())
    for offset in offsets:
        raw[offset] ^= 0x5A
    path.write_bytes(bytes(raw))


def _flip_middle(path: Path, count: int) -> None:
    size = path.stat().st_size
    # RocksDB data blocks start the file; the footer and index are at its end
    start = min(size // 3, 200)
    _flip(path, [start + 7 * i for i in range(count)])


def _garbage_dir(directory: Path) -> None:
    shutil.rmtree(directory)
    directory.mkdir()
    (directory / "CURRENT").write_text("MANIFEST-000042\n")
    (directory / "MANIFEST-000042").write_bytes(b"\x17garbage, not a manifest" * 10)
    (directory / "000042.sst").write_bytes(b"\xff" * 4096)


# -- permissions (only a user who is not root is refused) ----------------------------------


def deny_entry_log(root: Path) -> None:
    entry_logs(root)[0].chmod(0)


def deny_all_entry_logs(root: Path) -> None:
    for path in entry_logs(root):
        path.chmod(0)


def deny_index_dirs(root: Path) -> None:
    for name in ("locations", "ledgers"):
        (current(root) / name).chmod(0)


def deny_metadata_dir(root: Path) -> None:
    (root / "metadata").chmod(0)


def deny_journal(root: Path) -> None:
    journal_file(root).chmod(0)


def deny_current_dir(root: Path) -> None:
    current(root).chmod(0)


# -- bytes -------------------------------------------------------------------------------------


def corrupt_metadata_block(root: Path) -> None:
    """Bytes flipped inside a data block of the metadata store's table file."""
    _flip_middle(_sst(root / "metadata"), 5)


def flip_locations_bytes(root: Path) -> None:
    """5 bytes flipped in the ``locations`` index table (a bad sector)."""
    _flip_middle(_sst(current(root) / "locations"), 5)


def delete_locations(root: Path) -> None:
    shutil.rmtree(current(root) / "locations")


def delete_ledgers_index(root: Path) -> None:
    shutil.rmtree(current(root) / "ledgers")


def delete_both_indexes(root: Path) -> None:
    delete_locations(root)
    delete_ledgers_index(root)


def garbage_locations(root: Path) -> None:
    _garbage_dir(current(root) / "locations")


def garbage_ledgers_index(root: Path) -> None:
    _garbage_dir(current(root) / "ledgers")


def huge_ledgers_map(root: Path) -> None:
    """The first entry log's ledgers map claims 1 TB for its first ledger."""
    path = entry_logs(root)[0]
    raw = bytearray(path.read_bytes())
    header = entrylog.parse_header(raw)
    assert header.has_ledgers_map, "the demo's first entry log has a ledgers map"
    at = header.ledgers_map_offset + entrylog.LEDGERS_MAP_HEAD.size
    ledger_id, _ = entrylog.LEDGERS_MAP_PAIR.unpack_from(raw, at)
    entrylog.LEDGERS_MAP_PAIR.pack_into(raw, at, ledger_id, 10**12)
    path.write_bytes(bytes(raw))


def cut_entry_log(root: Path) -> None:
    """The first entry log cut to 100 bytes (a file system that lost its blocks)."""
    os.truncate(entry_logs(root)[0], 100)


def cut_journal_below_mark(root: Path) -> None:
    """The journal cut well below the offset its ``lastMark`` points at."""
    path = journal_file(root)
    mark_id, mark_offset = journal.parse_last_mark((current(root) / "lastMark").read_bytes())
    assert mark_id == int(path.stem, 16) and mark_offset > 8192
    os.truncate(path, mark_offset // 2)


def zero_entry_log_header(root: Path) -> None:
    path = entry_logs(root)[0]
    raw = bytearray(path.read_bytes())
    raw[: entrylog.HEADER.size] = bytes(entrylog.HEADER.size)
    path.write_bytes(bytes(raw))


def garbage_last_mark(root: Path) -> None:
    (current(root) / "lastMark").write_bytes(struct.pack(">q", -5))


PERMISSION: dict[str, Damage] = {
    "deny-entry-log": deny_entry_log,
    "deny-all-entry-logs": deny_all_entry_logs,
    "deny-index-dirs": deny_index_dirs,
    "deny-metadata-dir": deny_metadata_dir,
    "deny-journal": deny_journal,
    "deny-current-dir": deny_current_dir,
}

BYTES: dict[str, Damage] = {
    "corrupt-metadata-block": corrupt_metadata_block,
    "flip-locations-bytes": flip_locations_bytes,
    "delete-locations": delete_locations,
    "delete-ledgers-index": delete_ledgers_index,
    "delete-both-indexes": delete_both_indexes,
    "garbage-locations": garbage_locations,
    "garbage-ledgers-index": garbage_ledgers_index,
    "huge-ledgers-map": huge_ledgers_map,
    "cut-entry-log": cut_entry_log,
    "cut-journal-below-mark": cut_journal_below_mark,
    "zero-entry-log-header": zero_entry_log_header,
    "garbage-last-mark": garbage_last_mark,
}

DAMAGES: dict[str, Damage] = {**PERMISSION, **BYTES}


def tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` (readable as root)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out
