"""Writing new ledgers under a plan: the plan file saved before every step.

``compact --apply/--plan``, ``migrate compacted`` and ``migrate index`` write new ledgers
first and then swap them in with a plan. While they write, the plan file is saved before
every step (:class:`PlanJournal`, through :class:`PlanFile`): before a ledger's metadata is
created (its id and creator token), before a stopped bookie's files are written (which
they will be), before the ledger is closed (the closed value's sha256); so a crash at any
point leaves a plan file whose ``undo`` removes whatever was created, and only that (an
open ledger counts as ours only with our creator token; :mod:`.written`). A plan saved
over an earlier one of ours first gives back the ledgers that one wrote
(:func:`reclaim_plan_path`). The ledgers themselves are written through one context,
:class:`LedgerTarget` (open the writer, write, delete what was written when the command
fails, the plan's journal told before every step).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.stores.ledger_writer import Journal

from .binding import Binding
from .document import Plan
from .leases import Holds
from .written import Written, delete_written

if TYPE_CHECKING:
    from pulsarctl_py.stores.ledger_writer import LedgerConfig, LedgerWriter, NewLedger
    from pulsarctl_py.stores.metadata import MetadataStore


class PlanJournal(Journal):
    """A :class:`~pulsarctl_py.stores.ledger_writer.Journal` that records every step in a
    plan and saves it (``save``) before the step is taken; with a ``lease``
    (:class:`.leases.Lease`) each ledger is also named in the run's lease and
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

    @classmethod
    @contextlib.contextmanager
    def leased(
        cls, out: Any, url: str, topic: str, dirs: list[str], what: str, command: str
    ) -> Iterator[PlanFile]:
        """The plan file of a run that writes ledgers for ``topic``, with the run's lease
        (:class:`.leases.Lease`, held until the block ends: what the run writes is never
        taken for a leftover by another); the prepared output is discarded when the
        block fails before anything was saved."""
        from .leases import Lease

        with Lease(url, command, [topic]) as lease:
            plan_file = cls(out, url, topic, dirs, what, lease=lease)
            try:
                yield plan_file
            except BaseException:
                plan_file.discard()
                raise

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
    from pulsarctl_py.stores.metadata import open_metadata_store

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


# -- the one "write new ledgers" context -------------------------------------------------------


class LedgerTarget:
    """Where a command writes its new ledgers, and what it wrote there: the one context of
    every command that writes ledgers before its plan (``compact``, ``migrate compacted``,
    ``migrate index``).

    It opens the :class:`~pulsarctl_py.stores.ledger_writer.LedgerWriter` the bookie
    directories name: none, the running bookies of ``store``'s cluster
    (:class:`~pulsarctl_py.stores.live.writer.RunningBookiesWriter`, reached with
    ``options``); else the stopped bookie they are
    (:class:`~pulsarctl_py.stores.bookie.newledger.StoppedBookieWriter`, refused while it
    runs; ``doing`` names the write). Each ledger is written with the ``journal`` (a
    :class:`PlanJournal`: the plan file saved before every step, so that ``undo`` removes
    what a run cut short leaves). Used as a ``with`` block it deletes every ledger it
    wrote when the block fails (:meth:`LedgerWriter.delete`, the one deletion), so that
    nothing is left but what the plan file names for ``undo``.

    ``store`` is Pulsar's metadata store, open for writing (:meth:`opened` opens it).
    """

    def __init__(
        self,
        store: MetadataStore,
        *,
        bookie_dirs: list[str] | None = None,
        options: Any = None,
        doing: str = "writing a ledger into its storage",
        journal: Journal | None = None,
        fallback_bookie: str | None = None,
    ) -> None:
        self.store = store
        self.bookie_dirs = [str(d) for d in bookie_dirs or []]
        self.options = options
        self.doing = doing
        self._writer: LedgerWriter | None = None
        self.journal = journal
        self.fallback_bookie = fallback_bookie
        #: the ledgers written so far, in order
        self.written: list[NewLedger] = []

    @classmethod
    @contextlib.contextmanager
    def opened(
        cls,
        metadata_url: str,
        bookie_dirs: list[str],
        *,
        options: Any = None,
        doing: str = "writing a ledger into its storage",
        journal: Journal | None = None,
        topic_ledgers: list[int] | None = None,
    ) -> Iterator[LedgerTarget]:
        """The target of the metadata store at ``metadata_url`` (opened for writing, closed
        after the block) and ``bookie_dirs``; a stopped bookie whose directories carry no
        cookie stands for the first ensemble member of the newest of ``topic_ledgers``
        with metadata (:func:`bookie_id_for`)."""
        from pulsarctl_py.stores.metadata import open_metadata_store

        fallback = None
        if bookie_dirs:
            from pulsarctl_py.ledgers import LedgerSource

            with LedgerSource.open(metadata_url, bookie_dirs, need_metadata=True) as ro:
                fallback = bookie_id_for(ro, topic_ledgers or [])
        store = open_metadata_store(metadata_url, read_only=False)
        try:
            target = cls(
                store,
                bookie_dirs=bookie_dirs,
                options=options,
                doing=doing,
                journal=journal,
                fallback_bookie=fallback,
            )
            with target:
                yield target
        finally:
            store.close()

    @property
    def writer(self) -> LedgerWriter:
        """The home the bookie directories name, opened when first needed (a stopped
        bookie is checked then: :func:`~pulsarctl_py.stores.bookie.newledger
        .check_bookie_free`)."""
        if self._writer is None:
            from pulsarctl_py.stores.bookie.newledger import StoppedBookieWriter
            from pulsarctl_py.stores.live.writer import RunningBookiesWriter

            self._writer = (
                StoppedBookieWriter(self.store, self.bookie_dirs, self.doing)
                if self.bookie_dirs
                else RunningBookiesWriter(self.store, self.options)
            )
        return self._writer

    @property
    def place(self) -> Any:
        """BookKeeper's metadata (:meth:`MetadataStore.bookkeeper`)."""
        return self.store.bookkeeper()

    @property
    def offline(self) -> bool:
        return self.writer.offline

    def describe(self) -> str:
        return self.writer.describe()

    def effective(self, config: LedgerConfig) -> LedgerConfig:
        return self.writer.effective(config)

    def write(
        self,
        config: LedgerConfig,
        payloads: Iterable[bytes | memoryview],
        *,
        journal: Journal | None = None,
        fallback_bookie: str | None = None,
    ) -> NewLedger:
        """Write one ledger (see :meth:`LedgerWriter.write`) and keep it among
        :attr:`written`."""
        ledger = self.writer.write(
            config,
            payloads,
            journal=journal if journal is not None else self.journal,
            fallback_bookie=fallback_bookie or self.fallback_bookie,
        )
        self.written.append(ledger)
        return ledger

    def delete(self, ledger: NewLedger) -> bool:
        """Take back a ledger this target wrote (whether its metadata was deleted)."""
        return self.writer.delete(ledger)

    def __enter__(self) -> LedgerTarget:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            return
        for ledger in reversed(self.written):
            with contextlib.suppress(LedgerctlError):  # the error that stopped it stands
                self.delete(ledger)
        self.written.clear()


def bookie_id_for(source: Any, ledgers: list[int]) -> str | None:
    """A bookie id for a ledger written into bookie directories without a cookie: the
    first ensemble member of the topic's newest ledger with metadata."""
    for ledger_id in reversed(ledgers):
        try:
            md = source.ledger(ledger_id).metadata
        except LedgerctlError:
            continue
        if md is not None and md.ensembles:
            return md.ensembles[min(md.ensembles)][0]
    return None
