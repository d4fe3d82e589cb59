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
from pulsarctl_py.stores.metadata.base import (
    MetadataConflict,
    MetadataStoreError,
    ReadOnlyStoreError,
)

__all__ = [
    "ChecksumMismatch",
    "CorruptEntryError",
    "DecryptionError",
    "InputFormatError",
    "LedgerctlError",
    "MetadataConflict",
    "MetadataStoreError",
    "ReadOnlyStoreError",
    "UnsupportedCodec",
]
