"""One exception root for bad input, bad data and stores that cannot be opened.

Anything that is not a :class:`LedgerctlError` escaping a command is a bug and keeps
its traceback; a ``LedgerctlError`` becomes one line on stderr and its ``exit_code``:

* 1 (:data:`EXIT_FINDINGS`): the data has a problem (a checksum that does not match,
  bytes that do not follow a layout, a name or position that does not exist);
* 2 (:data:`EXIT_USAGE`): usage or bad input (the default);
* 3 (:data:`EXIT_STORE`): a store could not be reached or opened.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_STORE = 3


class LedgerctlError(Exception):
    """Root of every error caused by bad input, bad data or an unreachable store."""

    exit_code: int = EXIT_USAGE

    def one_line(self) -> str:
        return str(self).replace("\n", " ")


class DataError(LedgerctlError):
    """A finding in the data itself (exit code 1)."""

    exit_code = EXIT_FINDINGS


class NotFoundError(DataError):
    """A name, ledger, entry or position that does not exist where it was looked up."""


class StoreUnavailable(LedgerctlError):
    """A store (metadata store, bookie directory, bookie) could not be reached or opened."""

    exit_code = EXIT_STORE


class CorruptEntryError(DataError):
    """Bytes that do not follow the layout of a layer.

    ``layer`` names the layer, ``offset`` is where in the input the problem is,
    ``expected`` and ``found`` say what the layout wants and what is there.
    """

    def __init__(self, layer: str, offset: int, expected: str, found: str) -> None:
        self.layer = layer
        self.offset = offset
        self.expected = expected
        self.found = found
        super().__init__(f"{layer} at offset {offset}: expected {expected}, found {found}")


class ChecksumMismatch(DataError):
    """A stored checksum or digest that differs from the computed one."""

    def __init__(self, layer: str, offset: int, kind: str, stored: str, computed: str) -> None:
        self.layer = layer
        self.offset = offset
        self.kind = kind
        self.stored = stored
        self.computed = computed
        super().__init__(
            f"{layer} at offset {offset}: {kind} mismatch, stored {stored}, computed {computed}"
        )


class UnsupportedCodec(DataError):
    """A compression type this tool does not know."""


class DecryptionError(DataError):
    """An encrypted payload that the supplied key cannot open."""


class InputFormatError(LedgerctlError):
    """Input text that is neither binary, hex nor base64 as accepted."""
