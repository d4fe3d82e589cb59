"""A small Pulsar data directory for the verify tests: healthy, or broken one way at a time.

Built with ledgerctl's own writers: the metadata tree (managed ledgers, cursors, BookKeeper
ledger znodes) in Pulsar's RocksDB metadata store (or any writable MetadataStore, e.g. a
real ZooKeeper), and a DbLedgerStorage bookie directory holding the entries.

Topics and ledgers of the healthy world:

* ``public/default/orders``: ledgers 10 (closed, 5 entries), 11 (closed, 4), 12 (open, the
  last, 3 stored entries). Every entry has broker entry metadata (broker_timestamp, index)
  and holds 1-3 messages. Cursors: ``sub`` (znode, 11:2), ``durable-sub`` (state in cursor
  ledger 20, open, whose last PositionInfo says 12:1; znode snapshot 11:0) and
  ``__compaction`` (11:3, ``CompactedTopicLedger`` = 30). Property index = the last index
  of ledger 11 (what the broker wrote when it rolled to 12).
* ledger 30: the compacted ledger of orders (CRC32 digest), compacted up to 11:3.
* ``public/default/orders-shadow``: a shadow topic of orders listing 11 and 12.
* ``tenant-b/ns/plain``: ledgers 40 (closed, 3 entries, no broker entry metadata) and 41
  (open, empty). Cursor ``c`` at 40:2.
* ``tenant-b/ns/parts``: a partitioned topic; partition 0 has ledger 80 (closed, 2
  entries), partition 1 ledger 81 (open, 1 entry).
* ledger 50: a schema ledger (not referenced from /managed-ledgers: not an orphan);
  ledger 60: another application's ledger (no Pulsar tags).

:data:`VARIANTS` maps a variant name to the check ids verify must report for it (and
nothing else).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pulsarctl_py.decoders import bookkeeper, compacted
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, master_key
from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata, LedgerState
from pulsarctl_py.decoders.payload import build_batch
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.ledgers import LedgerSource
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.stores.metadata import MetadataStore

ORDERS = "persistent://public/default/orders"
SHADOW = "persistent://public/default/orders-shadow"
PLAIN = "persistent://tenant-b/ns/plain"
PARTS = "persistent://tenant-b/ns/parts"
OTHER = "persistent://public/default/other"
BOOKIE = "127.0.0.1:3181"
#: a bookie of the cluster whose directories a world never gives
OTHER_BOOKIE = "127.0.0.2:3181"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z

#: variant -> the checks verify must report for it, and nothing else
VARIANTS: dict[str, list[str]] = {
    "ledger-missing-metadata": ["ledger-missing-metadata"],
    "ledger-lost": ["ledger-missing-metadata"],  # no metadata, no entries: no index-gap
    "ledger-metadata-unreadable": ["ledger-metadata-unreadable"],
    "ledger-missing-storage": ["ledger-missing-storage"],
    "entry-missing": ["entry-missing"],
    "storage-not-covered": ["storage-not-covered"],
    "entry-corrupt": ["entry-corrupt"],
    "entry-past-last": ["entry-past-last"],
    "entry-past-last-plain": ["entry-past-last"],
    "checksum-mismatch": ["entry-corrupt"],
    "batch-count-huge": ["entry-undecodable"],
    "batch-payload-size-huge": ["entry-undecodable"],
    "uncompressed-size-wrong": ["entry-undecodable"],
    "entry-unreadable": ["entry-corrupt"],
    "cursor-ledger-corrupt": ["entry-corrupt"],
    "entries-mismatch": ["entries-mismatch"],
    "size-mismatch": ["size-mismatch"],
    "size-mismatch-bk": ["size-mismatch"],
    "size-mismatch-no-bk-metadata": ["ledger-missing-metadata", "size-mismatch"],
    "ledger-wrong-owner": ["ledger-wrong-owner"],
    "ledger-not-closed": ["ledger-not-closed"],
    "ledger-list-unordered": ["ledger-list-unordered"],
    "ledger-list-duplicate": ["ledger-list-duplicate"],
    "ml-unreadable": ["ml-unreadable"],
    "cursor-unreadable": ["cursor-unreadable"],
    "cursor-ledger-missing": ["cursor-ledger-missing"],
    "cursor-beyond-lac": ["cursor-beyond-lac"],
    "cursor-unknown-ledger": ["cursor-unknown-ledger"],
    "cursor-trimmed-ledger": ["cursor-unknown-ledger"],
    "compacted-ledger-missing": ["compacted-ledger-missing"],
    "compacted-ledger-wrong-topic": ["compacted-ledger-wrong-topic"],
    "compacted-ledger-untagged": ["compacted-ledger-wrong-topic"],
    "compacted-horizon-mismatch": ["compacted-horizon-mismatch"],
    "index-gap": ["index-gap"],
    "index-per-entry": ["index-per-entry"],
    "index-gap-txn": ["index-gap"],
    "index-missing": ["index-missing"],
    "index-property-behind": ["index-property-behind"],
    "index-property-invalid": ["index-property-invalid"],
    "timestamp-regression": ["timestamp-regression"],
    "orphan-ledger": ["orphan-ledger"],
    "shadow-source-missing": ["shadow-source-missing"],
    "shadow-ledger-not-in-source": ["shadow-ledger-not-in-source"],
    "shadow-ledger-differs": ["shadow-ledger-differs"],
    "digest-unverified": ["digest-unverified"],
}


#: variants whose entry 11:2 (a batch of 2) was published in a transaction
TXN_VARIANTS = frozenset({"index-per-entry", "index-gap-txn"})

#: the entry the payload damages change: 40:1, a batch of 3 messages of tenant-b/ns/plain
#: (no broker entry metadata, so the index checks do not see a damaged count)
DAMAGED_BATCH = (40, 1)
#: variants whose damaged batch verifies (digest, checksum) and does not decode
PAYLOAD_DAMAGE = frozenset(
    {"batch-count-huge", "batch-payload-size-huge", "uncompressed-size-wrong"}
)


def _damaged_batch(variant: str, md: api.MessageMetadata, records: list) -> tuple[object, bytes]:
    """The batch of ``records`` with ``md``, damaged as ``variant`` says; what the decoders
    reject and a producer never writes, behind a valid checksum and digest."""
    from pulsarctl_py.decoders.codecs import compress

    if variant == "batch-count-huge":
        md.num_messages_in_batch = -(2**31)  # the varint of 2^31, as an int32 reads it
        return md, build_batch(records)
    if variant == "batch-payload-size-huge":
        smm, value = records[1]
        plain = build_batch(records[:1])
        smm.payload_size = 2**31 - 1
        body = smm.SerializeToString()
        plain += len(body).to_bytes(4, "big") + body + value + build_batch(records[2:])
        return md, plain
    plain = build_batch(records)  # uncompressed-size-wrong: LZ4, the size one byte short
    md.compression = api.LZ4
    md.uncompressed_size = len(plain) - 1
    return md, compress(api.LZ4, plain)


@dataclass
class LedgerSpec:
    """One ledger: its metadata and the entries it stores."""

    ledger_id: int
    tags: dict[str, bytes]
    entries: list[bytes] = field(default_factory=list)  # digest-packed
    payload_sizes: list[int] = field(default_factory=list)
    closed: bool = True
    digest: DigestType = DigestType.CRC32C
    with_metadata: bool = True
    stored: bool = True
    metadata_bytes: bytes | None = None  # written instead of the built metadata
    length_delta: int = 0
    #: trailing entries stored past the closed ledger's last entry (not part of it)
    strays: int = 0
    #: its ensemble (write quorum 1): the world's one bookie unless said otherwise
    ensemble: list[str] = field(default_factory=lambda: [BOOKIE])

    @property
    def count(self) -> int:
        """The entries of the ledger (its strays not counted)."""
        return len(self.entries) - self.strays

    @property
    def length(self) -> int:
        return sum(self.payload_sizes[: self.count])

    def metadata(self) -> LedgerMetadata:
        closed = self.closed
        return LedgerMetadata(
            ensemble_size=len(self.ensemble),
            write_quorum_size=1,
            ack_quorum_size=1,
            state=LedgerState.CLOSED if closed else LedgerState.OPEN,
            ensembles={0: list(self.ensemble)},
            last_entry_id=self.count - 1 if closed else -1,
            length=self.length + self.length_delta if closed else 0,
            digest_type=self.digest,
            password=b"",
            ctime=T0,
            custom_metadata=dict(self.tags),
        )


@dataclass
class World:
    """A built data directory: where its stores are, and what it holds."""

    root: Path
    metadata_url: str
    bookie_dir: Path
    variant: str | None
    last_index: dict[int, int] = field(default_factory=dict)  # ledger -> last BEM index

    @contextlib.contextmanager
    def source(self, *, bookie: bool = True) -> Iterator[LedgerSource]:
        """A LedgerSource on the world's stores (no environment or config file consulted)."""
        from pulsarctl_py.stores.bookie import open_bookie
        from pulsarctl_py.stores.metadata import open_metadata_store

        store = open_metadata_store(self.metadata_url)
        try:
            storage = open_bookie([self.bookie_dir]) if bookie else None
            try:
                yield LedgerSource(store, storage)
            finally:
                if storage is not None:
                    storage.close()
        finally:
            store.close()

    def digest(self) -> dict[str, str]:
        """sha256 of every file under the world's root (and the directory listing)."""
        return tree_digest(self.root)


def tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        out[f"{rel}/"] = ",".join(sorted(dirnames + filenames))
        for name in filenames:
            data = (Path(dirpath) / name).read_bytes()
            out[str(rel / name)] = hashlib.sha256(data).hexdigest()
    return out


def _tags(topic: str, *, cursor: str | None = None) -> dict[str, bytes]:
    return lm.pulsar_custom_metadata(mld.TopicName.parse(topic).persistence_name, cursor=cursor)


def _compacted_tags(topic: str, to: tuple[int, int]) -> dict[str, bytes]:
    return {
        "application": b"pulsar",
        "component": b"compacted-ledger",
        "pulsar/compactedTopic": topic.encode(),
        "pulsar/compactedTo": lm.encode_message_id(*to),
    }


class _Builder:
    """Generates the entries of the world in topic order."""

    def __init__(
        self, variant: str | None, entries: dict[tuple[int, int], bytes] | None = None
    ) -> None:
        self.variant = variant
        self.replaced = entries or {}  # Pulsar entries stored instead of generated ones
        self.clock = T0
        self.seq = 0
        self.index = -1
        self.pulsar: dict[tuple[int, int], bytes] = {}  # the Pulsar entry of each position
        self.last_index: dict[int, int] = {}

    def pulsar_entry(self, ledger_id: int, entry_id: int, *, bem: bool) -> bytes:
        count = 1 + (ledger_id + entry_id) % 3
        self.clock += 1000
        broker_ts = self.clock
        if self.variant == "timestamp-regression" and (ledger_id, entry_id) == (11, 1):
            broker_ts -= 10_000
        md = api.MessageMetadata(
            producer_name="verify-world", sequence_id=self.seq, publish_time=self.clock - 5
        )
        # a batch of 2 published in a transaction: the broker's index moves by 1 (counted
        # as one message), or by 1 + 5 (no rule gives that)
        txn = (ledger_id, entry_id) == (11, 2) and self.variant in TXN_VARIANTS
        if txn:
            md.txnid_most_bits, md.txnid_least_bits = 0, 7
        if count == 1:
            md.partition_key = f"key-{self.seq % 4}"
            payload = f"value-{self.seq}".encode()
        else:
            md.num_messages_in_batch = count
            records = []
            for i in range(count):
                smm = api.SingleMessageMetadata(payload_size=0, sequence_id=self.seq + i)
                smm.partition_key = f"key-{(self.seq + i) % 4}"
                records.append((smm, f"value-{self.seq + i}".encode()))
            payload = build_batch(records)
        self.seq += count
        if (ledger_id, entry_id) == DAMAGED_BATCH and self.variant in PAYLOAD_DAMAGE:
            md, payload = _damaged_batch(self.variant, md, records)
        meta = None
        if bem and not (self.variant == "index-missing" and ledger_id == 12):
            self.index += 1 if txn else count
            if self.variant in ("index-gap", "index-gap-txn") and (ledger_id, entry_id) == (11, 2):
                self.index += 5
            meta = api.BrokerEntryMetadata(broker_timestamp=broker_ts, index=self.index)
            self.last_index[ledger_id] = self.index
        data = build_entry(md, payload, checksum=True, broker_entry_metadata=meta)
        data = self.replaced.get((ledger_id, entry_id), data)
        if (ledger_id, entry_id) == DAMAGED_BATCH and self.variant == "checksum-mismatch":
            data = data[:-1] + bytes([data[-1] ^ 0x01])  # under a BookKeeper digest that holds
        self.pulsar[(ledger_id, entry_id)] = data
        return data

    def strays(self, spec: LedgerSpec, count: int, *, bem: bool = True) -> None:
        """``count`` entries stored after the ledger's last one (a writer's adds that were
        never acknowledged before the ledger was closed): the topic's clock, sequence and
        index go on as if they had never been written."""
        state = (self.clock, self.seq, self.index, dict(self.last_index))
        first = len(spec.entries)
        payloads = [self.pulsar_entry(spec.ledger_id, first + i, bem=bem) for i in range(count)]
        self.clock, self.seq, self.index, self.last_index = state
        self.pack(spec, payloads, first, sum(spec.payload_sizes))
        spec.strays = count

    @staticmethod
    def pack(spec: LedgerSpec, payloads: list[bytes], first: int = 0, length: int = 0) -> None:
        for entry_id, payload in enumerate(payloads, first):
            length += len(payload)
            header = BookieEntryHeader(spec.ledger_id, entry_id, entry_id - 1, length)
            spec.entries.append(bookkeeper.build(header, payload, spec.digest, b""))
            spec.payload_sizes.append(len(payload))

    def data_ledger(
        self,
        ledger_id: int,
        topic: str,
        count: int,
        *,
        closed: bool = True,
        bem: bool = True,
        digest: DigestType = DigestType.CRC32C,
    ) -> LedgerSpec:
        spec = LedgerSpec(ledger_id, _tags(topic), closed=closed, digest=digest)
        self.pack(spec, [self.pulsar_entry(ledger_id, e, bem=bem) for e in range(count)])
        return spec


