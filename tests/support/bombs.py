"""The adversarial corpus of bombs, built on the fly: entries that claim (or hold) far more
than their bytes, worlds that store them, and a runner that measures a command's peak RSS.

Nothing here is a stored binary: every entry is built by ledgerctl's own builders
(``pulsar.build_entry``, ``payload.build_batch``, the codecs' libraries) in a few KiB,
and every world by the writers the other test worlds use (``tests/support/verify_world.py``).

* :data:`ENTRY_BOMBS`: single Pulsar entries, by name: for each codec an entry declaring
  4 GiB (``declared``), one declaring the limit whose bytes inflate far beyond it
  (``lying``, zlib and zstd streams of 256 MiB of zeros in a few KiB) and an honest one of
  exactly the limit (``at-limit``); batches claiming 2^31 - 1 messages, holding the most
  messages a batch may (each one empty), or a record claiming a 2^31 - 1 byte value.
* :data:`LEDGER_BOMBS`: runs of entries: chunked messages that announce or join to more
  than the limit, and thousands of chunked messages that never finish.
* :func:`bomb_world`: the verify world (``tests/support/verify_world.py``) with a bomb stored at
  40:1 (topic ``plain``, no broker entry metadata: what ``migrate index`` migrates), 10:1
  (``orders``; copied into its compacted ledger 30, which ``migrate compacted`` rewrites)
  and 12:0 (``orders``, after its compaction horizon: what ``compact`` reads).
* :func:`topic_world`: one topic of one closed ledger holding the entries given.
* :func:`run_peak`: ``ledgerctl ARGS`` in a fresh interpreter that writes its own peak RSS
  (``VmHWM`` of ``/proc/self/status``, as bench/cli.py's children do) at exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pulsarctl_py.decoders.codecs import compress
from pulsarctl_py.decoders.entry import MAX_BATCH_MESSAGES
from pulsarctl_py.decoders.limits import DEFAULT_MAX_MESSAGE_SIZE
from pulsarctl_py.decoders.payload import RECORD_HEADER, build_batch
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api

MiB = 1 << 20
#: the default maximum message size, which the bombs are built around
LIMIT = DEFAULT_MAX_MESSAGE_SIZE
#: the goal of issue 24 point 4: every command on every bomb under this peak RSS
PEAK_GOAL = 300 * MiB
#: what an honest zlib or zstd bomb inflates to (its stored bytes are a few KiB)
INFLATED = 256 * MiB
CODECS = {"lz4": api.LZ4, "zlib": api.ZLIB, "zstd": api.ZSTD, "snappy": api.SNAPPY}
T0 = 1_767_225_600_000


def pulsar_entry(
    payload: bytes,
    *,
    compression: int = api.NONE,
    uncompressed_size: int | None = None,
    key: str | None = "bomb",
    **fields: object,
) -> bytes:
    """A Pulsar entry (checksummed) with this payload and metadata."""
    md = api.MessageMetadata(
        producer_name="bombs", sequence_id=1, publish_time=T0, compression=compression
    )
    if compression != api.NONE or uncompressed_size is not None:
        md.uncompressed_size = len(payload) if uncompressed_size is None else uncompressed_size
    if key is not None:
        md.partition_key = key
    for name, value in fields.items():
        setattr(md, name, value)
    return build_entry(md, payload, checksum=True)


def zeros_compressed(codec: int, size: int) -> bytes:
    """``size`` zero bytes compressed as Pulsar stores them, without holding them for the
    streaming codecs (zlib, zstd: the frame then announces no content size)."""
    if codec == api.ZLIB:
        deflate = zlib.compressobj(9)
        block = bytes(MiB)
        parts = [deflate.compress(block) for _ in range(size // MiB)]
        parts.append(deflate.compress(bytes(size % MiB)))
        return b"".join(parts) + deflate.flush()
    if codec == api.ZSTD:
        import zstandard

        stream = zstandard.ZstdCompressor(level=19).compressobj()
        block = bytes(MiB)
        parts = [stream.compress(block) for _ in range(size // MiB)]
        parts.append(stream.compress(bytes(size % MiB)))
        return b"".join(parts) + stream.flush()
    return compress(codec, bytes(size))


def _declared(codec: int) -> bytes:
    """Declares 4 GiB - 1; holds a real bomb where the codec can (zlib, zstd)."""
    streaming = codec in (api.ZLIB, api.ZSTD)
    payload = zeros_compressed(codec, INFLATED if streaming else 64 * 1024)
    return pulsar_entry(payload, compression=codec, uncompressed_size=2**32 - 1)


def _lying(codec: int) -> bytes:
    """Declares exactly the limit; its bytes inflate to far more (twice the limit for the
    block codecs, whose libraries need the whole input to compress)."""
    streaming = codec in (api.ZLIB, api.ZSTD)
    payload = zeros_compressed(codec, INFLATED if streaming else 2 * LIMIT)
    return pulsar_entry(payload, compression=codec, uncompressed_size=LIMIT)


def _at_limit(codec: int) -> bytes:
    """An honest message of exactly the limit: it decodes, and its value is written."""
    return pulsar_entry(zeros_compressed(codec, LIMIT), compression=codec, uncompressed_size=LIMIT)


def _batch(records: bytes, count: int, codec: int = api.ZSTD) -> bytes:
    return pulsar_entry(
        zeros_compressed(codec, 0) if not records else compress(codec, records),
        compression=codec,
        uncompressed_size=len(records),
        num_messages_in_batch=count,
    )


def _batch_count_huge() -> bytes:
    """Three records, claiming 2^31 - 1."""
    smm = [(api.SingleMessageMetadata(partition_key=f"k{i}"), b"v") for i in range(3)]
    return _batch(build_batch(smm), 2**31 - 1)


def _batch_most_records() -> bytes:
    """As many empty records as a batch may hold (each 6 bytes: size, payload_size 0)."""
    record = api.SingleMessageMetadata(payload_size=0).SerializeToString()
    one = RECORD_HEADER.pack(len(record)) + record
    return _batch(one * MAX_BATCH_MESSAGES, MAX_BATCH_MESSAGES)


def _batch_value_huge() -> bytes:
    """One record whose payload_size claims 2^31 - 1 bytes."""
    record = api.SingleMessageMetadata(payload_size=2**31 - 1, partition_key="k")
    body = record.SerializeToString()
    return _batch(RECORD_HEADER.pack(len(body)) + body + b"v" * 16, 1)


ENTRY_BOMBS: dict[str, Callable[[], bytes]] = {
    **{f"{name}-declared": (lambda c=c: _declared(c)) for name, c in CODECS.items()},
    **{f"{name}-lying": (lambda c=c: _lying(c)) for name, c in CODECS.items()},
    **{f"{name}-at-limit": (lambda c=c: _at_limit(c)) for name, c in CODECS.items()},
    "batch-count-huge": _batch_count_huge,
    "batch-most-records": _batch_most_records,
    "batch-value-huge": _batch_value_huge,
}


# -- runs of entries ------------------------------------------------------------------------


def chunk(uuid: str, chunk_id: int, chunks: int, payload: bytes, total: int, **md: object) -> bytes:
    """One chunk of a chunked message (the payload slice of the compressed whole)."""
    return pulsar_entry(
        payload,
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=chunks,
        total_chunk_msg_size=total,
        **md,
    )


def _chunk_announces_huge() -> list[bytes]:
    """Chunk 0 of 2 announces a message of 2^31 - 1 bytes."""
    return [
        chunk("huge", 0, 2, b"x" * 1024, 2**31 - 1),
        chunk("huge", 1, 2, b"y" * 1024, 2**31 - 1),
    ]


def _chunks_join_past_limit() -> list[bytes]:
    """Five chunks of 0.9 x the limit each (each one a message the broker accepts),
    announcing one chunk's size: they join to 4.5 x the limit, past the 4 x a chunked
    message may hold, which only their bytes tell."""
    size = LIMIT * 90 // 100
    piece = os.urandom(1024) * (size // 1024)
    return [chunk("big", i, 5, piece, len(piece)) for i in range(5)]


def _chunks_inflate_past_limit() -> list[bytes]:
    """A two-chunk ZSTD message whose joined bytes (a few KiB) inflate to 256 MiB."""
    whole = zeros_compressed(api.ZSTD, INFLATED)
    half = len(whole) // 2
    md = {"compression": api.ZSTD, "uncompressed_size": INFLATED}
    return [
        chunk("inflating", 0, 2, whole[:half], len(whole), **md),
        chunk("inflating", 1, 2, whole[half:], len(whole), **md),
    ]


def _chunks_never_finished() -> list[bytes]:
    """1,200 chunked messages of 2 chunks of 64 KiB each, only chunk 0 of each stored:
    75 MiB of chunks that would all wait to be joined (the pending budget is 50 MiB)."""
    piece = b"p" * (64 * 1024)
    return [chunk(f"open-{i}", 0, 2, piece, 2 * len(piece)) for i in range(1200)]


def _many_at_limit() -> list[bytes]:
    """12 honest ZSTD messages of exactly the limit each (60 MiB of values in 3 KiB), each
    with its own key: every one is exported and kept by a compaction."""
    payload = zeros_compressed(api.ZSTD, LIMIT)
    return [
        pulsar_entry(payload, compression=api.ZSTD, uncompressed_size=LIMIT, key=f"k{i}")
        for i in range(12)
    ]


LEDGER_BOMBS: dict[str, Callable[[], list[bytes]]] = {
    "many-at-limit": _many_at_limit,
    "chunk-announces-huge": _chunk_announces_huge,
    "chunks-join-past-limit": _chunks_join_past_limit,
    "chunks-inflate-past-limit": _chunks_inflate_past_limit,
    "chunks-never-finished": _chunks_never_finished,  # last: its chunks stay pending
}


def corpus() -> list[tuple[str, list[bytes]]]:
    """Every bomb, by name, with its entries (one for an entry bomb), in corpus order."""
    out = [(name, [make()]) for name, make in ENTRY_BOMBS.items()]
    return out + [(name, make()) for name, make in LEDGER_BOMBS.items()]


# -- worlds ------------------------------------------------------------------------------------

#: where :func:`bomb_world` stores its bomb
BOMB_POSITIONS = ((40, 1), (10, 1), (12, 0))
#: the topic of :func:`topic_world`
TOPIC = "persistent://public/bombs/t"
TOPIC_LEDGER = 7


@dataclass(frozen=True)
class Stores:
    metadata_url: str
    bookie_dir: Path

    def flags(self) -> list[str]:
        return ["--metadata-url", self.metadata_url, "--bookie-dir", str(self.bookie_dir)]


def bomb_world(root: Path, bomb: bytes) -> Stores:
    """The verify world with ``bomb`` stored at :data:`BOMB_POSITIONS`."""
    from tests.support import verify_world

    world = verify_world.build_world(root, entries=dict.fromkeys(BOMB_POSITIONS, bomb))
    return Stores(world.metadata_url, world.bookie_dir)


def topic_world(
    root: Path, entries: list[bytes], schemas: list[tuple[int, bytes]] | None = None
) -> Stores:
    """:data:`TOPIC`: one closed ledger (CRC32C) holding ``entries``, a cursor at its start;
    with ``schemas`` ((schema type, definition) per version, from 0), its schema storage:
    a schema ledger of one entry per version and the index naming them."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.decoders.checksums import master_key
    from pulsarctl_py.stores.bookie import write_db_ledger_dir
    from pulsarctl_py.stores.metadata import create_metadata_store
    from tests.support import verify_world as vw

    spec = vw.LedgerSpec(TOPIC_LEDGER, vw._tags(TOPIC))
    vw._Builder.pack(spec, entries)
    name = mld.TopicName.parse(TOPIC)
    nodes = {
        name.ml_path: mld.build_info(vw._ml_info([(spec, True)], {})),
        name.cursor_path("c"): mld.build_info(vw._cursor((TOPIC_LEDGER, -1))),
        lm.ledger_path(TOPIC_LEDGER): lm.build(spec.metadata()),
        **vw.bookkeeper_root_nodes(root / "bookie"),
    }
    stored = list(spec.entries)
    if schemas:
        nodes.update(_schema_storage(schemas, stored))
    root.mkdir(parents=True, exist_ok=True)
    with create_metadata_store(root / "metadata") as store:
        vw.write_tree(store, nodes)
    write_db_ledger_dir(root / "bookie" / "current", stored, master_key(b""))
    vw.write_cookies(root / "bookie")
    return Stores(f"rocksdb://{root / 'metadata'}", root / "bookie")


