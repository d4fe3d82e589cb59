"""The exception roots shared by the library and the CLI, with their exit codes.

The roots are defined in the decoders (the lowest layer) and re-exported here with the
errors of the metadata stores, defined here, so that every command catches one class and
no store module is needed to name them. Exit codes: 0 ok, 1 findings in the data
(:class:`DataError`), 2 usage or bad input (:class:`LedgerctlError`, the default), 3 a
store could not be reached or opened (:class:`StoreUnavailable`), 4 a write refused
because a live broker has the topic loaded (:class:`TopicLoaded`), 5 a write refused
because the store changed since the plan was made (:class:`PlanConflict`).
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


class MetadataStoreError(StoreUnavailable):
    """A metadata store that cannot be reached, opened or read (exit code 3)."""


class PlanConflict(LedgerctlError):
    """Refused: the store changed since the plan was made (a compare-and-set or version
    check failed); nothing was written (exit code 5)."""

    exit_code = 5


class MetadataConflict(LedgerctlError):
    """A compare-and-set write whose precondition does not hold (version or existence).

    Exit code 1: the store changed under the plan; nothing was written.
    """

    exit_code = 1

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class ReadOnlyStoreError(LedgerctlError):
    """A write attempted on a store opened read-only."""


class TopicLoaded(LedgerctlError):
    """Refused: a live broker has the topic loaded (it caches and rewrites its metadata),
    or the brokers cannot be asked and --force-owned was not given; nothing was written
    (exit code 4)."""

    exit_code = 4


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
    "PlanConflict",
    "ReadOnlyStoreError",
    "StoreUnavailable",
    "TopicLoaded",
    "UnsupportedCodec",
]
