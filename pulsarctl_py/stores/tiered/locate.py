"""Where an offloaded ledger's data is: its managed ledger's ``LedgerInfo.offloadContext``.

An offloaded ledger whose BookKeeper copy was deleted (``bookkeeperDeleted``) has no ledger
metadata left in BookKeeper; its managed ledger's ``LedgerInfo`` is enough to read it
(``ManagedLedgerImpl.getLedgerHandle`` opens it through the offloader with the context's
uid and driver metadata). The context's driver metadata says where the data is
(``FileSystemManagedLedgerOffloader``: ``storageBasePath``; the jcloud drivers: bucket,
region, endpoint); ``--offload-url`` / ``LEDGERCTL_OFFLOAD_URL`` overrides it for a copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pulsarctl_py.errors import DataError, LedgerctlError, NotFoundError

from .filesystem import MapFileLedger, TieredEntry, ledger_directory, local_path, offload_uuid

if TYPE_CHECKING:
    from .where import Location

OFFLOAD_URL_ENV = "LEDGERCTL_OFFLOAD_URL"
FILESYSTEM_DRIVERS = ("filesystem",)
#: the jcloud drivers read from an S3 API (``JCloudBlobStoreProvider``: S3, aws-s3)
S3_DRIVERS = ("s3", "aws-s3")
#: where the broker reads a ledger that has both copies
#: (``managedLedgerDataReadPriority``: tiered-storage-first, its default, or bookkeeper-first)
PREFER = ("tiered", "bookkeeper")


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

    def where(self) -> str:
        """Where the offload context says the data is (the filesystem offloader's ledger
        directory, or the S3 drivers' data object), as a URL."""
        if self.driver.lower() in S3_DRIVERS:
            bucket = self.properties.get("bucket", "?")
            return f"s3://{bucket}/{self.uid}-ledger-{self.ledger_id}"
        base = self.properties.get("storageBasePath", "?").rstrip("/")
        return f"{base}/{self.managed_ledger}/{self.ledger_id}-{self.uid}"

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


def managed_ledger_offloads(store: Any, managed_ledger: str) -> dict[int, TieredLedger]:
    """The ledgers with an offload context in one managed ledger (its persistence name)."""
    from pulsarctl_py.stores.metadata.managed_ledgers import read_managed_ledger

    try:
        record = read_managed_ledger(store, managed_ledger, with_cursors=False)
    except LedgerctlError:
        return {}
    if record is None or record.info is None:
        return {}
    return {
        li.ledgerId: from_ledger_info(record.ref.name, li)
        for li in record.info.message.ledgerInfo
        if li.HasField("offloadContext") and li.offloadContext.HasField("uidMsb")
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
    """``--offload-url``, else ``LEDGERCTL_OFFLOAD_URL``, else ``offload_url`` in
    ledgerctl.toml, else None (the context's)."""
    from pulsarctl_py.precedence import resolve

    return resolve("offload_url", flag).value or None


class TieredReader(Protocol):
    """What :class:`~pulsarctl_py.ledgers.LedgerSource` reads an offloaded ledger through,
    whichever offloader wrote it."""

    def metadata(self) -> Any: ...

    def read_entries(
        self, first: int = 0, last: int | None = None, *, keep_going: bool = False
    ) -> Iterator[TieredEntry]: ...

    def close(self) -> None: ...


class JcloudReader:
    """The jcloud reader (:class:`~.jcloud.JcloudLedger`) in the filesystem reader's
    shape: ``metadata()``, and :class:`TieredEntry` items with ``error`` set for the
    entries of a damaged block."""

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger

    def metadata(self) -> Any:
        return self.ledger.metadata

    def read_entries(
        self, first: int = 0, last: int | None = None, *, keep_going: bool = False
    ) -> Iterator[TieredEntry]:
        from .jcloud import OffloadFormatError, UnreadableOffloadedEntry

        for item in self.ledger.read_entries(first, last):
            if isinstance(item, UnreadableOffloadedEntry):
                message = f"ledger {item.ledger_id}: {item.reason}"
                if not keep_going:
                    raise OffloadFormatError(message)
                yield TieredEntry(item.ledger_id, item.entry_id, b"", 0, message)
            else:
                offset = item.location.offset
                yield TieredEntry(item.ledger_id, item.entry_id, item.data, offset)

    @property
    def requests(self) -> int:
        return int(self.ledger.requests)

    def close(self) -> None:
        pass


def open_tiered(
    loc: TieredLedger,
    offload_url: str | None = None,
    s3_endpoint: str | None = None,
    *,
    location: Location | None = None,
) -> TieredReader:
    """A reader of the ledger's offloaded data; one line when it cannot be read here.

    The driver its offload context names chooses the format (the filesystem offloader's
    MapFile, or the jcloud objects of the S3 drivers); ``location`` says where
    (:mod:`.where`: the broker's resolution with ledgerctl's overrides on top); without it,
    the context's, with ``offload_url`` (``file:///dir`` or ``s3://bucket``) and
    ``s3_endpoint`` over it."""
    from .where import Overrides, locate_ledger

    if location is None:
        location = locate_ledger(loc, Overrides(offload_url, s3_endpoint=s3_endpoint))
    if not loc.complete:
        raise DataError(
            f"ledger {loc.ledger_id}: its offload (uid {loc.uid}) never completed (an "
            "interrupted offload: no complete flag in its offloadContext)"
            + ("; its BookKeeper copy is gone" if loc.bookkeeper_deleted else "")
        )
    scheme = offload_url.split("://", 1)[0].lower() if offload_url and "://" in offload_url else ""
    driver = loc.driver.lower()
    if driver in S3_DRIVERS:
        if offload_url and scheme != "s3":
            raise LedgerctlError(
                f"ledger {loc.ledger_id} is offloaded with the {loc.driver} driver: its "
                f"objects are read from s3://bucket, not {offload_url}"
            )
        return _open_s3(loc, location)
    if driver not in FILESYSTEM_DRIVERS:
        bucket = loc.properties.get("bucket")
        where = f" (bucket {bucket})" if bucket else ""
        raise LedgerctlError(
            f"ledger {loc.ledger_id} is offloaded with the {loc.driver} driver{where}: only "
            "the filesystem offloader's and the S3 drivers' data are read so far"
        )
    if offload_url and scheme == "s3":
        raise LedgerctlError(
            f"ledger {loc.ledger_id} is offloaded with the filesystem offloader: its files "
            f"are read from file:///dir, not {offload_url}"
        )
    base = location.root
    if not base:
        raise DataError(
            f"ledger {loc.ledger_id}: neither its offloadContext (storageBasePath) nor the "
            "offload policies or broker configuration name the filesystem offloader's root; "
            "pass --offload-url file:///dir"
        )
    directory = ledger_directory(local_path(base), loc.managed_ledger, loc.ledger_id, loc.uid)
    try:
        return MapFileLedger(directory, loc.ledger_id)
    except NotFoundError as exc:
        raise _gone(loc, exc, "file:///copy") from None


def _gone(loc: TieredLedger, exc: LedgerctlError, copy: str) -> LedgerctlError:
    if not loc.bookkeeper_deleted:
        return exc
    return type(exc)(
        f"{exc.one_line()}; its BookKeeper copy was deleted after the offload "
        "(bookkeeperDeleted): the ledger's data is gone unless a copy exists "
        f"(--offload-url {copy})"
    )


def s3_location(loc: TieredLedger, location: Location) -> Any:
    """The :class:`~.s3.S3Location` of a resolved location (one line without a bucket)."""
    from .s3 import S3Location

    return S3Location.from_driver_metadata(
        loc.driver,
        {"region": location.region or ""},
        endpoint=location.endpoint,
        bucket=location.bucket,
    )


def _open_s3(loc: TieredLedger, location: Location) -> TieredReader:
    """The jcloud objects of an S3-driver offload (``BlobStoreManagedLedgerOffloader``),
    where ``location`` says. The index object is read here, so a missing or unreachable
    object is said at once."""
    from .jcloud import JcloudLedger, OffloadObjectMissing
    from .s3 import S3Objects

    ledger = JcloudLedger(S3Objects(s3_location(loc, location)), loc.ledger_id, loc.uid)
    try:
        ledger.index  # noqa: B018 (HEAD both objects, read the index)
    except OffloadObjectMissing as exc:
        raise _gone(loc, exc, "s3://bucket") from None
    return JcloudReader(ledger)
