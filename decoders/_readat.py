"""Positional reads for the bookie file formats, without doing any I/O here.

Entry logs and journals are too large to hold in memory, so their scanners take a
``read_at(offset, size)`` callable instead of a buffer: it returns up to ``size`` bytes
starting at ``offset`` (fewer at the end of the input). The store passes one backed by
``os.pread`` on a read-only file; tests pass :func:`bytes_reader` over bytes.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import CorruptEntryError

ReadAt = Callable[[int, int], bytes]


def bytes_reader(data: bytes | bytearray | memoryview) -> ReadAt:
    """A ``read_at`` over bytes already in memory."""
    view = memoryview(data)

    def read_at(offset: int, size: int) -> bytes:
        if offset < 0 or size < 0:
            return b""
        return bytes(view[offset : offset + size])

    return read_at


def read_exact(read_at: ReadAt, offset: int, size: int, layer: str, what: str) -> bytes:
    """Read exactly ``size`` bytes or raise CorruptEntryError naming the layer."""
    data = read_at(offset, size)
    if len(data) != size:
        raise CorruptEntryError(layer, offset, f"{size} bytes of {what}", f"{len(data)} bytes")
    return data


class Window:
    """A small read-ahead cache over ``read_at`` for scanners that step through a file."""

    __slots__ = ("_data", "_read_at", "_size", "_start", "chunk")

    def __init__(self, read_at: ReadAt, size: int, chunk: int = 1 << 16) -> None:
        self._read_at = read_at
        self._size = size
        self._start = 0
        self._data = b""
        self.chunk = chunk

    def get(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``, never past the end of the input."""
        size = max(0, min(size, self._size - offset))
        end = offset + size
        if offset < self._start or end > self._start + len(self._data):
            self._start = offset
            self._data = self._read_at(offset, max(size, self.chunk))
        rel = offset - self._start
        return self._data[rel : rel + size]
