"""Where the new ledgers of ``compact --apply`` and ``migrate`` are written.

* **The running bookies** (the default, when no bookie directory is given): the ledger
  writer of :mod:`pulsarctl_py.stores.live.writer`, with the cluster's quorums, digest and
  password (:mod:`pulsarctl_py.writesettings`), its metadata in BookKeeper's metadata
  store (``--bookkeeper-metadata-url``, ``bookkeeperMetadataServiceUri``).
* **One stopped bookie's directories** (``--bookie-dir``, for standalone clusters and
  disaster recovery): :mod:`pulsarctl_py.stores.bookie.newledger` places the ledger in
  the directory the bookie reads it from. One bookie holds it, so its ensemble and quorums
  are 1; the digest and password are the cluster's all the same, and so is its bookie
  isolation: a bookie the ledger's isolation groups keep out is refused.

Both create the metadata (OPEN) before the first entry is written and close it last, as
BookKeeper's client does, so that a crash leaves an open ledger that nothing references,
which :meth:`LedgerTarget.delete` (a plan's undo, a re-run) removes; any failure it sees
removes what it wrote before the error is raised.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.stores.bookie.newledger import OfflineFiles
    from pulsarctl_py.stores.live.client import ClientOptions
    from pulsarctl_py.stores.live.writer import Journal, LedgerConfig
    from pulsarctl_py.stores.metadata import MetadataStore


@dataclass(slots=True)
class NewLedger:
    """A ledger ledgerctl wrote: where its metadata is and what it holds."""

    ledger_id: int
    entries: int
    length: int
    ensemble: list[str]
    path: str
    version: int
    metadata: str  # BookKeeper's metadata place, for messages
    where: str  # "running bookies" or the stopped bookie's directory
    config: str  # quorums, digest, whether a password is set
    files: OfflineFiles | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ledger_id": self.ledger_id,
            "entries": self.entries,
            "length": self.length,
            "ensemble": list(self.ensemble),
            "metadata_path": self.path,
            "written_to": self.where,
            "settings": self.config,
        }
        if self.files is not None:
            out["bookie_files"] = self.files.to_json()
        return out


class LedgerTarget:
    """The running bookies of ``store``'s cluster, or a stopped bookie's directories.

    ``store`` is Pulsar's metadata store, open for writing; BookKeeper's metadata is
    where it says (:meth:`MetadataStore.bookkeeper`).
    """

    def __init__(
        self,
        store: MetadataStore,
        *,
        bookie_dirs: list[str] | None = None,
        options: ClientOptions | None = None,
        doing: str = "writing a ledger into its storage",
    ) -> None:
        self.store = store
        self.place = store.bookkeeper()
        self.options = options
        self.dirs = [str(d) for d in bookie_dirs or []]
        self.current: list[Path] = []
        self.kind = ""
        self.bookie_id: str | None = None
        if self.dirs:
            from pulsarctl_py.stores.bookie.layout import discover
            from pulsarctl_py.stores.bookie.newledger import (
                check_bookie_free,
                cookie_bookie_id,
                index_kind,
            )

            self.current = list(discover(self.dirs).ledger_dirs)
            if not self.current:
                raise LedgerctlError(f"no ledger directory under {', '.join(self.dirs)}")
            self.kind = index_kind(self.current)
            check_bookie_free(self.current, store, doing)
            self.bookie_id = next(
                (b for b in map(cookie_bookie_id, self.current) if b is not None), None
            )

    @property
    def offline(self) -> bool:
        return bool(self.dirs)

    def describe(self) -> str:
        if self.offline:
            return f"the stopped bookie {self.bookie_id or '?'} ({', '.join(self.dirs)})"
        return f"the running bookies registered in {self.place.url}"

    def effective(self, config: LedgerConfig) -> LedgerConfig:
        """The config a ledger gets here: quorums of 1 in one stopped bookie."""
        if not self.offline:
            return config
        from pulsarctl_py.stores.live.writer import LedgerConfig

        return LedgerConfig(
            1,
            1,
            1,
            config.digest,
            config.password,
            dict(config.custom_metadata),
            config.placement,
        )

    def write(
        self,
        config: LedgerConfig,
        payloads: Iterable[bytes | memoryview],
        *,
        journal: Journal | None = None,
        fallback_bookie: str | None = None,
    ) -> NewLedger:
        """Create, fill and close one ledger; on failure nothing of it is left. The
        ``journal`` is told about each step before it is taken."""
        config = self.effective(config)
        if journal is not None:
            journal.attach(self.store)
        if self.offline:
            return self._write_offline(config, payloads, journal, fallback_bookie)
        from pulsarctl_py.stores.live.writer import LedgerWriter

        with LedgerWriter(
            self.place, config, self.options, journal=journal, pulsar=self.store
        ) as writer:
            writer.create()
            writer.add_all(payloads)
            done = writer.close()
        return NewLedger(
            done.ledger_id,
            done.entries,
            done.length,
            done.ensemble,
            done.path,
            done.version,
            self.place.url,
            "running bookies",
            config.describe(),
            notes=list(writer.notes),
        )

    def _write_offline(
        self,
        config: LedgerConfig,
        payloads: Iterable[bytes | memoryview],
        journal: Journal | None,
        fallback_bookie: str | None,
    ) -> NewLedger:
        from pulsarctl_py.stores.bookie.newledger import plan_files, target_dir, write_files
        from pulsarctl_py.stores.live.writer import (
            close_metadata,
            create_metadata,
            delete_metadata,
        )

        bookie_id = self.bookie_id or fallback_bookie
        if bookie_id is None:
            raise LedgerctlError(
                "the bookie directories carry no cookie (current/VERSION) naming the bookie: "
                "the ledger's ensemble cannot be told"
            )
        self._check_placement(config, bookie_id)
        ledger_id, path, version, md = create_metadata(self.place, config, [bookie_id], journal)
        files = None
        try:
            current = target_dir(self.current, self.kind, ledger_id)
            files = plan_files(current, self.kind, ledger_id)
            if journal is not None:
                journal.files(ledger_id, files)
            count, length = write_files(files, payloads, config.digest, config.password)
            version = close_metadata(self.place, path, version, md, count - 1, length, journal)
        except BaseException:
            if files is not None:
                files.undo()
            delete_metadata(self.place, path, version)
            raise
        return NewLedger(
            ledger_id,
            count,
            length,
            [bookie_id],
            path,
            version,
            self.place.url,
            str(current.parent if current.name == "current" else current),
            config.describe(),
            files,
        )

    def _check_placement(self, config: LedgerConfig, bookie_id: str) -> None:
        """Refuse a stopped bookie the ledger's placement does not allow: the broker would
        not place the ledger there (counted as if the bookie were running)."""
        if not config.placement.isolated:
            return
        from pulsarctl_py.stores.live.placement import read_racks
        from pulsarctl_py.stores.live.writer import writable_bookies

        known = {*writable_bookies(self.place), bookie_id}
        left, _ = config.placement.candidates(known, config.ensemble, read_racks(self.store))
        if bookie_id not in left:
            raise LedgerctlError(
                f"the stopped bookie {bookie_id} is not among the bookies "
                f"{config.placement.describe()} allows ({', '.join(left) or 'none'}): the "
                "broker would not place this ledger there; write it to the running bookies, "
                "or into the directories of a bookie of the group"
            )

    def delete(self, ledger: NewLedger) -> bool:
        """Remove a ledger this target wrote: its metadata (if unchanged since), and in a
        stopped bookie the files and index keys. Whether the metadata was deleted."""
        from pulsarctl_py.stores.live.writer import delete_metadata

        if ledger.files is not None:
            ledger.files.undo()
        return delete_metadata(self.place, ledger.path, ledger.version)
