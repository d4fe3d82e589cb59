"""Messages of a topic as rows: the scan behind `ledgerctl export` and the Spark data source.

One row per message, in topic order, with the columns of :data:`COLUMNS`. The work is a
scan plan (:mod:`pulsarctl_py.engines`): every split is read by :func:`split_rows`, which
opens its own stores, so the same function runs in this process (local engine) or on Spark
executors. An entry that carries problems but no message (it could not be read, decoded or
decrypted) gives one row whose message columns are null and whose ``problems`` say why.

Column pruning: when no message-level column is asked for (see :data:`MESSAGE_COLUMNS`),
entries are decoded only down to their metadata, so payloads are never decompressed; rows
are then counted from the metadata (``num_messages_in_batch``; a chunked message on its
last chunk; markers and Kafka-format entries give none), and ``index`` is computed from the
broker entry metadata as the full decode does.

Chunked messages that straddle two splits are read by the split where they start, which
reads past its end (within the ledger) until they are complete; the next split skips their
remaining chunks.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsarctl_py.errors import LedgerctlError

#: (name, Spark SQL type) in row order; JSON and Parquet use the same names
COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "string"),
    ("ledger_id", "bigint"),
    ("entry_id", "bigint"),
    ("batch_index", "int"),
    ("key", "string"),
    ("value", "binary"),
    ("properties", "map<string,string>"),
    ("publish_time", "bigint"),
    ("event_time", "bigint"),
    ("broker_timestamp", "bigint"),
    ("index", "bigint"),
    ("null_value", "boolean"),
    ("problems", "array<string>"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)
#: columns that need the payload opened (decrypted, decompressed, unbatched)
MESSAGE_COLUMNS = frozenset({"key", "value", "properties", "event_time", "null_value"})
#: the Spark SQL DDL of a full row
SCHEMA_DDL = ", ".join(f"`{n}` {t}" for n, t in COLUMNS)
#: entries per split for export plans (small enough that executors share the work)
EXPORT_SPLIT_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class RowFilters:
    """inspect's filters; picklable, so executors apply them. None means no limit."""

    key: str | None = None
    since: int | None = None  # entry timestamp, ms, inclusive
    until: int | None = None  # entry timestamp, ms, exclusive
    broker_metadata: bool | None = None  # True: only with, False: only without


def check_columns(columns: Sequence[str]) -> tuple[str, ...]:
    unknown = [c for c in columns if c not in COLUMN_NAMES]
    if unknown:
        raise LedgerctlError(
            f"unknown column(s) {', '.join(unknown)}: the columns are {', '.join(COLUMN_NAMES)}"
        )
    if not columns:
        raise LedgerctlError("no columns selected")
    return tuple(columns)


def needs_payload(columns: Sequence[str], filters: RowFilters | None = None) -> bool:
    """Whether rows with these columns (and filters) need the payload decoded."""
    return bool(MESSAGE_COLUMNS.intersection(columns)) or (
        filters is not None and filters.key is not None
    )


# -- the plan --------------------------------------------------------------------------------


def topic_plan(
    source: Any,
    topic: str,
    *,
    metadata_url: str | None,
    bookie_dirs: Sequence[str | os.PathLike[str]],
    split_entries: int = EXPORT_SPLIT_ENTRIES,
) -> Any:
    """The scan plan of a whole topic: every ledger up to its last stored entry, as inspect.

    Entry counts come from the managed-ledger metadata where it has them, and from the
    bookie's storage for the open ledger; sizes from the metadata.
    """
    from pulsarctl_py.engines import build_scan_plan
    from pulsarctl_py.errors import NotFoundError
    from pulsarctl_py.stores.metadata import read_managed_ledger

    if source.metadata is None:
        raise LedgerctlError(f"topic {topic}: a metadata store is needed to find its ledgers")
    record = read_managed_ledger(source.metadata, topic, with_cursors=False)
    if record is None:
        from pulsarctl_py.topics import topic_hint

        raise NotFoundError(
            f"topic {topic} not found in the metadata store{topic_hint(source.metadata, topic)}"
        )
    sizes = {}
    if record.info is not None:
        for li in record.info.message.ledgerInfo:
            sizes[li.ledgerId] = li.size if li.HasField("size") else None
    ledgers = []
    for ledger_id in record.ledger_ids:
        view = source.ledger(ledger_id)
        entries = 0 if view.last_stored is None else view.last_stored + 1
        ledgers.append((ledger_id, entries, sizes.get(ledger_id)))
    return build_scan_plan(
        record.ref.topic.full_name,
        ledgers,
        bookie_dirs=[os.path.abspath(d) for d in bookie_dirs],
        metadata_url=metadata_url,
        split_entries=split_entries,
        live=source.live_options,
    )


