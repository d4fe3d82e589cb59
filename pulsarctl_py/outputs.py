"""Every file ledgerctl writes where the user names it, written one safe way.

Plans (``--plan``), offset mappings (``--mapping`` and the default ``PLAN.mapping.jsonl``),
plan backups (``PLAN.backup.json``), exports (``export --to``), compacted views
(``compact --export``) and ledger metadata dumps (``ledger meta --dump``) all go through
:func:`prepare`, called before anything is computed, so that a bad path fails fast in one
line. The rules:

* a character device or a FIFO is only ever streamed into: opened for writing where it
  is, never replaced, renamed over or given a sibling file (``--plan /dev/null``
  discards, ``--to /dev/stdout`` writes to standard output; a FIFO nobody reads is an
  error, not a hang). ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` and
  ``/proc/self/fd/N`` are this process's own descriptors and are written through them.
  A block device (a disk), a socket or a directory is refused;
* a symbolic link is refused, naming it: ledgerctl neither follows nor replaces it;
* an existing regular file is replaced only when it is this command's own earlier
  output of the same kind (a ledgerctl plan, recognised by its format header; an
  export by its columns...), when it is empty (as ``mktemp`` leaves it), or with
  ``--force``;
* anything else is a new file: written to a temporary file created exclusively
  (``O_EXCL``) in the target's own directory at :func:`prepare` time (so an unwritable
  place fails before the work), then linked to its name only if that name is still
  free (``link`` fails rather than replace a file that appeared meanwhile), or renamed
  over the earlier output it may replace;
* permission denied (or a read-only file system) exits 3; a missing directory or any
  other path that cannot be written is one line saying "cannot write" (exit 2).

Plans and backups are created readable by their owner only (they may hold a ledger's
password, which BookKeeper keeps in the ledger metadata); other outputs get the usual
mode (0666 less the umask).

Usage::

    out = outputs.prepare(path, outputs.PLAN, force=force)   # before the work
    with out.open_text() as fh:                               # after it
        fh.write(text)

``open_text``/``open_binary`` commit on a normal exit (fsync, then link or rename) and
discard the temporary file on an exception; :meth:`Output.discard` drops an output that
is not wanted after all. An output not committed is discarded when it is collected.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pulsarctl_py.decoders.errors import LedgerctlError, StoreUnavailable

#: errors that mean "not allowed here" rather than "not possible": exit 3
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)
#: how much of an existing file the recognisers read
_SNIFF = 64 * 1024


class OutputDenied(StoreUnavailable):
    """An output the operating system does not let ledgerctl write (exit 3)."""


def cannot_write(path: str | os.PathLike[str], exc: OSError) -> LedgerctlError:
    """The one-line error for an OSError met while writing ``path``."""
    reason = exc.strerror or str(exc)
    if exc.errno in _DENIED:
        return OutputDenied(f"cannot write {os.fspath(path)}: {reason.lower()}")
    if exc.errno == errno.ENOENT:
        parent = os.path.dirname(os.path.abspath(os.fspath(path)))
        if os.path.isdir(parent):  # /proc/self: a directory that takes no new files
            return LedgerctlError(f"cannot write {os.fspath(path)}: {parent} takes no new files")
        return LedgerctlError(f"cannot write {os.fspath(path)}: no such directory {parent}")
    return LedgerctlError(f"cannot write {os.fspath(path)}: {reason}")


# -- kinds of output and how to recognise an earlier one ------------------------------------------


def _head(path: Path) -> bytes | None:
    """The first bytes of a regular file, read without following a link or blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _SNIFF)
    except OSError:
        return None
    finally:
        os.close(fd)


def json_header(fmt: str) -> Callable[[Path], bool]:
    """Recognise a JSON document whose first key is ``"format": fmt`` (plans, backups)."""
    pattern = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"' + re.escape(fmt.encode()) + rb'"')

    def recognise(path: Path) -> bool:
        head = _head(path)
        return head is not None and pattern.match(head) is not None

    return recognise


def jsonl_keys(allowed: frozenset[str], *, exact: bool = False) -> Callable[[Path], bool]:
    """Recognise JSON lines whose first object has only ``allowed`` keys (all when exact)."""
    import json

    def recognise(path: Path) -> bool:
        head = _head(path)
        if head is None:
            return False
        first, newline, _ = head.partition(b"\n")
        if not newline and len(head) >= _SNIFF:
            return False  # a first line longer than the sniff: not one of ours
        try:
            row = json.loads(first)
        except ValueError:
            return False
        if not isinstance(row, dict) or not row:
            return False
        keys = set(row)
        return keys == allowed if exact else keys <= allowed

    return recognise


