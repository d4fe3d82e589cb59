"""Reading a pass over a ledger's entries with read-ahead in the entry logs.

:meth:`~pulsarctl_py.stores.bookie.store.BookieStore.read_entries` reads a ledger's
entries in order through a :class:`PassReader`: the entry logs stay open for the pass and
are read in chunks where the entries follow each other, with the same bytes and the same
errors as one read per entry.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pulsarctl_py.decoders import entrylog, limits

from .files import FileCache
from .model import Location

#: the plain read of one entry at a location (``BookieStore.read_at_location``)
PlainRead = Callable[[int, int, Location], bytes]


class PassReader:
    """Reads the entries of one pass over a ledger (:meth:`BookieStore.read_entries`).

    Same bytes and checks as ``plain`` (:meth:`BookieStore.read_at_location`, which reads
    one entry at a location from ``files``, the store's open files), cheaper per entry:
    entry logs stay open for the pass, and where a ledger's entries follow each other in a
    log (the usual case: offsets ascending with small gaps) the log is read ahead in
    ``chunk``-byte reads (the store's ``READ_AHEAD``) and entries are cut out of the buffer,
    instead of two preads per entry. Random access and entries larger than half a chunk
    are read exactly (size, then entry). Journal locations and anything that fails a check
    take the plain path, so errors are exactly those of ``read_at_location``. At most
    ``max_files`` logs are held open with a buffer.
    """

    __slots__ = ("chunk", "files", "last_path", "last_view", "max_files", "plain", "views")

    def __init__(self, files: FileCache, plain: PlainRead, chunk: int, max_files: int = 8) -> None:
        self.files = files
        self.plain = plain
        self.chunk = chunk
        self.max_files = max_files
        self.views: dict[Path, _LogView | None] = {}
        self.last_path: Path | None = None
        self.last_view: _LogView | None = None

    def _view(self, path: Path) -> _LogView | None:
        if path in self.views:
            view = self.views[path]
        else:
            if len(self.views) >= self.max_files:
                oldest = self.views.pop(next(iter(self.views)))
                if oldest is not None:
                    oldest.release()
            # a missing file is left to the plain path, which says so
            view = _LogView(self.files, path) if path.is_file() else None
            self.views[path] = view
        self.last_path, self.last_view = path, view
        return view

    def read(self, ledger_id: int, entry_id: int, location: Location) -> bytes:
        if location.source != "journal":
            path = location.path
            view = self.last_view if path is self.last_path else self._view(path)
            if view is not None:
                data = view.entry(location.offset, ledger_id, entry_id, self.chunk)
                if data is not None:
                    return data
        return self.plain(ledger_id, entry_id, location)

    def close(self) -> None:
        views, self.views = self.views, {}
        self.last_path = self.last_view = None
        for view in views.values():
            if view is not None:
                view.release()


class _LogView:
    """One entry log held open during a pass, with a read-ahead buffer."""

    __slots__ = ("buf", "file", "hold", "next", "start")

    def __init__(self, files: FileCache, path: Path) -> None:
        self.hold = files.open(path)
        self.file = self.hold.__enter__()
        self.buf = b""
        self.start = 0  # file offset of buf[0]
        self.next = -1  # file offset just past the last entry read: where a sequel starts

    def entry(self, offset: int, ledger_id: int, entry_id: int, chunk: int) -> bytes | None:
        """The checked entry at ``offset``; None: let the plain path read (or reject) it."""
        at = offset - 4
        rel = at - self.start
        buf = self.buf
        if rel < 0 or rel + _HEAD_SIZE > len(buf):
            if at < 0:
                return None
            if not (0 <= self.next <= at < self.next + chunk // 2):
                return self._exact(offset, ledger_id, entry_id)  # random access
            buf = self.buf = self.file.read_at(at, chunk)
            self.start, rel = at, 0
            if len(buf) < _HEAD_SIZE:
                return None
        size, found_ledger, found_entry = _HEAD.unpack_from(buf, rel)
        if size < _MIN_SIZE or found_ledger != ledger_id or found_entry != entry_id:
            return None
        stop = rel + 4 + size
        if stop > len(buf):
            if size + 4 > chunk // 2:
                return self._exact(offset, ledger_id, entry_id)
            buf = self.buf = self.file.read_at(at, chunk)
            self.start, rel, stop = at, 0, 4 + size
            if stop > len(buf):
                return None
        self.next = self.start + stop
        return buf[rel + 4 : stop]

    def _exact(self, offset: int, ledger_id: int, entry_id: int) -> bytes | None:
        """Read the size and ids, then the entry: two preads, as read_at_location does."""
        head = self.file.read_at(offset - 4, _HEAD_SIZE)
        if len(head) < _HEAD_SIZE:
            return None
        size, found_ledger, found_entry = _HEAD.unpack(head)
        if size < _MIN_SIZE or found_ledger != ledger_id or found_entry != entry_id:
            return None
        if size > limits.max_frame():
            return None  # the plain path refuses it, with the reason
        data = self.file.read_at(offset, size)
        if len(data) != size:
            return None
        self.next = offset + size
        return data

    def release(self) -> None:
        self.buf = b""
        self.hold.__exit__(None, None, None)


_HEAD = entrylog.RECORD_HEAD
_HEAD_SIZE = entrylog.RECORD_HEAD.size
_MIN_SIZE = entrylog.MIN_SANE_ENTRY_SIZE