def absolute_url(url: Any) -> str:
    """The metadata URL as a string an executor can open from any working directory."""
    text = str(url)
    if text.startswith("rocksdb://"):
        return "rocksdb://" + os.path.abspath(text[len("rocksdb://") :])
    return text


# -- reading a split ---------------------------------------------------------------------------


#: how far past its end a split reads to complete a chunked message it started
MAX_READ_AHEAD = 100_000


def split_rows(
    split: Any,
    columns: Sequence[str] = COLUMN_NAMES,
    filters: RowFilters | None = None,
) -> Iterator[tuple[Any, ...]]:
    """The rows of one split, as tuples in the order of ``columns``. Opens its own stores.

    Decodes only as deep as ``columns`` and ``filters`` need (see the module docstring).
    """
    from pulsarctl_py.commands.options import password
    from pulsarctl_py.ledgers import LedgerSource

    filters = filters or RowFilters()
    full = needs_payload(columns, filters)
    with LedgerSource.open(
        split.metadata_url,
        list(split.bookie_dirs),
        password(None, None),
        need_bookie=True,
        live=split.live,
    ) as source:
        for row in _rows(source, split, filters, full):
            yield tuple(row[c] for c in columns)


def _chunk_of(entry: Any) -> tuple[tuple[str, str], int, int] | None:
    """((producer, uuid), chunk id, chunks) when the entry is a chunk, from its metadata."""
    md = entry.metadata
    if md is None or not (
        md.num_chunks_from_msg > 1 or (md.HasField("chunk_id") and md.HasField("uuid"))
    ):
        return None
    return (md.producer_name, md.uuid), md.chunk_id, md.num_chunks_from_msg


def _rows(source: Any, split: Any, filters: RowFilters, full: bool) -> Iterator[dict[str, Any]]:
    from pulsarctl_py.decoders import Depth

    depth = Depth.MESSAGES if full else Depth.METADATA
    view = source.ledger(split.ledger_id)
    if view.last_stored is None or split.first_entry > view.last_stored:
        return
    started: set[tuple[str, str]] = set()  # chunked messages begun in this split, unfinished
    entries = source.entries(view, split.first_entry, None, depth=depth, keep_going=True)
    try:
        for entry in entries:
            entry_id = entry.position[1] if entry.position else split.last_entry
            past_end = entry_id > split.last_entry
            if past_end and (not started or entry_id > split.last_entry + MAX_READ_AHEAD):
                break
            chunk = _chunk_of(entry)
            if chunk is not None:
                key, chunk_id, chunks = chunk
                if chunk_id == 0:
                    if past_end:
                        continue  # a message of the next split
                    started.add(key)
                elif key not in started and (past_end or split.first_entry > 0):
                    continue  # the rest of a message that another split reads
                if chunk_id >= chunks - 1:
                    started.discard(key)
            elif past_end:
                continue  # the next split's
            yield from _entry_rows(split, entry, full, filters)
    finally:
        entries.close()


def _keep_entry(entry: Any, filters: RowFilters) -> bool:
    """inspect's entry filters (broker entry metadata, entry time), on RowFilters."""
    if filters.broker_metadata is not None:
        if (entry.broker_entry_metadata is not None) != filters.broker_metadata:
            return False
    if filters.since is not None or filters.until is not None:
        ts = entry.entry_timestamp
        if ts is None or (filters.since is not None and ts < filters.since):
            return False
        if filters.until is not None and ts >= filters.until:
            return False
    return True


ENCRYPTED_NOTE = "warning: encryption: payload encrypted, values not exported"


def _problems(entry: Any) -> list[str]:
    return [f"{p.severity}: {p.layer}: {p.message}" for p in entry.problems]


