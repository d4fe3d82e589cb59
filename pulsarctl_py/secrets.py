"""Secrets come from environment variables or files, never from command-line values.

A secret is read once, kept as bytes, and never printed: :class:`Secret` hides its value
from ``repr`` and ``str`` so that it cannot leak into output or tracebacks.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import LedgerctlError

#: the variable read for a ledger password when no other source is named
LEDGER_PASSWORD_ENV = "LEDGERCTL_LEDGER_PASSWORD"
#: the longest secret read from a file (passwords and passphrases are short)
MAX_SECRET = 64 * 1024


class Secret:
    """A secret value that does not show itself."""

    __slots__ = ("_value", "source")

    def __init__(self, value: bytes, source: str) -> None:
        self._value = value
        self.source = source

    def reveal(self) -> bytes:
        return self._value

    def __repr__(self) -> str:
        return f"Secret(from {self.source})"

    __str__ = __repr__


def secret_from(
    env: str | None = None, file: Path | None = None, default_env: str | None = None
) -> Secret | None:
    """Read a secret from the named variable, or a file, or the default variable if set.

    A file's single trailing newline is dropped, as editors add one.
    """
    if env is not None and file is not None:
        raise LedgerctlError("give the secret through a variable or a file, not both")
    if file is not None:
        from .infile import read_small

        # bounded, and never waiting on a FIFO nobody writes to; a pipe from the shell's
        # process substitution (<(pass show ...)) is read as a file is
        data = read_small(file, MAX_SECRET, "secret file")
        if data.endswith(b"\r\n"):
            data = data[:-2]
        elif data.endswith(b"\n"):
            data = data[:-1]
        return Secret(data, f"file {file}")
    if env is not None:
        if env not in os.environ:
            raise LedgerctlError(f"environment variable {env} is not set")
        return Secret(os.environb[env.encode()], f"${env}")
    if default_env is not None and default_env in os.environ:
        return Secret(os.environb[default_env.encode()], f"${default_env}")
    return None
