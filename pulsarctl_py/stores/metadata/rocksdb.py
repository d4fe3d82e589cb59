"""Pulsar's RocksDB metadata store (``metadataStoreUrl=rocksdb://PATH``), through rocksdict.

Layout (formats.md §17, ``decoders/metadata_record.py``): one RocksDB database, default
column family; key = the node path, value = a 41-byte header (version, owner, timestamps,
ephemeral flag) and the node's data; two reserved keys hold the sequential-node counter and
the instance id.

Reading never writes a byte into the store's directory, even while Pulsar holds its LOCK:
RocksDB's read-only mode takes no lock and replays the WAL in memory, but rocksdict writes a
``rocksdict-config.json`` next to any database it opens. So a read-only store opens a
private directory of symlinks to the store's files (all but LOCK, LOG* and that file) and
sees the state of the moment it was opened. Writing (creating a demo store, applying a
repair plan) needs the LOCK, so Pulsar must be stopped; compare-and-set and transactions
are checked under a process lock and applied as one atomic WriteBatch.

Ephemeral nodes owned by another instance than the stored instance id are stale (Pulsar
deletes them when it meets them) and are hidden, as Pulsar hides them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders import metadata_record as rec
from pulsarctl_py.decoders.errors import CorruptEntryError, LedgerctlError
from pulsarctl_py.errors import MetadataConflict, MetadataStoreError

from .base import (
    ChildGroup,
    MetadataStore,
    Node,
    Op,
    Stat,
    validate_path,
)
from .url import MetadataUrl, parse_metadata_url

#: files of a RocksDB directory that a read-only open must not see (they could be written)
_PRIVATE_FILES = ("LOCK", "rocksdict-config.json")
_ROCKSDICT_CONFIG = "rocksdict-config.json"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _stat(meta: rec.MetaValue) -> Stat:
    return Stat(
        version=meta.version,
        created_ms=meta.created_ms,
        modified_ms=meta.modified_ms,
        ephemeral=meta.ephemeral,
        owner=meta.owner,
        data_length=len(meta.data),
        # upstream RocksdbMetadataStore.storePut sets createdTimestamp when it creates a
        # node and keeps it across updates: the store's only mark of an incarnation
        creation=f"created {meta.created_ms}",
    )


def _node(value: bytes) -> Node:
    meta = rec.parse(value)
    return Node(meta.data, _stat(meta))


class RocksDBMetadataStore(MetadataStore):
    """Metadata kept in Pulsar's RocksDB metadata-store format."""

    #: Stat.created_ms is the value header's createdTimestamp (RocksdbMetadataStore sets it
    #: when it creates a node and keeps it across updates)
    creation_basis = "rocksdb-created"

    def __init__(
        self,
        url: MetadataUrl | str | os.PathLike[str],
        *,
        read_only: bool = True,
        create: bool = False,
    ) -> None:
        if isinstance(url, MetadataUrl):
            parsed = url
        elif isinstance(url, str) and url.startswith(("rocksdb://", "metadata-store:")):
            parsed = parse_metadata_url(url)
        else:
            parsed = MetadataUrl("rocksdb", os.fspath(url))
        if parsed.scheme != "rocksdb":
            raise LedgerctlError(f"{parsed} is not a rocksdb:// URL")
        if create and read_only:
            raise LedgerctlError("creating a metadata store needs read_only=False")
        self.path = Path(parsed.target)
        self.url = str(parsed)
        self.location = parsed
        self.read_only = read_only
        self._lock = threading.RLock()
        self._db: Any = None
        self._shadow: str | None = None

        import rocksdict

        self._rocksdict = rocksdict
        if read_only:
            self._open_read_only()
        else:
            self._open_writable(create)
        try:
            self.instance_id = self._read_long(rec.INSTANCE_ID_KEY)
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------------

    def _check_dir(self) -> None:
        try:
            if not self.path.is_dir():
                raise MetadataStoreError(
                    f"no RocksDB metadata store at {self.path}: not a directory"
                )
            if not (self.path / "CURRENT").is_file():
                raise MetadataStoreError(f"{self.path} is not a RocksDB database (no CURRENT file)")
            os.listdir(self.path)
        except OSError as exc:
            raise MetadataStoreError(
                f"cannot read the RocksDB metadata store {self.path}: {exc.strerror}"
            ) from None

    def _damaged(self, exc: Exception) -> MetadataStoreError:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return MetadataStoreError(f"cannot read the RocksDB metadata store {self.path}: {text}")

    def _status(self, it: Any) -> None:
        """Raise if an iteration stopped on a damaged block rather than at the end."""
        try:
            it.status()
        except Exception as exc:  # rocksdict raises plain Exception for RocksDB errors
            raise self._damaged(exc) from None

    def _open_read_only(self) -> None:
        self._check_dir()
        rd = self._rocksdict
        last: Exception | None = None
        for _ in range(3):  # a live writer may rotate files between listing and opening
            shadow = tempfile.mkdtemp(prefix="ledgerctl-rocksdb-")
            try:
                for entry in os.scandir(self.path):
                    name = entry.name
                    if name in _PRIVATE_FILES or name.startswith("LOG") or not entry.is_file():
                        continue
                    os.symlink(os.path.abspath(entry.path), os.path.join(shadow, name))
                options = rd.Options(raw_mode=True)
                options.create_if_missing(False)
                self._db = rd.Rdict(shadow, options, access_type=rd.AccessType.read_only())
            except Exception as exc:
                shutil.rmtree(shadow, ignore_errors=True)
                last = exc
                time.sleep(0.05)
                continue
            self._shadow = shadow
            return
        raise MetadataStoreError(f"cannot open the RocksDB metadata store {self.path}: {last}")

    def _open_writable(self, create: bool) -> None:
        rd = self._rocksdict
        existed = (self.path / "CURRENT").is_file()
        if not existed and not create:
            self._check_dir()
        if existed and create and self._has_nodes_quick():
            raise MetadataStoreError(f"{self.path} already holds a metadata store")
        config_existed = (self.path / _ROCKSDICT_CONFIG).exists()
        self._remove_config = not config_existed
        options = rd.Options(raw_mode=True)
        options.create_if_missing(create)
        try:
            self._db = rd.Rdict(str(self.path), options)
        except Exception as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise MetadataStoreError(
                    f"the RocksDB metadata store {self.path} is locked by another process "
                    "(stop Pulsar before writing)"
                ) from None
            raise MetadataStoreError(f"cannot open {self.path} for writing: {text}") from None
        self._write_opts = rd.WriteOptions()
        self._write_opts.sync = True
        if not existed:
            # what Pulsar writes on its first open: both counters at 0
            batch = rd.WriteBatch(raw_mode=True)
            batch.put(rec.SEQUENTIAL_ID_KEY, rec.build_long(0))
            batch.put(rec.INSTANCE_ID_KEY, rec.build_long(0))
            self._db.write(batch, self._write_opts)

    def _has_nodes_quick(self) -> bool:
        probe = RocksDBMetadataStore(self.path, read_only=True)
        try:
            return bool(probe.children("/"))
        finally:
            probe.close()

    def close(self) -> None:
        self._close_bookkeeper()
        db, self._db = self._db, None
        if db is not None:
            db.close()
            if not self.read_only and getattr(self, "_remove_config", False):
                # leave a plain RocksDB directory, as Pulsar would
                try:
                    (self.path / _ROCKSDICT_CONFIG).unlink()
                except FileNotFoundError:
                    pass
        shadow, self._shadow = self._shadow, None
        if shadow is not None:
            shutil.rmtree(shadow, ignore_errors=True)

    # -- raw access ----------------------------------------------------------------------------

    def _opened(self) -> Any:
        if self._db is None:
            raise MetadataStoreError(f"the RocksDB store {self.url} is closed")
        return self._db

    def _raw_get(self, key: bytes) -> bytes | None:
        db = self._opened()
        try:
            return db.get(key)
        except Exception as exc:  # a damaged block: rocksdict raises plain Exception
            raise self._damaged(exc) from None

    def _read_long(self, key: bytes) -> int:
        value = self._raw_get(key)
        if value is None:
            return 0
        return rec.parse_long(value, key.decode())

    @property
    def sequential_id(self) -> int:
        """The next number a sequential node gets (``__metadata_sequentialId_key``)."""
        return self._read_long(rec.SEQUENTIAL_ID_KEY)

    def _meta(self, path: str) -> rec.MetaValue | None:
        value = self._raw_get(rec.path_key(path))
        if value is None:
            return None
        meta = validate_value(path, value)
        if meta.ephemeral and meta.owner != self.instance_id:
            return None  # stale: its owner is gone
        return meta

    # -- reads ---------------------------------------------------------------------------------

    def get(self, path: str) -> Node | None:
        meta = self._meta(validate_path(path))
        return None if meta is None else Node(meta.data, _stat(meta))

    def children(self, path: str) -> list[str]:
        parent = validate_path(path)
        first, last = rec.children_range(parent)
        db = self._opened()
        names: list[str] = []
        it = db.iter()
        try:
            self._walk_children(it, parent, first, last, names)
        except MetadataStoreError:
            raise
        except Exception as exc:
            raise self._damaged(exc) from None
        finally:
            del it
        return sorted(set(names))

    def _walk_children(
        self, it: Any, parent: str, first: bytes, last: bytes, names: list[str]
    ) -> None:
        """Append the child names of ``parent`` (keys in [first, last)) to ``names``."""
        base = "" if parent == "/" else parent
        cut = len(first)
        unpack, size, instance = rec.HEADER.unpack_from, rec.HEADER_SIZE, self.instance_id
        it.seek(first)
        while it.valid():
            key = it.key()
            if key >= last:
                break
            rest = key[cut:]
            slash = rest.find(b"/")
            if slash == 0 or not rest:
                it.next()  # "P//x" or "P/": no child name
                continue
            raw = rest if slash < 0 else rest[:slash]
            name = raw.decode("utf-8", errors="surrogateescape")
            if not raw.isascii():
                rec.path_key(f"{base}/{name}")  # a name that is not UTF-8: the store's error
            if slash < 0:
                value = it.value()
                fields = unpack(value, 0) if len(value) >= size else None
                if (
                    fields is None  # not a header parse accepts: listed, get() says why
                    or fields[6] <= 0
                    or fields[3] == instance
                    or not (size <= fields[0] <= len(value) and 1 <= fields[1] <= 0x7FFFFFFF)
                ):  # not stale (rec.is_stale inline: listings ask it of every key)
                    names.append(name)
                # the next key may be a sibling extending this name with a byte below
                # "/" ("topic-partition-0" after "topic"): step, do not skip
                it.next()
                continue
            if not names or names[-1] != name:  # (its own key may have been just before)
                names.append(name)
            # skip the rest of this child's subtree (its keys sort before child + "0"): a
            # few steps first, as a topic's cursors are few, then a seek
            inside = first + raw + b"/"
            for _ in range(4):
                it.next()
                if not (it.valid() and it.key().startswith(inside)):
                    break
            else:
                it.seek(first + raw + b"0")
        self._status(it)

    def _is_stale(self, value: bytes) -> bool:
        return rec.is_stale(value, self.instance_id)

    def _checked(self, path: str, value: bytes) -> int | LedgerctlError | None:
        """Where the data of a value read by an iterator starts; None when ``get(path)``
        would not see it (stale), the error ``get`` would raise when it does not decode."""
        fields = rec.header(value)
        if fields is None:
            try:
                validate_value(path, value)
            except CorruptEntryError as exc:
                return exc
            raise AssertionError(f"{path}: a header refused by header() but parsed")
        if fields[6] > 0 and fields[3] != self.instance_id:
            return None  # stale: its owner is gone
        return fields[0]

    def scan_children(self, path: str) -> Iterator[ChildGroup]:
        """One iterator over the keys under ``path``, in key order.

        Keys are the paths' UTF-8 bytes in RocksDB's default bytewise order (upstream
        pulsar-metadata RocksdbMetadataStore: ``toBytes(path)`` keys in a database opened
        with default Options, hence BytewiseComparator; ``getChildrenFromStore`` walks
        ``[path + "/", path + "0")`` in that order). A child's own children follow its key
        directly, except when siblings extend its name with a byte below "/" ("t" then
        "t-partition-0" then "t/sub"): those come first, and the child's children are read
        by a second iterator from ``child + "/"``; the main one skips them when it gets there.
        """
        parent = validate_path(path)
        first, last = rec.children_range(parent)
        base = "" if parent == "/" else parent
        cut = len(first)
        db = self._opened()
        it = db.iter()
        side: Any = None
        unpack, size, instance = rec.HEADER.unpack_from, rec.HEADER_SIZE, self.instance_id
        # the child read last while its children are gathered: its name, path and value,
        # where its data starts, the start of its children's keys and what they hold
        name = child = ""
        value = b""
        start = 0
        inside: bytes | None = None
        below: list[tuple[str, bytes, int | LedgerctlError]] = []
        try:
            it.seek(first)
            while it.valid():
                key = it.key()
                if inside is not None:
                    if key.startswith(inside):
                        rest = key[len(inside) :]
                        if rest and b"/" not in rest:
                            sub = it.value()
                            fields = unpack(sub, 0) if len(sub) >= size else None
                            if (
                                fields is not None
                                and rest.isascii()
                                and size <= fields[0] <= len(sub)
                                and 1 <= fields[1] <= 0x7FFFFFFF
                            ):  # the common case, _add's checks inline
                                if fields[6] <= 0 or fields[3] == instance:
                                    below.append((rest.decode("ascii"), sub, fields[0]))
                            else:
                                self._add(below, child, rest, sub)
                        it.next()
                        continue
                    if key < inside:
                        # siblings extending its name came first: its children are later
                        if side is None:
                            side = db.iter()
                        side.seek(inside)
                        while side.valid():
                            sub = side.key()
                            if not sub.startswith(inside):
                                break
                            rest = sub[len(inside) :]
                            if rest and b"/" not in rest:
                                self._add(below, child, rest, side.value())
                            side.next()
                        self._status(side)
                    yield self._group(name, value, start, below)
                    inside = None
                if key >= last:
                    break
                rest = key[cut:]
                slash = rest.find(b"/")
                if slash == 0 or not rest:
                    it.next()  # "P//x" or "P/": no child name (children() skips them too)
                    continue
                if slash > 0:
                    # under a child whose children were read by the side iterator, or
                    # that is stale, damaged or has no node of its own: past its subtree
                    it.seek(first + rest[:slash] + b"0")
                    continue
                name = rest.decode("utf-8", errors="surrogateescape")
                child = f"{base}/{name}"
                if not rest.isascii():
                    rec.path_key(child)  # a name that is not UTF-8: children()'s error
                value = it.value()
                it.next()
                fields = unpack(value, 0) if len(value) >= size else None
                if fields is None or not (
                    size <= fields[0] <= len(value) and 1 <= fields[1] <= 0x7FFFFFFF
                ):
                    error = self._checked(child, value)
                    assert isinstance(error, LedgerctlError)
                    yield ChildGroup(name, None, [], error)
                    continue
                if fields[6] > 0 and fields[3] != instance:
                    continue  # stale: its owner is gone (as get() sees it)
                start = fields[0]
                inside = key + b"/"
                below = []
            self._status(it)
            if inside is not None:
                yield self._group(name, value, start, below)
        except MetadataStoreError:
            raise
        except Exception as exc:
            raise self._damaged(exc) from None
        finally:
            del it, side

    def _add(
        self,
        below: list[tuple[str, bytes, int | LedgerctlError]],
        child: str,
        rest: bytes,
        value: bytes,
    ) -> None:
        """Add one child of ``child`` (its key after ``child + "/"``) unless stale."""
        name = rest.decode("utf-8", errors="surrogateescape")
        path = f"{child}/{name}"
        if not rest.isascii():
            rec.path_key(path)  # a name that is not UTF-8: children()'s error
        start = self._checked(path, value)
        if start is not None:
            below.append((name, value, start))

    @staticmethod
    def _group(
        name: str, value: bytes, start: int, below: list[tuple[str, bytes, int | LedgerctlError]]
    ) -> ChildGroup:
        """The group of a child, its children in ``children()`` order, the first error."""
        if len(below) > 1:
            below.sort(key=lambda item: item[0])  # str order, as children() sorts
        names: list[str] = []
        for sub, _, found in below:
            if not isinstance(found, int):
                return ChildGroup(name, None, names, found)
            names.append(sub)

        def load() -> tuple[Node, list[Node]]:
            return _node(value), [_node(sub_value) for _, sub_value, _ in below]

        return ChildGroup(name, value[start:], names, None, load)

    def keys(self) -> list[bytes]:
        """Every key in the database, reserved keys included (for dumps and tests)."""
        out: list[bytes] = []
        it = self._opened().iter()
        try:
            it.seek_to_first()
            while it.valid():
                out.append(bytes(it.key()))
                it.next()
            self._status(it)
        finally:
            del it
        return out

    # -- writes --------------------------------------------------------------------------------

    def _apply(self, ops: list[Op], sequential: bool = False) -> list[tuple[str, Stat | None]]:
        """Check every op against the current state plus the earlier ops, then write all."""
        rd = self._rocksdict
        batch = rd.WriteBatch(raw_mode=True)
        overlay: dict[str, rec.MetaValue | None] = {}
        results: list[tuple[str, Stat | None]] = []
        now = _now_ms()
        seq = self.sequential_id

        def current(path: str) -> rec.MetaValue | None:
            return overlay[path] if path in overlay else self._meta(path)

        for op in ops:
            meta = current(op.path)
            if op.kind == "check":
                if meta is None:
                    raise MetadataConflict(op.path, "does not exist")
                if op.version is not None and meta.version != op.version:
                    raise MetadataConflict(
                        op.path, f"is at version {meta.version}, not {op.version}"
                    )
                results.append((op.path, None))
            elif op.kind in ("create", "create-ephemeral"):
                path = op.path
                if sequential:
                    path = rec.sequential_path(op.path, seq)
                    seq += 1
                    batch.put(rec.SEQUENTIAL_ID_KEY, rec.build_long(seq))
                    meta = current(path)
                if meta is not None:
                    raise MetadataConflict(path, "already exists")
                new = rec.MetaValue(0, self.instance_id, now, now, op.kind != "create", op.data)
                overlay[path] = new
                batch.put(rec.path_key(path), rec.build(new))
                results.append((path, _stat(new)))
            elif op.kind == "set":
                if meta is None:
                    raise MetadataConflict(op.path, "does not exist")
                if op.version is not None and meta.version != op.version:
                    raise MetadataConflict(
                        op.path, f"is at version {meta.version}, not {op.version}"
                    )
                new = rec.MetaValue(
                    meta.version + 1,
                    self.instance_id,
                    meta.created_ms,
                    now,
                    meta.ephemeral,
                    op.data,
                )
                overlay[op.path] = new
                batch.put(rec.path_key(op.path), rec.build(new))
                results.append((op.path, _stat(new)))
            elif op.kind == "delete":
                if meta is None:
                    raise MetadataConflict(op.path, "does not exist")
                if self._children_with(op.path, overlay):
                    raise MetadataConflict(op.path, "has children")
                if op.version is not None and meta.version != op.version:
                    raise MetadataConflict(
                        op.path, f"is at version {meta.version}, not {op.version}"
                    )
                overlay[op.path] = None
                batch.delete(rec.path_key(op.path))
                results.append((op.path, None))
            else:
                raise LedgerctlError(f"unknown transaction operation {op.kind!r}")
        self._opened().write(batch, self._write_opts)
        return results

    def _children_with(self, path: str, overlay: dict[str, rec.MetaValue | None]) -> set[str]:
        """Children of ``path`` once the pending operations of a transaction are applied."""
        names = set(self.children(path))
        prefix = ("" if path == "/" else path) + "/"
        for other, meta in overlay.items():
            if other.startswith(prefix) and "/" not in other[len(prefix) :]:
                name = other[len(prefix) :]
                if meta is None:
                    names.discard(name)
                else:
                    names.add(name)
        return names

    def _put(
        self,
        path: str,
        data: bytes,
        expected_version: int | None,
        ephemeral: bool,
        sequential: bool,
    ) -> tuple[str, Stat]:
        with self._lock:
            existing = None if sequential else self._meta(path)
            if expected_version == -1 or sequential or existing is None:
                if expected_version not in (None, -1):
                    raise MetadataConflict(path, "does not exist")
                kind = "create-ephemeral" if ephemeral else "create"
                ((created, stat),) = self._apply([Op(kind, path, data)], sequential=sequential)
            else:
                ((created, stat),) = self._apply([Op("set", path, data, expected_version)])
            assert stat is not None
            return created, stat

    def _delete(self, path: str, expected_version: int | None) -> None:
        with self._lock:
            self._apply([Op("delete", path, version=expected_version)])

    def _commit(self, ops: list[Op]) -> list[Stat | None]:
        with self._lock:
            return [stat for _, stat in self._apply(ops)]

    def put_raw(self, key: bytes, value: bytes) -> None:
        """Write one key as is (restoring a dump, building test fixtures)."""
        self._require_writable()
        with self._lock:
            self._opened().put(key, value, self._write_opts)


def create_metadata_store(path: str | os.PathLike[str]) -> RocksDBMetadataStore:
    """Create a new, empty RocksDB metadata store at ``path`` and open it for writing."""
    return RocksDBMetadataStore(os.fspath(path), read_only=False, create=True)


def validate_value(path: str, value: bytes) -> rec.MetaValue:
    """Decode a raw value read elsewhere, naming its path on error."""
    try:
        return rec.parse(value)
    except CorruptEntryError as exc:
        raise CorruptEntryError(
            f"metadata-record {path}", exc.offset, exc.expected, exc.found
        ) from None
