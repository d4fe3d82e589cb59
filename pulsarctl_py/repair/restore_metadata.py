"""``repair ledger-meta --restore``: put a ledger's metadata back from a dump, byte for byte."""

from __future__ import annotations

from typing import Any

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.plans import Draft

from .recreate import ledger_place

#: the largest ledger metadata file --restore reads: ZooKeeper's default jute.maxbuffer
#: (1 MiB) bounds what a znode can hold
MAX_LEDGER_METADATA_FILE = 1 << 20


def restore_ledger_metadata(draft: Draft, ledger_id: int, path: Any) -> None:
    """Put a ledger's metadata back from a file ``ledger meta --dump`` (or ``bookkeeper
    shell ledgermetadata -dumptofile``) wrote: the bytes as they are, at the ledger's
    znode (created where BookKeeper's layout puts it when it has none), after checking
    that they parse as ledger metadata (BookKeeper's ``LedgerMetadataSerDe``)."""
    from pathlib import Path

    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.infile import read_small
    from pulsarctl_py.stores.metadata import read_ledger

    file = Path(path)
    # bounded and never blocking: a FIFO nobody writes to, a device, a directory or a
    # file the OS refuses is one line (exit 2, or 3 for permission denied)
    data = read_small(file, MAX_LEDGER_METADATA_FILE, "ledger metadata file")
    if len(data) > MAX_LEDGER_METADATA_FILE:
        raise LedgerctlError(
            f"{file} is larger than ledger metadata can be ({MAX_LEDGER_METADATA_FILE} bytes, "
            "ZooKeeper's jute.maxbuffer)"
        )
    try:
        md = lm.parse(data, ledger_id)
    except LedgerctlError as exc:
        raise LedgerctlError(f"{file} is not BookKeeper ledger metadata: {exc}") from None
    root = draft.ledgers_root()
    record = read_ledger(draft.store, ledger_id, root)
    if record is not None:
        key = record.path
        action = "unchanged" if record.raw == data else "replace"
    else:
        key = ledger_place(draft, ledger_id)
        action = "create"
    why = {
        "create": f"restore ledger {ledger_id}'s metadata from {file} (it has none)",
        "replace": f"replace ledger {ledger_id}'s metadata with {file}'s",
        "unchanged": f"ledger {ledger_id}'s metadata already is {file}'s",
    }[action]
    draft.set(key, "ledger", data, why)
    draft.repairs.append(
        {
            "repair": "ledger-meta",
            "ledger_id": ledger_id,
            "file": str(file),
            "action": action,
            "state": md.state.name,
            "last_entry_id": md.last_entry_id,
            "length": md.length,
            "ensembles": {str(k): list(v) for k, v in sorted(md.ensembles.items())},
        }
    )
    if record is not None and record.metadata is not None and action == "replace":
        old = record.metadata
        if old.is_closed and (not md.is_closed or md.last_entry_id < old.last_entry_id):
            draft.warnings.append(
                f"ledger {ledger_id} is closed at entry {old.last_entry_id}; the file's "
                f"metadata is {md.state.name} at {md.last_entry_id}: readers would lose entries"
            )
