"""A new ledger written into a STOPPED bookie's directories, where the bookie will look.

For standalone clusters and disaster recovery (no running bookie to write to). The bookie
must be stopped: refused while a process holds its RocksDB locks or it is registered as
available (:func:`check_bookie_free`).

Where the ledger goes (the bookie reads it back only from there):

* DbLedgerStorage keeps one storage per ledger directory, in the order of
  ``ledgerDirectories``, and serves ledger L from storage
  ``MathUtils.signSafeMod(L, numberOfDirs)`` (``DbLedgerStorage.getLedgerStorage``).
  The order is the bookie's configuration's, which its cookie (``current/VERSION``,
  ``ledgerDirs: "N\\t/dir0\\t/dir1"``) records: the directories are taken in that order,
  and every one of them must be given (else the index N cannot be told);
* Interleaved/Sorted storage finds a ledger's ``.idx`` file in any ledger directory
  (``IndexPersistenceMgr`` searches them all): the first one is used.

What is written there: the digest-packed entries in a NEW entry log (with its ledgers
map, as a rotated log), ``lastId`` bumped, and the index: DbLedgerStorage's ``locations``
and ``ledgers`` RocksDB keys, or a new ``.idx`` file. Everything written is recorded
(:class:`OfflineFiles`) so that it can be removed again, byte for byte, while the bookie
is still stopped. :class:`StoppedBookieWriter` is this home's implementation of
:class:`~pulsarctl_py.stores.ledger_writer.LedgerWriter`: the ledger's metadata is made,
closed and taken back as every new ledger's is; one bookie holds it, so its ensemble and
quorums are 1, while the digest, password and bookie isolation are the cluster's (a
bookie the ledger's isolation groups keep out is refused).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import bookkeeper, entrylog
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, master_key
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.errors import StoreUnavailable
from pulsarctl_py.stores.ledger_writer import (
    Journal,
    LedgerConfig,
    LedgerWriter,
    NewLedger,
    at_version,
    close_metadata,
    create_metadata,
    delete_ledger,
    writable_bookies,
)

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import MetadataStore


class BookieInUse(StoreUnavailable):
    """The bookie is running: its storage must not be written behind its back."""


# -- is the bookie stopped? -------------------------------------------------------------------


def _locked(lock: Path) -> bool:
    """Whether another process holds RocksDB's LOCK file (a running bookie)."""
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def cookie_text(current: Path) -> str | None:
    try:
        return (current / "VERSION").read_text("utf-8")
    except OSError:
        return None


def cookie_bookie_id(current: Path) -> str | None:
    from pulsarctl_py.stores.live.registry import parse_cookie

    text = cookie_text(current)
    if text is None:
        return None
    return parse_cookie(text.encode("utf-8")).bookie_host


def check_bookie_free(
    current: Path | Iterable[Path],
    store: Any,
    doing: str = "writing a compacted ledger into its storage",
) -> None:
    """Refuse (:class:`BookieInUse`) while a bookie holds a ``current`` dir's RocksDB locks
    or is registered as available in BookKeeper's metadata; ``doing`` names the write."""
    dirs = [current] if isinstance(current, Path) else list(current)
    for d in dirs:
        for name in ("ledgers", "locations"):
            if _locked(d / name / "LOCK"):
                raise BookieInUse(
                    f"the bookie holds its lock on {d / name}: stop the bookie before {doing}"
                )
    bk = store.bookkeeper()
    for d in dirs:
        bookie_id = cookie_bookie_id(d)
        if bookie_id is not None and bk.store.exists(bk.path("available", bookie_id)) is not None:
            raise BookieInUse(
                f"bookie {bookie_id} is registered as running "
                f"({bk.path('available', bookie_id)}): stop it before {doing}"
            )


# -- where the ledger goes ------------------------------------------------------------------