#: the schema ledger of :func:`topic_world` (its versions' entries)
SCHEMA_LEDGER = 8


def _schema_storage(schemas: list[tuple[int, bytes]], stored: list[bytes]) -> dict[str, bytes]:
    """The schema ledger's entries (appended to ``stored``) and its metadata store nodes, as
    the broker's BookkeeperSchemaStorage keeps them (docs/schemas.md)."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.decoders.schemas import (
        IndexEntry,
        SchemaType,
        StoredSchema,
        build_locator,
        build_schema_entry,
        build_schema_info,
        locator_path,
    )
    from pulsarctl_py.schemas import topic_schema_name
    from tests.support import verify_world as vw

    spec = vw.LedgerSpec(SCHEMA_LEDGER, {"application": b"pulsar", "component": b"schema"})
    index: list[IndexEntry] = []
    payloads = []
    for version, (kind, definition) in enumerate(schemas):
        info = StoredSchema(
            version, SchemaType(kind), kind + 1, definition, {}, False, T0, "", "bombs"
        )
        payloads.append(build_schema_entry(build_schema_info(info), list(index)))
        index.append(IndexEntry(version, SCHEMA_LEDGER, version, bytes(32)))
    vw._Builder.pack(spec, payloads)
    stored.extend(spec.entries)
    return {
        locator_path(topic_schema_name(TOPIC)): build_locator(index),
        lm.ledger_path(SCHEMA_LEDGER): lm.build(spec.metadata()),
    }


# -- measuring -------------------------------------------------------------------------------

_PEAK_ENV = "LEDGERCTL_TEST_PEAK_RSS_FILE"
# ledgerctl's entry point in a fresh interpreter that writes its own peak RSS (VmHWM, which
# exec resets; not ru_maxrss, which Linux carries over from the parent) at exit
_LAUNCH = f"""
import atexit, os, sys
def _peak():
    with open("/proc/self/status", encoding="ascii") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["{_PEAK_ENV}"], "w", encoding="ascii") as out:
        out.write(str(kib))
