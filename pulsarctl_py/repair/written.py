"""Ledgers a plan wrote before it was applied, and taking them back.

``compact --apply``, ``migrate compacted`` and ``migrate index`` write new ledgers first
and then swap them in with a plan. The plan records each ledger it wrote (:class:`Written`:
its metadata key in BookKeeper's metadata store, the creator token its metadata was created
with, the sha256 of the closed metadata, and for a stopped bookie the files and index keys
it wrote), so that:

* ``apply`` refuses a plan whose ledger is gone or changed (it would reference a ledger
  that is not what was written);
* ``undo`` deletes them after restoring the metadata: the previous state, byte for byte.

The plan file is saved before every step (:class:`PlanJournal`): before a ledger's metadata
is created (its id and creator token), before a stopped bookie's files are written (which
they will be), before the ledger is closed (the closed value's sha256); so a crash at any
point leaves a plan file whose ``undo`` removes whatever was created, and only that (an
open ledger counts as ours only with our creator token).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import MetadataStore


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


class PlanJournal:
    """A :class:`~pulsarctl_py.stores.live.writer.Journal` that records every step in a
    plan and saves it (``save``) before the step is taken; with a ``lease``
    (:class:`pulsarctl_py.leases.Lease`) each ledger is also named in the run's lease and
    recorded with the plan's path, before its metadata is created."""

    def __init__(
        self,
        written: list[Written],
        save: Any,
        after_step: Any = None,
        *,
        lease: Any = None,
        plan_path: Path | None = None,
    ) -> None:
        self.written = written
        self.save = save
        self.after_step = after_step or (lambda _: None)
        self.lease = lease
        self.plan_path = plan_path
        #: the writable metadata store the writer holds (:meth:`attach`)
        self.store: MetadataStore | None = None

    def attach(self, store: MetadataStore) -> None:
        self.store = store

    def _current(self, ledger_id: int) -> Written:
        for w in reversed(self.written):
            if w.ledger_id == ledger_id:
                return w
        raise LedgerctlError(f"ledger {ledger_id} was never announced")

    def creating(self, ledger_id: int, path: str, ctoken: int) -> None:
        if self.written and self.written[-1].sha256 is None and self.written[-1].files is None:
            # the previous attempt found its id taken (someone else's ledger): not ours
            taken = self.written.pop()
            if self.lease is not None:
                self.lease.drop(taken.ledger_id, self.store)
        self.written.append(Written(ledger_id, path, ctoken))
        self.save()
        if self.lease is not None:
            assert self.plan_path is not None
            self.lease.hold(ledger_id, self.plan_path, self.store)
        self.after_step("creating")

    def files(self, ledger_id: int, files: Any) -> None:
        self._current(ledger_id).files = files.to_json()
        self.save()
        self.after_step("files")

    def closing(self, ledger_id: int, closed: bytes) -> None:
        self._current(ledger_id).sha256 = hashlib.sha256(closed).hexdigest()
        self.save()
        self.after_step("closing")


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
    """Delete the ledgers a plan wrote: metadata still as written (or, for one being
    written when the command stopped, still open), and a stopped bookie's files. Returns
    what was done, per ledger; a ledger changed by someone else is left alone."""
    from pulsarctl_py.leases import forget_ledger
    from pulsarctl_py.stores.bookie.newledger import OfflineFiles, check_bookie_free

    out: list[dict[str, Any]] = []
    place = _place(store)
    for w in reversed(written):
        forget_ledger(store, w.ledger_id)  # the plan no longer keeps it, whatever follows
        node = place.store.get(w.path)
        action = "absent"
        if node is not None:
            ours = (
                w.sha256 is not None and hashlib.sha256(node.data).hexdigest() == w.sha256
            ) or _open_with(node.data, w.ledger_id, w.ctoken)
            if not ours:
                out.append(
                    {
                        "key": w.path,
                        "action": "left",
                        "reason": f"ledger {w.ledger_id} is not as this plan wrote it",
                        "ledger_id": w.ledger_id,
                    }
                )
                continue
            place.store.delete(w.path, node.stat.version)
            action = "deleted"
        if w.files is not None:
            files = OfflineFiles.from_json(w.files)
            check_bookie_free(
                [Path(files.current)], store, "removing the files ledgerctl wrote into it"
            )
            files.undo()
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