def parquet_tagged(tag: str) -> Callable[[Path], bool]:
    """Recognise a Parquet file whose schema metadata carries ``ledgerctl: tag``."""

    def recognise(path: Path) -> bool:
        head = _head(path)
        if head is None or not head.startswith(b"PAR1"):
            return False
        try:
            import pyarrow.parquet as pq

            meta = pq.read_schema(path).metadata or {}
        except Exception:  # any file pyarrow cannot read is not one of ours
            return False
        return meta.get(PARQUET_TAG_KEY) == tag.encode()

    return recognise


#: the Parquet schema metadata key ledgerctl writes into its Parquet outputs
PARQUET_TAG_KEY = b"ledgerctl"


@dataclass(frozen=True, slots=True)
class OutputKind:
    """What an output holds: its name for messages, how to tell an earlier one, its mode."""

    name: str
    recognise: Callable[[Path], bool]
    private: bool = False


def _either(*tests: Callable[[Path], bool]) -> Callable[[Path], bool]:
    return lambda path: any(test(path) for test in tests)


PLAN = OutputKind("plan", json_header("ledgerctl-plan"), private=True)
BACKUP = OutputKind("plan backup", json_header("ledgerctl-plan-backup"), private=True)
#: migrate index's offset mapping: exactly these keys per line (repair.migrate)
MAPPING_KEYS = frozenset(
    {"old_position", "legacy_kop_offset", "old_index", "messages", "first_index", "index"}
)
MAPPING = OutputKind("offset mapping", jsonl_keys(MAPPING_KEYS, exact=True))


def export_kind(columns: frozenset[str]) -> OutputKind:
    """``export --to``: JSON lines with export columns, or a Parquet file ledgerctl tagged."""
    return OutputKind("export", _either(jsonl_keys(columns), parquet_tagged("export")))


#: compact --export's rows (compaction.run.export_lines)
COMPACTED_VIEW_KEYS = frozenset(
    {"key", "value", "properties", "position", "publish_time", "event_time", "note"}
    | {"schema_version", "schema_type", "value_decoded", "value_error"}
)
COMPACTED_VIEW = OutputKind(
    "compacted view",
    _either(jsonl_keys(COMPACTED_VIEW_KEYS), parquet_tagged("compacted-view")),
)


def _ledger_metadata(path: Path) -> bool:
    head = _head(path)
    return head is not None and head.startswith(b"BookieMetadataFormatVersion\t")


#: ``ledger meta --dump``: a ledger's metadata as BookKeeper stores it (it holds the
#: ledger's password: readable by its owner only)
LEDGER_METADATA = OutputKind("ledger metadata dump", _ledger_metadata, private=True)


# -- the output ----------------------------------------------------------------------------------

_PROCESS_FD = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d{1,9})")
_STD_NAMES = {"/dev/stdout": 1, "/dev/stderr": 2}


def _process_fd(text: str) -> int | None:
    """The descriptor a path names when it is one of this process's own (/dev/stdout...)."""
    if text in _STD_NAMES:
        return _STD_NAMES[text]
    m = _PROCESS_FD.fullmatch(text)
    return int(m.group(1)) if m else None


