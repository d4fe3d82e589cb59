"""The broker's transaction stores: managed ledgers whose entries are raw protobuf
records, not Pulsar messages.

Wire grammar (what follows the BookKeeper entry header and digest):

    entry  = [0x0e02 size:u32 BrokerEntryMetadata] (record | batch)
    record = TransactionMetadataEntry             the transaction coordinator's log
           | PendingAckMetadataEntry              a subscription's pending-ack store
    batch  = 0x0e01 version:u16 (Batched...Entry)  records of one flush, version 1

* The coordinator's log (apache/pulsar ``MLTransactionLogImpl``) is the managed ledger
  ``pulsar/system/persistent/__transaction_log_<tc id>``: one
  ``TransactionMetadataEntry`` per entry (``TransactionMetadataOp`` NEW, ADD_PARTITION,
  ADD_SUBSCRIPTION, UPDATE), replayed when the coordinator starts.
* A subscription's pending-ack store (``MLPendingAckStore``) is the managed ledger
  ``<topic>-<subscription>__transaction_pending_ack``: one ``PendingAckMetadataEntry``
  per entry (ACK with the positions, then COMMIT or ABORT), replayed when the
  subscription loads.

Both are written with ``ManagedLedger.asyncAddEntry`` and no ``MessageMetadata``; the
Pulsar 4.0.7 broker gives them no broker entry metadata (the sandbox's ledgers start with
the record), which is decoded here when present. With batched writes
(``transactionLogBatchedWriteEnabled``, ``transactionPendingAckBatchedWriteEnabled``,
default off) ``TxnLogBufferedWriter`` writes ``BATCHED_ENTRY_DATA_PREFIX_MAGIC_NUMBER``
0x0e01 and ``BATCHED_ENTRY_DATA_PREFIX_VERSION`` 1 before a
``BatchedTransactionMetadataEntry`` / ``BatchedPendingAckMetadataEntry``. That magic is
the same two bytes as the Pulsar checksum's, and a record never starts with 0x0e (field 1,
wire type 6, does not exist): these ledgers are known by their managed ledger's name
(:func:`store_of`, the names of ``SystemTopicNames``), and a record by its first byte.

The replays read ``metadata_op`` / ``pending_ack_op`` and the transaction id of every
record (generated LightProto getters throw on a field that is not set), so a record
without them is an error here, as is one that is not protobuf.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf.message import Message as ProtoMessage

from pulsarctl_py.proto import pulsar_transactions_pb2 as txpb

from .errors import CorruptEntryError
from .nodes import Layer, Problem
from .protos import parse_proto, proto_fields


class Decoded(Protocol):
    """The entry being decoded (:class:`.entry.Entry`, which calls :func:`decode_records`):
    its layers and problems, which the records are added to."""

    layers: list[Layer]
    problems: list[Problem]


#: the prefix of a batch of records (``TxnLogBufferedWriter``)
BATCH_PREFIX = struct.Struct(">HH")
BATCH_MAGIC = 0x0E01
BATCH_VERSION = 1


@dataclass(frozen=True, slots=True)
class Store:
    """One kind of transaction store: its records and how it is named."""

    name: str  # the layer name of its records, and its ``entry_format``
    record: type[ProtoMessage]
    batch: type[ProtoMessage]
    #: the fields the broker's replay reads of every record
    needed: tuple[str, ...]
    what: str  # for people


TRANSACTION_LOG = Store(
    "transaction-log",
    txpb.TransactionMetadataEntry,
    txpb.BatchedTransactionMetadataEntry,
    ("metadata_op", "txnid_most_bits", "txnid_least_bits"),
    "the transaction coordinator's log",
)
PENDING_ACK = Store(
    "pending-ack",
    txpb.PendingAckMetadataEntry,
    txpb.BatchedPendingAckMetadataEntry,
    ("pending_ack_op", "txnid_most_bits", "txnid_least_bits"),
    "a subscription's pending-ack store",
)
#: entry format name -> store
STORES: dict[str, Store] = {s.name: s for s in (TRANSACTION_LOG, PENDING_ACK)}
#: the layers whose problems say a record does not decode (its digest verified)
LAYERS = frozenset(STORES) | {"record-batch"}

# SystemTopicNames: TRANSACTION_COORDINATOR_LOG is __transaction_log_ in the system
# namespace (its managed ledger adds the coordinator id), PENDING_ACK_STORE_SUFFIX ends
# every pending-ack store's name
_TRANSACTION_LOG = re.compile(r"pulsar/system/persistent/__transaction_log_\d+")
_PENDING_ACK_SUFFIX = "__transaction_pending_ack"


def store_of(managed_ledger: str | None) -> str | None:
    """The entry format of a managed ledger's data ledgers when they hold a transaction
    store's records (``transaction-log``, ``pending-ack``); None: Pulsar entries."""
    if not managed_ledger:
        return None
    if _TRANSACTION_LOG.fullmatch(managed_ledger):
        return TRANSACTION_LOG.name
    parts = managed_ledger.split("/")
    if len(parts) == 4 and parts[2] == "persistent" and parts[3].endswith(_PENDING_ACK_SUFFIX):
        return PENDING_ACK.name
    return None


