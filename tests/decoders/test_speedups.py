"""The compiled fast paths (decoders/_speedups.c) against the pure-Python decoder.

The native functions handle the regular case and return None for anything else; the
Python path then decides. So for every input, the decoded result with the native module
must equal the result without it. Inputs: batches generated field by field at the wire
level (unknown fields, repeated fields, odd varints, wrong wire types, bad UTF-8), the
same batches mutated, whole entries from the entry strategies, and every corpus entry.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import entry as entry_module
from pulsarctl_py.decoders import speedups
from pulsarctl_py.decoders.entry import DecodeOptions, Entry, Message, decode_entry
from pulsarctl_py.decoders.errors import CorruptEntryError
from pulsarctl_py.decoders.nodes import Check, Layer, Problem
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.decoders.text import RawText
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support import protowire
from tests.support.demo_env import demo, demo_root
from tests.support.protowire import protobuf_takes, reencoded
from tests.support.strategies import DATA, entry_specs

native = speedups.native
CORPUS = sorted((DATA / "real-client").glob("*/*.bin")) + sorted(
    (DATA / "upstream" / "pulsar-client-go").glob("raw*.bin")
)


def test_the_native_module_is_built() -> None:
    """CI installs with a C compiler: the fast paths must be there, not silently absent."""
    if os.environ.get(speedups.PURE_PYTHON_ENV):
        pytest.skip("LEDGERCTL_PURE_PYTHON is set: the pure-Python paths are under test")
    assert native is not None, "pulsarctl_py.decoders._speedups was not built"


def test_pure_python_switch() -> None:
    code = "from pulsarctl_py.decoders import speedups; print(speedups.native is None)"
    env = {**os.environ, speedups.PURE_PYTHON_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr


@pytest.mark.skipif(native is None, reason="native module not built")
def test_pure_python_switch_of_some_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """Naming entry points turns off only those, each answering "not regular" (how
    docs/performance.md measures one entry point's gain); any other name, the module."""
    smm = api.SingleMessageMetadata(payload_size=1).SerializeToString()
    plain = struct.pack(">I", len(smm)) + smm + b"v"
    assert native.split_batch(plain, 1, None, 0, 0, None, 0, 0) is not None
    monkeypatch.setenv(speedups.PURE_PYTHON_ENV, "split_batch, payload_slots")
    partial = speedups._load()
    assert partial.split_batch(plain, 1, None, 0, 0, None, 0, 0) is None
    assert partial.payload_slots(struct.pack(">qq", 0, 5), 0, 2, b"", 0, 3, None, len) == [1]
    assert partial.scan_heads is native.scan_heads and partial.HEAD == native.HEAD
    monkeypatch.setenv(speedups.PURE_PYTHON_ENV, "split_batch,1")
    assert speedups._load() is None


#: the shared demo fixtures this module's tests use
FIXTURES = (demo, demo_root)

needs_native = pytest.mark.skipif(native is None, reason="native module not built")


@contextmanager
def pure_python() -> Iterator[None]:
    saved = entry_module.native
    entry_module.native = None
    try:
        yield
    finally:
        entry_module.native = saved


def both(data: bytes, options: DecodeOptions | None = None) -> tuple[Entry, Entry]:
    """The entry decoded with the native paths, and without them."""
    opts = options or DecodeOptions()
    fast = decode_entry(data, opts, (5, 9))
    with pure_python():
        slow = decode_entry(data, opts, (5, 9))
    return fast, slow


def assert_same(fast: Entry, slow: Entry) -> None:
    assert fast.to_json(with_hex=True) == slow.to_json(with_hex=True)
    assert fast.messages == slow.messages
    for a, b in zip(fast.messages, slow.messages, strict=True):
        assert type(a.value) is type(b.value)
    assert fast.placeholders == slow.placeholders
    assert [p.to_json() for p in fast.problems] == [p.to_json() for p in slow.problems]
    fast_records, slow_records = fast.records, slow.records
    if slow_records is None:
        assert fast_records is None
    else:
        assert fast_records is not None
        assert [(r.batch_index, r.smm, bytes(r.value), r.offset) for r in fast_records] == [
            (r.batch_index, r.smm, bytes(r.value), r.offset) for r in slow_records
        ]


# -- wire-level batches ---------------------------------------------------------------------


def varint(value: int, pad: int = 0) -> bytes:
    """``value`` as a varint, with ``pad`` redundant continuation bytes (still valid)."""
    return protowire.varint(value, protowire.varint_size(value) + pad)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def ld(field: int, body: bytes) -> bytes:
    return tag(field, 2) + varint(len(body)) + body


UTF8 = st.text(max_size=6).map(lambda s: s.encode())
NOT_UTF8 = st.sampled_from([b"\xff", b"\xc3", b"a\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])


@st.composite
def key_values(draw: st.DrawFn) -> bytes:
    parts = []
    if draw(st.integers(0, 20)):
        parts.append(ld(1, draw(UTF8 | NOT_UTF8) if draw(st.integers(0, 15)) == 0 else draw(UTF8)))
    if draw(st.integers(0, 20)):
        parts.append(ld(2, draw(UTF8)))
    if draw(st.integers(0, 8)) == 0:
        parts.append(ld(1, draw(UTF8)))  # repeated: the last one wins
    if draw(st.integers(0, 8)) == 0:
        parts.append(tag(9, 0) + varint(draw(st.integers(0, 2**64 - 1))))  # unknown
    if draw(st.integers(0, 25)) == 0:
        parts.append(tag(2, 0) + varint(1))  # wrong wire type
    return b"".join(draw(st.permutations(parts)))


@st.composite
def unknown_fields(draw: st.DrawFn) -> bytes:
    number = draw(st.integers(11, 2**29 - 1))
    wire = draw(st.sampled_from([0, 1, 2, 5]))
    if wire == 0:
        return tag(number, 0) + varint(draw(st.integers(0, 2**64 - 1)))
    if wire == 1:
        return tag(number, 1) + bytes(8)
    if wire == 5:
        return tag(number, 5) + bytes(4)
    return ld(number, draw(st.binary(max_size=8)))


@dataclass
class WireRecord:
    smm: bytes
    value: bytes


@st.composite
def wire_records(draw: st.DrawFn) -> WireRecord:
    value = draw(st.binary(max_size=24))
    parts: list[bytes] = []
    u64 = st.integers(0, 2**64 - 1)
    pad = draw(st.integers(0, 2)) if draw(st.integers(0, 10)) == 0 else 0
    for _ in range(draw(st.integers(0, 3))):
        parts.append(ld(1, draw(key_values())))
    if draw(st.booleans()):
        text = draw(UTF8 | NOT_UTF8) if draw(st.integers(0, 15)) == 0 else draw(UTF8)
        parts.append(ld(2, text))
    size = len(value)
    if draw(st.integers(0, 30)) == 0:
        size = draw(st.sampled_from([-1, -(2**31), size + 1, 2**31 - 1, 2**32 + size]))
    if draw(st.integers(0, 40)):
        parts.append(tag(3, 0) + varint(size & (2**64 - 1), pad))
    for number in (4, 6, 9, 10):
        if draw(st.integers(0, 3)) == 0:
            parts.append(tag(number, 0) + varint(draw(st.sampled_from([0, 1, 2, 2**63]))))
    if draw(st.booleans()):
        parts.append(tag(5, 0) + varint(draw(u64), pad))
    if draw(st.integers(0, 3)) == 0:
        parts.append(ld(7, draw(st.binary(max_size=6))))
    if draw(st.booleans()):
        parts.append(tag(8, 0) + varint(draw(u64)))
    if draw(st.integers(0, 4)) == 0:
        parts.append(draw(unknown_fields()))
    if draw(st.integers(0, 6)) == 0:
        parts.append(tag(2, 0) + varint(3))  # a wire type that does not match the field
    if draw(st.integers(0, 4)) == 0:
        parts.append(parts[0] if parts else tag(8, 0) + varint(1))  # a field again
    return WireRecord(b"".join(draw(st.permutations(parts))), value)


def wire_batch(records: list[WireRecord]) -> bytes:
    return b"".join(struct.pack(">I", len(r.smm)) + r.smm + r.value for r in records)


def batch_entry(plain: bytes, count: int, indexes: list[int] | None, seq: int) -> bytes:
    md = api.MessageMetadata(
        producer_name="p",
        sequence_id=seq,
        publish_time=1_700_000_000_000,
        num_messages_in_batch=count,
    )
    if indexes is not None:
        md.compacted_batch_indexes.extend(indexes)
    return build_entry(md, plain, checksum=False)


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    if not data:
        return data
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "none"]))
    at = draw(st.integers(0, len(data) - 1))
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ (1 << draw(st.integers(0, 7)))]) + data[at + 1 :]
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=3)) + data[at:]
    return data


