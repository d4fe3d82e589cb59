"""The exception roots shared by the library and the CLI, with their exit codes.

Defined in the decoders (the lowest layer) and re-exported here with the errors of the
upper layers, so that every command catches one class. Exit codes: 0 ok, 1 findings in
the data (:class:`DataError`), 2 usage or bad input (:class:`LedgerctlError`, the
default), 3 a store could not be reached or opened (:class:`StoreUnavailable`).
"""

from pulsarctl_py.decoders.errors import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_STORE,
    EXIT_USAGE,
    ChecksumMismatch,
    CorruptEntryError,
    DataError,
    DecryptionError,
    InputFormatError,
    LedgerctlError,
    NotFoundError,
    StoreUnavailable,
    UnsupportedCodec,
)
from pulsarctl_py.stores.metadata.base import (
    MetadataConflict,
    MetadataStoreError,
    ReadOnlyStoreError,
)

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_OK",
    "EXIT_STORE",
    "EXIT_USAGE",
    "ChecksumMismatch",
    "CorruptEntryError",
    "DataError",
    "DecryptionError",
    "InputFormatError",
    "LedgerctlError",
    "MetadataConflict",
    "MetadataStoreError",
    "NotFoundError",
    "ReadOnlyStoreError",
    "StoreUnavailable",
    "UnsupportedCodec",
]
