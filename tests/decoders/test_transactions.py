"""The transaction stores' records (decoders/transactions.py): what is built decodes back
field for field, one record or a batch, behind a BookKeeper entry; bytes that are not a
record are a problem on the record's layer, never an exception; the stores are told by
their managed ledger's name. The sandbox shows the broker's own records
(tests/cluster/sandbox/test_verify.py); these bytes are the shapes the 4.0.7 broker wrote there.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookkeeper
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.entry import PAYLOAD_LAYERS, DecodeOptions, Outer, decode_entry
from pulsarctl_py.decoders.protos import proto_fields
from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer
from pulsarctl_py.decoders.transactions import (
    PENDING_ACK,
    TRANSACTION_LOG,
    build_records,
    store_of,
)
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.proto import pulsar_transactions_pb2 as txpb
from tests.support.strategies import I64, U64

#: records the Pulsar 4.0.7 broker of scripts/sandbox wrote (the bytes after an entry's
#: header and digest): the coordinator's NEW, ADD_PARTITION and UPDATE OPEN -> COMMITTING
#: of transaction 0:0; a subscription's ACK of 58:0 in a batch of 4 (ack_set 14: the
#: batch indexes still unacknowledged) in transaction 0:11, and its COMMIT
SANDBOX_LOG = [
    bytes.fromhex("08001000180040c0cf2448bab1ae9ca23450bab1ae9ca2345800"),
    bytes.fromhex(
        "080110001800321d70657273697374656e743a2f2f7075626c69632f776f726c642f74786e"
        "50f3b1ae9ca2345800"
    ),
    bytes.fromhex("0803100018002000280150d8b2ae9ca2345800"),
]
SANDBOX_ACK = bytes.fromhex("08011000180b20002a08083a1000180e2004")
SANDBOX_COMMIT = bytes.fromhex("08021000180b2000")

TEXT = st.text(max_size=12)
STATUS = st.sampled_from(list(txpb.TxnStatus.values()))


@st.composite
def transaction_records(draw: st.DrawFn) -> txpb.TransactionMetadataEntry:
    r = txpb.TransactionMetadataEntry(
        metadata_op=draw(
            st.sampled_from(list(txpb.TransactionMetadataEntry.TransactionMetadataOp.values()))
        ),
        txnid_least_bits=draw(U64),
        txnid_most_bits=draw(U64),
    )
    if draw(st.booleans()):
        r.expected_status, r.new_status = draw(STATUS), draw(STATUS)
    r.partitions.extend(draw(st.lists(TEXT, max_size=3)))
    for topic, sub in draw(st.lists(st.tuples(TEXT, TEXT), max_size=2)):
        r.subscriptions.add(topic=topic, subscription=sub)
    for name in ("timeout_ms", "start_time", "last_modification_time", "max_local_txn_id"):
        if draw(st.booleans()):
            setattr(r, name, draw(U64))
    if draw(st.booleans()):
        r.owner = draw(TEXT)
    return r


@st.composite
def pending_ack_records(draw: st.DrawFn) -> txpb.PendingAckMetadataEntry:
    r = txpb.PendingAckMetadataEntry(
        pending_ack_op=draw(st.sampled_from(list(txpb.PendingAckOp.values()))),
        txnid_least_bits=draw(U64),
        txnid_most_bits=draw(U64),
    )
    if draw(st.booleans()):
        r.ack_type = draw(st.sampled_from([0, 1]))
    for _ in range(draw(st.integers(0, 3))):
        m = r.pending_ack_metadata.add(ledgerId=draw(U64), entryId=draw(U64))
        m.ack_set.extend(draw(st.lists(I64, max_size=3)))
        if draw(st.booleans()):
            m.batch_size = draw(st.integers(-(2**31), 2**31 - 1))
    return r


def _entry(payload: bytes, *, bem: bool = False) -> bytes:
    if bem:
        body = api.BrokerEntryMetadata(broker_timestamp=1, index=7).SerializeToString()
        payload = (
            BrokerEntryMetadataLayer.HEADER.pack(BrokerEntryMetadataLayer.MAGIC, len(body))
            + body
            + payload
        )
    header = BookieEntryHeader(5, 3, 2, len(payload))
    return bookkeeper.build(header, payload, DigestType.CRC32C)


def _decode(data: bytes, store: str) -> Any:
    options = DecodeOptions(outer=Outer.BOOKIE_ENTRY, digest_type=DigestType.CRC32C, records=store)
    return decode_entry(data, options, (5, 3))


def _records_of(entry: Any) -> list[dict[str, Any]]:
    (layer,) = [x for x in entry.layers if x.name in (TRANSACTION_LOG.name, PENDING_ACK.name)]
    fields = layer.fields
    for batch in ("transaction_logs", "pending_ack_logs"):
        if batch in fields:
            return list(fields[batch])
    return [fields]


@given(
    st.one_of(
        st.tuples(
            st.just(TRANSACTION_LOG.name), st.lists(transaction_records(), min_size=1, max_size=4)
        ),
        st.tuples(
            st.just(PENDING_ACK.name), st.lists(pending_ack_records(), min_size=1, max_size=4)
        ),
    ),
    st.booleans(),
    st.booleans(),
)
def test_records_built_decode_back(drawn: Any, batched: bool, bem: bool) -> None:
    store, records = drawn
    records = records if batched else records[:1]
    entry = _decode(_entry(build_records(records, batched=batched), bem=bem), store)
    assert entry.ok, entry.problems
    assert entry.messages == [] and entry.metadata is None
    assert _records_of(entry) == [proto_fields(r) for r in records]
    names = [x.name for x in entry.layers]
    assert names[0] == "bookie-entry"
    assert ("broker-entry-metadata" in names) is bem
    assert ("record-batch" in names) is batched
    if bem:
        assert entry.index == 7


@given(st.binary(max_size=64), st.sampled_from([TRANSACTION_LOG.name, PENDING_ACK.name]))
def test_any_bytes_decode_without_raising(payload: bytes, store: str) -> None:
    entry = _decode(_entry(payload), store)
    # the digest verifies: whatever is wrong is the record's (verify: entry-undecodable),
    # or a broker entry metadata prefix's (0x0e02 and what follows)
    layers = PAYLOAD_LAYERS | {"broker-entry-metadata"}
    assert all(p.layer in layers for p in entry.problems), entry.problems
    assert entry.problems or entry.layers[-1].name in (TRANSACTION_LOG.name, PENDING_ACK.name)


def test_the_sandbox_brokers_records() -> None:
    new, add, update = (
        _records_of(_decode(_entry(b), TRANSACTION_LOG.name))[0] for b in SANDBOX_LOG
    )
    assert (new["metadata_op"], new["timeout_ms"]) == ("NEW", 600_000)
    assert add["metadata_op"] == "ADD_PARTITION"
    assert add["partitions"] == ["persistent://public/world/txn"]
    assert (update["metadata_op"], update["expected_status"], update["new_status"]) == (
        "UPDATE",
        "OPEN",
        "COMMITTING",
    )
    ack = _records_of(_decode(_entry(SANDBOX_ACK), PENDING_ACK.name))[0]
    assert ack == {
        "pending_ack_op": "ACK",
        "ack_type": "Individual",
        "txnid_least_bits": 11,
        "txnid_most_bits": 0,
        "pending_ack_metadata": [
            {"ledger_id": 58, "entry_id": 0, "ack_set": [14], "batch_size": 4}
        ],
    }
    commit = _records_of(_decode(_entry(SANDBOX_COMMIT), PENDING_ACK.name))[0]
    assert commit["pending_ack_op"] == "COMMIT"


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\xff\xff", "undecodable bytes"),  # not protobuf
        (b"", "without metadata_op, txnid_most_bits, txnid_least_bits"),  # nothing to replay
        (bytes.fromhex("0e010001") + b"\xff", "undecodable bytes"),  # a batch that is not one
    ],
)
def test_a_record_the_replay_cannot_read_is_an_error(payload: bytes, why: str) -> None:
    entry = _decode(_entry(payload), TRANSACTION_LOG.name)
    (problem,) = entry.problems
    assert problem.severity == "error" and why in problem.message
    assert problem.layer in PAYLOAD_LAYERS


def test_the_same_bytes_as_pulsar_entries_are_corrupt() -> None:
    """Why the stores need their own decoder: read as a Pulsar entry, a healthy record is
    a damaged MessageMetadata (what verify said of the coordinator's log before)."""
    entry = decode_entry(_entry(SANDBOX_LOG[0]), DecodeOptions(outer=Outer.BOOKIE_ENTRY))
    assert not entry.ok


@pytest.mark.parametrize(
    ("name", "store"),
    [
        ("pulsar/system/persistent/__transaction_log_0", "transaction-log"),
        ("pulsar/system/persistent/__transaction_log_15", "transaction-log"),
        ("public/default/persistent/orders-sub__transaction_pending_ack", "pending-ack"),
        ("public/default/persistent/orders", None),
        ("public/default/persistent/__transaction_log_0", None),  # not the system namespace
        ("pulsar/system/persistent/__transaction_buffer_snapshot", None),  # Pulsar messages
        ("public/default/persistent/__change_events", None),  # Pulsar messages
        ("pulsar/system/persistent/__transaction_coordinator_assign-partition-0", None),
        (None, None),
    ],
)
def test_stores_are_told_by_their_managed_ledgers_name(name: str | None, store: str | None) -> None:
    assert store_of(name) == store
