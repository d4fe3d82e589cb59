"""Write a computed compaction where the topic lives, as Pulsar's compactor would.

Order (nothing half-written: every step before the last is undone when a later one fails):

1. refuse while a live broker owns the topic's namespace bundle
   (:mod:`pulsarctl_py.ownership`; ``force`` overrides) and when the ``__compaction``
   cursor is no longer what the compaction was computed from (its version read before
   the compute);
2. write the compacted ledger (:class:`pulsarctl_py.plans.writing.LedgerTarget`): to the running
   bookies with the broker's quorums (``managedLedgerDefault*``), CRC32 and the empty
   password, as ``AbstractTwoPhaseCompactor.createLedger`` creates it, or into one stopped
   bookie's directories; its metadata, created OPEN then closed, lives in BookKeeper's
   metadata store and carries the compactor's custom metadata (``application``,
   ``component``, ``pulsar/compactedTopic``, ``pulsar/compactedTo``). A compaction that
   deletes every key writes an empty ledger, as the broker does;
3. set the ``__compaction`` cursor (mark-delete = horizon, property
   ``CompactedTopicLedger``) with compare-and-set on the version read before the
   compaction started. A stale version fails it: nothing is committed, and the ledger of
   step 2 is deleted.

The previous compacted ledger (and a cursor ledger the new cursor state replaces) is listed
for deletion; it is deleted (its metadata) only when asked.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import LedgerctlError

# the offline bookie side moved to stores.bookie.newledger; these names stay importable here
from pulsarctl_py.stores.bookie.newledger import (  # noqa: F401
    BookieInUse,
    check_bookie_free,
    writable_rocksdb,
)

from .core import CompactedEntry

if TYPE_CHECKING:
    from pulsarctl_py.stores.ledger_writer import NewLedger
    from pulsarctl_py.stores.live.client import ClientOptions
    from pulsarctl_py.writesettings import WriteSettings

COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
PASSWORD = b""


@dataclass(slots=True)
class ApplyResult:
    ledger: NewLedger
    ledger_path: str
    cursor_path: str
    to_delete: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ledger_id(self) -> int:
        return self.ledger.ledger_id

    @property
    def entries(self) -> int:
        return self.ledger.entries

    @property
    def length(self) -> int:
        return self.ledger.length


# -- metadata ------------------------------------------------------------------------------


def compacted_to_bytes(compacted_to: tuple[int, int], partition: int) -> bytes:
    """``pulsar/compactedTo`` as the compactor stores it: ``MessageIdImpl.toByteArray``
    of phase one's last id (ledger, entry, the partition when there is one, and
    ``batch_size`` 0, which it always writes; checked on a broker's compacted ledger)."""
    from pulsarctl_py.proto import pulsar_api_pb2 as api

    msg = api.MessageIdData(ledgerId=compacted_to[0] % 2**64, entryId=compacted_to[1] % 2**64)
    if partition >= 0:
        msg.partition = partition
    msg.batch_size = 0
    return msg.SerializeToString()


def compacted_custom_metadata(
    topic: str, compacted_to: tuple[int, int], partition: int
) -> dict[str, bytes]:
    """The custom metadata of a compacted ledger (``LedgerMetadataUtils
    .buildMetadataForCompactedLedger``), in the order a broker's compacted ledger stores
    it (the iteration order of the Java HashMap it is built in)."""
    return {
        lm.COMPONENT_KEY: b"compacted-ledger",
        lm.PULSAR_KEYS["compacted_topic"][0]: topic.encode("utf-8"),
        lm.APPLICATION_KEY: b"pulsar",
        lm.PULSAR_KEYS["compacted_to"][0]: compacted_to_bytes(compacted_to, partition),
    }


def cursor_value(old: Any, horizon: tuple[int, int], ledger_id: int) -> bytes:
    """The ``__compaction`` cursor as a broker leaves it after a clean close, committed."""
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

    info = mlpb.ManagedCursorInfo()
    encoding: Any = mld.InfoEncoding.BINARY
    compression = None
    if old is not None and old.info is not None:
        info.CopyFrom(old.info.message)
        encoding, compression = old.info.encoding, old.info.compression
        if encoding in (mld.InfoEncoding.EMPTY, mld.InfoEncoding.TEXT):
            encoding = mld.InfoEncoding.BINARY
    info.cursorsLedgerId = -1  # state in the znode: the broker recovers the position from here
    info.markDeleteLedgerId, info.markDeleteEntryId = horizon
    del info.individualDeletedMessages[:]
    del info.batchedEntryDeletionIndexInfo[:]
    del info.properties[:]
    info.properties.add(name=COMPACTED_LEDGER_PROPERTY, value=ledger_id)
    info.lastActive = int(time.time() * 1000)
    return mld.build_info(info, encoding, compression)


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


