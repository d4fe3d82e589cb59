"""The C parser of v3 read answers (``_speedups.v3_read_replies``) against protobuf's.

Two properties, on generated answers and on mutated bytes (truncated frames, changed
bytes, wrong wire types, huge lengths):

* every frame the C parser takes gives the fields protobuf's parse gives; the frames it
  leaves are ones the Python path must look at (it never takes a frame protobuf rejects),
  and a regular answer in any encoding is taken exactly when protobuf takes it;
* a connection reading the same bytes gives the same replies and ends with the same
  one-line error with the C parser as without it (the Python path is the fallback).
"""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookie_wire as wire
from pulsarctl_py.decoders.errors import InputFormatError
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.stores.live import BookieConnection, BookieUnavailable, ClientOptions
from pulsarctl_py.stores.live import client as client_module
from tests.support.protowire import reencoded

pytestmark = pytest.mark.skipif(
    native is None or not hasattr(native, "v3_read_replies"),
    reason="the C extension is not built (or LEDGERCTL_PURE_PYTHON is set)",
)

U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
STATUS = st.sampled_from(sorted(wire.V3_STATUS))


varint = wire._varint  # any value, negative int64 as ten bytes (its own tests hold it)


def field(number: int, wire_type: int, value: int | bytes) -> bytes:
    tag = varint(number << 3 | wire_type)
    if wire_type == 2:
        assert isinstance(value, bytes)
        return tag + varint(len(value)) + value
    assert isinstance(value, int)
    return tag + varint(value)


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    """A Response payload: mostly a read answer, in any field order, sometimes with
    optional, unknown or repeated fields, another operation or version."""
    op = draw(st.sampled_from([1, 1, 1, 1, 7, 9, 2]))
    header = [
        field(1, 0, draw(st.sampled_from([3, 3, 3, 2, 1]))),
        field(2, 0, op),
        field(3, 0, draw(U64)),
    ]
    if draw(st.booleans()):
        header.append(field(4, 0, draw(st.integers(0, 2**33))))
    read = [
        field(1, 0, draw(STATUS)),
        field(2, 0, draw(I64)),
        field(3, 0, draw(I64)),
    ]
    if draw(st.booleans()):
        read.append(field(4, 2, draw(st.binary(max_size=300))))
    if draw(st.booleans()):
        read.append(field(5, 0, draw(I64)))
    if draw(st.booleans()):
        read.append(field(6, 0, draw(I64)))
    extra = draw(st.sampled_from(["none"] * 6 + ["unknown", "repeat", "drop"]))
    if extra == "unknown":
        read.append(field(draw(st.integers(7, 40)), 0, draw(U64)))
    elif extra == "repeat":
        read.append(draw(st.sampled_from(read)))
    elif extra == "drop":
        read.pop(draw(st.integers(0, len(read) - 1)))
    header = draw(st.permutations(header))
    read = draw(st.permutations(read))
    parts = [
        field(1, 2, b"".join(header)),
        field(2, 0, draw(STATUS)),
        field(100, 2, b"".join(read)),
    ]
    return b"".join(draw(st.permutations(parts)))


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def python_parse(payload: bytes) -> tuple | None:
    """What the Python path makes of one payload, as the C parser's tuple; None when
    protobuf rejects it; ``"other"`` when it is not an answer to a read."""
    try:
        reply = wire.parse_v3_response(payload)
    except InputFormatError:
        return None
    if reply.op != "read":
        return ("other",)
    code = wire.V3_FROM_NAME[reply.status]
    return (reply.key, code, reply.ledger_id, reply.entry_id, reply.body, reply.max_lac)


@given(st.lists(answers(), min_size=1, max_size=6))
def test_taken_frames_match_protobuf(payloads: list[bytes]) -> None:
    buf = bytearray(b"".join(frame(p) for p in payloads))
    out: list[tuple] = []
    pos = native.v3_read_replies(buf, 0, wire.MAX_FRAME, out)
    # frames are taken in order, up to the first one left to Python
    taken = 0
    at = 0
    for payload in payloads:
        if taken == len(out):
            break
        assert out[taken] == python_parse(payload)
        taken += 1
        at += 4 + len(payload)
    assert pos == at
    if taken < len(payloads):
        # the frame left behind is one the C parser does not call regular: asking again
        # from there takes nothing
        again: list[tuple] = []
        assert native.v3_read_replies(buf, pos, wire.MAX_FRAME, again) == pos and not again


def test_plain_read_answers_are_all_taken() -> None:
    frames = [wire.v3_read_response(t, "EOK", 5, t, b"x" * t, 9) for t in range(1, 40)]
    frames.append(wire.v3_read_response(40, "ENOENTRY", 5, 40, None, -1))
    out: list[tuple] = []
    buf = b"".join(frames)
    assert native.v3_read_replies(buf, 0, wire.MAX_FRAME, out) == len(buf)
    assert out[0] == (1, 0, 5, 1, b"x", 9)
    assert out[-1] == (40, 403, 5, 40, None, None)
    assert [python_parse(f[4:]) for f in frames] == out


