"""Ledgers offloaded by Pulsar's filesystem offloader: one Hadoop MapFile per ledger.

``FileSystemManagedLedgerOffloader`` (apache/pulsar ``tiered-storage/file-system``) writes
ledger L of managed ledger ``tenant/ns/persistent/topic`` with offload uuid U to the
directory ``<storageBasePath>/tenant/ns/persistent/topic/L-U/``, a Hadoop ``MapFile``:

* ``data``: a SequenceFile ``<LongWritable, BytesWritable>``; key -1 holds the ledger's
  metadata (``OffloadUtils.buildLedgerMetadataFormat``: a BookKeeper
  ``LedgerMetadataFormat``, serialized bare), keys 0..lastEntryId the entries, each the
  bytes the broker wrote to BookKeeper (no bookie header or digest);
* ``index``: a SequenceFile ``<LongWritable, LongWritable>`` of (key, byte offset in
  ``data``) for the first key and then every ``io.map.index.interval`` keys (128) where
  the offset moved (``MapFile.Writer.append``): entry E is read from the greatest indexed
  key <= E, never by a scan from the start;
* ``.data.crc`` / ``.index.crc``: Hadoop's LocalFileSystem checksums
  (``ChecksumFileSystem``: ``"crc\\0" | i32 bytesPerChecksum | CRC32 per chunk``), checked
  over the bytes read when present.

``storageBasePath`` is the ``fileSystemURI`` the broker was given; ``file://`` paths are
read here. ``hdfs://`` would need an HDFS client (the NameNode's RPC, or WebHDFS over HTTP,
and Kerberos where the cluster uses it): refused in one line (:func:`local_path`), or
read from a copy (``hdfs dfs -get``) given as ``file://``.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import urllib.parse
import uuid as uuidlib
import zlib
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pulsarctl_py.decoders import DecodeOptions, Depth, Outer
from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata, parse_format
from pulsarctl_py.errors import (
    ChecksumMismatch,
    CorruptEntryError,
    DataError,
    LedgerctlError,
    NotFoundError,
)

from .seqfile import LAYER, Record, SequenceFile, bytes_value, long_key

#: MapFile's file names (MapFile.DATA_FILE_NAME, MapFile.INDEX_FILE_NAME)
DATA = "data"
INDEX = "index"
#: the key under which the offloader stores the ledger's metadata
METADATA_KEY = -1
CRC_MAGIC = b"crc\x00"
#: a LocalFileSystem checksum chunk is 512 bytes by default (file.bytes-per-checksum);
#: any size from 1 byte to 16 MiB is taken
MAX_BYTES_PER_CHECKSUM = 16 * 1024 * 1024


class UnsupportedLocation(LedgerctlError):
    """An offload location this reader cannot open (exit 2)."""


def local_path(storage_base_path: str) -> Path:
    """The local directory of a ``file://`` storage base path (or a plain path)."""
    parsed = urllib.parse.urlparse(storage_base_path)
    if parsed.scheme in ("", "file"):
        if parsed.netloc not in ("", "localhost"):
            raise UnsupportedLocation(
                f"{storage_base_path}: a file:// URL names a host; give a local path (file:///dir)"
            )
        return Path(urllib.parse.unquote(parsed.path))
    if parsed.scheme in ("hdfs", "viewfs", "webhdfs"):
        raise UnsupportedLocation(
            f"{storage_base_path}: reading {parsed.scheme}:// needs an HDFS client "
            "(NameNode RPC or WebHDFS, with Kerberos where enabled), which ledgerctl does not "
            "have; copy the offload root out (hdfs dfs -get) and pass --offload-url file:///copy"
        )
    raise UnsupportedLocation(
        f"{storage_base_path}: the filesystem offloader's {parsed.scheme}:// paths are not "
        "read; only file:// (a local directory or a copy)"
    )


def offload_uuid(msb: int, lsb: int) -> str:
    """The offload's UUID from OffloadContext's signed halves (java.util.UUID)."""
    return str(uuidlib.UUID(int=((msb & (2**64 - 1)) << 64) | (lsb & (2**64 - 1))))


