"""A bookie's data directories, read offline: entry logs, indexes and journals.

Open with :func:`open_bookie` (or :class:`BookieStore`); write new files with the writers.
rocksdict (RocksDB) is imported only when a DbLedgerStorage index is opened or written.
"""

from .layout import BookieLayout, discover
from .model import (
    BookieDirError,
    ConsistencyReport,
    EntryLogInfo,
    EntryNotFound,
    Finding,
    JournalInfo,
    LedgerInfo,
    LedgerRecord,
    Location,
    StoredEntry,
)
from .store import BookieStore, open_bookie
from .writers import (
    EntryLogWriter,
    JournalWriter,
    LedgerDirSummary,
    ledger_data,
    write_db_index,
    write_db_ledger_dir,
    write_entry_log,
    write_index_file,
    write_last_id,
    write_last_mark,
)

__all__ = [
    "BookieDirError",
    "BookieLayout",
    "BookieStore",
    "ConsistencyReport",
    "EntryLogInfo",
    "EntryLogWriter",
    "EntryNotFound",
    "Finding",
    "JournalInfo",
    "JournalWriter",
    "LedgerDirSummary",
    "LedgerInfo",
    "LedgerRecord",
    "Location",
    "StoredEntry",
    "discover",
    "ledger_data",
    "open_bookie",
    "write_db_index",
    "write_db_ledger_dir",
    "write_entry_log",
    "write_index_file",
    "write_last_id",
    "write_last_mark",
]