atexit.register(_peak)
sys.argv[0] = "ledgerctl"
from pulsarctl_py.cli import run
run()
"""
#: address space a measured command may take: far above the goal, so a command that
#: breaks it fails its test instead of taking the machine's memory
ADDRESS_SPACE = 16 << 30


@dataclass
class Measured:
    code: int
    peak: int  # bytes
    out: str  # stdout (when kept) or ""
    err: str

    @property
    def peak_mib(self) -> float:
        return round(self.peak / MiB, 1)


def _limit_address_space() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_peak(
    *args: str | Path,
    env: dict[str, str] | None = None,
    keep_stdout: bool = False,
    stdout_to: Path | None = None,
    timeout: float = 180,
    cwd: Path | None = None,
) -> Measured:
    """Run ``ledgerctl ARGS`` in a fresh interpreter; its exit code, peak RSS and output.

    Its stdout goes to a file (``stdout_to``, or one read back when ``keep_stdout``) or
    nowhere: a large output never sits in this process unless asked for.
    """
    with tempfile.TemporaryDirectory(prefix="ledgerctl-peak-") as tmp:
        peak_file = Path(tmp) / "peak"
        out_file = stdout_to or Path(tmp) / "out"
        full_env = {**os.environ, **(env or {}), _PEAK_ENV: str(peak_file)}
        with open(out_file, "wb") as out:
            proc = subprocess.run(
                [sys.executable, "-c", _LAUNCH, *map(str, args)],
                stdin=subprocess.DEVNULL,
                stdout=out if keep_stdout or stdout_to else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=full_env,
                cwd=cwd,
                timeout=timeout,
                preexec_fn=_limit_address_space,
            )
        err = proc.stderr.decode("utf-8", "replace")
        if not peak_file.exists():
            raise AssertionError(f"no peak RSS written (exit {proc.returncode}): {err[-2000:]}")
        peak = int(peak_file.read_text(encoding="ascii")) * 1024
        text = out_file.read_text(encoding="utf-8", errors="replace") if keep_stdout else ""
    return Measured(proc.returncode, peak, text, err)


# -- many topics -------------------------------------------------------------------------------

#: the namespace of :func:`many_topics_world`
MANY_NAMESPACE = "public/many"


def many_topics_world(root: Path, topics: int, *, batch: int = 20_000) -> Stores:
    """A RocksDB metadata store of ``topics`` topics (``public/many/t-NNNNNN``), each with
    one closed ledger of 10 entries (its znode too) and one cursor; no bookie data."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.stores.metadata import create_metadata_store
    from tests.support import verify_world as vw

    root.mkdir(parents=True, exist_ok=True)
    with create_metadata_store(root / "metadata") as store:
        txn = store.transaction()
        pending = 0
        for i in range(topics):
            topic = f"persistent://{MANY_NAMESPACE}/t-{i:06d}"
            ledger_id = 1000 + i
            spec = vw.LedgerSpec(ledger_id, vw._tags(topic), payload_sizes=[100] * 10)
            spec.entries = [b""] * 10
            name = mld.TopicName.parse(topic)
            txn.create(name.ml_path, mld.build_info(vw._ml_info([(spec, True)], {})))
            txn.create(name.cursor_path("sub"), mld.build_info(vw._cursor((ledger_id, 4))))
            txn.create(lm.ledger_path(ledger_id), lm.build(spec.metadata()))
            pending += 3
            if pending >= batch:
                txn.commit()
                txn, pending = store.transaction(), 0
        if pending:
            txn.commit()
    (root / "bookie").mkdir(exist_ok=True)
    return Stores(f"rocksdb://{root / 'metadata'}", root / "bookie")