def sign_safe_mod(dividend: int, divisor: int) -> int:
    """BookKeeper's ``MathUtils.signSafeMod``: Java's remainder, plus ``divisor`` when it
    is negative; that is Python's ``%`` for a positive divisor."""
    if divisor <= 0:
        raise LedgerctlError(f"no ledger directory to place ledger {dividend} in")
    return dividend % divisor


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def ledger_dirs_in_order(current_dirs: list[Path]) -> list[Path]:
    """The bookie's ``current/`` ledger dirs in the order of its configuration (cookie)."""
    from pulsarctl_py.stores.live.registry import parse_cookie

    if len(current_dirs) <= 1:
        return list(current_dirs)
    listed: list[str] | None = None
    for d in current_dirs:
        text = cookie_text(d)
        if text is not None:
            listed = parse_cookie(text.encode("utf-8")).ledger_dirs
            if listed:
                break
    if not listed:
        raise LedgerctlError(
            "the bookie directories carry no cookie (current/VERSION) naming the order of "
            "the ledger directories: DbLedgerStorage places a ledger by that order"
        )
    ordered: list[Path] = []
    names = [Path(n).name for n in listed]
    for name in listed:
        match = [d for d in current_dirs if _same(d.parent, Path(name)) or _same(d, Path(name))]
        if not match and names.count(Path(name).name) == 1:
            # the directories moved (a copy for recovery): the last path component decides
            match = [d for d in current_dirs if d.parent.name == Path(name).name]
        if len(match) != 1:
            raise LedgerctlError(
                f"the bookie's cookie lists ledger directory {name}, which was not given: "
                f"give every ledger directory of the bookie ({', '.join(listed)}) with "
                "--bookie-dir, so that the ledger goes where the bookie will look"
            )
        ordered.append(match[0])
    extra = [d for d in current_dirs if not any(_same(d, o) for o in ordered)]
    if extra:
        raise LedgerctlError(
            f"{extra[0]} is not one of the ledger directories the bookie's cookie lists "
            f"({', '.join(listed)}): these are not one bookie's directories"
        )
    return ordered


def index_kind(current_dirs: list[Path]) -> str:
    """``db`` (DbLedgerStorage) or ``idx`` (Interleaved/Sorted storage)."""
    from pulsarctl_py.stores.bookie.layout import has_index_files
    from pulsarctl_py.stores.bookie.rocks import is_rocksdb_dir

    if current_dirs and all(
        is_rocksdb_dir(d / "locations") and is_rocksdb_dir(d / "ledgers") for d in current_dirs
    ):
        return "db"
    if any(has_index_files(d) for d in current_dirs):
        return "idx"
    raise LedgerctlError(
        "no DbLedgerStorage index (locations/, ledgers/) in every ledger directory, nor .idx "
        "files: cannot tell how the bookie would index a new ledger"
    )


def target_dir(current_dirs: list[Path], kind: str, ledger_id: int) -> Path:
    """The ``current/`` dir the bookie reads ``ledger_id`` from."""
    if kind == "db":
        ordered = ledger_dirs_in_order(current_dirs)
        return ordered[sign_safe_mod(ledger_id, len(ordered))]
    return current_dirs[0]


# -- writing, and taking it back ---------------------------------------------------------------


@dataclass(slots=True)
class OfflineFiles:
    """What is (about to be) written into a stopped bookie's directory for one ledger, to
    remove it again: recorded BEFORE anything is written, so that a record saved then
    covers a crash at any point of the writing. Undo removes every index key of the ledger,
    its ``.idx`` file, the new entry log, and puts ``lastId`` back."""

    current: str
    kind: str
    ledger_id: int = -1
    log: str | None = None
    last_id: tuple[str, bytes | None] | None = None
    idx: str | None = None

    def undo(self) -> None:
        from pulsarctl_py.stores.bookie.rocks import ledger_key, location_key

        current = Path(self.current)
        if self.kind == "db" and self.ledger_id >= 0:
            with writable_rocksdb(current / "locations") as db:
                db.delete_range(
                    location_key(self.ledger_id, 0), location_key(self.ledger_id + 1, 0)
                )
            with writable_rocksdb(current / "ledgers") as db:
                db.delete(ledger_key(self.ledger_id))
        if self.idx is not None:
            idx = Path(self.idx)
            idx.unlink(missing_ok=True)
            for folder in (idx.parent, idx.parent.parent):  # made for it, if now empty
                if folder != current and folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
        if self.log is not None:
            Path(self.log).unlink(missing_ok=True)
        if self.last_id is not None:
            path, old = self.last_id
            if old is None:
                Path(path).unlink(missing_ok=True)
            else:
                _replace(Path(path), old)

    def to_json(self) -> dict[str, Any]:
        return {
            "current": self.current,
            "kind": self.kind,
            "ledger_id": self.ledger_id,
            "entry_log": self.log,
            "last_id": None
            if self.last_id is None
            else {
                "path": self.last_id[0],
                "old_base64": None
                if self.last_id[1] is None
                else base64.b64encode(self.last_id[1]).decode("ascii"),
            },
            "idx": self.idx,
        }

    @classmethod
    def from_json(cls, obj: Any) -> OfflineFiles:
        try:
            last = obj.get("last_id")
            old = None
            if last is not None and last.get("old_base64") is not None:
                old = base64.b64decode(last["old_base64"], validate=True)
            kind = str(obj["kind"])
            ledger_id = obj["ledger_id"]
            if kind not in ("db", "idx") or isinstance(ledger_id, bool):
                raise ValueError(kind)
            return cls(
                str(obj["current"]),
                kind,
                int(ledger_id),
                None if obj.get("entry_log") is None else str(obj["entry_log"]),
                None if last is None else (str(last["path"]), old),
                None if obj.get("idx") is None else str(obj["idx"]),
            )
        except (KeyError, TypeError, AttributeError, ValueError):
            raise LedgerctlError(
                "plan: the record of a bookie's written files is damaged"
            ) from None


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".ledgerctl-tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@contextlib.contextmanager
def writable_rocksdb(path: Path) -> Any:
    """An existing RocksDB index opened for writing; rocksdict's config file removed after."""
    from rocksdict import Options, Rdict

    from pulsarctl_py.stores.bookie.rocks import ROCKSDICT_CONFIG

    options = Options(raw_mode=True)
    options.create_if_missing(False)
    had_config = (path / ROCKSDICT_CONFIG).exists()
    try:
        db = Rdict(str(path), options)
    except Exception as exc:
        raise BookieInUse(f"cannot open {path} for writing: {exc}") from None
    try:
        yield db
    finally:
        db.flush()
        db.close()
        if not had_config:
            (path / ROCKSDICT_CONFIG).unlink(missing_ok=True)


