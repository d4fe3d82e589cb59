"""Reading the JSON documents ledgerctl is handed back: plans, plan backups, verify reports.

They are untrusted input (a plan may have been edited, a report may be anything), so they
are read one way:

* only from a regular file (or standard input where a command says ``-``): a FIFO, a
  device, a directory, ``/`` or an empty path is refused in one line, before reading;
* streamed, with a size cap checked against the file's size before a byte is read and
  again while reading (a file that grows is cut off, not read to the end): a 1 GiB plan is
  refused at once, in bounded memory;
* parsed by orjson, which refuses nesting deeper than 1024 levels: a document nested
  100,000 deep is one line ("is not JSON"), not a RecursionError.

The cap is :data:`MAX_DOCUMENT_SIZE` (256 MiB: a plan holds the bytes it deletes, and a
stopped bookie's index entries of a ledger with a million entries take about 32 MB of
base64); ``LEDGERCTL_MAX_PLAN_SIZE`` or ``max_plan_size`` in ledgerctl.toml (bytes) raises or
lowers it.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from typing import Any

from pulsarctl_py.decoders.errors import LedgerctlError, StoreUnavailable

MAX_DOCUMENT_SIZE = 256 * 1024 * 1024
ENV_MAX_SIZE = "LEDGERCTL_MAX_PLAN_SIZE"
_CHUNK = 1 << 20


class InputDenied(StoreUnavailable):
    """A document the operating system does not let ledgerctl read (exit 3)."""


def max_document_size() -> int:
    """The cap in bytes: ``$LEDGERCTL_MAX_PLAN_SIZE``, else ``max_plan_size`` in
    ledgerctl.toml, else the default (the ``max_plan_size`` setting of
    :mod:`pulsarctl_py.precedence`)."""
    from pulsarctl_py import precedence

    return int(precedence.resolve(precedence.MAX_PLAN_SIZE).value)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _too_big(name: str, what: str, size: int | None, cap: int) -> LedgerctlError:
    have = f"{size} bytes" if size is not None else "more"
    return LedgerctlError(
        f"the {what} {name} is {have}, more than the {cap} bytes a {what} may hold "
        f"(set {ENV_MAX_SIZE} to raise the limit)"
    )


def read_document(path: str | os.PathLike[str], what: str, *, stdin: bool = False) -> bytes:
    """The bytes of the document at ``path`` (``-`` is standard input when ``stdin``)."""
    name = os.fspath(path)
    cap = max_document_size()
    if not name:
        raise LedgerctlError(f"no {what} file given (an empty path)")
    if name == "-" and stdin:
        data = sys.stdin.buffer.read(cap + 1)
        if len(data) > cap:
            raise _too_big("on standard input", what, None, cap)
        return data
    try:
        # non-blocking: opening a FIFO must not wait for a writer
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise InputDenied(f"cannot read the {what} {name}: permission denied") from None
        raise LedgerctlError(f"cannot read the {what} {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LedgerctlError(
                f"cannot read the {what} {name}: it is {_kind(st.st_mode)}; a {what} is read "
                "from a regular file"
            )
        if st.st_size > cap:
            raise _too_big(name, what, st.st_size, cap)
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(_CHUNK, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise _too_big(name, what, None, cap)
        return b"".join(chunks)
    except OSError as exc:
        raise LedgerctlError(f"cannot read the {what} {name}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def parse_document(data: bytes, name: str, what: str, hint: str = "") -> Any:
    """Parse JSON (orjson: nesting past 1024 levels is refused); one-line errors."""
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "not JSON"
        raise LedgerctlError(f"the {what} {name} is not JSON{hint}: {reason}") from None


def load_document(
    path: str | os.PathLike[str], what: str, *, stdin: bool = False, hint: str = ""
) -> Any:
    """Read and parse a JSON document (see the module docstring for the rules)."""
    name = os.fspath(path)
    shown = "on standard input" if name == "-" and stdin else name
    return parse_document(read_document(path, what, stdin=stdin), shown, what, hint)
