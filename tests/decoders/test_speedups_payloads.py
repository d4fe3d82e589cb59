"""verify's native payload check (decoders/_speedups_payloads.c) against the decoder's
payload step: an entry the native check passes is one ``decode_payload`` finds nothing
wrong with, whichever of the three forms (locations items, slots, records) reads it; and
the fast path gives the findings of the general path on ledgers whose batches do not
decode (tests/verify/test_fastscan.py holds the rest)."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookkeeper
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.codecs import compress, decompress
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.proto import pulsar_api_pb2 as api

needs_native = pytest.mark.skipif(native is None, reason="native module not built")
LEDGER = 3


def _entry(entry_id: int, md: api.MessageMetadata, body: bytes, digest: DigestType) -> bytes:
    metadata = md.SerializeToString()
    payload = struct.pack(">I", len(metadata)) + metadata + body
    header = BookieEntryHeader(LEDGER, entry_id, entry_id - 1, 100)
    return bookkeeper.build(header, payload, digest)


def _batch(values: list[bytes]) -> bytes:
    out = b""
    for value in values:
        smm = api.SingleMessageMetadata(payload_size=len(value)).SerializeToString()
        out += struct.pack(">I", len(smm)) + smm + value
    return out


def _md(entry_id: int, **fields: object) -> api.MessageMetadata:
    return api.MessageMetadata(
        producer_name="p", sequence_id=entry_id, publish_time=1000 + entry_id, **fields
    )


def _named(entries: list[bytes], digest: DigestType, limit: int | None = None) -> list[int]:
    """The positions the native check names, the same from each of its three forms."""
    kind = int(digest)
    window = b""
    items = []
    for entry_id, data in enumerate(entries):
        window += struct.pack(">I", len(data))
        items.append((struct.pack(">qq", LEDGER, entry_id), struct.pack(">q", len(window))))
        window += data
    slots = b"".join(value for _, value in items)
    n = len(entries)
    named = native.payload_records(list(enumerate(entries)), 0, n, kind, limit, decompress)
    assert native.payload_items(items, 0, n, window, 0, kind, limit, decompress) == named
    assert native.payload_slots(slots, 0, n, window, 0, kind, limit, decompress) == named
    return named  # type: ignore[no-any-return]


@needs_native
@pytest.mark.parametrize("digest", [DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY])
def test_regular_payloads_pass_and_odd_ones_are_named(digest: DigestType) -> None:
    plain = _batch([b"a", b"bc", b""])
    entries = [
        _entry(0, _md(0), b"one value", digest),  # passes
        _entry(1, _md(1, num_messages_in_batch=3), plain, digest),  # passes
        _entry(
            2,
            _md(2, num_messages_in_batch=3, compression=api.LZ4, uncompressed_size=len(plain)),
            compress(api.LZ4, plain),
            digest,
        ),  # passes
        _entry(3, _md(3, num_messages_in_batch=4), plain, digest),  # a record short
        _entry(4, _md(4, num_messages_in_batch=2), plain, digest),  # bytes left over
        _entry(
            5,
            _md(5, num_messages_in_batch=3, compression=api.LZ4, uncompressed_size=len(plain) + 1),
            compress(api.LZ4, plain),
            digest,
        ),  # uncompressed_size wrong
        _entry(6, _md(6, marker_type=1), b"", digest),  # markers: the decoder's
        _entry(7, _md(7, num_messages_in_batch=3, compression=api.ZLIB), b"junk", digest),
    ]
    assert _named(entries, digest) == [3, 4, 5, 6, 7]
    # a limit below what an entry decompresses to: the decoder's error, named
    assert 2 in _named(entries, digest, limit=4)


@needs_native
@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32))
def test_a_passed_payload_is_one_decode_payload_takes(seed: int) -> None:
    """Generated and mutated entries (tests/support/fuzz_native.py's layouts target): the three
    forms name the same entries, and every entry the check passes that reads clean to its
    metadata decodes with no error in the decoder's payload step; so do the layout scans."""
    from tests.support import fuzz_native

    fuzz_native.layouts_target(random.Random(seed))


@needs_native
def test_hostile_arguments_are_refused() -> None:
    window = b"\x00" * 64
    for call in [
        lambda: native.payload_records([], 0, 1, 3, None, decompress),  # end past the list
        lambda: native.payload_records([], -1, 0, 3, None, decompress),
        lambda: native.payload_records([], 0, 0, 7, None, decompress),  # no such digest
        lambda: native.payload_items([], 1, 0, window, 0, 3, None, decompress),  # end < first
        lambda: native.payload_slots(b"\x00" * 8, 0, 2, window, 0, 3, None, decompress),
        lambda: native.payload_slots(b"", 0, 0, window, 0, 9, None, decompress),
    ]:
        with pytest.raises(ValueError):
            call()
    for call in [
        lambda: native.payload_records([], 0, 0, 3, None, "not callable"),
        lambda: native.payload_records((), 0, 0, 3, None, decompress),
        lambda: native.payload_items([], 0, 0, object(), 0, 3, None, decompress),
        lambda: native.payload_slots("slots", 0, 0, window, 0, 3, None, decompress),
    ]:
        with pytest.raises(TypeError):
            call()


@needs_native
def test_a_decompress_that_changes_the_records_is_survived() -> None:
    plain = _batch([b"a"])
    md = _md(0, num_messages_in_batch=1, compression=api.LZ4, uncompressed_size=len(plain))
    data = _entry(0, md, compress(api.LZ4, plain), DigestType.CRC32C)
    records = [(0, data), (1, data)]

    def meddling(*args: object) -> bytes:
        records.clear()
        return plain

    assert native.payload_records(records, 0, 2, 3, None, meddling) == [1]
