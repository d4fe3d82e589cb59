"""The value header of Pulsar's RocksDB metadata store, and its key-range rules."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders import metadata_record as rec
from pulsarctl_py.decoders.errors import CorruptEntryError

I64 = st.integers(-(2**63), 2**63 - 1)


def test_layout_is_pulsars_metavalue() -> None:
    meta = rec.MetaValue(5, 7, 1000, 2000, True, b"hello")
    data = rec.build(meta)
    assert rec.HEADER_SIZE == 41  # 4 + 4 + 8 + 8 + 8 + 8 + 1
    assert data[:8] == struct.pack(">II", 41, 1)
    assert struct.unpack_from(">qqqqb", data, 8) == (5, 7, 1000, 2000, 1)
    assert data[41:] == b"hello"
    assert rec.parse(data) == meta


@given(I64, I64, I64, I64, st.booleans(), st.binary(max_size=64))
def test_round_trip(version: int, owner: int, c: int, m: int, eph: bool, data: bytes) -> None:
    meta = rec.MetaValue(version, owner, c, m, eph, data)
    assert rec.parse(rec.build(meta)) == meta


def test_reader_honours_a_larger_stored_header() -> None:
    head = struct.pack(">IIqqqqb", 49, 2, 1, 2, 3, 4, 0) + b"\xaa" * 8
    meta = rec.parse(head + b"data")
    assert (meta.header_size, meta.format_version, meta.data) == (49, 2, b"data")
    assert rec.build(meta)[:8] == struct.pack(">II", 41, 1)  # written back as version 1


def test_ephemeral_flag_is_a_java_signed_byte() -> None:
    raw = bytearray(rec.build(rec.MetaValue(0, 0, 0, 0, False, b"")))
    raw[40] = 0x80  # negative as a Java byte: "> 0" is false
    assert rec.parse(bytes(raw)).ephemeral is False
    raw[40] = 0x02
    assert rec.parse(bytes(raw)).ephemeral is True


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"", "header size"),
        (b"\x00\x00\x00", "header size"),
        (struct.pack(">I", 100) + b"\x00" * 20, "a header of 100 bytes"),
        (struct.pack(">II", 41, 0) + b"\x00" * 33, "format version"),
        (struct.pack(">II", 8, 1), "at least 41"),
    ],
)
def test_corrupt_values(data: bytes, fragment: str) -> None:
    with pytest.raises(CorruptEntryError, match=fragment):
        rec.parse(data)


def test_reserved_longs() -> None:
    assert rec.build_long(1) == b"\x00" * 7 + b"\x01"
    assert rec.parse_long(rec.build_long(-2)) == -2
    with pytest.raises(CorruptEntryError):
        rec.parse_long(b"\x01")


def test_children_ranges() -> None:
    assert rec.children_range("/") == (b"/", b"0")
    assert rec.children_range("/ledgers") == (b"/ledgers/", b"/ledgers0")
    assert rec.child_name("/", b"/ledgers/00/0000/L0001") == "ledgers"
    assert rec.child_name("/ledgers", b"/ledgers/00/0000/L0001") == "00"
    assert rec.child_name("/ledgers", b"/ledgers") is None
    assert rec.child_name("/ledgers", b"/ledgers-old/x") is None
    assert rec.child_name("/", rec.SEQUENTIAL_ID_KEY) is None  # '_' sorts after '0'
    assert rec.sequential_path("/ledgers/idgen/ID-", 42) == "/ledgers/idgen/ID-42"


def _near_headers() -> st.SearchStrategy[bytes]:
    """Values around the header's bounds: sizes and versions at and past each limit, the
    ephemeral flag's sign, short values."""
    sizes = st.sampled_from([0, 1, 40, 41, 42, 60, 2**31, 2**32 - 1])
    versions = st.sampled_from([0, 1, 2, 2**31 - 1, 2**31, 2**32 - 1])
    flags = st.sampled_from([0, 1, 0x7F, 0x80, 0xFF])
    built = st.builds(
        lambda size, version, owner, flag, tail, cut: (
            struct.pack(">IIqqqqB", size, version, 3, owner, 4, 5, flag) + tail
        )[: None if cut < 0 else cut],
        sizes,
        versions,
        st.sampled_from([0, 7, -1]),
        flags,
        st.binary(max_size=24),
        st.integers(-1, 50),
    )
    return st.one_of(built, st.binary(max_size=64))


@given(_near_headers(), st.sampled_from([0, 7, -1]))
def test_header_and_is_stale_agree_with_parse(value: bytes, instance: int) -> None:
    """header() accepts exactly what parse() accepts; is_stale() is parse's stale rule."""
    try:
        meta = rec.parse(value)
    except CorruptEntryError:
        meta = None
    fields = rec.header(value)
    assert (fields is None) == (meta is None)
    if meta is not None:
        assert fields is not None
        assert (fields[2], fields[3], fields[4], fields[5], fields[6] > 0) == (
            meta.version,
            meta.owner,
            meta.created_ms,
            meta.modified_ms,
            meta.ephemeral,
        )
        assert value[fields[0] :] == meta.data
    stale = meta is not None and meta.ephemeral and meta.owner != instance
    assert rec.is_stale(value, instance) == stale
