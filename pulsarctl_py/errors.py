"""The exception root for bad input, shared by the library and the CLI.

Defined in the decoders (the lowest layer) and re-exported here with the errors of the
upper layers, so that every command catches one class.
"""

from pulsarctl_py.decoders.errors import (
    ChecksumMismatch,
    CorruptEntryError,
    DecryptionError,
    InputFormatError,
    LedgerctlError,
    UnsupportedCodec,
)


class MetadataConflict(LedgerctlError):
    """Metadata changed between reading it and writing it (compare-and-set failed)."""


__all__ = [
    "ChecksumMismatch",
    "CorruptEntryError",
    "DecryptionError",
    "InputFormatError",
    "LedgerctlError",
    "MetadataConflict",
    "UnsupportedCodec",
]
