"""Ledgers a plan wrote before it was applied, and taking them back.

``compact --apply``, ``migrate compacted`` and ``migrate index`` write new ledgers first
and then swap them in with a plan. The plan records each ledger it wrote (:class:`Written`:
its metadata key in BookKeeper's metadata store, the creator token its metadata was created
with, the sha256 of the closed metadata, and for a stopped bookie the files and index keys
it wrote), so that:

* ``apply`` refuses a plan whose ledger is gone or changed (it would reference a ledger
  that is not what was written);
* ``undo`` deletes them after restoring the metadata: the previous state, byte for byte
  (:func:`delete_written`; an open ledger counts as ours only with our creator token).

The records are made while the ledgers are written (:mod:`.writing`), before each step.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import MetadataStore
    from pulsarctl_py.stores.metadata.base import Node


@dataclass(slots=True)
class Written:
    """One ledger a plan wrote: where its metadata is, and how to tell it is ours.

    ``ctoken`` is the creator token its metadata was created with (BookKeeper's
    ``cToken``: random, so an open ledger carrying it is ours); ``sha256`` the closed
    metadata value, recorded just before the close (None: the command stopped before).
    """

    ledger_id: int
    path: str  # the metadata key in BookKeeper's metadata store
    ctoken: int | None = None
    sha256: str | None = None
    files: dict[str, Any] | None = None  # a stopped bookie's files (OfflineFiles)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ledger_id": self.ledger_id,
            "metadata_key": self.path,
            "state": "written" if self.sha256 is not None else "being written",
            "ctoken": self.ctoken,
            "metadata_sha256": self.sha256,
        }
        if self.files is not None:
            out["bookie_files"] = self.files
        return out

    @classmethod
    def from_json(cls, obj: Any) -> Written:
        from pulsarctl_py.stores.metadata.base import validate_path

        if not isinstance(obj, dict):
            raise LedgerctlError("plan: a written ledger is not a JSON object")
        ledger_id, path = obj.get("ledger_id"), obj.get("metadata_key")
        sha, ctoken = obj.get("metadata_sha256"), obj.get("ctoken")
        if isinstance(ledger_id, bool) or not isinstance(ledger_id, int) or ledger_id < 0:
            raise LedgerctlError("plan: a written ledger has no ledger id")
        if not isinstance(path, str) or _id_of(path) != ledger_id:
            raise LedgerctlError(f"plan: written ledger {ledger_id} has no metadata key of its own")
        validate_path(path)
        if sha is not None and not (isinstance(sha, str) and len(sha) == 64):
            raise LedgerctlError(f"plan: written ledger {ledger_id} has a damaged sha256")
        if ctoken is not None and (isinstance(ctoken, bool) or not isinstance(ctoken, int)):
            raise LedgerctlError(f"plan: written ledger {ledger_id} has a damaged ctoken")
        files = obj.get("bookie_files")
        if files is not None and not isinstance(files, dict):
            raise LedgerctlError(f"plan: written ledger {ledger_id} has damaged bookie files")
        return cls(ledger_id, path, ctoken, sha, files)


def _id_of(path: str) -> int | None:
    """The ledger id a ledger znode path spells (any layout: the digits of its trailing
    segments, the last one starting with L)."""
    segments = path.split("/")
    if not segments[-1].startswith("L") or not segments[-1][1:].isdigit():
        return None
    digits = segments[-1][1:]
    for seg in reversed(segments[:-1]):
        if not seg.isdigit():
            break
        digits = seg + digits
    return int(digits)


def _place(store: MetadataStore) -> Any:
    return store.bookkeeper()


def check_written(written: list[Written], store: MetadataStore) -> None:
    """Every ledger the plan wrote still holds what it wrote (else MetadataConflict)."""
    from pulsarctl_py.stores.metadata.base import MetadataConflict

    if not written:
        return
    place = _place(store)
    for w in written:
        if w.sha256 is None:
            raise MetadataConflict(
                w.path,
                f"ledger {w.ledger_id} was still being written when this plan was saved "
                "(the command stopped): `ledgerctl undo` the plan, then make a new one",
            )
        node = place.store.get(w.path)
        if node is None:
            raise MetadataConflict(
                w.path,
                f"ledger {w.ledger_id}, which this plan wrote, no longer exists; nothing was "
                "written: make a new plan",
            )
        if hashlib.sha256(node.data).hexdigest() != w.sha256:
            raise MetadataConflict(
                w.path,
                f"ledger {w.ledger_id}, which this plan wrote, changed since; nothing was "
                "written: make a new plan",
            )


def delete_written(written: list[Written], store: MetadataStore) -> list[dict[str, Any]]:
    """Delete the ledgers a plan wrote (:func:`~pulsarctl_py.stores.ledger_writer
    .delete_ledger`): metadata still as written (or, for one being written when the
    command stopped, still open), and a stopped bookie's files (while it is stopped).
    Returns what was done, per ledger; a ledger changed by someone else is left alone."""
    from pulsarctl_py.stores.bookie.newledger import OfflineFiles, check_bookie_free
    from pulsarctl_py.stores.ledger_writer import LEFT, delete_ledger

    from .leases import forget_ledger

    out: list[dict[str, Any]] = []
    place = _place(store)
    for w in reversed(written):
        forget_ledger(store, w.ledger_id)  # the plan no longer keeps it, whatever follows

        def ours(node: Node, w: Written = w) -> bool:
            return (
                w.sha256 is not None and hashlib.sha256(node.data).hexdigest() == w.sha256
            ) or _open_with(node.data, w.ledger_id, w.ctoken)

        files = OfflineFiles.from_json(w.files) if w.files is not None else None

        def stopped(files: OfflineFiles | None = files) -> None:
            if files is not None:
                check_bookie_free(
                    [Path(files.current)], store, "removing the files ledgerctl wrote into it"
                )

        action = delete_ledger(place, w.path, ours, files, before=stopped)
        if action == LEFT:
            out.append(
                {
                    "key": w.path,
                    "action": "left",
                    "reason": f"ledger {w.ledger_id} is not as this plan wrote it",
                    "ledger_id": w.ledger_id,
                }
            )
            continue
        if files is not None:
            action += ", bookie files removed"
        out.append({"key": w.path, "action": action, "ledger_id": w.ledger_id})
    return out


def _open_with(data: bytes, ledger_id: int, ctoken: int | None) -> bool:
    """Whether the metadata is an open ledger created with ``ctoken`` (ours)."""
    from pulsarctl_py.decoders import ledger_metadata as lm

    if ctoken is None:
        return False
    try:
        md = lm.parse(data, ledger_id)
    except LedgerctlError:
        return False
    return md.state is lm.LedgerState.OPEN and md.ctoken == ctoken


def validate_written(w: Written, binding: Any) -> None:
    """A written ledger of a loaded plan: its key a ledger's (not under the managed-ledger
    root), and a stopped bookie's files inside a ledger directory the plan is bound to (so
    that its identity is checked before anything there is removed)."""
    import os

    from pulsarctl_py.decoders.managed_ledger import ML_ROOT

    if w.path.startswith(ML_ROOT + "/") or w.path == ML_ROOT:
        raise LedgerctlError(f"plan: written ledger {w.ledger_id}'s key is not a ledger's")
    if w.files is None:
        return
    from pulsarctl_py.stores.bookie.newledger import OfflineFiles

    files = OfflineFiles.from_json(w.files)
    if files.ledger_id != w.ledger_id:
        raise LedgerctlError(f"plan: the files of written ledger {w.ledger_id} name another")
    current = files.current
    if current not in binding.bookie_dirs:
        raise LedgerctlError(
            f"plan: written ledger {w.ledger_id}'s files are in {current}, a directory the "
            "plan is not bound to"
        )
    named = [files.log, files.idx, files.last_id[0] if files.last_id else None]
    for path in (p for p in named if p is not None):
        inside = os.path.dirname(path) == current or (
            files.idx == path and path.startswith(current + "/")
        )
        if os.path.normpath(path) != path or not inside:
            raise LedgerctlError(
                f"plan: written ledger {w.ledger_id} names a file outside {current}: {path}"
            )
