"""The commands as users run them, end to end, on every storage layout and digest type,
against the library loops and the floors of the same data.

Generates (or reuses, ``--data DIR``) data directories that the CLI opens like real ones,
one per row: a storage layout x a digest type. Each holds one ledger (7) of N entries,
written by ledgerctl's own writers from the entries of ``bench/scan.py`` (the same
deterministic pool: small Pulsar entries with broker entry metadata, half single values,
half batches of 2-5, a quarter LZ4), and a RocksDB metadata store in which that ledger
(closed, with the row's digest type and the empty password, Pulsar's default
``managedLedgerPassword``) is the only ledger of ``persistent://public/bench/cli``.

Layouts (``--layouts``):

* ``db``: DbLedgerStorage, one ledger directory (entry logs, ``locations`` and
  ``ledgers`` RocksDB indexes);
* ``db-dirs``: DbLedgerStorage with two ledger directories: ledger 7 in the one
  ``signSafeMod(7, 2)`` picks (BookKeeper's ``DbLedgerStorage.getLedgerStorage``,
  formats.md corrections §9), another ledger (8, N/4 entries) in the other;
* ``interleaved``: InterleavedLedgerStorage: entry logs and ``.idx`` index files, ledger
  7's entries interleaved with ledger 8's as they arrive (one record in ten is 8's);
* ``sorted``: SortedLedgerStorage: the same files, the entries flushed sorted by ledger
  (runs of 10,000 entries of ledger 7, each followed by 1,000 of ledger 8);
* ``scan``: the ``db`` directory without its ``locations`` index (lost): entries are
  located by scanning the entry logs, and every command reports the lost index (verify
  one finding, exit 1);
* ``live``: the ``db`` directory served by the self-made test bookie (tests/support/live_bookie.py,
  Python, answers preloaded in memory up to 250,000 entries) on loopback, the commands
  reading through the bookie protocol with ``--metadata-url`` alone. Not a real bookie:
  bench/live.py compares with BookKeeper's own client.
* ``sandbox``: real bookies, those of ``scripts/sandbox`` (``--sandbox DIR``: the cluster
  running in DIR, or started there and stopped after; only with ``--sandbox``, so the
  default run needs no Java). The row's ledger is written onto the running bookies by
  ledgerctl's own writer (pulsarctl_py/stores/live/writer.py: the ledger id from
  BookKeeper's id generator, the metadata in the sandbox's ZooKeeper under its
  BookKeeper root, the broker's ensemble and quorums from its broker.conf, the row's
  digest and the empty password), from the same entry pool (the bookie headers differ
  only by the piggybacked last-add-confirmed the writer sends), and the topic
  ``persistent://public/bench-cli-DIGEST/cli-N`` names it in a managed-ledger znode of
  that ZooKeeper: a namespace no broker serves. The commands read with
  ``--metadata-url`` and ``--bookkeeper-metadata-url`` alone (no directory). The row is
  reused by a later run on the same sandbox when its description (``--data``) and the
  znodes still match; a run fails if a broker loaded one of its topics (the managed
  ledger's znode changed, or the namespace has an owner).

Digests (``--digests``): ``crc32c``, ``crc32``, ``dummy`` (verify reports every entry
unverified: one warning finding), ``mac`` (HMAC-SHA1 with the empty password, read from
the ledger's metadata; on the sandbox too: the writer takes the empty password).

Measured on the same files in the same run, every measurement in a fresh process, the
rounds interleaved (round 1 of every row, then round 2, ...), CPU time of that process:

* commands, end to end, as a user runs them (``ledgerctl`` in a child process; CPU time
  is the child's user + system time from ``os.wait4``, interpreter start-up and imports
  included; peak RSS is the child's own VmHWM, written by the child at exit: not
  ``ru_maxrss``, which Linux floors at this script's RSS when it starts the child):

  - ``verify``: ``ledgerctl verify TOPIC --engine local -o jsonl`` (in this process, as
    ``--engine auto`` runs it unless a Spark threshold is set);
  - ``entry_jsonl``: ``ledgerctl inspect LEDGER --depth entry -o jsonl``;
  - ``jsonl``: ``ledgerctl inspect LEDGER -o jsonl``;
  - ``table``: ``ledgerctl inspect LEDGER -o table`` written to a pseudo-terminal of
    ``--columns`` columns (COLUMNS and the terminal's window size);
  - ``startup``: ``ledgerctl --version`` (what every command pays before its work; once).

  Every command's output is read by this script (a pipe, or the terminal) and its lines
  counted: one line per entry (table: at least one), verify the findings the row
  expects, or the run is rejected.

* library loops and floors, in a worker process of this script, timed around the loop
  only (``time.process_time``), on the row's store:

  - ``full_decode_loop``: ``read_entries`` + ``decode_entry`` at the default depth;
  - ``head_scan``: ``read_heads``;
  - ``floor``: on a directory, bench/scan.py's read-and-split floor: mmap the entry logs
    of the directory holding the ledger and split their ``[u32 size][entry]`` records in
    Python, one bytes object per record (interleaved and sorted: ledger 8's records too,
    one in eleven). On bookies (``live`` and ``sandbox``) that is not what the commands
    pay: their floor is the **bookie protocol read** of the same entries,
    ``LiveBookieStore.read_entries`` (v3, pipelined, the defaults) with nothing decoded
    and no digest verified (the store's per-entry check for failover off: ids only),
    CPU of the reading process (the bookies' CPU is not counted, as it is not in the
    commands' figures);
  - ``dir_floor``: the directory floor above on the live rows' files, as context (the
    test bookie's ``db`` directory; not taken on the sandbox, whose bookies' entry logs
    hold every ledger of the cluster, each entry on two of three bookies);
  - ``read_once``: read the directory's entry logs with one ``read()`` each (not on the
    sandbox).

Every measurement runs ``--runs`` times; the report gives min/median/max CPU seconds and
uses the min (best) for the ratios, per row, named as the goals of the issue:

* ``verify/floor``: entries/s of ``verify`` over those of the floor (goal >= 0.25);
* ``entry_jsonl/floor``: the same for ``inspect --depth entry -o jsonl`` (goal >= 0.10);
* ``jsonl/full_decode_loop``: ``inspect -o jsonl`` over the full decode loop (>= 0.50);
* ``table/jsonl``: CPU of ``-o table`` over that of ``-o jsonl`` (goal <= 1.5);
* ``rss_large/rss_small``: per command, peak RSS on N entries over that on N/10 (flat:
  <= 1.25, the bound of bench/scan.py).

On the live rows the report adds, as ``context``, ``verify`` and ``entry_jsonl`` over the
directory floor of the same files (``dir_floor``), which is what their ``floor`` was
before the floor of a row on bookies became the protocol read.

The files are in the page cache (just written or just read), so the floors are CPU
costs, not the disk's. On bookies every figure is the reading process's CPU: the
bookies' own CPU (the test bookie's, or the sandbox's JVMs, on the same cores) is not
counted, in the commands as in the floor. The load average is recorded before and
after. Prints one JSON object on stdout.

    python bench/cli.py --data DIR                  # 10^6 and 10^5 entries, every row, 3 rounds
    python bench/cli.py --entries 100000 --runs 3   # 10^5 and 10^4: while developing
    python bench/cli.py --layouts db,interleaved --digests crc32c   # some rows
    python bench/cli.py --rows scan/crc32,live/dummy --only verify,entry_jsonl,floor
    python bench/cli.py --quick                     # 2,000 and 200 entries, 1 round (smoke)
    python bench/cli.py --layouts sandbox --sandbox DIR --digests crc32c,crc32,dummy \
        --entries 1000000 --only verify,entry_jsonl,floor --data DIR2   # real bookies
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import json
import mmap
import os
import pty
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import scan  # bench/scan.py: the entry pool and the library scans
from _machine import machine  # bench/ is on sys.path when a bench script runs
from _sandbox import ensure_running
from _sandbox import sandbox as _sandbox

ROOT = Path(__file__).resolve().parent.parent  # tests.support.live_bookie, the test bookie
SEED = scan.SEED
LEDGER_ID = scan.LEDGER_ID
OTHER_LEDGER = 8  # the other ledger of the db-dirs, interleaved and sorted layouts
TOPIC = "persistent://public/bench/cli"
BOOKIE_ID = "127.0.0.1:3181"  # the bookie ledger metadata names
PASSWORD = b""  # Pulsar's default managedLedgerPassword
LAYOUT_VERSION = 2  # of the generated directories (bench-cli.json); bump when they change
INFO_FILE = "bench-cli.json"
COLUMNS = 160
LAYOUTS = ("db", "db-dirs", "interleaved", "sorted", "scan", "live", "sandbox")
DEFAULT_LAYOUTS = LAYOUTS[:-1]  # the sandbox row only with --sandbox (it needs Java)
SANDBOX_TOPIC = "persistent://public/bench-cli-{digest}/cli-{entries}"
DIGESTS = ("crc32c", "crc32", "dummy", "mac")
INTERLEAVE = 10  # interleaved: one record in ten is ledger 8's
SORTED_RUN = 10_000  # sorted: runs of ledger 7's entries, each followed by a tenth of 8's
LOG_LIMIT = 1 << 30  # entry logs rotate at BookKeeper's default entryLogSizeLimit
LIVE_PRELOAD = 250_000  # the test bookie holds a ledger in memory up to this many entries
GOALS: dict[str, tuple[str, float]] = {
    "verify/floor": (">=", 0.25),
    "entry_jsonl/floor": (">=", 0.10),
    "jsonl/full_decode_loop": (">=", 0.50),
    "table/jsonl": ("<=", 1.5),
    "rss_large/rss_small": ("<=", 1.25),
}
COMMANDS = ("verify", "entry_jsonl", "jsonl", "table")
LOOPS = ("full_decode_loop", "head_scan", "floor", "dir_floor", "read_once")
ON_BOOKIES = ("live", "sandbox")  # rows read through the bookie protocol
SIZE = struct.Struct(">i")


def _digest(name: str) -> Any:
    from pulsarctl_py.decoders.checksums import DigestType

    return DigestType.parse(name)


def _data_layout(layout: str) -> str:
    """The layout whose files a row reads: the live row serves the db directory."""
    return "db" if layout == "live" else layout


def applies(name: str, layout: str) -> bool:
    """Whether measurement ``name`` is taken on a row of ``layout``: the directory floor
    apart from the floor only where the floor is the protocol read of a directory's
    files (live); no files to read once on the sandbox."""
    if name == "dir_floor":
        return layout == "live"
    return not (name == "read_once" and layout == "sandbox")


# -- generation ---------------------------------------------------------------------------


def _write_logs(current: Path, records: Iterator[bytes], key: bytes) -> list[Path]:
    """Entry logs of ``records`` (rotating as a bookie does, the last one active) and one
    ``.idx`` index file per ledger: InterleavedLedgerStorage and SortedLedgerStorage."""
    from pulsarctl_py.decoders import entrylog
    from pulsarctl_py.stores.bookie import write_index_file
    from pulsarctl_py.stores.bookie.writers import EntryLogWriter, write_last_id

    current.mkdir(parents=True)
    by_ledger: dict[int, dict[int, int]] = {}
    logs: list[Path] = []
    writer: EntryLogWriter | None = None
    log_id = 0

    def close(active: bool) -> None:
        assert writer is not None
        writer.close(ledgers_map=not active)
        for (lid, eid), location in writer.locations.items():
            by_ledger.setdefault(lid, {})[eid] = location

    for entry in records:
        if writer is not None and writer.position + 4 + len(entry) > LOG_LIMIT:
            close(False)
            writer = None
            log_id += 1
        if writer is None:
            logs.append(current / entrylog.log_file_name(log_id))
            writer = EntryLogWriter(logs[-1], log_id)
        writer.add(entry)
    if writer is not None:
        close(True)
    write_last_id(current, log_id)
    for lid, locations in sorted(by_ledger.items()):
        write_index_file(current, lid, key, locations)
    return logs


def _interleaved(ours: Iterator[bytes], other: Iterator[bytes]) -> Iterator[bytes]:
    for i, entry in enumerate(ours):
        yield entry
        if i % (INTERLEAVE - 1) == INTERLEAVE - 2:
            yield from islice(other, 1)


def _sorted(ours: Iterator[bytes], other: Iterator[bytes]) -> Iterator[bytes]:
    while run := list(islice(ours, SORTED_RUN)):
        yield from run
        yield from islice(other, len(run) // 10)


def _write_bookie(
    bookie: Path, layout: str, ours: Iterator[bytes], other: Callable[[int], Iterator[bytes]]
) -> tuple[list[Path], Path]:
    """The bookie directory of a layout; its entry logs, and the ledger dir holding 7."""
    from pulsarctl_py.decoders import entrylog
    from pulsarctl_py.decoders.checksums import master_key
    from pulsarctl_py.stores.bookie import write_db_ledger_dir

    key = master_key(PASSWORD)
    if layout in ("db", "scan"):
        current = bookie / "current"
        summary = write_db_ledger_dir(current, ours, key)
        logs = [current / entrylog.log_file_name(i) for i in summary.log_ids]
        if layout == "scan":
            shutil.rmtree(current / "locations")  # the index is lost
        return logs, current
    if layout == "db-dirs":
        dirs = [bookie / f"ledgers{i}" / "current" for i in range(2)]
        # DbLedgerStorage.getLedgerStorage: MathUtils.signSafeMod(ledgerId, numberOfDirs)
        ours_dir, other_dir = dirs[LEDGER_ID % 2], dirs[OTHER_LEDGER % 2]
        summary = write_db_ledger_dir(ours_dir, ours, key)
        write_db_ledger_dir(other_dir, other(4), key)
        return [ours_dir / entrylog.log_file_name(i) for i in summary.log_ids], ours_dir
    current = bookie / "current"
    if layout == "interleaved":
        return _write_logs(current, _interleaved(ours, other(INTERLEAVE - 1)), key), current
    if layout == "sorted":
        return _write_logs(current, _sorted(ours, other(10)), key), current
    raise ValueError(layout)


def generate(root: Path, entries: int, seed: int, layout: str, digest_name: str) -> dict[str, Any]:
    """Write the bookie directory and the metadata store of one row under ``root``."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.decoders.bookkeeper import HEADER
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.stores.metadata import create_metadata_store

    start = time.perf_counter()
    digest = _digest(digest_name)
    pool = scan.build_pool(seed)
    last: list[bytes] = []

    def entries_kept() -> Iterator[bytes]:
        for data in scan.ledger_entries(pool, LEDGER_ID, entries, seed, digest, PASSWORD):
            last[:] = [data]
            yield data

    def other(share: int) -> Iterator[bytes]:
        count = max(1, entries // share)
        return scan.ledger_entries(pool, OTHER_LEDGER, count, seed, digest, PASSWORD)

    logs, ledger_dir = _write_bookie(root / "bookie", layout, entries_kept(), other)
    length = HEADER.unpack_from(last[0], 0)[3]
    messages = scan._messages(pool, entries, seed)
    topic = mld.TopicName.parse(TOPIC)
    metadata = lm.LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        state=lm.LedgerState.CLOSED,
        ensembles={0: [BOOKIE_ID]},
        last_entry_id=entries - 1,
        length=length,
        digest_type=digest,
        password=PASSWORD,
        ctime=scan.BASE_TIME - 1000,
        custom_metadata=lm.pulsar_custom_metadata(topic.persistence_name),
    )
    info = mlpb.ManagedLedgerInfo()
    info.ledgerInfo.add(
        ledgerId=LEDGER_ID, entries=entries, size=length, timestamp=scan.BASE_TIME + 5 * entries
    )
    info.properties.add(key=mld.PROPERTY_INDEX, value=str(messages - 1))
    store = create_metadata_store(root / "metadata")
    try:
        for path, data in (
            (lm.ledger_path(LEDGER_ID), lm.build(metadata)),
            (topic.ml_path, mld.build_info(info)),
        ):
            parts = path.split("/")
            for i in range(2, len(parts)):
                parent = "/".join(parts[:i])
                if store.exists(parent) is None:
                    store.put(parent, b"")
            store.put(path, data)
    finally:
        store.close()
    description = {
        "layout_version": LAYOUT_VERSION,
        "layout": layout,
        "digest": digest_name,
        "entries": entries,
        "messages": messages,
        "seed": seed,
        "ledger_id": LEDGER_ID,
        "topic": TOPIC,
        "ledger_dir": str(ledger_dir.relative_to(root)),
        "entry_log_bytes": sum(p.stat().st_size for p in logs),
        "generation_seconds": round(time.perf_counter() - start, 2),
    }
    (root / INFO_FILE).write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    return description