@needs_native
@settings(max_examples=600, deadline=None)
@given(
    records=st.lists(wire_records(), max_size=6),
    extra=st.integers(-1, 1),
    compacted=st.booleans(),
    seq=st.integers(0, 2**64 - 1),
    data=st.data(),
)
def test_wire_batches_decode_the_same(
    records: list[WireRecord], extra: int, compacted: bool, seq: int, data: Any
) -> None:
    plain = wire_batch(records)
    plain = data.draw(mutations(plain)) if data.draw(st.integers(0, 3)) == 0 else plain
    count = max(0, len(records) + extra)
    indexes = sorted(data.draw(st.sets(st.integers(0, 50), min_size=count, max_size=count)))
    entry_bytes = batch_entry(plain, count, indexes if compacted else None, seq)
    fast, slow = both(entry_bytes)
    assert_same(fast, slow)


@needs_native
@settings(max_examples=300, deadline=None)
@given(records=st.lists(wire_records(), max_size=6), data=st.data())
def test_split_batch_returns_what_the_python_path_builds(
    records: list[WireRecord], data: Any
) -> None:
    """The native function alone, on mutated batches: None, or exactly Python's answer."""
    plain = data.draw(mutations(wire_batch(records)))
    count = len(records)
    got = native.split_batch(plain, count, None, 7, 1000, 40, 5, 9)
    entry = Entry(b"", position=(5, 9))
    md = api.MessageMetadata(
        producer_name="p", sequence_id=7, publish_time=1000, num_messages_in_batch=count
    )
    entry.broker_entry_metadata = api.BrokerEntryMetadata(index=40 + count - 1)
    with pure_python():
        try:
            expected = entry_module._messages(entry, md, plain)
        except CorruptEntryError:
            assert got is None
            return
    if got is None:
        return
    messages, holes, end = got
    assert messages == expected
    assert holes == entry.placeholders
    assert end == entry.layers[-1].length
    assert not any(p.layer == "batch" and p.severity == "error" for p in entry.problems)