def ledger_directory(root: Path, managed_ledger: str, ledger_id: int, uid: str) -> Path:
    """Where the offloader put one ledger (``FileSystemManagedLedgerOffloader``
    ``getStoragePath`` and ``getDataFilePath``): the managed ledger's name is its
    ``tenant/ns/persistent/topic`` path."""
    return root / managed_ledger / f"{ledger_id}-{uid}"


@dataclass(frozen=True, slots=True)
class TieredEntry:
    """One offloaded entry: the bytes the broker wrote (``data``), or why they could not
    be read (``error``, with ``data`` empty)."""

    ledger_id: int
    entry_id: int
    data: bytes
    offset: int  # where its record (or its block) starts in ``data``
    error: str | None = None


class _Checksums:
    """A file's LocalFileSystem ``.crc`` side file, checked over the ranges read."""

    def __init__(self, raw: bytes, name: str, size: int) -> None:
        if len(raw) < 8 or raw[:4] != CRC_MAGIC:
            raise CorruptEntryError("crc-file", 0, "a Hadoop .crc file (crc\\0)", raw[:4].hex())
        (self.chunk,) = struct.unpack_from(">i", raw, 4)
        if not 1 <= self.chunk <= MAX_BYTES_PER_CHECKSUM:
            raise CorruptEntryError(
                "crc-file", 4, f"1 to {MAX_BYTES_PER_CHECKSUM} bytes per checksum", str(self.chunk)
            )
        self.sums = memoryview(raw)[8:]
        self.name = name
        chunks = -(-size // self.chunk)
        if len(self.sums) != 4 * chunks:
            raise CorruptEntryError(
                "crc-file",
                8,
                f"{chunks} checksums for {size} bytes of {name}",
                f"{len(self.sums) // 4} checksums",
            )
        self.checked: set[int] = set()

    def check(self, data: memoryview, start: int, end: int) -> None:
        first, last = start // self.chunk, max(start, end - 1) // self.chunk
        for i in range(first, last + 1):
            if i in self.checked:
                continue
            chunk = data[i * self.chunk : (i + 1) * self.chunk]
            stored = int.from_bytes(self.sums[4 * i : 4 * i + 4], "big")
            computed = zlib.crc32(chunk)
            if stored != computed:
                raise ChecksumMismatch(
                    self.name,
                    i * self.chunk,
                    "CRC32 (.crc file)",
                    f"{stored:08x}",
                    f"{computed:08x}",
                )
            self.checked.add(i)


class _File:
    """One MapFile member, memory-mapped, with its checksums when present."""

    def __init__(self, path: Path, check_crc: bool) -> None:
        self.path = path
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise NotFoundError(f"{path}: no such file (the offloaded ledger is gone)") from None
        except OSError as exc:
            raise DataError(f"{path}: cannot open ({exc.strerror})") from None
        try:
            size = os.fstat(fd).st_size
            self.map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size else None
        finally:
            os.close(fd)
        self.data = memoryview(self.map) if self.map is not None else memoryview(b"")
        self.crc: _Checksums | None = None
        crc_path = path.with_name(f".{path.name}.crc")
        if check_crc and crc_path.is_file():
            self.crc = _Checksums(crc_path.read_bytes(), str(path), len(self.data))

    def check(self, start: int, end: int) -> None:
        if self.crc is not None:
            self.crc.check(self.data, start, end)

    def close(self) -> None:
        self.data = memoryview(b"")
        if self.map is not None:
            # a reader's generator not run to its end still holds slices of the map: it is
            # then unmapped when they are collected
            with contextlib.suppress(BufferError):
                self.map.close()
            self.map = None


class MapFileLedger:
    """One ledger offloaded by the filesystem offloader, read by entry id through its index."""

    def __init__(self, directory: Path, ledger_id: int, *, check_crc: bool = True) -> None:
        self.directory = directory
        self.ledger_id = ledger_id
        if not directory.is_dir():
            raise NotFoundError(
                f"ledger {ledger_id}: no offloaded data at {directory} (missing directory)"
            )
        self._data = _File(directory / DATA, check_crc)
        try:
            self._index_file = _File(directory / INDEX, check_crc)
        except LedgerctlError:
            self._data.close()
            raise
        self._seq: SequenceFile | None = None
        self._index: tuple[list[int], list[int]] | None = None
        self._metadata: LedgerMetadata | None = None

    def close(self) -> None:
        self._seq = None
        self._data.close()
        self._index_file.close()

    def __enter__(self) -> MapFileLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- structure ---------------------------------------------------------------------

    @property
    def seq(self) -> SequenceFile:
        if self._seq is None:
            self._seq = SequenceFile(
                self._data.data, f"{self.directory.name}/{DATA}", self._data.check
            )
            self._check_classes(self._seq, "org.apache.hadoop.io.BytesWritable")
        return self._seq

    def _check_classes(self, seq: SequenceFile, value_class: str) -> None:
        h = seq.header
        if h.key_class != "org.apache.hadoop.io.LongWritable" or h.value_class != value_class:
            raise CorruptEntryError(
                LAYER,
                4,
                f"a MapFile of LongWritable -> {value_class.rsplit('.', 1)[1]}",
                f"{h.key_class} -> {h.value_class}",
            )

    def index(self) -> tuple[list[int], list[int]]:
        """The MapFile index: ascending keys and the data offsets they start at."""
        if self._index is None:
            f = self._index_file
            seq = SequenceFile(f.data, f"{self.directory.name}/{INDEX}", f.check)
            self._check_classes(seq, "org.apache.hadoop.io.LongWritable")
            keys: list[int] = []
            offsets: list[int] = []
            data = self.seq
            for rec in seq.records():
                key, pos = long_key(rec.key, rec.offset), long_key(rec.value, rec.offset)
                if keys and (key <= keys[-1] or pos < offsets[-1]):
                    raise CorruptEntryError(
                        "mapfile-index",
                        rec.offset,
                        f"keys and offsets ascending (after key {keys[-1]} at {offsets[-1]})",
                        f"key {key} at {pos}",
                    )
                if not data.header.length <= pos < data.size:
                    raise CorruptEntryError(
                        "mapfile-index",
                        rec.offset,
                        f"an offset inside the data file ({data.header.length} to {data.size - 1})",
                        f"key {key} at offset {pos}",
                    )
                keys.append(key)
                offsets.append(pos)
            if not keys:
                raise CorruptEntryError("mapfile-index", 0, "at least one index entry", "none")
            self._index = (keys, offsets)
        return self._index

    def _records(self, offset: int) -> Iterator[tuple[int, Record]]:
        """(key, record) from ``offset``, each record's bytes checked against the .crc."""
        for rec in self.seq.records(offset):
            yield long_key(rec.key, rec.offset), rec

    def metadata(self) -> LedgerMetadata:
        """The ledger metadata the offloader embedded under key -1."""
        if self._metadata is None:
            keys, offsets = self.index()
            if keys[0] != METADATA_KEY:
                raise CorruptEntryError(
                    "mapfile-index", 0, "the metadata key -1 first", f"key {keys[0]}"
                )
            for key, rec in self._records(offsets[0]):
                if key != METADATA_KEY:
                    raise CorruptEntryError(
                        LAYER, rec.offset, "the ledger metadata (key -1)", f"key {key}"
                    )
                self._metadata = parse_format(bytes_value(rec.value, rec.offset), rec.offset)
                self._metadata.ledger_id = self.ledger_id
                break
        assert self._metadata is not None
        return self._metadata

    def start_offset(self, entry_id: int) -> tuple[int, int]:
        """(indexed key, data offset) to read entry ``entry_id`` from: the greatest indexed
        key <= the entry id."""
        keys, offsets = self.index()
        i = bisect_right(keys, entry_id) - 1
        if i < 0:
            raise NotFoundError(f"ledger {self.ledger_id}: no entry {entry_id} in the index")
        return keys[i], offsets[i]

    # -- entries -----------------------------------------------------------------------

    def read_entry(self, entry_id: int) -> bytes:
        """One entry's bytes, read from the index's nearest position before it."""
        for entry in self.read_entries(entry_id, entry_id):
            if entry.error is not None:
                raise DataError(entry.error)
            return entry.data
        raise NotFoundError(f"ledger {self.ledger_id}: entry {entry_id} is not in the offload")

    def read_entries(
        self, first: int = 0, last: int | None = None, *, keep_going: bool = False
    ) -> Iterator[TieredEntry]:
        """The entries in [first, last] (last None: to the end of the file), in order.

        A damaged record or block raises; with ``keep_going`` the entries it makes
        unreadable come out as :class:`TieredEntry` with ``error`` set, up to the next
        position the index gives (or ``last``, or the embedded metadata's lastEntryId),
        and the read goes on from there. An id the data skips comes out the same way.
        Callers pass ``last`` from the managed ledger's LedgerInfo (``entries - 1``): the
        embedded metadata may be in the damaged block."""
        first = max(first, 0)
        if last is None and keep_going:
            try:
                last = self.metadata().stored_last_entry_id
            except LedgerctlError:
                last = None
        keys, _offsets = self.index()
        next_id = first
        while last is None or next_id <= last:
            _key, offset = self.start_offset(next_id)
            previous: int | None = None
            try:
                for key, rec in self._records(offset):
                    if previous is not None and key <= previous:
                        raise CorruptEntryError(
                            LAYER, rec.offset, f"a key above {previous} (keys ascend)", str(key)
                        )
                    previous = key
                    if key < next_id:
                        continue
                    if last is not None and key > last:
                        break
                    value = bytes_value(rec.value, rec.offset)
                    while next_id < key:  # ids the data skips
                        if not keep_going:
                            raise NotFoundError(
                                f"ledger {self.ledger_id}: entry {next_id} is not in the "
                                f"offloaded data (the next is {key})"
                            )
                        yield self._missing(next_id, rec.offset, key)
                        next_id += 1
                    yield TieredEntry(self.ledger_id, key, value, rec.offset)
                    next_id = key + 1
                # the file ended before ``last``: the entries after its last record
                while last is not None and next_id <= last:
                    message = (
                        f"ledger {self.ledger_id}: entry {next_id} is not in the offloaded "
                        f"data (it ends at entry {next_id - 1})"
                    )
                    if not keep_going:
                        raise NotFoundError(message)
                    yield TieredEntry(self.ledger_id, next_id, b"", self.seq.size, message)
                    next_id += 1
                return
            except LedgerctlError as exc:
                if not keep_going:
                    raise
                resume = self._resume_after(next_id, keys)
                stop = resume - 1 if resume is not None else last
                if stop is None:
                    stop = next_id  # nothing tells how far: this one entry
                message = f"ledger {self.ledger_id}: {exc.one_line()}"
                for eid in range(next_id, stop + 1):
                    yield TieredEntry(self.ledger_id, eid, b"", offset, message)
                if resume is None:
                    return
                next_id = resume

    def _missing(self, entry_id: int, offset: int, found: int) -> TieredEntry:
        return TieredEntry(
            self.ledger_id,
            entry_id,
            b"",
            offset,
            f"ledger {self.ledger_id}: entry {entry_id} is not in the offloaded data "
            f"(the next record is entry {found})",
        )

    @staticmethod
    def _resume_after(entry_id: int, keys: list[int]) -> int | None:
        """The first indexed key past ``entry_id``: where reading can start again."""
        i = bisect_right(keys, entry_id)
        return keys[i] if i < len(keys) else None


def decode_options(
    depth: Depth = Depth.MESSAGES, verify: bool = True, max_uncompressed: int | None = None
) -> DecodeOptions:
    """How offloaded entries are decoded: Pulsar's entry bytes as the broker wrote them
    (broker entry metadata, then ``0x0e01 crc32c`` metadata and payload, the CRC32C
    verified), no bookie header or digest."""
    options = DecodeOptions(outer=Outer.PULSAR_ENTRY, depth=depth, verify=verify)
    if max_uncompressed is not None:
        options.max_uncompressed = max_uncompressed
    return options