def _entry_rows(
    split: Any, entry: Any, full: bool, filters: RowFilters
) -> Iterator[dict[str, Any]]:
    ledger_id, entry_id = entry.position or (split.ledger_id, None)
    problems = _problems(entry)
    md = entry.metadata
    encrypted = md is not None and len(md.encryption_keys) > 0
    if encrypted:
        # export takes no private key: the values stay sealed whatever the depth
        problems.append(ENCRYPTED_NOTE)
    base = {
        "topic": split.topic,
        "ledger_id": ledger_id,
        "entry_id": entry_id,
        "publish_time": entry.publish_time,
        "broker_timestamp": None,
        "problems": problems,
    }
    bem = entry.broker_entry_metadata
    if bem is not None and bem.HasField("broker_timestamp"):
        base["broker_timestamp"] = bem.broker_timestamp
    if entry.unreadable is None and not _keep_entry(entry, filters):
        return
    if full:
        messages = entry.messages
        if filters.key is not None:
            messages = [m for m in messages if m.key == filters.key]
            if not messages and entry.messages:
                return
        for m in messages:
            yield {
                **base,
                "batch_index": None if m.batch_index < 0 else m.batch_index,
                "key": m.key,
                "value": None if m.value is None else bytes(m.value),
                "properties": m.properties,
                "event_time": m.event_time,
                "index": m.index,
                "null_value": m.null_value,
            }
        if messages:
            return
    if not full or (encrypted and not entry.messages):
        slots = _metadata_slots(entry)
        if slots:
            for batch_index, index in slots:
                yield {**base, "batch_index": batch_index, "index": index, **_NO_MESSAGE}
            return
    if problems:
        yield {**base, "batch_index": None, "index": None, **_NO_MESSAGE}


_NO_MESSAGE = {
    "key": None,
    "value": None,
    "properties": None,
    "event_time": None,
    "null_value": None,
}


def _metadata_slots(entry: Any) -> list[tuple[int | None, int | None]]:
    """(batch index, continuous index) of each message, from the metadata alone."""
    md = entry.metadata
    if md is None or md.HasField("marker_type"):
        return []
    if any(kv.key == "entry.format" and kv.value == "kafka" for kv in md.properties):
        return []
    chunk = _chunk_of(entry)
    if chunk is not None and chunk[1] != chunk[2] - 1:
        return []
    last = entry.index
    if not md.HasField("num_messages_in_batch"):
        return [(None, last)]
    count = md.num_messages_in_batch
    indexes = list(md.compacted_batch_indexes) or range(count)
    first = None if last is None else last - count + 1
    return [(i, None if first is None else first + i) for i in indexes]


# -- writing ---------------------------------------------------------------------------------


def json_line(row: dict[str, Any]) -> str:
    doc = dict(row)
    if doc.get("value") is not None:
        doc["value"] = base64.b64encode(doc["value"]).decode("ascii")
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def arrow_schema(columns: Sequence[str] = COLUMN_NAMES) -> Any:
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "bigint": pa.int64(),
        "int": pa.int32(),
        "binary": pa.binary(),
        "boolean": pa.bool_(),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
        "array<string>": pa.list_(pa.string()),
    }
    kinds = dict(COLUMNS)
    return pa.schema([(c, types[kinds[c]]) for c in columns])


PARQUET_BATCH_ROWS = 20_000


def _has_error(problems: Sequence[str] | None) -> bool:
    return bool(problems) and any(p.startswith("error") for p in problems or ())


def write_part(
    split: Any,
    *,
    fmt: str,
    parts_dir: str,
    columns: Sequence[str] = COLUMN_NAMES,
    filters: RowFilters | None = None,
) -> Iterator[tuple[int, str, int, int]]:
    """Write one split's rows to a part file; yield (ordinal, path, rows, rows with errors).

    Module-level and picklable: the engines run it where the split is read.
    """
    path = os.path.join(parts_dir, f"part-{split.ordinal:08d}.{fmt}")
    rows = flagged = 0
    it = split_rows(split, columns, filters)
    if fmt == "jsonl":
        with open(path, "w", encoding="utf-8") as fh:
            for values in it:
                row = dict(zip(columns, values, strict=True))
                fh.write(json_line(row) + "\n")
                rows += 1
                flagged += _has_error(row.get("problems"))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = arrow_schema(columns)
        with pq.ParquetWriter(path, schema) as writer:
            batch: list[tuple[Any, ...]] = []

            def flush() -> None:
                cols = list(zip(*batch, strict=True)) if batch else [[] for _ in columns]
                table = pa.Table.from_arrays(
                    [pa.array(list(col), type=schema.field(i).type) for i, col in enumerate(cols)],
                    schema=schema,
                )
                writer.write_table(table)
                batch.clear()

            problems_at = columns.index("problems") if "problems" in columns else None
            for values in it:
                batch.append(values)
                rows += 1
                if problems_at is not None:
                    flagged += _has_error(values[problems_at])
                if len(batch) >= PARQUET_BATCH_ROWS:
                    flush()
            if batch or rows == 0:
                flush()
    yield split.ordinal, path, rows, flagged