def is_stream_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names something written in place: this process's own descriptor
    (/dev/stdout...), a character device or a FIFO (a symbolic link is not followed)."""
    text = os.fspath(path)
    if _process_fd(text) is not None:
        return True
    try:
        mode = os.lstat(text).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)


class Output:
    """A checked output path: a file to create or replace, or a stream to write into."""

    def __init__(
        self,
        path: Path,
        kind: OutputKind,
        *,
        stream_fd: int | None = None,
        replaces: os.stat_result | None = None,
    ) -> None:
        self.path = path
        self.kind = kind
        #: a device, FIFO or descriptor written in place (no temporary file, no rename)
        self.stream = stream_fd is not None
        self._fd = stream_fd
        #: the earlier output this one replaces (None: a new file)
        self._replaces = replaces
        self._tmp: str | None = None
        self._done = False
        #: files that belonged to the output replaced, removed once this one is in place
        self._companions: list[Path] = []
        self._finalizer: Any = None
        if stream_fd is None:
            self._reserve()
        else:
            self._finalizer = weakref.finalize(self, _close_quietly, stream_fd)

    def __str__(self) -> str:
        return os.fspath(self.path)

    @property
    def replaces_existing(self) -> bool:
        """Whether a file of that name exists and will be replaced (an earlier output)."""
        return self._replaces is not None

    # -- a file: the temporary file beside the target ---------------------------------------

    def _reserve(self) -> None:
        target = os.path.abspath(self.path)
        directory, name = os.path.split(target)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{name[:200]}.", suffix=".tmp", dir=directory)
        except OSError as exc:
            raise cannot_write(self.path, exc) from None
        try:
            if not self.kind.private:
                os.fchmod(fd, 0o666 & ~_umask())
        except OSError:
            pass
        # written through this descriptor, never reopened by name (the name could be
        # swapped for a link in a directory others may write)
        self._fd = fd
        self._tmp = tmp
        self._finalizer = weakref.finalize(self, _remove_and_close, tmp, fd)

    def remove_on_commit(self, path: Path) -> None:
        """Remove ``path`` (a file that belonged to the output being replaced, such as an
        undone plan's backup) once this output is in place."""
        self._companions.append(path)

    def sibling(self, suffix: str) -> Path | None:
        """``PATH<suffix>`` beside a file output; None for a stream (no file beside a device)."""
        if self.stream:
            return None
        return self.path.with_name(self.path.name + suffix)

    # -- writing --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def open_binary(self) -> Iterator[IO[bytes]]:
        """A binary file object on the output; committed when the block ends normally."""
        if self._done:
            raise LedgerctlError(f"{self.path} was written already")
        if self.stream:
            assert self._fd is not None
            for std in (sys.stdout, sys.stderr):  # what they buffered comes first
                with contextlib.suppress(OSError, ValueError):
                    std.flush()
            fh = os.fdopen(os.dup(self._fd), "wb")
            try:
                yield fh
                fh.flush()
            except OSError as exc:
                raise cannot_write(self.path, exc) from None
            finally:
                with contextlib.suppress(OSError):
                    fh.close()
            self.close()
            return
        assert self._tmp is not None and self._fd is not None
        fd, self._fd = self._fd, None
        fh = os.fdopen(fd, "wb")  # closes the descriptor with the file object
        try:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        except OSError as exc:
            fh.close()
            self.discard()
            raise cannot_write(self.path, exc) from None
        except BaseException:
            fh.close()
            self.discard()
            raise
        self.commit()

    @contextlib.contextmanager
    def open_text(self) -> Iterator[IO[str]]:
        """A UTF-8 text file object on the output; committed when the block ends normally."""
        import io

        with self.open_binary() as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8", newline="\n", write_through=False)
            try:
                yield text
                text.flush()
            finally:
                text.detach()

    def write_bytes(self, data: bytes) -> None:
        with self.open_binary() as fh:
            fh.write(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    # -- ending ---------------------------------------------------------------------------------

    def commit(self) -> None:
        """Give the temporary file its name: link it to a free name, or rename it over the
        earlier output it replaces (checked again: still that regular file, not a link)."""
        if self.stream:
            self.close()
            return
        assert self._tmp is not None
        target = os.fspath(self.path)
        try:
            if self._replaces is None:
                try:
                    os.link(self._tmp, target)
                except FileExistsError:
                    raise LedgerctlError(
                        f"cannot write {target}: a file of that name appeared while ledgerctl "
                        "was working; it was left as it is"
                    ) from None
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                        raise
                    # no hard links here (some FUSE or FAT file systems): claim the name
                    # exclusively, then rename over the claim
                    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
                    os.close(fd)
                    os.replace(self._tmp, target)
            else:
                now = os.lstat(target)
                before = self._replaces
                if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (
                    before.st_dev,
                    before.st_ino,
                ):
                    raise LedgerctlError(
                        f"cannot write {target}: it was replaced while ledgerctl was working; "
                        "it was left as it is"
                    )
                os.replace(self._tmp, target)
        except FileNotFoundError as exc:
            raise cannot_write(self.path, exc) from None
        except OSError as exc:
            raise cannot_write(self.path, exc) from None
        finally:
            self._drop_tmp()
        self._done = True
        for companion in self._companions:
            with contextlib.suppress(OSError):
                os.unlink(companion)
        with contextlib.suppress(OSError):
            dirfd = os.open(os.path.dirname(os.path.abspath(target)), os.O_RDONLY)
            try:
                os.fsync(dirfd)
            finally:
                os.close(dirfd)

    def _drop_tmp(self) -> None:
        tmp, self._tmp = self._tmp, None
        fd, self._fd = self._fd, None
        _remove_and_close(tmp, fd)
        if self._finalizer is not None:
            self._finalizer.detach()

    def discard(self) -> None:
        """Drop an output that will not be written (its temporary file goes)."""
        if self.stream:
            self.close()
        else:
            self._drop_tmp()
        self._done = True

    def close(self) -> None:
        fd, self._fd = self._fd, None
        self._done = True
        if fd is not None:
            if self._finalizer is not None:
                self._finalizer.detach()
            _close_quietly(fd)


def _remove_and_close(path: str | None, fd: int | None) -> None:
    _remove(path)
    if fd is not None:
        _close_quietly(fd)


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _describe_mode(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISBLK(mode):
        return "a block device (a disk): ledgerctl never writes into one"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _open_stream(path: str, mode: int) -> int:
    """Open a character device or FIFO for writing where it is (no create, no truncate)."""
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    if stat.S_ISFIFO(mode):
        flags |= os.O_NONBLOCK  # no reader: ENXIO now rather than a hang
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO and stat.S_ISFIFO(mode):
            raise LedgerctlError(
                f"cannot write {path}: it is a FIFO and no process is reading it"
            ) from None
        raise cannot_write(path, exc) from None
    try:
        now = os.fstat(fd).st_mode
        if stat.S_IFMT(now) != stat.S_IFMT(mode):  # swapped between the checks
            raise LedgerctlError(f"cannot write {path}: it changed while being opened")
        if stat.S_ISFIFO(mode):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def prepare(path: str | os.PathLike[str], kind: OutputKind, *, force: bool = False) -> Output:
    """Check ``path`` as an output of ``kind`` and get it ready to be written (see the
    module docstring for the rules); raise a one-line :class:`LedgerctlError` otherwise."""
    text = os.fspath(path)
    if not text:
        raise LedgerctlError(f"no file given for the {kind.name} (an empty path)")
    if "\x00" in text:
        raise LedgerctlError(f"cannot write {text!r}: a path cannot hold a NUL byte")
    fd = _process_fd(text)
    if fd is not None:
        try:
            own = os.dup(fd)
        except OSError as exc:
            raise LedgerctlError(
                f"cannot write {text}: this process has no descriptor {fd} ({exc.strerror})"
            ) from None
        return Output(Path(text), kind, stream_fd=own)
    if text.endswith("/"):
        raise LedgerctlError(f"cannot write {text}: it names a directory, not a file")
    try:
        st = os.lstat(text)
    except FileNotFoundError:
        return Output(Path(text), kind)
    except OSError as exc:
        raise cannot_write(text, exc) from None
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(text)
        except OSError:
            target = "?"
        raise LedgerctlError(
            f"will not write {text}: it is a symbolic link (to {target}); ledgerctl neither "
            "follows nor replaces one: name the file itself"
        )
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return Output(Path(text), kind, stream_fd=_open_stream(text, mode))
    if not stat.S_ISREG(mode):
        raise LedgerctlError(f"cannot write {text}: it is {_describe_mode(mode)}")
    if not (force or st.st_size == 0 or kind.recognise(Path(text))):
        raise LedgerctlError(
            f"will not overwrite {text}: it exists and is not a ledgerctl {kind.name} "
            "(choose a new name, or pass --force to replace it)"
        )
    return Output(Path(text), kind, replaces=st)


def check_directory_target(path: str | os.PathLike[str]) -> None:
    """A directory ledgerctl fills (demo's DIR): refuse a symbolic link or a non-directory."""
    text = os.fspath(path)
    if not text:
        raise LedgerctlError("no directory given (an empty path)")
    try:
        st = os.lstat(text)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise cannot_write(text, exc) from None
    if stat.S_ISLNK(st.st_mode):
        raise LedgerctlError(
            f"will not write into {text}: it is a symbolic link (to {os.readlink(text)}); "
            "name the directory itself"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise LedgerctlError(f"{text} exists and is not a directory")
