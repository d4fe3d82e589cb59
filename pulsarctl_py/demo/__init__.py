"""A Pulsar standalone-style data directory built from real client entries (`ledgerctl demo`).

:func:`create_demo` writes, into one directory::

    metadata/        Pulsar's RocksDB metadata store (rocksdb://metadata): BookKeeper's
                     /ledgers tree, /managed-ledgers topics and cursors, /admin policies
    bookkeeper/      one bookie's data dir, as Pulsar standalone lays it out (the journal
                     and the ledger dir are the same directory): current/VERSION (cookie),
                     <hex>.txn journal, entry logs, lastId, lastMark, and the
                     DbLedgerStorage RocksDB indexes current/ledgers and current/locations
    ledgerctl.toml   metadata_url and bookie_dirs, so commands run there need no flags

The messages are the entries the official Pulsar client produced (shipped in
``entries/``, see its README); the demo adds only what a broker and a bookie add. Every
timestamp and id is derived from those entries, so the output is the same on every run.
"""

from .builder import create_demo
from .model import (
    BOOKIE_ID,
    DEFAULT_DIR,
    DemoEntry,
    DemoLedger,
    DemoSummary,
    DemoTopic,
)

__all__ = [
    "BOOKIE_ID",
    "DEFAULT_DIR",
    "DemoEntry",
    "DemoLedger",
    "DemoSummary",
    "DemoTopic",
    "create_demo",
]