def test_incomplete_and_oversized_frames_are_left_alone() -> None:
    good = wire.v3_read_response(1, "EOK", 5, 1, b"abc", 0)
    for cut in range(len(good)):
        out: list[tuple] = []
        assert native.v3_read_replies(good + good[:cut], 0, wire.MAX_FRAME, out) == len(good)
        assert len(out) == 1
    huge = struct.pack(">I", wire.MAX_FRAME + 1) + good[4:]
    out = []
    assert native.v3_read_replies(huge, 0, wire.MAX_FRAME, out) == 0 and out == []
    with pytest.raises(ValueError):
        native.v3_read_replies(good, len(good) + 1, wire.MAX_FRAME, [])


# -- a connection reading the same bytes with and without the C parser ----------------


def read_all(data: bytes, use_c: bool) -> tuple[list, str]:
    """Every reply a connection takes from ``data`` (then the bookie closes), and the
    error it ends with."""
    saved = client_module._NATIVE
    client_module._NATIVE = native if use_c else None
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(data)
        theirs.close()
        conn = BookieConnection("b:3181", ClientOptions(timeout=2))
        conn._sock = ours
        got: list = []
        try:
            while True:
                got.extend(conn._replies())
        except BookieUnavailable as exc:
            return got, exc.one_line()
    finally:
        ours.close()
        client_module._NATIVE = saved


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """Frames of read answers, then damaged: truncated, bytes changed, a tag's wire type
    changed, a huge length written in, or bytes inserted."""
    data = bytearray(b"".join(frame(p) for p in draw(st.lists(answers(), min_size=1, max_size=4))))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "byte", "wiretype", "huge", "insert"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "truncate":
            del data[at:]
        elif kind == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "wiretype" and data:
            data[at] = (data[at] & ~7) | draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7]))
        elif kind == "huge":
            data[at:at] = draw(
                st.sampled_from([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", varint(2**63)])
            )
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@settings(max_examples=150)
@given(mutated())
def test_damaged_bytes_give_the_same_replies_and_error(data: bytes) -> None:
    with_c = read_all(data, True)
    without = read_all(data, False)
    assert with_c == without
    assert "\n" not in with_c[1]


@given(st.lists(answers(), min_size=1, max_size=5))
def test_generated_answers_give_the_same_replies(payloads: list[bytes]) -> None:
    data = b"".join(frame(p) for p in payloads)
    with_c = read_all(data, True)
    assert with_c == read_all(data, False)
    # the stream ends when the bookie closes it, or earlier at an answer that is not a read
    ends = ("closed the connection before answering", "answered a request it was not asked")
    assert ends[0] in with_c[1] or ends[1] in with_c[1]


@settings(max_examples=300)
@given(st.binary(max_size=200), st.integers(0, 2**32 - 1))
def test_arbitrary_bytes_never_crash_and_take_only_what_protobuf_takes(
    data: bytes, size: int
) -> None:
    """Any bytes, behind their true length or a random one: whatever the C parser takes
    is what protobuf's parse gives for that frame."""
    for buf in (frame(data), struct.pack(">I", size) + data):
        out: list[tuple] = []
        pos = native.v3_read_replies(buf, 0, wire.MAX_FRAME, out)
        assert pos in (0, len(buf))
        if out:
            assert len(out) == 1 and pos == len(buf)
            assert out[0] == python_parse(buf[4:])


@st.composite
def regular_answers(draw: st.DrawFn) -> bytes:
    """An answer to a read the C parser takes when its encoding is protobuf's: every
    field once, in any order, values the schema knows."""
    header = [field(1, 0, draw(st.sampled_from([1, 2, 3]))), field(2, 0, 1), field(3, 0, draw(U64))]
    if draw(st.booleans()):
        header.append(field(4, 0, draw(st.integers(0, 2**32 - 1))))
    read = [field(1, 0, draw(STATUS)), field(2, 0, draw(I64)), field(3, 0, draw(I64))]
    if draw(st.booleans()):
        read.append(field(4, 2, draw(st.binary(max_size=20))))
    for number in (5, 6):
        if draw(st.booleans()):
            read.append(field(number, 0, draw(I64)))
    parts = [
        field(1, 2, b"".join(draw(st.permutations(header)))),
        field(2, 0, draw(STATUS)),
        field(100, 2, b"".join(draw(st.permutations(read)))),
    ]
    return b"".join(draw(st.permutations(parts)))


@settings(max_examples=400)
@given(regular_answers(), st.data())
def test_encodings_are_taken_as_protobuf_takes_them(payload: bytes, data: st.DataObject) -> None:
    """A regular answer with every tag, length and varint written again, overlong and past
    protobuf's limits (tests/support/protowire.py): the C parser takes it exactly when protobuf
    parses it, and then gives protobuf's fields."""
    payload = data.draw(reencoded(payload, {1: {}, 100: {}}))
    out: list[tuple] = []
    pos = native.v3_read_replies(frame(payload), 0, wire.MAX_FRAME, out)
    expected = python_parse(payload)
    assert (pos != 0) == (expected is not None), payload.hex()
    if out:
        assert out == [expected]