class PlanFile:
    """A plan file while a command writes ledgers: a plan naming them saved before each
    step of the writing (through ``out``, prepared before the work, the first time; then
    replacing that earlier plan of ours), so that a run cut short leaves a plan whose
    ``ledgerctl undo`` deletes what it wrote; :meth:`final` is the output the complete plan
    goes to. ``dirs``: the stopped bookie's directories written into (none: running
    bookies); the plan is bound to them and to the metadata store of ``url``."""

    def __init__(
        self, out: Any, url: str, topic: str, dirs: list[str], what: str, *, lease: Any = None
    ) -> None:
        from pulsarctl_py.stores.bookie.layout import discover
        from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic

        from .binding import Binding
        from .plan import Plan

        self.out = out
        self.used = False
        #: what was done with the ledgers of the earlier plan this one replaces, for people
        self.reclaimed = reclaim_plan_path(out, url, lease)
        current = [d.resolve() for d in discover(dirs).ledger_dirs] if dirs else []
        with open_metadata_store(url) as store:
            self.binding = Binding.of(store, current)
        self.pending = Plan(
            metadata_url=self.binding.metadata_url,
            topics=[resolve_topic(topic).full_name],
            binding=self.binding,
        )
        self.pending.warnings.append(
            f"the command stopped while it wrote {what}: `ledgerctl undo` this plan to "
            "delete what it wrote"
        )
        self.journal = PlanJournal(
            self.pending.written, self._save, lease=lease, plan_path=self.path
        )

    @property
    def path(self) -> Path:
        return Path(self.out.path)

    def _next(self) -> Any:
        from pulsarctl_py import outputs

        if not self.used:
            self.used = True
            return self.out
        return outputs.prepare(self.out.path, outputs.PLAN)

    def _save(self) -> None:
        self.pending.write(self._next())

    def final(self) -> Any:
        """The output the complete plan is written to."""
        return self._next()

    def discard(self) -> None:
        """Nothing was saved yet: drop the prepared output."""
        if not self.used:
            self.out.discard()


def reclaim_plan_path(out: Any, metadata_url: str, lease: Any = None) -> list[str]:
    """Before a plan is saved over an earlier one of ours (``out`` replaces it; one that
    was applied and not undone is refused when ``out`` is prepared): the earlier plan was
    never applied (a run that stopped, or one made for review), so the ledgers it wrote
    are deleted (as ``undo`` deletes them: only while they are as it wrote them, or still
    open with its creator token), unless a live run still holds one in its lease. Shared
    by every command that writes ledgers under a plan (``compact``, ``migrate``). Returns
    what was done, for people."""
    from pulsarctl_py.leases import Holds
    from pulsarctl_py.stores.metadata import open_metadata_store

    from .plan import Plan

    if out.stream or not out.replaces_existing:
        return []
    try:
        old = Plan.load(Path(out.path))
    except LedgerctlError:
        return []
    if not old.written:
        return []
    lines = []
    with open_metadata_store(metadata_url, read_only=False) as store:
        holds = Holds(store)
        mine = lease.info.name if lease is not None else None
        free = []
        for w in old.written:
            held = holds.lease_of(w.ledger_id)
            if held is not None and held.name != mine:
                lines.append(
                    f"{out.path}: the ledger {w.ledger_id} its earlier run wrote: left, "
                    f"being written by {held.describe()}"
                )
            else:
                free.append(w)
        done = delete_written(free, store)
    for d in done:
        if "ledger_id" in d:
            lines.append(
                f"{out.path}: the ledger {d['ledger_id']} its earlier run wrote: {d['action']}"
            )
        else:
            lines.append(f"{out.path}: {d['key']}: left ({d['reason']})")
    return lines