@dataclass(slots=True)
class ExportResult:
    topic: str
    engine: str
    to: str
    format: str
    splits: int
    entries: int
    rows: int
    rows_with_errors: int

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "engine": self.engine,
            "to": self.to,
            "format": self.format,
            "splits": self.splits,
            "entries": self.entries,
            "rows": self.rows,
            "rows_with_errors": self.rows_with_errors,
        }


def output_format(path: str | os.PathLike[str]) -> str:
    name = str(path).lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".jsonl") or name.endswith(".ndjson"):
        return "jsonl"
    raise LedgerctlError(f"{path}: the file name must end in .parquet or .jsonl")


def export_plan(
    plan: Any,
    engine: Any,
    to: str | os.PathLike[str],
    *,
    columns: Sequence[str] = COLUMN_NAMES,
    filters: RowFilters | None = None,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Run ``plan`` on ``engine``; write its rows, in topic order, to one file ``to``.

    Each split's rows go to a part file in a folder beside ``to`` (so executors of a
    cluster can write there when ``to`` is on a shared path); the parts are then joined in
    plan order, and the folder removed. The file appears whole or not at all.
    """
    import functools

    fmt = output_format(to)
    target = Path(to).absolute()
    if not target.parent.is_dir():
        raise LedgerctlError(f"{target.parent}: no such directory")
    parts_dir = tempfile.mkdtemp(prefix=f".{target.name}.parts-", dir=target.parent)
    try:
        fn = functools.partial(
            write_part, fmt=fmt, parts_dir=parts_dir, columns=tuple(columns), filters=filters
        )
        parts: list[tuple[int, str, int, int]] = []
        for part in engine.map_splits(plan, fn):
            parts.append(part)
            if progress is not None:
                progress(len(parts))
        parts.sort()
        tmp = str(target) + ".tmp"
        _join(fmt, [p[1] for p in parts], tmp, columns)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)
    return ExportResult(
        plan.topic,
        engine.name,
        str(to),
        fmt,
        len(plan.splits),
        plan.entries,
        sum(p[2] for p in parts),
        sum(p[3] for p in parts),
    )


def _join(fmt: str, paths: Iterable[str], out: str, columns: Sequence[str]) -> None:
    if fmt == "jsonl":
        with open(out, "wb") as dst:
            for path in paths:
                with open(path, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    # One row group in memory at a time, decoded on this thread: Arrow's thread pools
    # each keep a heap, and the pool keeps what it freed, so a threaded read left the
    # driver's RSS wherever the largest part's decoding had taken it (and higher with
    # more parts and more threads). Closed and released after every part, the join's
    # memory is one row group's, whatever the topic's size (docs/performance.md).
    pool = pa.default_memory_pool()
    with pq.ParquetWriter(out, arrow_schema(columns)) as writer:
        for path in paths:
            with pq.ParquetFile(path) as part:
                for group in range(part.num_row_groups):
                    table = part.read_row_group(group, use_threads=False)
                    if table.num_rows:
                        writer.write_table(table)
                    del table
            pool.release_unused()


# -- compact --export FILE.parquet -----------------------------------------------------------


def compacted_view_to_parquet(jsonl: str | os.PathLike[str], to: str | os.PathLike[str]) -> int:
    """Turn compact's JSON-lines view into Parquet (value as bytes); remove the lines file.

    Columns: key, value, properties, position ("L:E[:B]"), publish_time, event_time, note.
    Returns the rows written; the Parquet file appears whole or not at all.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("key", pa.string()),
            ("value", pa.binary()),
            ("properties", pa.map_(pa.string(), pa.string())),
            ("position", pa.string()),
            ("publish_time", pa.int64()),
            ("event_time", pa.int64()),
            ("note", pa.string()),
        ]
    )
    tmp = str(to) + ".tmp"
    rows = 0
    try:
        with pq.ParquetWriter(tmp, schema) as writer, open(jsonl, encoding="utf-8") as fh:
            batch: list[dict[str, Any]] = []
            for line in fh:
                doc = json.loads(line)
                value = doc.get("value")
                batch.append(
                    {
                        "key": doc.get("key"),
                        "value": None if value is None else base64.b64decode(value),
                        "properties": list((doc.get("properties") or {}).items()),
                        "position": doc.get("position"),
                        "publish_time": doc.get("publish_time"),
                        "event_time": doc.get("event_time"),
                        "note": doc.get("note"),
                    }
                )
                if len(batch) >= PARQUET_BATCH_ROWS:
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                    rows += len(batch)
                    batch.clear()
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            rows += len(batch)
        os.replace(tmp, to)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        os.unlink(jsonl)
    return rows
