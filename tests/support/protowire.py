"""Protobuf written by hand, in any encoding, including the ones protobuf refuses.

The native parsers (decoders/_speedups.c) must take exactly the encodings the protobuf
library takes. What the library (upb) does, measured by tests/decoders/test_speedups.py:

* a varint value may take up to 10 bytes, zeros padded on (``0x85 0x80 0x00`` is 5);
  bits past the 64th are dropped, so a 10th byte of 2 reads as 0 there;
* a tag takes at most 5 bytes and its value fits 32 bits; field number 0 is refused;
* a length takes at most 5 bytes.

:func:`reencoded` writes a valid message again with every tag, length and varint in a
size drawn from "minimal" to "past the limit", so that tests meet all of those cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

#: the longest encodings protobuf accepts
TAG_MAX = 5
LENGTH_MAX = 5
VARINT_MAX = 10


def varint(value: int, size: int | None = None) -> bytes:
    """``value`` (0 <= value < 2**70) as a varint of ``size`` bytes (the fewest when None):
    padded with continuation bytes of zeros; bits past the 64th land in the 10th byte."""
    if value < 0:
        value &= 2**64 - 1  # protobuf's int64: ten bytes
    need = max(1, (value.bit_length() + 6) // 7)
    size = need if size is None else size
    if size < need:
        raise ValueError(f"{value} takes {need} bytes, not {size}")
    out = bytearray()
    for i in range(size):
        byte = (value >> (7 * i)) & 0x7F
        out.append(byte | (0x80 if i < size - 1 else 0))
    return bytes(out)


def varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def field(number: int, wire: int, value: int | bytes) -> bytes:
    """One field, minimally encoded."""
    tag = varint(number << 3 | wire)
    if wire == 2:
        assert isinstance(value, bytes)
        return tag + varint(len(value)) + value
    if wire == 0:
        assert isinstance(value, int)
        return tag + varint(value)
    assert isinstance(value, bytes)
    return tag + value


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` (any length) and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("a varint past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(data: bytes) -> list[tuple[int, int, Any]]:
    """A message's fields, as (number, wire type, value): an int for varints, bytes for the
    others. Raises ValueError for bytes that are not a plain message (groups included)."""
    out = []
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ValueError("field 0")
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 2:
            size, pos = read_varint(data, pos)
            value = data[pos : pos + size]
            if len(value) != size:
                raise ValueError("a length past the end")
            pos += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value = data[pos : pos + width]
            if len(value) != width:
                raise ValueError("a fixed field past the end")
            pos += width
        else:
            raise ValueError(f"wire type {wire}")
        out.append((number, wire, value))
    return out


Nested = Mapping[int, "Nested"]


@st.composite
def sizes(draw: st.DrawFn, need: int, limit: int) -> int:
    """A size for an encoding that needs ``need`` bytes: mostly the fewest, often padded
    within ``limit``, sometimes past it."""
    kind = draw(st.integers(0, 9))
    if kind < 5:
        return need
    if kind < 8:
        return draw(st.integers(need, max(need, limit)))
    return draw(st.integers(max(need, limit + 1), max(need, limit) + 2))


@st.composite
def wide_varint(draw: st.DrawFn, value: int) -> bytes:
    """``value`` as a varint of a drawn size; at ten bytes, sometimes with bits past the
    64th in the last byte (which protobuf drops)."""
    size = draw(sizes(varint_size(value), VARINT_MAX))
    if size == VARINT_MAX and draw(st.integers(0, 2)) == 0:
        value |= draw(st.integers(1, 63)) << 64
    return varint(value, size)


@st.composite
def reencoded(draw: st.DrawFn, data: bytes, nested: Nested | None = None) -> bytes:
    """``data`` (a protobuf message) with every tag, length and varint written again in a
    drawn size; the fields in ``nested`` (number -> their own ``nested``) are messages
    re-encoded the same way. Bytes that are not a plain message come back unchanged."""
    try:
        parsed = fields(data)
    except ValueError:
        return data
    nested = nested or {}
    out = bytearray()
    for number, wire, value in parsed:
        tag = number << 3 | wire
        out += varint(tag, draw(sizes(varint_size(tag), TAG_MAX)))
        if wire == 0:
            out += draw(wide_varint(value))
        elif wire == 2:
            if number in nested:
                value = draw(reencoded(value, nested[number]))
            out += varint(len(value), draw(sizes(varint_size(len(value)), LENGTH_MAX)))
            out += value
        else:
            out += value
    return bytes(out)


def protobuf_takes(cls: Any, data: bytes) -> bool:
    """Whether the protobuf library parses ``data`` as ``cls`` (required fields aside)."""
    from google.protobuf.message import DecodeError

    msg = cls()
    try:
        msg.MergeFromString(data)
    except DecodeError:
        return False
    return True


# -- Python objects that run code where C might not expect it --------------------------------


class Meddler:
    """An object whose ``__index__``, ``__bool__``, ``__add__``, ``__eq__``, ``__hash__``
    and buffer-free conversions run ``action`` first (emptying or refilling the lists a
    native function is reading), then answer like ``value``."""

    def __init__(self, value: int, action: Any) -> None:
        self.value = value
        self.action = action

    def _act(self) -> None:
        action, self.action = self.action, None  # once: no recursion through the action
        if action is not None:
            action()

    def __index__(self) -> int:
        self._act()
        return self.value

    def __int__(self) -> int:
        return self.__index__()

    def __bool__(self) -> bool:
        self._act()
        return bool(self.value)

    def __add__(self, other: Any) -> Any:
        self._act()
        return self.value + other

    __radd__ = __add__

    def __eq__(self, other: object) -> bool:
        self._act()
        return self.value == other

    def __hash__(self) -> int:
        self._act()
        return hash(self.value)
