"""Where an offloaded ledger's data is: its managed ledger's ``LedgerInfo.offloadContext``.

An offloaded ledger whose BookKeeper copy was deleted (``bookkeeperDeleted``) has no ledger
metadata left in BookKeeper; its managed ledger's ``LedgerInfo`` is enough to read it
(``ManagedLedgerImpl.getLedgerHandle`` opens it through the offloader with the context's
uid and driver metadata). The context's driver metadata says where the data is
(``FileSystemManagedLedgerOffloader``: ``storageBasePath``; the jcloud drivers: bucket,
region, endpoint); ``--offload-url`` / ``LEDGERCTL_OFFLOAD_URL`` overrides it for a copy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.errors import DataError, LedgerctlError, NotFoundError

from .filesystem import MapFileLedger, ledger_directory, local_path, offload_uuid

OFFLOAD_URL_ENV = "LEDGERCTL_OFFLOAD_URL"
FILESYSTEM_DRIVERS = ("filesystem",)


@dataclass(frozen=True, slots=True)
class TieredLedger:
    """One ledger's offload, as its managed ledger records it."""

    ledger_id: int
    managed_ledger: str  # persistence name: tenant/ns/persistent/topic
    entries: int
    size: int
    uid: str
    complete: bool
    bookkeeper_deleted: bool
    driver: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def last_entry_id(self) -> int:
        return self.entries - 1

    def to_json(self) -> dict[str, Any]:
        return {
            "managed_ledger": self.managed_ledger,
            "uid": self.uid,
            "complete": self.complete,
            "bookkeeper_deleted": self.bookkeeper_deleted,
            "driver": self.driver,
            "driver_metadata": dict(self.properties),
            "entries": self.entries,
            "size": self.size,
        }


def offloaded_ledgers(store: Any) -> dict[int, TieredLedger]:
    """Every ledger with an offload context, in every managed ledger of ``store`` (one
    pass over the managed ledgers)."""
    from pulsarctl_py.stores.metadata.managed_ledgers import decode_ml_info, iter_managed_ledgers

    found: dict[int, TieredLedger] = {}
    for folder in iter_managed_ledgers(store):
        for ref in folder:
            node = store.get(ref.path)
            if node is None:
                continue
            info, _error = decode_ml_info(node.data)
            if info is None:
                continue
            for li in info.message.ledgerInfo:
                if li.HasField("offloadContext") and li.offloadContext.HasField("uidMsb"):
                    found[li.ledgerId] = from_ledger_info(ref.name, li)
    return found


def from_ledger_info(managed_ledger: str, li: Any) -> TieredLedger:
    ctx = li.offloadContext
    return TieredLedger(
        ledger_id=li.ledgerId,
        managed_ledger=managed_ledger,
        entries=li.entries,
        size=li.size,
        uid=offload_uuid(ctx.uidMsb, ctx.uidLsb),
        complete=ctx.complete,
        bookkeeper_deleted=ctx.bookkeeperDeleted,
        driver=ctx.driverMetadata.name,
        properties={p.key: p.value for p in ctx.driverMetadata.properties},
    )


def resolve_offload_url(flag: str | None) -> str | None:
    """``--offload-url``, else ``LEDGERCTL_OFFLOAD_URL``, else None (the context's)."""
    return flag or os.environ.get(OFFLOAD_URL_ENV) or None


def open_tiered(loc: TieredLedger, offload_url: str | None = None) -> MapFileLedger:
    """A reader of the ledger's offloaded data; one line when it cannot be read here."""
    if not loc.complete:
        raise DataError(
            f"ledger {loc.ledger_id}: its offload (uid {loc.uid}) never completed (an "
            "interrupted offload: no complete flag in its offloadContext)"
            + ("; its BookKeeper copy is gone" if loc.bookkeeper_deleted else "")
        )
    if loc.driver.lower() not in FILESYSTEM_DRIVERS:
        bucket = loc.properties.get("bucket")
        where = f" (bucket {bucket})" if bucket else ""
        raise LedgerctlError(
            f"ledger {loc.ledger_id} is offloaded with the {loc.driver} driver{where}: only "
            "the filesystem offloader's data is read so far"
        )
    base = offload_url or loc.properties.get("storageBasePath")
    if not base:
        raise DataError(
            f"ledger {loc.ledger_id}: its offloadContext names no storageBasePath; pass "
            "--offload-url file:///dir"
        )
    directory = ledger_directory(local_path(base), loc.managed_ledger, loc.ledger_id, loc.uid)
    try:
        return MapFileLedger(directory, loc.ledger_id)
    except NotFoundError as exc:
        if not loc.bookkeeper_deleted:
            raise
        raise NotFoundError(
            f"{exc.one_line()}; its BookKeeper copy was deleted after the offload "
            "(bookkeeperDeleted): the ledger's data is gone unless a copy exists "
            "(--offload-url file:///copy)"
        ) from None