def _ml_info(
    ledgers: list[tuple[LedgerSpec, bool]], properties: dict[str, str]
) -> mlpb.ManagedLedgerInfo:
    """ManagedLedgerInfo: (ledger, recorded) pairs; unrecorded ones as Pulsar creates them."""
    info = mlpb.ManagedLedgerInfo()
    for spec, recorded in ledgers:
        if recorded:
            info.ledgerInfo.add(
                ledgerId=spec.ledger_id,
                entries=spec.count,
                size=spec.length,
                timestamp=T0 + 3_600_000 + spec.ledger_id,
            )
        else:
            info.ledgerInfo.add(ledgerId=spec.ledger_id, timestamp=0)
    for key, value in properties.items():
        info.properties.add(key=key, value=value)
    return info


def _cursor(
    position: tuple[int, int], *, ledger: int = -1, properties: dict[str, int] | None = None
) -> mlpb.ManagedCursorInfo:
    info = mlpb.ManagedCursorInfo(
        cursorsLedgerId=ledger, markDeleteLedgerId=position[0], markDeleteEntryId=position[1]
    )
    for name, value in (properties or {}).items():
        info.properties.add(name=name, value=value)
    return info


def _position_info(position: tuple[int, int]) -> bytes:
    return mld.build_position_info(mlpb.PositionInfo(ledgerId=position[0], entryId=position[1]))


