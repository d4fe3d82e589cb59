"""Hypothesis strategies for stored entries, and how to build them with the layer builders.

An :class:`EntrySpec` says what an entry holds (messages, codec, prefixes, framings);
:meth:`EntrySpec.build` serializes it with the decoders' own layer builders
(``payload.build_batch``, ``codecs.compress``, ``pulsar.build_entry``, ``compacted.build``,
``bookkeeper.build``) and :meth:`EntrySpec.expected` says, from the spec alone and the
rules of ../shared/spec/formats.md, what a consumer must get back.
"""

from __future__ import annotations

import os
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from pulsarctl_py.decoders import bookkeeper, compacted
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.codecs import compress
from pulsarctl_py.decoders.payload import build_batch
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api

DATA = Path(__file__).parent.parent / "data"
KEYS = DATA / "real-client" / "keys"

U64 = st.integers(0, 2**64 - 1)
U32 = st.integers(0, 2**32 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
NON_NEG_I64 = st.integers(0, 2**63 - 1)

#: keys and property strings: any unicode, including empty
TEXT = st.text(max_size=10)
#: producer names as brokers assign them ("standalone-0-3"); printable, never a magic byte
NAMES = st.text(alphabet=string.ascii_letters + string.digits + "-._", min_size=1, max_size=20)
PROPERTIES = st.dictionaries(TEXT, TEXT, max_size=3)
CODECS = st.sampled_from([0, 1, 2, 3, 4])  # NONE, LZ4, ZLIB, ZSTD, SNAPPY

#: values: empty, short binary, or compressible (repeated) binary
VALUES = st.one_of(
    st.just(b""),
    st.binary(max_size=48),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=6), st.integers(2, 120)),
)


@dataclass
class Record:
    """One message: what the producer set (a value of None is a null-value tombstone)."""

    value: bytes | None
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    event_time: int | None = None
    sequence_id: int | None = None
    ordering_key: bytes | None = None
    null_key: bool = False
    compacted_out: bool = False  # a placeholder the compactor left in an old-style batch

    def smm(self) -> Any:
        smm = api.SingleMessageMetadata()
        if self.compacted_out:
            smm.compacted_out = True  # formats.md §4: only compacted_out and payload_size
            return smm
        for k, v in self.properties.items():
            smm.properties.add(key=k, value=v)
        if self.key is not None:
            smm.partition_key = self.key
        if self.event_time is not None:
            smm.event_time = self.event_time
        if self.ordering_key is not None:
            smm.ordering_key = self.ordering_key
        if self.sequence_id is not None:
            smm.sequence_id = self.sequence_id
        if self.value is None:
            smm.null_value = True
        if self.null_key:
            smm.null_partition_key = True
        return smm


@st.composite
def records(draw: st.DrawFn, with_sequence_id: bool = True) -> Record:
    null = draw(st.integers(0, 5)) == 0
    key = draw(st.none() | TEXT)
    return Record(
        value=None if null else draw(VALUES),
        key=key,
        properties=draw(PROPERTIES),
        event_time=draw(st.none() | U64),
        sequence_id=draw(st.none() | U64) if with_sequence_id else None,
        ordering_key=draw(st.none() | st.binary(max_size=8)),
        null_key=key is None and draw(st.booleans()),
    )


@st.composite
def message_metadata(draw: st.DrawFn) -> Any:
    """A MessageMetadata as a producer writes it, before the payload fields are set."""
    md = api.MessageMetadata(
        producer_name=draw(NAMES),
        sequence_id=draw(U64),
        publish_time=draw(U64),
    )
    if draw(st.booleans()):
        md.replicated_from = draw(NAMES)
    for cluster in draw(st.lists(NAMES, max_size=2)):
        md.replicate_to.append(cluster)
    if draw(st.booleans()):
        md.schema_version = draw(st.binary(max_size=8))  # present-but-empty is allowed
    if draw(st.booleans()):
        md.deliver_at_time = draw(I64)
    if draw(st.booleans()):
        md.highest_sequence_id = draw(U64)
    if draw(st.integers(0, 4)) == 0:
        md.txnid_least_bits = draw(U64)
        md.txnid_most_bits = draw(U64)
    return md


