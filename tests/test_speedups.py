"""The compiled fast paths (decoders/_speedups.c) against the pure-Python decoder.

The native functions handle the regular case and return None for anything else; the
Python path then decides. So for every input, the decoded result with the native module
must equal the result without it. Inputs: batches generated field by field at the wire
level (unknown fields, repeated fields, odd varints, wrong wire types, bad UTF-8), the
same batches mutated, whole entries from the entry strategies, and every corpus entry.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c as crc32c_lib
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import entry as entry_module
from pulsarctl_py.decoders import speedups
from pulsarctl_py.decoders.entry import DecodeOptions, Entry, Message, decode_entry
from pulsarctl_py.decoders.errors import CorruptEntryError
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.strategies import DATA, entry_specs

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
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value or pad:
            out.append(byte | 0x80)
            if not value:
                while pad > 1:
                    out.append(0x80)
                    pad -= 1
                out.append(0)
                break
        else:
            out.append(byte)
            break
    return bytes(out)


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


# -- CRC32C -------------------------------------------------------------------------------


@needs_native
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), start=st.integers(0, 2**32 - 1), offset=st.integers(0, 7))
def test_crc32c_matches_the_library(data: bytes, start: int, offset: int) -> None:
    view = memoryview(b"\0" * offset + data)[offset:]  # unaligned starts too
    expected = crc32c_lib.crc32c(data, start)
    assert native.crc32c(view, start) == expected
    assert native.crc32c(view, start, True) == expected  # the table path, on any CPU


@needs_native
def test_crc32c_check_value() -> None:
    assert native.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


# -- binding ------------------------------------------------------------------------------


@needs_native
def test_bind_refuses_classes_it_cannot_fill() -> None:
    class Plain:
        pass

    with pytest.raises(TypeError):
        speedups.bind(native.HEAD, Plain)
    with pytest.raises(TypeError):
        native.bind(native.HEAD, Plain, ("a",))