#: the cluster's BookKeeper instance id (``/ledgers/INSTANCEID``, the cookie's)
INSTANCE_ID = "verify-world-instance"
#: ``/ledgers/LAYOUT``: the hierarchical ledger manager, as BookKeeper formats it
LAYOUT = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"


def cookie(ledger_dirs: Path | list[Path], host: str = BOOKIE) -> bytes:
    """The cookie of the world's bookie (``current/VERSION`` and ``/ledgers/cookies/<id>``
    hold it): its ledger directories, the journal sharing the first of them."""
    dirs = [ledger_dirs] if isinstance(ledger_dirs, Path) else list(ledger_dirs)
    listed = "\\t".join(str(d) for d in dirs)
    return (
        f'5\nbookieHost: "{host}"\njournalDir: "{dirs[0]}"\n'
        f'ledgerDirs: "{len(dirs)}\\t{listed}"\ninstanceId: "{INSTANCE_ID}"\n'
    ).encode()


def write_cookies(bookie: Path, host: str = BOOKIE) -> bytes:
    """Write the cookie into every ``current/`` directory under the bookie data root
    ``bookie`` (its ledger directories), as a bookie does when it first starts; return it."""
    currents = sorted(p for p in [bookie / "current", *bookie.glob("*/current")] if p.is_dir())
    data = cookie([c.parent for c in currents], host)
    for current in currents:
        (current / "VERSION").write_bytes(data)
    return data