@needs_native
@settings(max_examples=150, deadline=None)
@given(spec=entry_specs())
def test_generated_entries_decode_the_same(spec: Any) -> None:
    fast, slow = both(spec.build())
    assert_same(fast, slow)


@needs_native
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_entries_decode_the_same(path: Path) -> None:
    fast, slow = both(path.read_bytes())
    assert_same(fast, slow)


@needs_native
def test_batched_values_are_bytes() -> None:
    smm = api.SingleMessageMetadata(partition_key="k", payload_size=3, sequence_id=1)
    body = smm.SerializeToString()
    plain = struct.pack(">I", len(body)) + body + b"abc"
    messages, holes, end = native.split_batch(plain, 1, None, 0, 5, None, None, None)
    assert (messages[0].value, holes, end) == (b"abc", [], len(plain))
    assert type(messages[0].value) is bytes
    assert type(messages[0]) is Message


# -- binding ------------------------------------------------------------------------------


@needs_native
def test_bind_refuses_classes_it_cannot_fill() -> None:
    class Plain:
        pass

    with pytest.raises(TypeError):
        speedups.bind(native.HEAD, Plain)
    with pytest.raises(TypeError):
        native.bind(native.HEAD, Plain, ("a",))


# -- encodings: exactly what protobuf takes --------------------------------------------------


def python_split(plain: bytes, count: int) -> Any:
    """What the Python path makes of a batch, as split_batch's answer; None where it
    refuses it (an error, or a problem on the batch)."""
    entry = Entry(b"", position=(5, 9))
    md = api.MessageMetadata(
        producer_name="p", sequence_id=7, publish_time=1000, num_messages_in_batch=count
    )
    entry.broker_entry_metadata = api.BrokerEntryMetadata(index=40 + count - 1)
    with pure_python():
        try:
            messages = entry_module._messages(entry, md, plain)
        except CorruptEntryError:
            return None
    if any(p.severity == "error" for p in entry.problems):
        return None
    return messages, entry.placeholders, entry.layers[-1].length