@st.composite
def broker_entry_metadata(draw: st.DrawFn) -> Any:
    bem = api.BrokerEntryMetadata()
    if draw(st.booleans()):
        bem.broker_timestamp = draw(U64)
    if draw(st.booleans()):
        bem.index = draw(st.integers(0, 2**62))
    return bem


@st.composite
def message_ids(draw: st.DrawFn) -> Any:
    """The original position in a compacted-ledger entry (uint64 on the wire: -1 is 2**64-1)."""
    msg_id = api.MessageIdData(ledgerId=draw(U64), entryId=draw(U64))
    if draw(st.booleans()):
        msg_id.partition = draw(I32)
    if draw(st.booleans()):
        msg_id.batch_index = -1
    return msg_id


@dataclass
class BookieFraming:
    header: BookieEntryHeader
    digest: DigestType
    password: bytes | None


@st.composite
def bookie_framings(draw: st.DrawFn) -> BookieFraming:
    """Headers as LedgerHandle writes them: lac < entry id, length cumulative (>= 0)."""
    entry_id = draw(st.integers(0, 2**63 - 1))
    lac = draw(st.integers(-1, min(entry_id - 1, 2**63 - 1)))
    header = BookieEntryHeader(draw(NON_NEG_I64), entry_id, lac, draw(NON_NEG_I64))
    digest = draw(st.sampled_from(list(DigestType)))
    password = draw(st.binary(max_size=8)) if digest is DigestType.HMAC else None
    return BookieFraming(header, digest, password)


@dataclass
class Expected:
    """What a consumer must see for one message."""

    key: str | None
    value: bytes | None
    properties: dict[str, str]
    null_value: bool
    batch_index: int
    event_time: int | None
    sequence_id: int
    ordering_key: bytes | None
    index: int | None


@dataclass
class EntrySpec:
    """Everything one built entry holds, outermost framing last."""

    metadata: Any
    records: list[Record] | None  # None: a single (non-batched) message
    single: Record | None
    codec: int
    checksum: bool
    set_uncompressed_size: bool
    bem: Any = None
    original_id: Any = None
    bookie: BookieFraming | None = None
    compacted_indexes: list[int] | None = None  # PIP-429: batch index of each record
    num_messages_in_batch: int | None = None  # when it differs from len(records)
    encrypt: bool = False

    # -- building ------------------------------------------------------------------

    def final_metadata(self) -> Any:
        md = api.MessageMetadata()
        md.CopyFrom(self.metadata)
        if self.records is not None:
            md.num_messages_in_batch = (
                self.num_messages_in_batch
                if self.num_messages_in_batch is not None
                else len(self.records)
            )
            if self.compacted_indexes is not None:
                md.compacted_batch_indexes.extend(self.compacted_indexes)
        else:
            rec = self.single
            assert rec is not None
            for k, v in rec.properties.items():
                md.properties.add(key=k, value=v)
            if rec.key is not None:
                md.partition_key = rec.key
            if rec.event_time is not None:
                md.event_time = rec.event_time
            if rec.ordering_key is not None:
                md.ordering_key = rec.ordering_key
            if rec.value is None:
                md.null_value = True
            if rec.null_key:
                md.null_partition_key = True
        if self.codec:
            md.compression = self.codec
        plain = self.plain()
        if self.codec or self.set_uncompressed_size:
            md.uncompressed_size = len(plain)
        return md

    def plain(self) -> bytes:
        if self.records is None:
            assert self.single is not None
            return self.single.value or b""
        return build_batch((r.smm(), r.value) for r in self.records)

    def payload(self, md: Any) -> bytes:
        plain = self.plain()
        stored = compress(self.codec, plain) if self.codec else plain
        if self.encrypt:
            stored = encrypt_payload(md, stored)
        return stored

    def pulsar_entry(self) -> bytes:
        md = self.final_metadata()
        payload = self.payload(md)
        return build_entry(md, payload, checksum=self.checksum, broker_entry_metadata=self.bem)

    def build(self) -> bytes:
        out = self.pulsar_entry()
        if self.original_id is not None:
            out = compacted.build(self.original_id, out)
        if self.bookie is not None:
            f = self.bookie
            out = bookkeeper.build(f.header, out, f.digest, f.password)
        return out

    # -- what a consumer must get back ---------------------------------------------

    def expected(self) -> list[Expected]:
        bem_index = self.bem.index if self.bem is not None and self.bem.HasField("index") else None
        base_seq = self.metadata.sequence_id
        if self.records is None:
            r = self.single
            assert r is not None
            return [
                Expected(
                    r.key,
                    r.value,
                    r.properties,
                    r.value is None,
                    -1,
                    r.event_time,
                    base_seq,
                    r.ordering_key,
                    bem_index,
                )
            ]
        # formats.md §2: the stored index is the last message's; message i has
        # index - num_messages_in_batch + i + 1
        count = self.num_messages_in_batch or len(self.records)
        out = []
        for j, r in enumerate(self.records):
            batch_index = self.compacted_indexes[j] if self.compacted_indexes else j
            if r.compacted_out:
                continue  # §4: placeholders hold no message
            out.append(
                Expected(
                    r.key,
                    r.value,
                    r.properties,
                    r.value is None,
                    batch_index,
                    r.event_time,
                    # the producer numbers a batch's messages from the batch's sequence id
                    r.sequence_id if r.sequence_id is not None else base_seq + batch_index,
                    r.ordering_key,
                    None if bem_index is None else bem_index - count + batch_index + 1,
                )
            )
        return out