def bookkeeper_root_nodes(
    ledger_dirs: Path | list[Path] | None = None, root: str = "/ledgers"
) -> dict[str, bytes]:
    """What BookKeeper writes under its root when the cluster is formatted (``LAYOUT``,
    ``INSTANCEID``) and, given its ledger directories, when the world's bookie first
    joins (its cookie)."""
    nodes = {f"{root}/LAYOUT": LAYOUT, f"{root}/INSTANCEID": INSTANCE_ID.encode()}
    if ledger_dirs is not None:
        nodes[f"{root}/cookies/{BOOKIE}"] = cookie(ledger_dirs)
    return nodes


def build_world(
    root: Path,
    variant: str | None = None,
    *,
    store: MetadataStore | None = None,
    metadata_url: str | None = None,
    index: str = "db",
    entries: dict[tuple[int, int], bytes] | None = None,
) -> World:
    """Write the world (``variant`` None: healthy) under ``root``; return where it is.

    ``entries``: Pulsar entries stored at these positions instead of the generated ones
    (a compacted ledger that copies such a position copies it too).

    The metadata goes to ``store`` (then ``metadata_url`` names it) or to a new RocksDB
    metadata store under ``root/metadata``. ``index``: the bookie indexes its entries as
    DbLedgerStorage (``db``: RocksDB ``ledgers``/``locations``) or Interleaved/Sorted
    storage does (``idx``: one ``.idx`` file per ledger).
    """
    if variant is not None and variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    v = variant
    b = _Builder(v, entries)

    # -- orders: three data ledgers, a cursor ledger, a compacted ledger ----------------------
    l10 = b.data_ledger(10, ORDERS, 3 if v == "entry-past-last" else 5)
    if v == "entry-past-last":
        b.strays(l10, 2)
    l11 = b.data_ledger(11, ORDERS, 4)
    l12 = b.data_ledger(12, ORDERS, 3, closed=False)
    cursor_ledger = LedgerSpec(20, _tags(ORDERS, cursor="durable-sub"), closed=False)
    b.pack(cursor_ledger, [_position_info((11, 3)), _position_info((12, 1))])
    to = (11, 1) if v == "compacted-horizon-mismatch" else (11, 3)
    compacted_tags = _compacted_tags(OTHER if v == "compacted-ledger-wrong-topic" else ORDERS, to)
    if v == "compacted-ledger-untagged":
        compacted_tags = {}
    l30 = LedgerSpec(30, compacted_tags, digest=DigestType.CRC32)
    b.pack(
        l30,
        [
            compacted.build(api.MessageIdData(ledgerId=lid, entryId=eid), b.pulsar[(lid, eid)])
            for lid, eid in ((10, 1), (11, 3))
        ],
    )
    # -- plain and partitioned topics: no broker entry metadata ------------------------------
    if v == "digest-unverified":  # a MAC ledger whose password is not known
        l40 = b.data_ledger(40, PLAIN, 3, bem=False, digest=DigestType.HMAC)
        without = lm.to_format(l40.metadata())
        without.ClearField("password")  # BookKeeper then reads no digest type either
        l40.metadata_bytes = (
            lm.build(l40.metadata()).split(b"\n", 1)[0]
            + b"\n"
            + (lm._varint(without.ByteSize()) + without.SerializeToString())
        )
    else:
        l40 = b.data_ledger(40, PLAIN, 3, bem=False)
        if v == "entry-past-last-plain":
            b.strays(l40, 1, bem=False)
    l41 = LedgerSpec(41, _tags(PLAIN), closed=False)
    l80 = b.data_ledger(80, PARTS + "-partition-0", 2, bem=False)
    l81 = b.data_ledger(81, PARTS + "-partition-1", 1, closed=False, bem=False)
    # -- ledgers no topic lists --------------------------------------------------------------
    l50 = LedgerSpec(
        50, {"application": b"pulsar", "component": b"schema", "pulsar/schemaId": b"x/y"}
    )
    l60 = LedgerSpec(60, {"owner": b"someone-else"})
    b.pack(l60, [b"not a pulsar entry"])
    ledgers = [l10, l11, l12, cursor_ledger, l30, l40, l41, l50, l60, l80, l81]
    index_property = b.last_index[11]
    shadow_ledgers: list[tuple[LedgerSpec, bool]] = [(l11, True), (l12, False)]

    # -- the variant's damage ----------------------------------------------------------------
    ml_overrides: dict[int, dict[str, int]] = {}  # orders: ledger -> LedgerInfo fields
    shadow_overrides: dict[int, dict[str, int]] = {}
    orders_list: list[tuple[LedgerSpec, bool]] = [(l10, True), (l11, True), (l12, False)]
    plain_list: list[tuple[LedgerSpec, bool]] = [(l40, True), (l41, False)]
    sub_position = (11, 2)
    shadow_source = ORDERS
    raw_znodes: dict[str, bytes] = {}
    if v == "ledger-missing-metadata":
        l11.with_metadata = False
    elif v == "ledger-lost":
        l11.with_metadata = False
        l11.stored = False
    elif v == "ledger-metadata-unreadable":
        l11.metadata_bytes = b"BookieMetadataFormatVersion\t3\n\x05garbage"
    elif v == "ledger-missing-storage":
        l11.stored = False
    elif v == "entry-missing":
        l10.entries[2] = b""  # dropped when storing
    elif v == "storage-not-covered":
        # every other entry is on a second bookie, whose directories are not given
        l10.ensemble = [BOOKIE, OTHER_BOOKIE]
        for i in range(1, len(l10.entries), 2):
            l10.entries[i] = b""
    elif v == "entry-corrupt":
        data = bytearray(l10.entries[3])
        data[-2] ^= 0x40
        l10.entries[3] = bytes(data)
    elif v == "entries-mismatch":
        ml_overrides[10] = {"entries": len(l10.entries) + 1}
    elif v == "size-mismatch":
        ml_overrides[10] = {"size": l10.length + 7}
    elif v == "size-mismatch-bk":
        l10.length_delta = 7
        ml_overrides[10] = {"size": l10.length + 7}
    elif v == "size-mismatch-no-bk-metadata":
        l10.with_metadata = False
        ml_overrides[10] = {"size": l10.length + 7}
    elif v == "ledger-wrong-owner":
        l10.tags = _tags(OTHER)
    elif v == "ledger-not-closed":
        l10.closed = False
    elif v == "ledger-list-unordered":
        # as a 4.0 broker's offload leaves it: the current ledger listed first (the list
        # written from a HashMap, ManagedLedgerImpl.tryTransformLedgerInfo); read sorted
        plain_list = [(l41, False), (l40, True)]
    elif v == "cursor-beyond-lac":
        sub_position = (11, 9)
    elif v == "cursor-unknown-ledger":
        sub_position = (99, 0)
    elif v == "cursor-trimmed-ledger":
        sub_position = (5, 3)
    elif v == "cursor-ledger-missing":
        cursor_ledger.with_metadata = False
    elif v == "cursor-ledger-corrupt":
        data = bytearray(cursor_ledger.entries[-1])
        data[-1] ^= 0x01
        cursor_ledger.entries[-1] = bytes(data)
    elif v == "compacted-ledger-missing":
        l30.with_metadata = False  # deleted, while the cursor property still names it
    elif v == "index-property-behind":
        index_property = b.last_index[10]
    elif v == "orphan-ledger":
        l70 = b.data_ledger(70, ORDERS, 3)
        ledgers.append(l70)
    elif v == "shadow-source-missing":
        shadow_source = "persistent://public/default/gone"
    elif v == "shadow-ledger-not-in-source":
        l71 = b.data_ledger(71, ORDERS, 1)
        ledgers.append(l71)
        shadow_ledgers.append((l71, True))
    elif v == "shadow-ledger-differs":
        shadow_overrides[11] = {"entries": len(l11.entries) - 1}
    properties = {mld.PROPERTY_INDEX: str(index_property)}
    if v == "index-property-invalid":
        properties[mld.PROPERTY_INDEX] = "12a"

    # -- metadata ----------------------------------------------------------------------------
    nodes: dict[str, bytes] = {}

    def ml(
        topic: str, info: mlpb.ManagedLedgerInfo, overrides: dict[int, dict[str, int]] | None = None
    ) -> None:
        for li in info.ledgerInfo:
            for name, value in (overrides or {}).get(li.ledgerId, {}).items():
                setattr(li, name, value)
        nodes[mld.TopicName.parse(topic).ml_path] = mld.build_info(info)

    def cursor(topic: str, name: str, info: mlpb.ManagedCursorInfo) -> None:
        nodes[mld.TopicName.parse(topic).cursor_path(name)] = mld.build_info(info)

    ml(ORDERS, _ml_info(orders_list, properties), ml_overrides)
    cursor(ORDERS, "sub", _cursor(sub_position))
    cursor(ORDERS, "durable-sub", _cursor((11, 0), ledger=20))
    cursor(
        ORDERS,
        mld.COMPACTION_CURSOR,
        _cursor((11, 3), properties={"CompactedTopicLedger": 30}),
    )
    shadow_props = {mld.PROPERTY_SHADOW_SOURCE: shadow_source}
    ml(SHADOW, _ml_info(shadow_ledgers, shadow_props), shadow_overrides)
    cursor(SHADOW, "shadow-sub", _cursor((12, 0)))
    plain = _ml_info(plain_list, {})
    if v == "ledger-list-duplicate":
        # a stale LedgerInfo of ledger 40 listed before its right one: the broker keeps the
        # last (ManagedLedgerImpl.initialize), so no entries-mismatch for the stale one
        stale = mlpb.ManagedLedgerInfo.LedgerInfo()
        stale.CopyFrom(plain.ledgerInfo[0])
        stale.entries += 5
        plain.ledgerInfo.insert(0, stale)
    ml(PLAIN, plain)
    cursor(PLAIN, "c", _cursor((40, 2)))
    ml(PARTS + "-partition-0", _ml_info([(l80, True)], {}))
    ml(PARTS + "-partition-1", _ml_info([(l81, False)], {}))
    if v == "ml-unreadable":
        raw_znodes[mld.TopicName.parse(PLAIN).ml_path] = b"\xff\xfe\xfd not protobuf"
    if v == "cursor-unreadable":
        raw_znodes[mld.TopicName.parse(ORDERS).cursor_path("sub")] = b"\xff\xff\xff"
    nodes.update(raw_znodes)
    for spec in ledgers:
        if spec.with_metadata:
            data = spec.metadata_bytes or lm.build(spec.metadata())
            nodes[lm.ledger_path(spec.ledger_id)] = data
    # BookKeeper's root as a formatted cluster has it, with the one bookie's cookie
    bookie_dir = root / "bookie"
    nodes.update(bookkeeper_root_nodes(bookie_dir))

    root.mkdir(parents=True, exist_ok=True)
    own_store = store is None
    if store is None:
        from pulsarctl_py.stores.metadata import create_metadata_store

        path = root / "metadata"
        store = create_metadata_store(path)
        metadata_url = f"rocksdb://{path}"
    assert metadata_url is not None
    try:
        write_tree(store, nodes)
    finally:
        if own_store:
            store.close()

    # -- bookie storage ----------------------------------------------------------------------
    from pulsarctl_py.stores.bookie import write_db_ledger_dir

    entries = [e for spec in ledgers if spec.stored for e in spec.entries if e]
    summary = write_db_ledger_dir(bookie_dir / "current", entries, master_key(b""))
    write_cookies(bookie_dir)
    if index == "idx":
        _to_index_files(bookie_dir / "current", summary.locations)
    if v == "entry-unreadable":
        _truncate_entry(bookie_dir / "current", 11, 1)
    return World(root, metadata_url, bookie_dir, variant, dict(b.last_index))


