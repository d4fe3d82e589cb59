"""One exception root for bad input.

Anything that is not a :class:`LedgerctlError` escaping a command is a bug and keeps
its traceback; a ``LedgerctlError`` becomes one line on stderr and exit code 1.
"""

from __future__ import annotations


class LedgerctlError(Exception):
    """Root of every error caused by bad input or bad data."""

    def one_line(self) -> str:
        return str(self).replace("\n", " ")


class CorruptEntryError(LedgerctlError):
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


class ChecksumMismatch(LedgerctlError):
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


class UnsupportedCodec(LedgerctlError):
    """A compression type this tool does not know."""


class DecryptionError(LedgerctlError):
    """An encrypted payload that the supplied key cannot open."""


class InputFormatError(LedgerctlError):
    """Input text that is neither binary, hex nor base64 as accepted."""
