"""Reading a small file the user named on the command line: a password, a passphrase, a
private key, an entry to decode.

Such a path may be anything: a regular file, a device (``/dev/zero`` never ends), a FIFO
nobody writes to (opening it would wait forever), a pipe from the shell's process
substitution (``--password-file <(pass show bk)``, which must keep working), a directory.
:func:`read_small` reads at most ``limit`` bytes of any of them, never blocks longer than
:data:`FIFO_WAIT` seconds for a writer, and says what went wrong in one line: permission
denied or an I/O error is :class:`StoreUnavailable` (exit 3, as for any store the OS
refuses), anything else about the path is bad input (exit 2).
"""

from __future__ import annotations

import errno
import os
import select
import stat
import time

from pulsarctl_py.decoders.errors import LedgerctlError, StoreUnavailable

#: how long a FIFO or pipe may stay silent before the read is given up
FIFO_WAIT = 5.0
_CHUNK = 1 << 16
#: errors that say the file is there but the OS will not hand it over (exit 3)
_REFUSED = {errno.EACCES, errno.EPERM, errno.EIO, errno.ENXIO}


def cannot_read(what: str, path: str | os.PathLike[str], exc: OSError) -> LedgerctlError:
    """The one-line error for an OSError met reading ``path`` (exit 3 when refused)."""
    reason = exc.strerror or str(exc)
    message = f"cannot read {what} {os.fspath(path)}: {reason}"
    if exc.errno in _REFUSED:
        return StoreUnavailable(message)
    return LedgerctlError(message)


def read_small(
    path: str | os.PathLike[str], limit: int, what: str, *, wait: float = FIFO_WAIT
) -> bytes:
    """At most ``limit`` bytes of ``path``, or a one-line error (see the module doc)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise cannot_read(what, path, exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise LedgerctlError(f"cannot read {what} {os.fspath(path)}: it is a directory")
        streamed = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        deadline = time.monotonic() + wait
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            if streamed and not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                raise LedgerctlError(
                    f"cannot read {what} {os.fspath(path)}: nothing was written to it within "
                    f"{wait:g} s (a FIFO without a writer?)"
                )
            try:
                chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            except BlockingIOError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise cannot_read(what, path, exc) from None
    finally:
        os.close(fd)
    if size > limit:
        raise LedgerctlError(f"{what} {os.fspath(path)} is larger than {limit} bytes")
    return b"".join(chunks)


def check_openable(path: str | os.PathLike[str], what: str) -> None:
    """Fail early (before any output) on a path that cannot be opened for reading; a FIFO
    is not waited for here."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise cannot_read(what, path, exc) from None
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise LedgerctlError(f"cannot read {what} {os.fspath(path)}: it is a directory")
    finally:
        os.close(fd)