# -- encryption as the producer does it (real-client README): compress, then AES-256-GCM
# with a random data key wrapped by RSA-OAEP(SHA-1) for each consumer key ---------------

_PUBLIC_KEY: Any = None


def public_key() -> Any:
    global _PUBLIC_KEY
    if _PUBLIC_KEY is None:
        from cryptography.hazmat.primitives import serialization

        _PUBLIC_KEY = serialization.load_pem_public_key((KEYS / "rsa_public.pem").read_bytes())
    return _PUBLIC_KEY


def encrypt_payload(md: Any, payload: bytes) -> bytes:
    """Encrypt ``payload`` with a fresh data key and IV, recorded in ``md``."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    data_key, iv = os.urandom(32), os.urandom(12)
    oaep = padding.OAEP(
        mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None
    )
    md.encryption_keys.add(key="corpus-key", value=public_key().encrypt(data_key, oaep))
    md.encryption_param = iv
    return AESGCM(data_key).encrypt(iv, payload, None)


# -- whole entries -----------------------------------------------------------------


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[Record], list[int] | None, int | None]:
    """Batch records: a normal batch, an old-style compacted batch with placeholders,
    or a PIP-429 batch (compacted_batch_indexes, only the kept records in the payload)."""
    kind = draw(st.sampled_from(["normal", "placeholders", "pip429"]))
    recs = draw(st.lists(records(), min_size=1, max_size=6))
    if kind == "normal":
        return recs, None, None
    if kind == "placeholders":
        holes = draw(st.lists(st.booleans(), min_size=len(recs), max_size=len(recs)))
        for rec, hole in zip(recs, holes, strict=True):
            if hole:
                rec.compacted_out = True
                rec.value = b""
        return recs, None, None
    total = draw(st.integers(len(recs), len(recs) + 6))
    kept = sorted(draw(st.sets(st.integers(0, total - 1), min_size=len(recs), max_size=len(recs))))
    return recs, kept, total


@st.composite
def entry_specs(
    draw: st.DrawFn,
    framing: bool = True,
    encryption: bool = True,
) -> EntrySpec:
    md = draw(message_metadata())
    batched = draw(st.booleans())
    codec = draw(CODECS)
    if batched:
        recs, indexes, total = draw(batches())
        spec = EntrySpec(md, recs, None, codec, False, False, compacted_indexes=indexes)
        spec.num_messages_in_batch = total
        if draw(st.booleans()) and recs[0].key is not None:
            md.partition_key = recs[0].key  # the batch carries its first message's key
    else:
        spec = EntrySpec(md, None, draw(records(with_sequence_id=False)), codec, False, False)
    spec.checksum = draw(st.booleans())
    spec.set_uncompressed_size = draw(st.booleans())
    spec.encrypt = encryption and draw(st.integers(0, 7)) == 5  # about one in eight
    if draw(st.booleans()):
        spec.bem = draw(broker_entry_metadata())
    if framing:
        if draw(st.booleans()):
            spec.original_id = draw(message_ids())
        if draw(st.booleans()):
            spec.bookie = draw(bookie_framings())
    return spec