def native_split(plain: bytes, count: int) -> Any:
    return native.split_batch(plain, count, None, 7, 1000, 40, 5, 9)


@st.composite
def regular_smm(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A record's metadata that the Python path reads without a problem (serialized by
    protobuf), and its value."""
    value = draw(st.binary(max_size=8))
    smm = api.SingleMessageMetadata(payload_size=len(value))
    for _ in range(draw(st.integers(0, 2))):
        smm.properties.add(key=draw(st.text(max_size=4)), value=draw(st.text(max_size=4)))
    u64 = st.integers(0, 2**64 - 1)
    if draw(st.booleans()):
        smm.partition_key = draw(st.text(max_size=4))
    if draw(st.booleans()):
        smm.event_time = draw(u64)
    if draw(st.booleans()):
        smm.sequence_id = draw(u64)
    if draw(st.booleans()):
        smm.ordering_key = draw(st.binary(max_size=4))
    for name in ("compacted_out", "partition_key_b64_encoded", "null_value", "null_partition_key"):
        if draw(st.integers(0, 4)) == 0:
            setattr(smm, name, draw(st.booleans()))
    return smm.SerializeToString(), value


@needs_native
@settings(max_examples=800, deadline=None)
@given(records=st.lists(regular_smm(), min_size=1, max_size=3), data=st.data())
def test_split_batch_takes_the_encodings_protobuf_takes(
    records: list[tuple[bytes, bytes]], data: Any
) -> None:
    """Regular records with every tag, length and varint written again, overlong and past
    protobuf's limits (tags and lengths of 6 bytes, varints of 11, bits past the 64th):
    split_batch answers exactly when the Python path (protobuf) reads the batch, and then
    the same messages."""
    plain = b""
    for smm, value in records:
        body = data.draw(reencoded(smm, {1: {}}))
        plain += struct.pack(">I", len(body)) + body + value
    got = native_split(plain, len(records))
    expected = python_split(plain, len(records))
    assert (got is None) == (expected is None), (plain.hex(), got, expected)
    if got is not None:
        assert (got[0], got[1], got[2]) == expected


@needs_native
@pytest.mark.parametrize(
    ("encoded", "takes"),
    [
        (b"\x08" + protowire.varint(5, 10), True),  # a value padded to ten bytes
        (b"\x08" + protowire.varint(5, 11), False),  # eleven
        (b"\x08" + b"\xff" * 9 + b"\x7f", True),  # bits past the 64th: dropped
        (protowire.varint(8, 5) + b"\x05", True),  # a tag of five bytes
        (protowire.varint(8, 6) + b"\x05", False),  # six
        (protowire.varint(2**32 | 8, 5) + b"\x05", False),  # a tag past 32 bits
        (protowire.varint(128 << 3, 6) + b"\x00", False),  # an unknown field's tag of six bytes
        (b"\x1a" + protowire.varint(1, 5) + b"x", True),  # an unknown field's length of five bytes
        (b"\x1a" + protowire.varint(1, 6) + b"x", False),  # six
        (b"\x00\x05", False),  # field 0
    ],
)
def test_protobuf_takes_these_encodings(encoded: bytes, takes: bool) -> None:
    """The rules the native parsers follow, held against the installed protobuf library
    (upb), so that a protobuf upgrade that changes them fails here first."""
    assert protobuf_takes(api.BrokerEntryMetadata, encoded) is takes


@needs_native
def test_a_tag_of_six_bytes_is_not_a_batch_natively() -> None:
    """The batch the adversarial run found: one record whose unknown field's tag takes six
    bytes. protobuf refuses it, so must split_batch and the compaction helpers."""
    plain = bytes.fromhex("0000000c12016b18018081808080000076")
    assert python_split(plain, 1) is None
    assert native_split(plain, 1) is None
    table = native.key_table()
    assert native.compact_offer(plain, 1, None, b"k", bytes(16), table) is None
    assert len(table) == 0
    assert native.compact_keep(plain, 1, None, b"k", bytes(16), table, True, False, b"") is None
    assert native.compact_rebuild(plain, 1, [0], False, b"") is None


# -- arguments: checked at the module boundary ---------------------------------------------------
#
# The callers never pass these; the module must not trust that. A Meddler runs code where a
# conversion calls back into Python (__index__, __bool__, __add__, __eq__, __hash__), here
# emptying the lists the native function is about to read; a collection in the middle of a
# call (gc callbacks) does the same at an allocation. Each call must answer or raise, never
# read past a list.


@contextmanager
def collection_on_every_allocation(action: Any) -> Iterator[None]:
    """Run ``action`` at every garbage collection, with a collection at (nearly) every
    allocation of a container."""
    import gc

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            action()

    threshold = gc.get_threshold()
    gc.callbacks.append(callback)
    gc.set_threshold(1, 1, 1)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(callback)


def _clean_log(n: int) -> tuple[list[tuple[bytes, bytes]], bytes]:
    from pulsarctl_py.decoders import bookkeeper
    from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
    from pulsarctl_py.decoders.checksums import DigestType
    from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer
    from tests.stores.bookie.test_heads import in_memory_log

    md = api.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    body = BrokerEntryMetadataLayer.build(api.BrokerEntryMetadata(index=1)) + build_entry(
        md, b"v", checksum=True
    )
    entries = [
        bookkeeper.build(BookieEntryHeader(3, e, e - 1, 10), body, DigestType.CRC32C)
        for e in range(n)
    ]
    return in_memory_log(3, entries)


def _state(expected: int = 0, **slots: Any) -> list[Any]:
    state: list[Any] = [None] * native.VERIFY_SLOTS
    state[0] = expected
    state[1] = state[2] = 0
    state[5] = state[6] = state[11] = False
    for slot, value in slots.items():
        state[int(slot[1:])] = value
    return state


@needs_native
def test_negative_starts_and_windows_past_int64_are_refused() -> None:
    items, window = _clean_log(3)
    for start in (-1, -(2**40)):
        with pytest.raises(ValueError):
            native.scan_heads(items, start, 3, 0, window, 0, [])
        with pytest.raises(ValueError):
            native.verify_heads(items, start, 3, 0, window, 0, 3, _state())
        with pytest.raises(ValueError):
            native.verify_records([(0, b"")], start, 3, 3, _state())
        with pytest.raises(ValueError):
            native.entry_lines([], start, 1, 3, None, b"}\n")
    for window_start in (2**63 - 2, -1, -(2**63)):
        with pytest.raises(ValueError):
            native.scan_heads(items, 0, 3, 0, window, window_start, [])
        with pytest.raises(ValueError):
            native.verify_heads(items, 0, 3, 0, window, window_start, 3, _state())
    with pytest.raises(ValueError):
        native.v3_read_replies(b"", 0, -1, [])
    with pytest.raises(ValueError):
        native.verify_records([], 0, 3, 3, _state(-1))
    # a start past the end reads nothing
    assert native.scan_heads(items, 10, 3, 0, window, 0, []) == (10, native.HEADS_END)


@needs_native
def test_conversions_that_empty_the_lists_being_read() -> None:
    items, window = _clean_log(4)
    out: list[Any] = []
    ledger = protowire.Meddler(3, items.clear)
    assert native.scan_heads(items, 0, ledger, 0, window, 0, out) == (0, native.HEADS_END)
    items, window = _clean_log(4)
    state = _state()
    meddler = protowire.Meddler(0, state.clear)
    for slot in (0, 1, 3, 5, 11):
        bad = _state(**{f"s{slot}": meddler})
        with pytest.raises(TypeError):
            native.verify_heads(items, 0, 3, 0, window, 0, 3, bad)
        with pytest.raises(TypeError):
            native.verify_records([], 0, 3, 3, bad)
    records: list[Any] = [(0, b"x" * 40)]
    with pytest.raises(TypeError):
        native.verify_records([(protowire.Meddler(0, records.clear), b"")], 0, 3, 3, _state())
    with pytest.raises(TypeError):
        native.verify_records([(0, protowire.Meddler(0, records.clear))], 0, 3, 3, _state())
    # split_batch: the indexes are read before the batch; the sums take ints only
    smm = api.SingleMessageMetadata(payload_size=1).SerializeToString()
    plain = (struct.pack(">I", len(smm)) + smm + b"v") * 3
    indexes: list[Any] = [0, 1, 2]
    count = protowire.Meddler(3, indexes.clear)
    assert native.split_batch(plain, count, indexes, 0, 0, None, 0, 0) is None
    indexes = [0, 1, 2]
    for bad_seq in (protowire.Meddler(0, indexes.clear), 1.5, "0"):
        with pytest.raises(TypeError):
            native.split_batch(plain, 3, indexes, bad_seq, 0, None, 0, 0)
    with pytest.raises(TypeError):
        native.split_batch(plain, 3, None, 0, 0, protowire.Meddler(0, indexes.clear), 0, 0)
    assert (
        native.split_batch(plain, 3, [0, protowire.Meddler(1, indexes.clear), 2], 0, 0, None, 0, 0)
        is None
    )
    # compaction: indexes of ints only, a kept list of ints only
    table = native.key_table()
    assert (
        native.compact_offer(plain, 3, [0, protowire.Meddler(1, None), 2], b"", bytes(16), table)
        is None
    )
    keep: list[Any] = [0]
    keep.append(protowire.Meddler(1, keep.clear))
    with pytest.raises(TypeError):
        native.compact_rebuild(plain, 3, keep, False, b"")
    # a tombstone flag that empties the table while it is asked
    table.offer(b"a", b"r", False)
    assert table.offer(b"b", b"r", protowire.Meddler(0, table.clear)) is True
    assert len(table) == 1 and table.get(b"b") == (b"r", False)


@needs_native
def test_a_collection_in_the_middle_of_a_call_that_empties_its_lists() -> None:
    items, window = _clean_log(50)
    out: list[Any] = []
    with collection_on_every_allocation(items.clear):
        stop, status = native.scan_heads(items, 0, 3, 0, window, 0, out)
    assert status == native.HEADS_END and stop <= 50 and len(out) == stop
    items, window = _clean_log(50)
    pairs = [(h, b"") for h in out]
    with collection_on_every_allocation(pairs.clear):
        native.entry_lines(pairs, 0, 100, 3, None, b"}\n")
    smm = api.SingleMessageMetadata(payload_size=1).SerializeToString()
    plain = (struct.pack(">I", len(smm)) + smm + b"v") * 50
    indexes = list(range(50))
    with collection_on_every_allocation(indexes.clear):
        got = native.split_batch(plain, 50, indexes, 0, 0, None, 0, 0)
    assert got is not None and [m.batch_index for m in got[0]] == list(range(50))
    table = native.key_table()
    keyed = api.SingleMessageMetadata(payload_size=1, partition_key="k").SerializeToString()
    plain = (struct.pack(">I", len(keyed)) + keyed + b"v") * 50
    with collection_on_every_allocation(table.clear):
        native.compact_keep(plain, 50, None, b"", bytes(16), table, True, False, b"")
        native.compact_offer(plain, 50, None, b"", bytes(16), table)


@needs_native
def test_the_key_table_takes_empty_keys_and_ranks() -> None:
    """An empty key and rank were stored at the NULL arena of a new table (UBSan: memcpy
    from a NULL pointer); they are a key like any other."""
    table = native.key_table()
    assert table.offer(b"", b"", False) is True
    assert table.get(b"") == (b"", False) and len(table) == 1
    assert table.offer(b"", b"\x01", True) is False
    assert table.get(b"") == (b"\x01", True) and table.live == 0
    table.clear()
    assert table.put(b"", b"", False) is True and table.min_rank() == b""


@needs_native
def test_bind_takes_only_a_slots_class_of_its_own_slots() -> None:
    from pulsarctl_py.decoders.heads import EntryHead

    @dataclass(slots=True)
    class Other:
        a: Any
        b: Any

    class Borrowed:  # a slot descriptor of another class: its offset is not this class's
        __slots__ = ("c",)
        a = Other.__dict__["a"]

    names = tuple(f for f in EntryHead.__slots__)
    for cls, fields in [
        (Borrowed, ("a",)),
        (Other, ("a", "a")),
        (Other, (1,)),
        (int, ("real",)),
        (type("WithDict", (), {}), ()),
    ]:
        with pytest.raises(TypeError):
            native.bind(native.HEAD, cls, fields)
    native.bind(native.HEAD, EntryHead, names)  # the real binding still holds


# -- an entry's JSON (entry_doc) -------------------------------------------------------------


def same_json(fast: Any, slow: Any) -> None:
    """Equal as JSON text: the same keys in the same order, the same values and types."""
    import json

    assert json.dumps(fast, ensure_ascii=False) == json.dumps(slow, ensure_ascii=False)
    assert fast == slow


def check_entry_doc(entry: Entry) -> bool:
    """The native dict of ``entry`` (when it builds one) is the Python path's; True when
    it was built."""
    got = native.entry_doc(entry)
    slow = entry.to_json_python()
    if got is not None:
        same_json(got, slow)
        same_json(entry.to_json(), slow)
    return got is not None


@needs_native
@settings(max_examples=150, deadline=None)
@given(spec=entry_specs())
def test_entry_doc_is_the_python_json_of_generated_entries(spec: Any) -> None:
    fast, slow = both(spec.build())
    check_entry_doc(fast)
    check_entry_doc(slow)


@needs_native
def test_entry_doc_is_the_python_json_of_the_corpus() -> None:
    built = [check_entry_doc(both(path.read_bytes())[0]) for path in CORPUS]
    assert any(built), "no corpus entry took the native path"


# what a message, a layer's field or a check may hold: the regular values and the ones
# the native builder leaves to Python (not UTF-8 text, bytes, nested maps, subclasses)
BIG_INTS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**80), 2**80))
PLAIN = st.one_of(
    st.none(), st.booleans(), BIG_INTS, st.text(max_size=8), st.floats(allow_nan=False)
)
ODD = st.one_of(
    st.binary(max_size=6),
    st.sampled_from([b"\xff", b"a\xc3"]).map(lambda b: RawText(b)),
    st.dictionaries(st.text(max_size=3), PLAIN, max_size=2).map(lambda d: {"nested": d}),
    st.sampled_from([True, 3]).map(lambda v: IntFlagLike(v)),
)
FIELD_VALUES = st.one_of(
    PLAIN,
    st.lists(PLAIN, max_size=3),
    st.lists(st.dictionaries(st.text(max_size=3), PLAIN, max_size=2), max_size=2),
    ODD,
    st.lists(ODD, max_size=2),
)


class IntFlagLike(int):
    """An int subclass (an IntEnum's kind): not a plain value."""


def byte_values() -> st.SearchStrategy[Any]:
    raw = st.binary(max_size=40)
    return st.one_of(
        st.none(),
        raw,
        raw.map(memoryview),
        st.tuples(raw, st.integers(0, 3)).map(lambda t: memoryview(b"xyz" + t[0])[3 - t[1] :]),
        raw.map(bytearray),
        st.builds(lambda: memoryview(struct.pack("<2I", 1, 2)).cast("I")),  # 2 items, 8 bytes
    )


TEXT = st.text(max_size=10)  # unicode keys, property names and values, empty ones
ODD_TEXT = st.sampled_from([b"\xff", b"k\xe9"]).map(lambda b: RawText(b))


@st.composite
def messages(draw: st.DrawFn) -> Message:
    ledger = draw(st.one_of(st.none(), BIG_INTS))
    return Message(
        key=draw(st.one_of(st.none(), TEXT, ODD_TEXT)),
        value=draw(byte_values()),
        properties=draw(
            st.dictionaries(st.one_of(TEXT, ODD_TEXT), st.one_of(TEXT, ODD_TEXT), max_size=3)
        ),
        batch_index=draw(st.one_of(st.integers(-2, 5), BIG_INTS)),
        null_value=draw(st.booleans()),
        event_time=draw(st.one_of(st.none(), BIG_INTS)),
        sequence_id=draw(BIG_INTS),
        publish_time=draw(BIG_INTS),
        key_b64_encoded=draw(st.booleans()),
        ordering_key=draw(st.one_of(st.none(), st.none(), st.binary(max_size=4))),
        index=draw(st.one_of(st.none(), BIG_INTS)),
        ledger_id=ledger,
        entry_id=draw(st.one_of(st.none(), BIG_INTS)),
        chunks=draw(st.one_of(st.none(), st.integers(1, 9))),
    )


@st.composite
def layers(draw: st.DrawFn) -> Layer:
    check = None
    if draw(st.booleans()):
        check = Check(
            draw(st.sampled_from(["CRC32C", "CRC32", "DUMMY", "MAC"])),
            draw(TEXT),
            draw(st.one_of(st.none(), TEXT)),
            draw(st.one_of(st.none(), st.booleans())),
            draw(st.one_of(st.none(), st.just(""), TEXT)),
        )
    return Layer(
        draw(st.sampled_from(["bookie-entry", "bookie-digest", "checksum", "batch", "x"])),
        draw(st.integers(0, 2**40)),
        draw(st.integers(0, 2**40)),
        b"",
        draw(st.dictionaries(TEXT, FIELD_VALUES, max_size=4)),
        check,
        draw(st.one_of(st.none(), TEXT)),
        draw(st.sampled_from(["entry", "payload"])),
    )


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    entry = Entry(
        draw(byte_values().filter(lambda v: v is not None)),
        layers=draw(st.lists(layers(), max_size=4)),
        messages=draw(st.lists(messages(), max_size=4)),
        problems=draw(
            st.lists(
                st.builds(
                    Problem,
                    st.sampled_from(["error", "warning"]),
                    TEXT,
                    st.integers(0, 99),
                    TEXT,
                ),
                max_size=2,
            )
        ),
        encrypted=draw(st.booleans()),
    )
    entry.position = draw(st.one_of(st.none(), st.tuples(BIG_INTS, BIG_INTS)))
    return entry


@needs_native
@settings(max_examples=400, deadline=None)
@given(entry=entries())
def test_entry_doc_is_the_python_json_of_any_entry(entry: Entry) -> None:
    """Unicode keys, empty values, ints wider than 64 bits, memoryviews, text that is not
    UTF-8, ordering keys, chunks, nested fields, notes: the native dict is the Python
    path's, or the Python path builds it."""
    check_entry_doc(entry)


@needs_native
def test_entry_doc_runs_no_python_code_of_a_field_name() -> None:
    """A layer field named by a str subclass: its __hash__ (Python code, here emptying the
    entry's lists) must not run inside entry_doc, which read those lists; the Python path
    builds that document (tests/support/fuzz_native.py's hostile entries found it)."""
    entry = Entry(b"x", layers=[Layer("l", 0, 1, b"x")], position=(1, 2))
    armed: list[bool] = []
    ran: list[bool] = []

    class Name(str):
        def __hash__(self) -> int:
            if armed:
                ran.append(True)
                entry.layers.clear()
            return str.__hash__(self)

    entry.layers[0].fields[Name("k")] = 1
    armed.append(True)
    assert native.entry_doc(entry) is None
    assert ran == []


@needs_native
def test_entry_doc_builds_the_regular_entries() -> None:
    """The native builder is taken for what regular entries hold (not only refused)."""
    message = Message("k", b"v", {"p": "q"}, -1, False, None, 1, 2, ledger_id=3, entry_id=4)
    check = Check("CRC32C", "0a", "0a", True)
    layer = Layer("bookie-entry", 0, 36, b"", {"ledger_id": 3, "covers": [1, 2]}, check)
    entry = Entry(b"x" * 9, [layer], [message], [], position=(3, 4))
    assert check_entry_doc(entry)
    assert native.entry_doc(entry)["messages"][0]["message_id"] == "3:4"


@needs_native
def test_entry_doc_refuses_a_class_bound_with_other_slots() -> None:
    @dataclass(slots=True)
    class Other:
        a: Any

    with pytest.raises(TypeError):
        native.bind(native.ENTRY, Other, ("a",))
    assert native.entry_doc(Other(1)) is None  # the real binding still holds


@needs_native
@pytest.mark.usefixtures("demo")  # in the demo's directory, its stores by ledgerctl.toml
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_inspect_writes_the_same_bytes_without_the_native_entry_json(
    fmt: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every demo topic (batches, chunks, encrypted payloads, schema'd values, markers,
    compacted and cursor ledgers): the command's stdout with the native entry JSON is
    the Python path's, byte for byte."""
    from tests.support.cli_helpers import run

    listed = run(capsys, "topic", "list", "-o", "jsonl")
    assert listed.code == 0, listed.err
    topics = [json.loads(line)["topic"] for line in listed.out.splitlines()]
    assert len(topics) >= 8
    built = 0
    real = native.entry_doc

    def counting(entry: Entry) -> Any:
        nonlocal built
        got = real(entry)
        built += got is not None
        return got

    for topic in topics:
        args = ("inspect", "--topic", topic, "-o", fmt, "--hash")
        monkeypatch.setattr(entry_module, "_native_doc", counting)
        fast = run(capsys, *args)
        monkeypatch.setattr(entry_module, "_native_doc", None)
        slow = run(capsys, *args)
        assert (fast.code, fast.out) == (slow.code, slow.out), topic
        assert fast.out
    assert built > 0
