"""Shared helpers for the bookie store tests: the BookKeeper-written oracle data and checks."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders import bookkeeper
from pulsarctl_py.decoders.checksums import DigestType

BK = Path(__file__).resolve().parent.parent / "data" / "bookkeeper"
OFFLINE = BK / "offline"
LIVE = BK / "live-dbledgerstorage"
LIVE_DATA = LIVE / "bookie-data"
LIVE_LEDGERS = LIVE_DATA / "ledgers" / "current"
LIVE_JOURNAL = LIVE_DATA / "journal" / "current"
OFFLINE_LOGS = OFFLINE / "entrylog" / "ledgers" / "current"
OFFLINE_JOURNAL = OFFLINE / "journal" / "journal" / "current" / "1a1fdccd862.txn"
PASSWORD = b"secret"


@functools.cache
def offline_manifest() -> dict[str, Any]:
    return json.loads((OFFLINE / "manifest.json").read_text())


@functools.cache
def live_manifest() -> dict[str, Any]:
    return json.loads((LIVE / "manifest.json").read_text())


def digest_type(name: str) -> DigestType:
    return DigestType.parse(name)


def verified_payload(
    data: bytes, ledger_id: int, entry_id: int, kind: DigestType, password: bytes = PASSWORD
) -> bytes:
    """The payload of a digest-packed entry, after checking ids and the digest."""
    layer, header, payload_at = bookkeeper.parse(data, 0, len(data), kind, password)
    assert (header.ledger_id, header.entry_id) == (ledger_id, entry_id)
    assert layer.check is not None and layer.check.ok is True, layer.check
    return data[payload_at:]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` by relative path (directories listed too)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        out[f"{rel}/"] = ",".join(sorted(dirnames + filenames))
        for name in filenames:
            out[str(rel / name)] = sha256((Path(dirpath) / name).read_bytes())
    return out


def writable_copy(src: Path, dst: Path) -> Path:
    """A scratch copy of a data directory under tmp_path, made writable."""
    shutil.copytree(src, dst)
    for dirpath, _, filenames in os.walk(dst):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(Path(dirpath) / name, 0o644)
    return dst


def stored_entry(log: bytes, offset: int) -> bytes:
    """An entry of a BookKeeper log read the naive way, by its size field."""
    size = struct.unpack_from(">i", log, offset - 4)[0]
    return log[offset : offset + size]