def _to_index_files(current: Path, locations: dict[tuple[int, int], int]) -> None:
    """Replace the RocksDB indexes of ``current`` by one ``.idx`` file per ledger."""
    import shutil

    from pulsarctl_py.stores.bookie import write_index_file

    shutil.rmtree(current / "ledgers")
    shutil.rmtree(current / "locations")
    by_ledger: dict[int, dict[int, int]] = {}
    for (ledger_id, entry_id), location in locations.items():
        by_ledger.setdefault(ledger_id, {})[entry_id] = location
    for ledger_id, entries in sorted(by_ledger.items()):
        write_index_file(current, ledger_id, master_key(b""), entries)


def write_tree(store: MetadataStore, nodes: dict[str, bytes]) -> None:
    """Put ``nodes`` into ``store``, each missing parent as an empty node first."""
    written: set[str] = set()
    for path in sorted(nodes):
        parts = path.split("/")
        for i in range(2, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in written and parent not in nodes and store.exists(parent) is None:
                store.put(parent, b"")
            written.add(parent)
        store.put(path, nodes[path])
        written.add(path)


def _truncate_entry(current: Path, ledger_id: int, entry_id: int) -> None:
    """Zero the ledger id of one stored entry in its entry log: its location no longer
    holds that entry, so reading it fails."""
    from pulsarctl_py.stores.bookie import open_bookie

    with open_bookie(current) as bookie:
        location = bookie.locate(ledger_id, entry_id)
    assert location is not None
    with open(location.path, "r+b") as f:
        f.seek(location.offset)
        f.write(b"\x00" * 8)
