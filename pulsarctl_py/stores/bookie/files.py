"""Read-only access to bookie files: every file is opened ``O_RDONLY`` and read by position."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .model import BookieDirError


class ReadOnlyFile:
    """A file opened read-only; ``read_at`` is ``os.pread`` (safe across threads)."""

    __slots__ = ("fd", "path", "size", "users")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1
        try:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            self.size = os.fstat(self.fd).st_size
        except OSError as exc:
            self.close()
            raise unreadable(path, exc) from None
        self.users = 0

    def read_at(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; fewer at the end of the file."""
        if offset < 0 or size <= 0 or offset >= self.size:
            return b""
        parts = []
        while size > 0:
            try:
                chunk = os.pread(self.fd, size, offset)
            except OSError as exc:  # EIO from a failing disk
                raise unreadable(self.path, exc) from None
            if not chunk:
                break
            parts.append(chunk)
            offset += len(chunk)
            size -= len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def unreadable(path: Path, exc: OSError) -> BookieDirError:
    """The one-line error for a bookie file or directory the OS refuses to read."""
    return BookieDirError(f"cannot read {path}: {exc.strerror or exc}")


class FileCache:
    """Keeps up to ``limit`` idle files open; a file in use is never closed under a reader."""

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._files: OrderedDict[Path, ReadOnlyFile] = OrderedDict()
        self._lock = threading.Lock()

    @contextmanager
    def open(self, path: Path) -> Iterator[ReadOnlyFile]:
        """The open file for ``path``, held until the ``with`` block ends."""
        with self._lock:
            found = self._files.get(path)
            if found is None:
                found = ReadOnlyFile(path)
                self._files[path] = found
            self._files.move_to_end(path)
            found.users += 1
        try:
            yield found
        finally:
            with self._lock:
                found.users -= 1
                self._trim()

    def _trim(self) -> None:
        idle = [p for p, f in self._files.items() if f.users == 0]
        for path in idle[: max(0, len(self._files) - self.limit)]:
            self._files.pop(path).close()

    def close(self) -> None:
        with self._lock:
            for opened in self._files.values():
                opened.close()
            self._files.clear()


def read_small_file(path: Path, limit: int = 1 << 20) -> bytes:
    """The content of a small file (lastMark, lastId), opened read-only."""
    opened = ReadOnlyFile(path)
    try:
        return opened.read_at(0, min(opened.size, limit))
    finally:
        opened.close()