def next_log_id(current: Path) -> int:
    ids = [
        entrylog.parse_log_file_name(name)
        for name in os.listdir(current)
        if entrylog.parse_log_file_name(name) is not None
    ]
    last = max((i for i in ids if i is not None), default=-1)
    try:
        last = max(last, int((current / "lastId").read_text().strip() or "-1", 16))
    except (OSError, ValueError):
        pass
    return last + 1


def pack_entries(
    ledger_id: int,
    payloads: Iterable[bytes | memoryview],
    digest: DigestType,
    password: bytes,
) -> Iterable[tuple[int, bytes, int]]:
    """Digest-packed entries with cumulative lengths; each carries the previous entry as
    its LAC, as a writer whose every earlier add was confirmed sends it."""
    from pulsarctl_py.decoders import limits
    from pulsarctl_py.stores.ledger_writer import entry_too_large

    length = 0
    for entry_id, payload in enumerate(payloads):
        length += len(payload)
        header = BookieEntryHeader(ledger_id, entry_id, entry_id - 1, length)
        packed = bookkeeper.build(header, payload, digest, password)
        # the bound the readers apply to a stored entry (entrylog.check_entry_size)
        if len(packed) > limits.max_frame():
            raise entry_too_large(ledger_id, entry_id, len(packed))
        yield entry_id, packed, length


def plan_files(current: Path, kind: str, ledger_id: int) -> OfflineFiles:
    """What :func:`write_files` will write for ``ledger_id`` in ``current``."""
    from pulsarctl_py.decoders import index_file

    log_id = next_log_id(current)
    last_id_path = current / "lastId"
    old = last_id_path.read_bytes() if last_id_path.exists() else None
    idx = str(current / index_file.ledger_index_path(ledger_id)) if kind == "idx" else None
    return OfflineFiles(
        str(current),
        kind,
        ledger_id,
        str(current / entrylog.log_file_name(log_id)),
        (str(last_id_path), old),
        idx,
    )


