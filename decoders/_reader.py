"""Bounds-checked reads shared by every layer: a short input names the layer and offset."""

from __future__ import annotations

import struct

from .errors import CorruptEntryError

U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


def need(buf: bytes | memoryview, pos: int, size: int, end: int, layer: str, what: str) -> None:
    """Raise CorruptEntryError unless ``size`` bytes of ``what`` fit before ``end``."""
    if size < 0 or pos + size > end:
        left = max(0, end - pos)
        raise CorruptEntryError(layer, pos, f"{size} bytes of {what}", f"{left} bytes left")


def read_u32(buf: bytes | memoryview, pos: int, end: int, layer: str, what: str) -> int:
    need(buf, pos, 4, end, layer, what)
    return U32.unpack_from(buf, pos)[0]


def peek_u16(buf: bytes | memoryview, pos: int, end: int) -> int | None:
    if pos + 2 > end:
        return None
    return U16.unpack_from(buf, pos)[0]