def decode_records(
    entry: Decoded, buf: bytes | memoryview, pos: int, end: int, store_name: str
) -> None:
    """Decode what follows the prefix layers of a transaction store's entry: one record,
    or a batch of them; a record that does not decode is recorded as a problem on its
    layer (never raised)."""
    store = STORES[store_name]
    problems = entry.problems
    prefix = BATCH_PREFIX.unpack_from(buf, pos) if end - pos >= BATCH_PREFIX.size else None
    if prefix is not None and prefix[0] == BATCH_MAGIC:
        version = prefix[1]
        entry.layers.append(
            Layer(
                "record-batch",
                pos,
                BATCH_PREFIX.size,
                buf[pos : pos + BATCH_PREFIX.size],
                {"magic": f"0x{BATCH_MAGIC:04x}", "version": version},
            )
        )
        if version != BATCH_VERSION:
            problems.append(
                Problem(
                    "warning",
                    "record-batch",
                    pos,
                    f"batch version {version}; Pulsar writes {BATCH_VERSION}",
                )
            )
        pos += BATCH_PREFIX.size
        batch = _parse(store.batch, buf, pos, end, store, problems, entry)
        if batch is not None:
            for record in _records(batch):
                _check(record, store, pos, problems)
        return
    record = _parse(store.record, buf, pos, end, store, problems, entry)
    if record is not None:
        _check(record, store, pos, problems)


def _parse(
    cls: type[ProtoMessage],
    buf: bytes | memoryview,
    pos: int,
    end: int,
    store: Store,
    problems: list[Problem],
    entry: Decoded,
) -> ProtoMessage | None:
    raw = buf[pos:end]
    try:
        msg, missing = parse_proto(cls, bytes(raw), store.name, pos)
    except CorruptEntryError as exc:
        reason = f"expected {exc.expected}, found {exc.found}"
        problems.append(Problem("error", store.name, pos, reason))
        entry.layers.append(
            Layer("undecoded", pos, end - pos, raw, {"layer": store.name}, None, reason)
        )
        return None
    entry.layers.append(Layer(store.name, pos, end - pos, raw, proto_fields(msg)))
    if missing:
        problems.append(
            Problem(
                "error",
                store.name,
                pos,
                f"{cls.DESCRIPTOR.name} lacks required fields: {', '.join(missing)}",
            )
        )
    return msg


def _check(record: ProtoMessage, store: Store, pos: int, problems: list[Problem]) -> None:
    lacks = [name for name in store.needed if not record.HasField(name)]
    if lacks:
        problems.append(
            Problem(
                "error",
                store.name,
                pos,
                f"a {record.DESCRIPTOR.name} without {', '.join(lacks)}: the broker's "
                f"replay of {store.what} cannot read it",
            )
        )


def build_records(records: list[ProtoMessage], *, batched: bool = False) -> bytes:
    """The bytes a transaction store writes for ``records`` (one, or a batch)."""
    if not batched:
        if len(records) != 1:
            raise ValueError("one record per entry unless batched")
        return records[0].SerializeToString()
    first = records[0]
    store = next(s for s in STORES.values() if isinstance(first, s.record))
    batch = store.batch()
    _records(batch).extend(records)
    return BATCH_PREFIX.pack(BATCH_MAGIC, BATCH_VERSION) + batch.SerializeToString()


def _records(batch: ProtoMessage) -> Any:
    """The records of a batch (its one field, repeated)."""
    return getattr(batch, batch.DESCRIPTOR.fields[0].name)
