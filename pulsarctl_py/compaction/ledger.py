"""The compacted ledger, as Pulsar's compactor writes it.

* its settings (:func:`compacted_config`): the broker's quorums (``managedLedgerDefault*``),
  CRC32 and the empty password, as ``AbstractTwoPhaseCompactor.createLedger`` creates it,
  and the compactor's custom metadata (``application``, ``component``,
  ``pulsar/compactedTopic``, ``pulsar/compactedTo``;
  ``LedgerMetadataUtils.buildMetadataForCompactedLedger``);
* :func:`write_compacted_ledger`: a computed compaction's ledger, written for a plan that
  swaps it in (``migrate compacted``), through the one "write new ledgers" context
  (:class:`pulsarctl_py.plans.writing.LedgerTarget`: the running bookies, or one stopped
  bookie's directories). A compaction that deletes every key writes an empty ledger, as
  the broker does.

Nothing here commits a compaction: the ``__compaction`` cursor is changed by a plan
(:mod:`.cursor`, :mod:`.planned`), applied and undone by :mod:`pulsarctl_py.plans.apply`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import ledger_metadata as lm

from .core import CompactedEntry

if TYPE_CHECKING:
    from pulsarctl_py.stores.ledger_writer import LedgerConfig, NewLedger
    from pulsarctl_py.stores.live.client import ClientOptions
    from pulsarctl_py.writesettings import WriteSettings


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


def compaction_settings(settings: WriteSettings | None) -> WriteSettings:
    """The write settings of the command (flags, broker.conf, Pulsar's defaults)."""
    if settings is not None:
        return settings
    from pulsarctl_py.writesettings import resolve_write_settings

    return resolve_write_settings()


def compacted_config(
    topic: str,
    compacted_to: tuple[int, int],
    partition: int,
    settings: WriteSettings | None = None,
) -> LedgerConfig:
    """How the compacted ledger of ``topic`` is written (see the module docstring)."""
    return compaction_settings(settings).compacted_config(
        compacted_custom_metadata(topic, compacted_to, partition)
    )


def write_compacted_ledger(
    *,
    metadata_url: str,
    bookie_dirs: list[str],
    topic: str,
    entries: Iterable[CompactedEntry],
    compacted_to: tuple[int, int],
    cursor_version: int | None,
    data_ledgers: list[int],
    partition: int,
    settings: WriteSettings | None = None,
    options: ClientOptions | None = None,
    force: bool = False,
    journal: Any = None,
) -> NewLedger:
    """Write a computed compaction's ledger, which a plan then swaps in (nothing
    references it until then). Refused, with nothing written, while a live broker has the
    topic loaded (:mod:`pulsarctl_py.livewrite`; with --unload the apply unloads it) or
    cannot be asked (``force`` overrides), and when the ``__compaction`` cursor is no
    longer at ``cursor_version``, the version the compaction was computed from (with
    --unload: the broker's unload rewrites the cursor, and the plan's apply judges that
    change by what it means, :func:`pulsarctl_py.livewrite.rebase`).

    ``bookie_dirs`` empty: the running bookies. The ``journal``
    (:class:`pulsarctl_py.stores.ledger_writer.Journal`) is told about each step of the
    writing before it is taken; a failure takes back what was written.
    """
    from pulsarctl_py import livewrite
    from pulsarctl_py.plans.writing import LedgerTarget
    from pulsarctl_py.stores.metadata import MetadataConflict, read_cursor, resolve_topic

    from .cursor import compaction_cursor_path

    name = resolve_topic(topic)
    config = compacted_config(name.full_name, compacted_to, partition, settings)
    with LedgerTarget.opened(
        metadata_url,
        bookie_dirs,
        options=options,
        doing="writing a compacted ledger into its storage",
        journal=journal,
        topic_ledgers=data_ledgers,
    ) as target:
        store = target.store
        unload = livewrite.current().unload
        if not unload:  # with --unload the apply unloads it (an unload now rewrites it)
            livewrite.prepare(store, [name], force=force)
        cursor_path = compaction_cursor_path(name.ml_path)
        cursor = read_cursor(store, name.ml_path, cursor_path.rsplit("/", 1)[1])
        now_version = None if cursor is None else cursor.stat.version
        if now_version != cursor_version and not (unload and cursor_version is not None):
            raise MetadataConflict(
                cursor_path,
                f"the __compaction cursor changed since the compaction was computed "
                f"(version {cursor_version} then, {now_version} now); nothing was written",
            )
        return target.write(config, (e.data for e in entries))
