"""Ledgers on running bookies: a read-only bookie client and a store over it.

:class:`LiveBookieStore` stands where the offline :class:`~pulsarctl_py.stores.bookie.BookieStore`
stands when no bookie directory is given: bookie addresses come from ledger metadata.
:func:`compare_replicas` reads every replica of a range of entries and reports where
they disagree. Only the standard library and the generated protobuf module are used.
"""

from .client import (
    DEFAULT_TIMEOUT,
    DEFAULT_WINDOW,
    BookieConnection,
    BookiePool,
    BookieUnavailable,
    ClientOptions,
    split_address,
)
from .replicas import ReplicaReport, compare_replicas
from .store import LiveBookieStore, digest_ok, open_live, write_set

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_WINDOW",
    "BookieConnection",
    "BookiePool",
    "BookieUnavailable",
    "ClientOptions",
    "LiveBookieStore",
    "ReplicaReport",
    "compare_replicas",
    "digest_ok",
    "open_live",
    "split_address",
    "write_set",
]