def compaction_settings(settings: WriteSettings | None) -> WriteSettings:
    """The write settings of the command (flags, broker.conf, Pulsar's defaults)."""
    if settings is not None:
        return settings
    from pulsarctl_py.writesettings import resolve_write_settings

    return resolve_write_settings()


def apply_compaction(
    *,
    metadata_url: str,
    bookie_dirs: list[str],
    topic: str,
    entries: Iterable[CompactedEntry],
    horizon: tuple[int, int],
    compacted_to: tuple[int, int],
    cursor_version: int | None,
    previous: int | None,
    previous_cursor_ledger: int | None,
    data_ledgers: list[int],
    partition: int,
    delete_old: bool = False,
    commit_cursor: bool = True,
    settings: WriteSettings | None = None,
    options: ClientOptions | None = None,
    force: bool = False,
    journal: Any = None,
) -> ApplyResult:
    """Write the compacted ledger and commit the cursor (see the module docstring).

    ``bookie_dirs`` empty: the running bookies. ``commit_cursor=False``: write the ledger
    only; the cursor is left to a plan (``migrate compacted``), so the new ledger is
    unreferenced until then. The ``journal`` (:class:`pulsarctl_py.stores.ledger_writer
    .Journal`) is told about each step of the writing before it is taken.
    """
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.ownership import check_not_owned
    from pulsarctl_py.plans.writing import LedgerTarget
    from pulsarctl_py.stores.metadata import (
        MetadataConflict,
        open_metadata_store,
        read_cursor,
        read_ledger,
        resolve_topic,
    )

    name = resolve_topic(topic)
    fallback = None
    if bookie_dirs:
        with LedgerSource.open(metadata_url, bookie_dirs, need_metadata=True) as ro:
            fallback = bookie_id_for(ro, data_ledgers)
    config = compaction_settings(settings).compacted_config(
        compacted_custom_metadata(name.full_name, compacted_to, partition)
    )
    store = open_metadata_store(metadata_url, read_only=False)
    try:
        warnings = check_not_owned(store, [name], force=force)
        cursor_znode = mld.url_encode(mld.COMPACTION_CURSOR)
        cursor_path = f"{name.ml_path}/{cursor_znode}"
        cursor = read_cursor(store, name.ml_path, cursor_znode)
        now_version = None if cursor is None else cursor.stat.version
        if now_version != cursor_version:
            raise MetadataConflict(
                cursor_path,
                f"the __compaction cursor changed since the compaction was computed "
                f"(version {cursor_version} then, {now_version} now); nothing was written",
            )
        target = LedgerTarget(
            store,
            bookie_dirs=bookie_dirs,
            options=options,
            doing="writing a compacted ledger into its storage",
        )
        ledger = target.write(
            config,
            (e.data for e in entries),
            journal=journal,
            fallback_bookie=fallback,
        )
        try:
            if commit_cursor:
                # the owner may have come back while the ledger was written
                warnings += check_not_owned(store, [name], force=force)
                value = cursor_value(cursor, horizon, ledger.ledger_id)
                txn = store.transaction()
                if cursor is None:
                    txn.create(cursor_path, value)
                else:
                    txn.set(cursor_path, value, cursor.stat.version)
                txn.commit()
        except BaseException:
            target.delete(ledger)
            raise
        result = ApplyResult(ledger, ledger.path, cursor_path, warnings=warnings)
        if commit_cursor:
            result.to_delete = [
                lid for lid in (previous, previous_cursor_ledger) if lid is not None
            ]
        if delete_old:
            for lid in result.to_delete:
                record = read_ledger(store, lid)
                if record is not None and record.stat is not None:
                    target.place.store.delete(record.path, record.stat.version)
                    result.deleted.append(lid)
        return result
    finally:
        store.close()