def prepared(root: Path, entries: int, seed: int, layout: str, digest: str) -> dict[str, Any]:
    """The description of the directory at ``root``: reused when it matches, else rebuilt."""
    try:
        found = json.loads((root / INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        found = None
    wanted = {
        "layout_version": LAYOUT_VERSION,
        "entries": entries,
        "seed": seed,
        "layout": layout,
        "digest": digest,
    }
    if isinstance(found, dict) and all(found.get(k) == v for k, v in wanted.items()):
        return {**found, "reused": True}
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    args = ["--generate-into", str(root), "--entries", str(entries), "--seed", str(seed)]
    args += ["--layouts", layout, "--digests", digest]
    return {**_generate_apart(args, "generation"), "reused": False}


def _generate_apart(args: list[str], what: str) -> dict[str, Any]:
    """This script with ``args`` (a ``--generate-into`` run) in a process of its own, so
    that no measurement inherits the writer's memory; its JSON report."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench/cli.py: {what} failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


# -- the sandbox rows: real bookies -------------------------------------------------------


def _cluster_store(cluster: Path, read_only: bool = True) -> Any:
    """The sandbox's metadata store, BookKeeper's root included (``store.bookkeeper()``)."""
    from pulsarctl_py.stores.metadata import open_metadata_store

    state = json.loads(cluster.read_text(encoding="utf-8"))
    url = f"{state['metadata_url']} bookkeeper={state['bookkeeper_metadata_url']}"
    return open_metadata_store(url, read_only=read_only)


def _broker_touched(store: Any, info: dict[str, Any]) -> str | None:
    """Why a broker loaded a sandbox row's topic, or None: its managed ledger's znode is
    not the one written (a broker that opens a managed ledger rewrites it, adding a
    ledger), or a broker owns the topic's bundle (pulsarctl_py/ownership.py)."""
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.ownership import owner_of

    topic = mld.TopicName.parse(info["topic"])
    node = store.get(topic.ml_path)
    if node is None or node.stat.version != info["ml_version"]:
        return f"the managed ledger of {info['topic']} changed (a broker opened it)"
    owner = owner_of(store, topic)
    if owner is not None:
        return f"broker {owner.broker} owns {info['topic']}"
    return None


def generate_sandbox(
    root: Path, entries: int, seed: int, digest_name: str, cluster: Path
) -> dict[str, Any]:
    """Write one sandbox row's ledger onto the running bookies and its topic's managed
    ledger into the sandbox's ZooKeeper; its description, kept in ``root``. Reused when
    the description in ``root`` matches and the znodes still hold what it says."""
    from pulsarctl_py.brokerconf import load_broker_conf
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.stores.ledger_writer import LedgerConfig
    from pulsarctl_py.stores.live.writer import write_ledger
    from pulsarctl_py.stores.metadata.ledgers import read_ledger

    start = time.perf_counter()
    state = json.loads(cluster.read_text(encoding="utf-8"))
    topic = mld.TopicName.parse(SANDBOX_TOPIC.format(digest=digest_name, entries=entries))
    wanted = {
        "layout_version": LAYOUT_VERSION,
        "layout": "sandbox",
        "digest": digest_name,
        "entries": entries,
        "seed": seed,
        "topic": str(topic),
        "zookeeper": state["metadata_url"],
    }
    try:
        found = json.loads((root / INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        found = None
    with _cluster_store(cluster, read_only=False) as store:
        place = store.bookkeeper()
        if isinstance(found, dict) and all(found.get(k) == v for k, v in wanted.items()):
            ledger = read_ledger(store, found["ledger_id"])
            if ledger is not None and _broker_touched(store, found) is None:
                return {**found, "reused": True}
        if store.exists(topic.ml_path) is not None:
            # an earlier run's topic (this namespace is the benchmark's): written anew
            old = mlpb.ManagedLedgerInfo()
            old.ParseFromString(store.get(topic.ml_path).data)
            for item in old.ledgerInfo:
                record = read_ledger(store, item.ledgerId)
                if record is not None:
                    place.store.delete(record.path)
            store.delete(topic.ml_path)
        conf = load_broker_conf(state["broker"]["conf"])
        config = LedgerConfig(
            ensemble=conf.ensemble,
            write_quorum=conf.write_quorum,
            ack_quorum=conf.ack_quorum,
            digest=_digest(digest_name),
            password=PASSWORD,
            custom_metadata=lm.pulsar_custom_metadata(topic.persistence_name),
        )
        pool = scan.build_pool(seed)
        # the entries of the other rows (ledger 7's picks of the pool), whatever id
        # BookKeeper's generator gives this ledger
        payloads = scan.ledger_payloads(pool, LEDGER_ID, entries, seed)
        written = write_ledger(place, config, payloads)
        messages = scan._messages(pool, entries, seed)
        info = mlpb.ManagedLedgerInfo()
        info.ledgerInfo.add(
            ledgerId=written.ledger_id,
            entries=written.entries,
            size=written.length,
            timestamp=scan.BASE_TIME + 5 * entries,
        )
        info.properties.add(key=mld.PROPERTY_INDEX, value=str(messages - 1))
        parts = topic.ml_path.split("/")
        for i in range(2, len(parts)):
            parent = "/".join(parts[:i])
            if store.exists(parent) is None:
                store.put(parent, b"")
        store.put(topic.ml_path, mld.build_info(info))
        ml_version = store.get(topic.ml_path).stat.version
    description = {
        **wanted,
        "messages": messages,
        "ledger_id": written.ledger_id,
        "ensemble": written.ensemble,
        "quorums": [config.ensemble, config.write_quorum, config.ack_quorum],
        "length": written.length,
        "ml_version": ml_version,
        "written_by": "ledgerctl's LedgerWriter (pulsarctl_py/stores/live/writer.py)",
        "generation_seconds": round(time.perf_counter() - start, 2),
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / INFO_FILE).write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    return {**description, "reused": False}


def prepared_sandbox(
    root: Path, entries: int, seed: int, digest: str, cluster: Path
) -> dict[str, Any]:
    """:func:`generate_sandbox` in a process of its own (no measurement inherits it)."""
    args = ["--generate-into", str(root), "--entries", str(entries), "--seed", str(seed)]
    args += ["--layouts", "sandbox", "--digests", digest, "--sandbox", str(cluster.parent)]
    return _generate_apart(args, "writing the sandbox row")


# -- the library loops (worker processes) ------------------------------------------------


class Row:
    """One layout x digest: where its files are, and how its stores are opened."""

    def __init__(self, layout: str, digest: str, root: Path, address: str | None = None):
        self.layout = layout
        self.digest = digest
        self.root = root  # the data directory (live: the db one it serves; sandbox: the
        # row's description)
        self.address = address  # the test bookie's HOST:PORT (live); cluster.json (sandbox)

    @property
    def name(self) -> str:
        return f"{self.layout}/{self.digest}"

    @property
    def ledger_id(self) -> int:
        """The row's ledger: 7, or the id BookKeeper's generator gave (sandbox)."""
        return int(self.info()["ledger_id"]) if self.layout == "sandbox" else LEDGER_ID

    @property
    def topic(self) -> str:
        return str(self.info()["topic"]) if self.layout == "sandbox" else TOPIC

    def cluster(self) -> dict[str, Any]:
        assert self.layout == "sandbox" and self.address is not None
        state: dict[str, Any] = json.loads(Path(self.address).read_text(encoding="utf-8"))
        return state

    def info(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / INFO_FILE).read_text(encoding="utf-8"))
        return data

    def logs(self) -> list[Path]:
        """The entry logs of the ledger directory holding the ledger."""
        from pulsarctl_py.decoders import entrylog

        current = self.root / self.info()["ledger_dir"]
        return sorted(
            current / n for n in os.listdir(current) if entrylog.parse_log_file_name(n) is not None
        )

    def options(self, depth: Any = None) -> Any:
        from pulsarctl_py.decoders.entry import DecodeOptions, Depth, Outer

        return DecodeOptions(
            outer=Outer.BOOKIE_ENTRY,
            digest_type=_digest(self.digest),
            password=PASSWORD,
            depth=depth or Depth.MESSAGES,
        )

    def open_store(self, store_class: Any = None) -> Any:
        """The row's store, as a context manager (on bookies: ``store_class``, by default
        LiveBookieStore)."""
        from contextlib import contextmanager

        from pulsarctl_py.stores.bookie import open_bookie

        @contextmanager
        def live() -> Iterator[Any]:
            from pulsarctl_py.stores.live import ClientOptions, LiveBookieStore
            from pulsarctl_py.stores.metadata import open_metadata_store

            kind = store_class or LiveBookieStore
            if self.layout == "sandbox":
                assert self.address is not None
                md = _cluster_store(Path(self.address))
                options = ClientOptions()  # the bookies' addresses are their ids
            else:
                md = open_metadata_store(f"rocksdb://{self.root / 'metadata'}")
                options = ClientOptions(addresses=((BOOKIE_ID, self.address),))
            with md, kind(md, options) as store:
                yield store

        if self.layout in ON_BOOKIES:
            return live()
        return open_bookie([self.root / "bookie"])

    def argv(self) -> list[str]:
        """The store flags of a command on this row."""
        if self.layout == "sandbox":
            state = self.cluster()
            return [
                "--metadata-url",
                state["metadata_url"],
                "--bookkeeper-metadata-url",
                state["bookkeeper_metadata_url"],
            ]
        stores = ["--metadata-url", f"rocksdb://{self.root / 'metadata'}"]
        if self.layout == "live":
            return [*stores, "--bookie-address", f"{BOOKIE_ID}={self.address}"]
        return [*stores, "--bookie-dir", str(self.root / "bookie")]


def _full_decode_loop(row: Row) -> dict[str, Any]:
    """``read_entries`` + ``decode_entry`` at the default depth (bench/scan.py's (b))."""
    from pulsarctl_py.decoders.entry import decode_entry

    options = row.options()
    count = bad = messages = 0
    with row.open_store() as store:
        cpu = time.process_time()
        for stored in store.read_entries(row.ledger_id):
            entry = decode_entry(stored.data, options, (stored.ledger_id, stored.entry_id))
            bad += any(p.severity == "error" for p in entry.problems)
            messages += len(entry.messages)
            count += 1
        cpu = time.process_time() - cpu
    return {"entries": count, "bad": bad, "messages": messages, "cpu_seconds": cpu}


def _head_scan(row: Row) -> dict[str, Any]:
    """``read_heads`` (bench/scan.py's (a)): every entry located, read, its digest checked
    (unless DUMMY), its broker entry metadata read."""
    from pulsarctl_py.decoders.entry import Depth

    options = row.options(Depth.ENTRY)
    count = bad = 0
    with row.open_store() as store:
        cpu = time.process_time()
        for head in store.read_heads(row.ledger_id, options=options):
            bad += not head.ok or head.digest_ok is False
            count += 1
        cpu = time.process_time() - cpu
    return {"entries": count, "bad": bad, "cpu_seconds": cpu}


def _floor(row: Row) -> dict[str, Any]:
    """The row's floor: the protocol read on bookies (:func:`_protocol_floor`), the
    directory's read-and-split floor (:func:`_dir_floor`) elsewhere."""
    return _protocol_floor(row) if row.layout in ON_BOOKIES else _dir_floor(row)


def _protocol_floor(row: Row) -> dict[str, Any]:
    """The floor of a row on bookies: ``LiveBookieStore.read_entries`` over the ledger,
    nothing decoded, no digest verified: the store checks each answer's digest to fail
    over to another replica, which is the commands' work (verify) and so is left out
    here; the ids of each answer are still checked. CPU of this process only."""
    from pulsarctl_py.stores.live import LiveBookieStore

    class Unverified(LiveBookieStore):
        def _digest(self, md: Any) -> tuple[None, None]:
            return None, None  # no digest checked (LiveBookieStore._read's failover check)

    count = data_bytes = 0
    with row.open_store(Unverified) as store:
        store.metadata_of(row.ledger_id)  # the metadata read outside the timing
        cpu = time.process_time()
        for stored in store.read_entries(row.ledger_id):
            count += 1
            data_bytes += len(stored.data)
        cpu = time.process_time() - cpu
    return {"entries": count, "bytes": data_bytes, "cpu_seconds": cpu}


def _dir_floor(row: Row) -> dict[str, Any]:
    """bench/scan.py's read-and-split floor over the logs of the ledger's directory:
    mmap each, split its ``[u32 size][entry]`` records in Python, no index, no checks."""
    from pulsarctl_py.decoders import entrylog

    unpack = SIZE.unpack_from
    records = data_bytes = 0
    logs = row.logs()
    cpu = time.process_time()
    for path in logs:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            end = len(mm)
            pos = entrylog.parse_header(mm[: entrylog.DIRECT_HEADER_SIZE]).size
            while pos + 4 <= end:
                (size,) = unpack(mm, pos)
                if size <= 0:
                    break
                pos += 4
                entry = mm[pos : pos + size]
                pos += size
                records += 1
                data_bytes += len(entry)
    cpu = time.process_time() - cpu
    return {"entries": None, "records": records, "bytes": data_bytes, "cpu_seconds": cpu}


def _read_once(row: Row) -> dict[str, Any]:
    """Each entry log of the ledger's directory read with one ``read()``."""
    total = 0
    logs = row.logs()
    cpu = time.process_time()
    for path in logs:
        with open(path, "rb") as f:
            total += len(f.read())
    return {"entries": None, "bytes": total, "cpu_seconds": time.process_time() - cpu}


WORKERS: dict[str, Callable[[Row], dict[str, Any]]] = {
    "full_decode_loop": _full_decode_loop,
    "head_scan": _head_scan,
    "floor": _floor,
    "dir_floor": _dir_floor,
    "read_once": _read_once,
}


def worker(name: str, layout: str, digest: str, root: Path, address: str | None) -> dict[str, Any]:
    gc.collect()
    return WORKERS[name](Row(layout, digest, root, address))


# -- running a child and measuring it ----------------------------------------------------


#: the child's own peak RSS goes here (see _LAUNCH)
PEAK_FILE_ENV = "BENCH_CLI_PEAK_RSS_FILE"

# ``ledgerctl``'s entry point, run as the console script runs it, that writes the process's
# own peak RSS (VmHWM, which exec resets) to a file at exit: ``ru_maxrss`` from wait4 is
# floored at this script's RSS when it starts the child (Linux keeps it over fork and
# exec), so it cannot show a command smaller than this script.
_LAUNCH = f"""
import atexit, os, sys
def _peak():
    with open("/proc/self/status", encoding="ascii") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["{PEAK_FILE_ENV}"], "w", encoding="ascii") as out:
        out.write(str(kib))
atexit.register(_peak)
sys.argv[0] = "ledgerctl"
from pulsarctl_py.cli import run
sys.exit(run())
"""


def _ledgerctl() -> list[str]:
    """``ledgerctl``'s entry point in a fresh interpreter that reports its own peak RSS."""
    return [sys.executable, "-c", _LAUNCH]


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, float, int]:
    """Reap the child: exit code, CPU seconds (user + system), peak RSS KiB."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def run_child(argv: list[str], *, terminal: bool = False) -> dict[str, Any]:
    """Run ``argv`` with stdout on a pipe (or a pseudo-terminal); count what it writes."""
    env = {**os.environ, "COLUMNS": str(COLUMNS), "LINES": "50", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    # with the modules' bytecode cached, as an installed package has it: without the
    # cache every run compiles what it imports again (about 0.15 s of CPU per command)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    peak_file = tempfile.NamedTemporaryFile(prefix="bench-cli-rss-", delete=False)
    peak_file.close()
    env[PEAK_FILE_ENV] = peak_file.name
    with tempfile.TemporaryFile() as err:
        if terminal:
            leader, follower = pty.openpty()
            fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=err, env=env
            )
            os.close(follower)
            reader = leader
        else:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env
            )
            assert proc.stdout is not None
            reader = proc.stdout.fileno()
        lines = size = 0
        try:
            while True:
                try:
                    chunk = os.read(reader, 1 << 20)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                size += len(chunk)
                lines += chunk.count(b"\n")
        finally:
            if terminal:
                os.close(leader)
            code, cpu, rss = _finish(proc)
            if proc.stdout is not None:
                proc.stdout.close()
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    own = Path(peak_file.name).read_text(encoding="ascii").strip()
    os.unlink(peak_file.name)
    return {
        "code": code,
        "cpu_seconds": cpu,
        # the child's own peak (VmHWM); wait4's ru_maxrss only where /proc is missing
        "peak_rss_kib": int(own) if own else rss,
        "lines": lines,
        "stdout_bytes": size,
        "stderr": stderr,
    }


def command_argv(name: str, row: Row | None) -> tuple[list[str], bool]:
    """The command line of measurement ``name`` on a row."""
    if name == "startup":
        return [*_ledgerctl(), "--version"], False
    assert row is not None
    stores = row.argv()
    ledger = str(row.ledger_id)
    if name == "verify":
        # the in-process engine, stated (--engine auto keeps verify in this process unless
        # a Spark threshold is set, which the environment could do)
        engine = ["--engine", "local"]
        return [*_ledgerctl(), "verify", row.topic, *stores, *engine, "-o", "jsonl"], False
    if name == "entry_jsonl":
        return [*_ledgerctl(), "inspect", ledger, *stores, "--depth", "entry", "-o", "jsonl"], False
    if name == "jsonl":
        return [*_ledgerctl(), "inspect", ledger, *stores, "-o", "jsonl"], False
    if name == "table":
        return [*_ledgerctl(), "inspect", ledger, *stores, "-o", "table"], True
    raise ValueError(name)


def expected(name: str, row: Row | None, entries: int, lines: int, code: int) -> bool:
    """Whether a command wrote what the row's data holds: one line per entry (table: at
    least one); verify the findings the row has (the lost index of the scan layout, a
    warning of unverified digests for DUMMY), and their exit code."""
    if name == "startup" or row is None:
        return lines == 1 and code == 0
    lost = row.layout == "scan"  # an error finding, exit 1 (inspect reports it too)
    if name == "verify":
        return lines == int(lost) + int(row.digest == "dummy") and code == int(lost)
    if code != int(lost):
        return False
    return lines >= entries if name == "table" else lines == entries


def measure_command(name: str, row: Row | None, entries: int) -> dict[str, Any]:
    argv, terminal = command_argv(name, row)
    result = run_child(argv, terminal=terminal)
    where = f"{row.name} " if row is not None else ""
    if not expected(name, row, entries, result["lines"], result["code"]):
        raise SystemExit(
            f"bench/cli.py: {where}{name} exited {result['code']} with {result['lines']} "
            f"lines for {entries} entries:\n{result['stderr'][-2000:]}"
        )
    del result["stderr"]
    return result


def measure_loop(name: str, row: Row, entries: int) -> dict[str, Any]:
    args = ["--worker", name, row.layout, row.digest, str(row.root), row.address or "-"]
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"bench/cli.py: {row.name} {name} worker failed:\n{err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out)
    if result.get("entries") not in (None, entries) or result.get("bad"):
        raise SystemExit(f"bench/cli.py: {row.name} {name} saw {result} of {entries} entries")
    return result


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 4),
        "median": round(statistics.median(values), 4),
        "max": round(max(values), 4),
    }


def _summary(name: str, results: list[dict[str, Any]], entries: int) -> dict[str, Any]:
    cpu = [r["cpu_seconds"] for r in results]
    best = min(cpu)
    item: dict[str, Any] = {
        "cpu_seconds": _stats(cpu),
        "entries_per_cpu_s": round(entries / best) if best > 0 else None,
        "us_per_entry": round(best / entries * 1e6, 3),
    }
    if name not in LOOPS:
        item["peak_rss_mib"] = round(max(r["peak_rss_kib"] for r in results) / 1024, 1)
        item["stdout_bytes"] = results[0]["stdout_bytes"]
        item["lines"] = results[0]["lines"]
    return item


def run_all(
    rows: dict[str, tuple[Row, Row]],
    entries: tuple[int, int],
    runs: int,
    only: tuple[str, ...] = (*COMMANDS, *LOOPS),
) -> dict[str, Any]:
    """Every measurement (of ``only``) of every row ``runs`` times, interleaved: round 1
    of every row, then round 2...; the small ledger (N/10) for the commands only (peak
    RSS)."""
    large, small = entries
    samples: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    startup: list[dict[str, Any]] = []
    for _ in range(runs):
        startup.append(measure_command("startup", None, large))
        for key, (big, little) in rows.items():
            for name in (n for n in only if applies(n, big.layout)):
                if name in LOOPS:
                    result = measure_loop(name, big, large)
                else:
                    result = measure_command(name, big, large)
                samples.setdefault((key, "large", name), []).append(result)
            for name in (n for n in only if n in COMMANDS):
                result = measure_command(name, little, small)
                samples.setdefault((key, "small", name), []).append(result)
    out: dict[str, Any] = {"startup": _summary("startup", startup, large)}
    for (key, size, name), results in samples.items():
        count = large if size == "large" else small
        row = out.setdefault(key, {"large": {}, "small": {}})
        row[size][name] = _summary(name, results, count)
    return out


# -- the test bookie of the live rows --------------------------------------------------------


def start_test_bookie(bookie_dir: Path, entries: int) -> tuple[subprocess.Popen[str], str]:
    """The test bookie serving a bookie directory on loopback; its process and address."""
    cmd = [sys.executable, "-m", "tests.support.live_bookie", str(bookie_dir), "--no-record"]
    if entries <= LIVE_PRELOAD:
        cmd += ["--preload", str(LEDGER_ID)]
    server = subprocess.Popen(
        cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    line = server.stdout.readline().split()
    if len(line) != 2 or line[0] != "port":
        server.kill()
        raise SystemExit("bench/cli.py: the test bookie did not start")
    return server, f"127.0.0.1:{line[1]}"


def stop_test_bookie(server: subprocess.Popen[str]) -> None:
    if server.stdin is not None:
        server.stdin.close()  # it serves until stdin closes
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


# -- the report ---------------------------------------------------------------------------


def _goal(name: str, measured: float, metric: str) -> dict[str, Any]:
    op, target = GOALS[name]
    ok = measured >= target if op == ">=" else measured <= target
    return {"metric": metric, "goal": f"{op} {target}", "measured": measured, "pass": ok}


#: goal name -> (numerator, denominator, what the ratio is): a speed ratio is the
#: denominator's CPU seconds over the numerator's; a cost ratio the other way round
RATIOS: dict[str, tuple[str, str, str]] = {
    "verify/floor": (
        "floor",
        "verify",
        "entries/s of `ledgerctl verify` over entries/s of the row's floor",
    ),
    "entry_jsonl/floor": (
        "floor",
        "entry_jsonl",
        "entries/s of `inspect --depth entry -o jsonl` over the row's floor's",
    ),
    "jsonl/full_decode_loop": (
        "full_decode_loop",
        "jsonl",
        "entries/s of `inspect -o jsonl` over the library's full decode loop's",
    ),
    "table/jsonl": (
        "table",
        "jsonl",
        "CPU seconds of `inspect -o table` (terminal) over those of `inspect -o jsonl`",
    ),
}


def ratios(large: dict[str, Any], small: dict[str, Any]) -> dict[str, Any]:
    """The goals' ratios, of those whose measurements were taken."""
    out: dict[str, Any] = {}
    for name, (above, below, metric) in RATIOS.items():
        if above in large and below in large:
            value = large[above]["cpu_seconds"]["min"] / large[below]["cpu_seconds"]["min"]
            out[name] = _goal(name, round(value, 4), metric)
    rss = {
        name: round(large[name]["peak_rss_mib"] / small[name]["peak_rss_mib"], 3)
        for name in COMMANDS
        if name in large
    }
    if not rss:
        return out
    metric = "peak RSS on the large ledger over the small one's, worst command"
    out["rss_large/rss_small"] = {
        **_goal("rss_large/rss_small", max(rss.values()), metric),
        "per_command": rss,
    }
    return out


def _names(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise SystemExit(f"bench/cli.py: unknown {what} {unknown}: expected {', '.join(allowed)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--entries",
        type=int,
        help="entries of the large ledger (default 1000000; the small one has a tenth)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 2000 entries, 1 round")
    parser.add_argument("--runs", type=int, help="rounds per measurement (default 3; quick 1)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--layouts",
        help=f"comma-separated, of {', '.join(LAYOUTS)} (default: all; sandbox only with "
        "--sandbox)",
    )
    parser.add_argument(
        "--sandbox",
        type=Path,
        metavar="DIR",
        help="the sandbox row's cluster: scripts/sandbox in DIR (started there when not "
        "running, and stopped after)",
    )
    parser.add_argument(
        "--digests", default=",".join(DIGESTS), help=f"comma-separated, of {', '.join(DIGESTS)}"
    )
    parser.add_argument(
        "--rows",
        help="comma-separated LAYOUT/DIGEST pairs, instead of every layout x digest",
    )
    parser.add_argument(
        "--only",
        default=",".join((*COMMANDS, *LOOPS)),
        help="comma-separated measurements to take (default all: "
        f"{', '.join((*COMMANDS, *LOOPS))}); ratios of the others are left out",
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="generate the ledgers under DIR and keep them; a later run with the same "
        "--entries and --seed reuses them (default: a temporary directory, removed)",
    )
    parser.add_argument("--tmp", help="parent of the temporary directory (default: TMPDIR)")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--generate-into", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        name, layout, digest, root, address = args.worker
        result = worker(name, layout, digest, Path(root), None if address == "-" else address)
        print(json.dumps(result))
        return 0
    default = LAYOUTS if args.sandbox is not None else DEFAULT_LAYOUTS
    layouts = _names(args.layouts or ",".join(default), LAYOUTS, "layouts")
    digests = _names(args.digests, DIGESTS, "digests")
    pairs = [(layout, digest) for layout in layouts for digest in digests]
    if args.rows:
        pairs = [tuple(p.split("/", 1)) for p in args.rows.split(",")]  # type: ignore[misc]
        for layout, digest in pairs:
            _names(layout, LAYOUTS, "layouts")
            _names(digest, DIGESTS, "digests")
    if any(layout == "sandbox" for layout, _ in pairs) and args.sandbox is None:
        raise SystemExit("bench/cli.py: the sandbox layout needs --sandbox DIR")
    if args.generate_into:
        root = Path(args.generate_into)
        if layouts[0] == "sandbox":
            cluster = args.sandbox.resolve() / "cluster.json"
            info = generate_sandbox(root, args.entries, args.seed, digests[0], cluster)
        else:
            info = generate(root, args.entries, args.seed, layouts[0], digests[0])
        print(json.dumps(info))
        return 0
    entries = args.entries or (2000 if args.quick else 1_000_000)
    small_entries = max(1, entries // 10)
    runs = args.runs or (1 if args.quick else 3)
    keep = args.data is not None
    base = (
        Path(args.data)
        if keep
        else Path(tempfile.mkdtemp(prefix="ledgerctl-bench-cli-", dir=args.tmp))
    )
    load_before = os.getloadavg()
    servers: list[subprocess.Popen[str]] = []
    cluster: Path | None = None
    own_sandbox = False
    try:
        data: dict[str, Any] = {}
        rows: dict[str, tuple[Row, Row]] = {}
        for layout, digest in pairs:
            pair = []
            for size, count in (("large", entries), ("small", small_entries)):
                where = base / f"n{count}" / f"{_data_layout(layout)}-{digest}"
                address = None
                if layout == "sandbox":
                    if cluster is None:
                        directory = args.sandbox.resolve()
                        own_sandbox = ensure_running(directory)
                        cluster = directory / "cluster.json"
                    info = prepared_sandbox(where, count, args.seed, digest, cluster)
                    address = str(cluster)
                else:
                    info = prepared(where, count, args.seed, _data_layout(layout), digest)
                data.setdefault(f"{layout}/{digest}", {})[size] = info
                if layout == "live":
                    server, address = start_test_bookie(where / "bookie", count)
                    servers.append(server)
                pair.append(Row(layout, digest, where, address))
            rows[f"{layout}/{digest}"] = (pair[0], pair[1])
        only = tuple(_names(args.only, (*COMMANDS, *LOOPS), "measurements"))
        measured = run_all(rows, (entries, small_entries), runs, only)
        if cluster is not None:
            with _cluster_store(cluster) as store:
                for key, pair in rows.items():
                    for row in pair:
                        if row.layout == "sandbox" and (why := _broker_touched(store, row.info())):
                            raise SystemExit(f"bench/cli.py: {key}: {why}")
    finally:
        for server in servers:
            stop_test_bookie(server)
        if own_sandbox:
            _sandbox("down", str(args.sandbox.resolve()))
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()
    command = argv if argv is not None else sys.argv[1:]
    report_rows: dict[str, Any] = {}
    for key in rows:
        large, small = measured[key]["large"], measured[key]["small"]
        report_rows[key] = {
            "data": data[key],
            "large": {"entries": entries, "measurements": large},
            "small": {"entries": small_entries, "measurements": small},
            "ratios": ratios(large, small),
        }
        if "dir_floor" in large:  # context: the same over the directory's floor (live)
            report_rows[key]["context"] = {
                f"{name}/dir_floor": round(
                    large["dir_floor"]["cpu_seconds"]["min"] / large[name]["cpu_seconds"]["min"],
                    4,
                )
                for name in ("verify", "entry_jsonl")
                if name in large
            }
    report = {
        "benchmark": "cli",
        "command": " ".join(["python", "bench/cli.py", *command]),
        "floors": "directory rows: the read-and-split floor of the ledger's entry logs; "
        "live and sandbox rows: the bookie protocol read (LiveBookieStore.read_entries, "
        "nothing decoded or verified), the directory floor as dir_floor (live only)",
        "quick": args.quick,
        "seed": args.seed,
        "runs": runs,
        "clock": "CPU seconds (user + system): the command's child process from os.wait4; "
        "library loops and floors around the loop only (time.process_time)",
        "machine": machine(),
        "load_average": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in load_after],
        },
        "terminal_columns": COLUMNS,
        "entries": {"large": entries, "small": small_entries},
        "startup": measured["startup"],
        "rows": report_rows,
        "goals": {
            key: {name: goal["pass"] for name, goal in row["ratios"].items()}
            for key, row in report_rows.items()
        },
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