def write_files(
    files: OfflineFiles,
    payloads: Iterable[bytes | memoryview],
    digest: DigestType,
    password: bytes,
) -> tuple[int, int]:
    """Write what ``files`` plans: the ledger's entries in a new entry log, ``lastId``,
    and the index; return (entries, ledger length)."""
    from pulsarctl_py.stores.bookie.rocks import LOCATION_VALUE, ledger_key, location_key
    from pulsarctl_py.stores.bookie.writers import EntryLogWriter, ledger_data, write_index_file

    current, ledger_id = Path(files.current), files.ledger_id
    assert files.log is not None and files.last_id is not None
    log_path = Path(files.log)
    log_id = entrylog.parse_log_file_name(log_path.name)
    assert log_id is not None
    writer = EntryLogWriter(log_path, log_id)
    count = length = 0
    locations: dict[int, int] = {}
    try:
        for entry_id, packed, total in pack_entries(ledger_id, payloads, digest, password):
            locations[entry_id] = writer.add(packed)
            count, length = count + 1, total
    finally:
        writer.close(ledgers_map=True)
    _replace(Path(files.last_id[0]), f"{log_id:x}\n".encode())
    key = master_key(password)
    if files.kind == "db":
        with writable_rocksdb(current / "locations") as db:
            for entry_id, loc in locations.items():
                db[location_key(ledger_id, entry_id)] = LOCATION_VALUE.pack(loc)
        with writable_rocksdb(current / "ledgers") as db:
            db[ledger_key(ledger_id)] = ledger_data(key)
    else:
        written = write_index_file(current, ledger_id, key, locations)
        assert files.idx is None or Path(files.idx) == written
    return count, length


# -- the implementation of LedgerWriter ---------------------------------------------------------


class StoppedBookieWriter(LedgerWriter):
    """One stopped bookie's directories (``bookie_dirs``: its ledger directories, or
    directories holding them), refused while the bookie runs (:func:`check_bookie_free`);
    ``doing`` names the write in that refusal."""

    offline = True

    def __init__(
        self,
        store: MetadataStore,
        bookie_dirs: list[str],
        doing: str = "writing a ledger into its storage",
    ) -> None:
        from pulsarctl_py.stores.bookie.layout import discover

        super().__init__(store)
        self.dirs = [str(d) for d in bookie_dirs]
        self.current: list[Path] = list(discover(self.dirs).ledger_dirs)
        if not self.current:
            raise LedgerctlError(f"no ledger directory under {', '.join(self.dirs)}")
        self.kind = index_kind(self.current)
        check_bookie_free(self.current, store, doing)
        self.bookie_id: str | None = next(
            (b for b in map(cookie_bookie_id, self.current) if b is not None), None
        )

    def describe(self) -> str:
        return f"the stopped bookie {self.bookie_id or '?'} ({', '.join(self.dirs)})"

    def effective(self, config: LedgerConfig) -> LedgerConfig:
        """Quorums of 1: one stopped bookie holds the ledger."""
        return LedgerConfig(
            1,
            1,
            1,
            config.digest,
            config.password,
            dict(config.custom_metadata),
            config.placement,
        )

    def _write(
        self,
        config: LedgerConfig,
        payloads: Iterable[bytes | memoryview],
        journal: Journal | None,
        fallback_bookie: str | None,
    ) -> NewLedger:
        bookie_id = self.bookie_id or fallback_bookie
        if bookie_id is None:
            raise LedgerctlError(
                "the bookie directories carry no cookie (current/VERSION) naming the bookie: "
                "the ledger's ensemble cannot be told"
            )
        self._check_placement(config, bookie_id)
        ledger_id, path, version, md = create_metadata(self.place, config, [bookie_id], journal)
        files = None
        try:
            current = target_dir(self.current, self.kind, ledger_id)
            files = plan_files(current, self.kind, ledger_id)
            if journal is not None:
                journal.files(ledger_id, files)
            count, length = write_files(files, payloads, config.digest, config.password)
            version = close_metadata(self.place, path, version, md, count - 1, length, journal)
        except BaseException:
            with contextlib.suppress(LedgerctlError):  # the error that stopped it stands
                delete_ledger(self.place, path, at_version(version), files)
            raise
        return NewLedger(
            ledger_id,
            count,
            length,
            [bookie_id],
            path,
            version,
            self.place.url,
            str(current.parent if current.name == "current" else current),
            config.describe(),
            files,
        )

    def _check_placement(self, config: LedgerConfig, bookie_id: str) -> None:
        """Refuse a stopped bookie the ledger's placement does not allow: the broker would
        not place the ledger there (counted as if the bookie were running)."""
        if not config.placement.isolated:
            return
        from pulsarctl_py.stores.live.placement import read_racks

        known = {*writable_bookies(self.place), bookie_id}
        left, _ = config.placement.candidates(known, config.ensemble, read_racks(self.store))
        if bookie_id not in left:
            raise LedgerctlError(
                f"the stopped bookie {bookie_id} is not among the bookies "
                f"{config.placement.describe()} allows ({', '.join(left) or 'none'}): the "
                "broker would not place this ledger there; write it to the running bookies, "
                "or into the directories of a bookie of the group"
            )
