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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pulsarctl_py.coverage import Gaps, Tracker
from pulsarctl_py.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.outputs import Output

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
#: columns added when the topic has a schema (values decoded): value_decoded's type comes
#: from the schema (pulsarctl_py.value_columns)
VALUE_COLUMNS: tuple[str, ...] = ("schema_version", "schema_type", "value_decoded")
#: columns that need the payload opened (decrypted, decompressed, unbatched); the value
#: columns are given per message, so schema_version too
MESSAGE_COLUMNS = frozenset(
    {"key", "value", "properties", "event_time", "null_value", *VALUE_COLUMNS}
)
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


@dataclass(frozen=True, slots=True)
class ValueOptions:
    """How rows get their values (picklable: executors use it). ``values``: the topic's
    schemas (pulsarctl_py.values.Values) or None; ``column``: the typed column of a
    Parquet file (pulsarctl_py.value_columns.ValueColumn), None for JSON lines;
    ``key_pem`` and ``passphrase``: the consumer's private key, to open encrypted values."""

    values: Any = None
    column: Any = None
    key_pem: bytes | None = field(default=None, repr=False)
    passphrase: bytes | None = field(default=None, repr=False)

    def private_key(self) -> Any:
        if self.key_pem is None:
            return None
        from pulsarctl_py.decoders.crypto import load_private_key

        return load_private_key(self.key_pem, self.passphrase)


def check_columns(columns: Sequence[str], values: bool = False) -> tuple[str, ...]:
    known = COLUMN_NAMES + (VALUE_COLUMNS if values else ())
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise LedgerctlError(
            f"unknown column(s) {', '.join(unknown)}: the columns are {', '.join(known)}"
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
    gaps: Gaps | None = None,
) -> Any:
    """The scan plan of a whole topic: every ledger up to the last entry its readers get.

    A ledger's range is ``0..lastEntryId`` when it is closed, else up to its last stored
    entry or LAC (:attr:`LedgerView.readable_last`); sizes come from the managed-ledger
    metadata. What the storage cannot give goes to ``gaps`` (when given): ledgers it holds
    none of (no split), and entries stored past a closed ledger's last entry (skipped).
    """
    from pulsarctl_py.engines import build_scan_plan
    from pulsarctl_py.errors import NotFoundError
    from pulsarctl_py.stores.metadata import read_managed_ledger

    if source.metadata is None:
        raise LedgerctlError(f"topic {topic}: a metadata store is needed to find its ledgers")
    record = read_managed_ledger(source.metadata, topic, with_cursors=False)
    if record is None:
        from pulsarctl_py.topics import partitions_of

        partitions = partitions_of(source.metadata, topic)
        if partitions:
            return _partitioned_plan(
                source, topic, partitions, metadata_url, bookie_dirs, split_entries, gaps
            )
        from pulsarctl_py.topics import topic_hint

        raise NotFoundError(
            f"topic {topic} not found in the metadata store{topic_hint(source.metadata, topic)}"
        )
    sizes = {}
    if record.info is not None:
        for li in record.info.message.ledgerInfo:
            sizes[li.ledgerId] = li.size if li.HasField("size") else None
    gaps = gaps if gaps is not None else Gaps()
    ledgers = []
    for ledger_id in record.ledger_ids:
        view = source.ledger(ledger_id)
        last = view.readable_last
        if not gaps.ledger(view, last):
            continue
        entries = 0 if last is None else last + 1
        ledgers.append((ledger_id, entries, sizes.get(ledger_id)))
    return build_scan_plan(
        record.ref.topic.full_name,
        ledgers,
        bookie_dirs=[os.path.abspath(d) for d in bookie_dirs],
        metadata_url=metadata_url,
        split_entries=split_entries,
        live=source.live_options,
    )


def _partitioned_plan(
    source: Any,
    topic: str,
    partitions: Sequence[str],
    metadata_url: str | None,
    bookie_dirs: Sequence[str | os.PathLike[str]],
    split_entries: int,
    gaps: Gaps | None,
) -> Any:
    """A partitioned topic named by its base name: every partition's plan, one after the
    other in partition order (each row's topic column names its partition)."""
    import dataclasses

    from pulsarctl_py.engines.base import ScanPlan
    from pulsarctl_py.stores.metadata import resolve_topic

    plans = [
        topic_plan(
            source,
            p,
            metadata_url=metadata_url,
            bookie_dirs=bookie_dirs,
            split_entries=split_entries,
            gaps=gaps,
        )
        for p in partitions
    ]
    splits: list[Any] = []
    for plan in plans:
        splits.extend(
            dataclasses.replace(s, ordinal=len(splits) + i) for i, s in enumerate(plan.splits)
        )
    return ScanPlan(
        resolve_topic(topic).full_name,
        tuple(splits),
        sum(p.entries for p in plans),
        sum(p.bytes for p in plans),
        all(p.exact for p in plans),
        tuple(n for p in plans for n in p.notes),
    )


def absolute_url(url: Any) -> str:
    """The metadata URL as a string an executor can open from any working directory."""
    from pulsarctl_py.stores.metadata.url import MetadataUrl, parse_metadata_url

    parsed = url if isinstance(url, MetadataUrl) else parse_metadata_url(str(url))
    return str(parsed.absolute())


# -- reading a split ---------------------------------------------------------------------------


#: how far past its end a split reads to complete a chunked message it started
MAX_READ_AHEAD = 100_000


def split_rows(
    split: Any,
    columns: Sequence[str] = COLUMN_NAMES,
    filters: RowFilters | None = None,
    gaps: Gaps | None = None,
    values: ValueOptions | None = None,
) -> Iterator[tuple[Any, ...]]:
    """The rows of one split, as tuples in the order of ``columns``. Opens its own stores.

    Decodes only as deep as ``columns`` and ``filters`` need (see the module docstring).
    Entries of the split the storage does not hold, or could not give, are recorded in
    ``gaps``; a run of missing entries is one row whose ``problems`` say so, as an
    unreadable entry is.
    """
    from pulsarctl_py.config import resolve_ledger_password
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.limits import apply_split
    from pulsarctl_py.topicpolicies import install as install_topic_policies

    apply_split(split)
    install_topic_policies()
    filters = filters or RowFilters()
    full = needs_payload(columns, filters)
    with LedgerSource.open(
        split.metadata_url,
        list(split.bookie_dirs),
        resolve_ledger_password(),
        need_bookie=True,
        live=split.live,
        **split.source_options(),
    ) as source:
        rows = _rows(source, split, filters, full, gaps if gaps is not None else Gaps(), values)
        for row in rows:
            yield tuple(row.get(c) for c in columns)


def _chunk_of(entry: Any) -> tuple[tuple[str, str], int, int] | None:
    """((producer, uuid), chunk id, chunks) when the entry is a chunk, from its metadata."""
    md = entry.metadata
    if md is None or not (
        md.num_chunks_from_msg > 1 or (md.HasField("chunk_id") and md.HasField("uuid"))
    ):
        return None
    return (md.producer_name, md.uuid), md.chunk_id, md.num_chunks_from_msg


def _rows(
    source: Any,
    split: Any,
    filters: RowFilters,
    full: bool,
    gaps: Gaps,
    values: ValueOptions | None = None,
) -> Iterator[dict[str, Any]]:
    from pulsarctl_py.decoders import Depth

    depth = Depth.MESSAGES if full else Depth.METADATA
    view = source.ledger(split.ledger_id)
    tracker = Tracker(gaps, split.ledger_id, split.first_entry, split.last_entry)
    if view.last_stored is None or split.first_entry > view.last_stored:
        yield from _missing_rows(split, tracker.finish())
        return
    # read on past the split's end for chunks, never past the ledger's last entry
    end = view.readable_last
    started: set[tuple[str, str]] = set()  # chunked messages begun in this split, unfinished
    key = values.private_key() if values is not None else None
    entries = source.entries(
        view, split.first_entry, end, depth=depth, keep_going=True, private_key=key
    )
    try:
        for entry in entries:
            entry_id = entry.position[1] if entry.position else split.last_entry
            if entry_id <= split.last_entry:
                yield from _missing_rows(split, tracker.see(entry_id, entry.unreadable))
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
            yield from _entry_rows(split, entry, full, filters, values)
        yield from _missing_rows(split, tracker.finish())
    finally:
        entries.close()


def _missing_rows(split: Any, gap: tuple[int, int] | None) -> Iterator[dict[str, Any]]:
    """The row of a range of entries the storage does not hold (none for None)."""
    if gap is not None:
        first, last = gap
        lid = split.ledger_id
        what = f"entry {lid}:{first} is" if first == last else f"entries {lid}:{first}..{last} are"
        yield {
            "topic": split.topic,
            "ledger_id": lid,
            "entry_id": first,
            "publish_time": None,
            "broker_timestamp": None,
            "problems": [f"error: storage: {what} not in storage"],
            "batch_index": None,
            "index": None,
            **_NO_MESSAGE,
        }


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
    split: Any,
    entry: Any,
    full: bool,
    filters: RowFilters,
    values: ValueOptions | None = None,
) -> Iterator[dict[str, Any]]:
    ledger_id, entry_id = entry.position or (split.ledger_id, None)
    problems = _problems(entry)
    md = entry.metadata
    encrypted = md is not None and len(md.encryption_keys) > 0
    if encrypted and not entry.messages:
        # no private key (or not the right one): the values stay sealed
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
        schema_values = values.values if values is not None else None
        version = md.schema_version if md is not None and md.HasField("schema_version") else None
        for m in messages:
            row = {
                **base,
                "batch_index": None if m.batch_index < 0 else m.batch_index,
                "key": m.key,
                "value": None if m.value is None else bytes(m.value),
                "properties": m.properties,
                "event_time": m.event_time,
                "index": m.index,
                "null_value": m.null_value,
            }
            if schema_values is not None:
                _add_value(row, schema_values, values.column, version, m)  # type: ignore[union-attr]
            yield row
        if messages:
            return
    if not full or (encrypted and not entry.messages):
        slots = _metadata_slots(entry)
        if slots:
            plain = _plain_metadata(entry) if full and encrypted else _NO_MESSAGE
            for batch_index, index in slots:
                yield {**base, "batch_index": batch_index, "index": index, **plain}
            return
    if problems:
        yield {**base, "batch_index": None, "index": None, **_NO_MESSAGE}


def _add_value(row: dict[str, Any], values: Any, column: Any, version: Any, m: Any) -> None:
    """The row's schema_version, schema_type and value_decoded (typed for ``column``); a
    value that does not decode with its schema is an error in the row's problems."""
    from pulsarctl_py.values import message_key_bytes

    key = message_key_bytes(m)
    got = values.decode(version, m.value, key)
    row["schema_version"] = got.schema_version
    row["schema_type"] = got.schema_type
    if column is not None:
        row["value_decoded"] = column.value(values, version, m.value, key) if got.decoded else None
    else:
        row["value_decoded"] = got.value if got.decoded else None
    if got.error is not None:
        row["problems"] = [*row["problems"], f"error: value: {got.error}"]


def _plain_metadata(entry: Any) -> dict[str, Any]:
    """What an encrypted entry keeps in plain text: a single message's key, properties,
    event time and null flag are in its MessageMetadata (a batch's are encrypted with it)."""
    md = entry.metadata
    if md is None or md.HasField("num_messages_in_batch"):
        return _NO_MESSAGE
    from pulsarctl_py.decoders.text import text_map

    return {
        "key": md.partition_key if md.HasField("partition_key") else None,
        "value": None,
        "properties": text_map(md.properties),
        "event_time": md.event_time if md.HasField("event_time") else None,
        "null_value": md.null_value if md.HasField("null_value") else False,
    }


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


def arrow_schema(columns: Sequence[str] = COLUMN_NAMES, column: Any = None) -> Any:
    """The Arrow schema of rows with these columns; ``column``: value_decoded's
    (pulsarctl_py.value_columns.ValueColumn)."""
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
    kinds = {**dict(COLUMNS), "schema_version": "bigint", "schema_type": "string"}
    fields = []
    for c in columns:
        if c == "value_decoded":
            fields.append((c, column.arrow_type() if column is not None else pa.string()))
        else:
            fields.append((c, types[kinds[c]]))
    return pa.schema(fields)


PARQUET_BATCH_ROWS = 20_000
#: ... or once the values held reach this many bytes (decoded values counted by what they
#: take, estimated: pulsarctl_py.value_bounds): a row group holds at most about this much
#: (plus one message), however large the messages are
PARQUET_BATCH_BYTES = 16 << 20


def _has_error(problems: Sequence[str] | None) -> bool:
    return bool(problems) and any(p.startswith("error") for p in problems or ())


def write_part(
    split: Any,
    *,
    fmt: str,
    parts_dir: str,
    columns: Sequence[str] = COLUMN_NAMES,
    filters: RowFilters | None = None,
    values: ValueOptions | None = None,
) -> Iterator[tuple[int, dict[int | None, tuple[str, int]], int, int, Gaps]]:
    """Write one split's rows to part files; yield (ordinal, {key: (path, rows)}, rows,
    rows with errors, the split's :class:`Gaps`).

    The key is None for the one part of a plain export; with a value column split by
    schema version (:meth:`pulsarctl_py.value_columns.ValueColumn.part`) the rows of
    version N go to part N, typed by that version, and every other row to part None.
    Module-level and picklable: the engines run it where the split is read.
    """
    rows = flagged = 0
    gaps = Gaps()
    if values is not None and fmt == "jsonl" and values.column is not None:
        values = ValueOptions(values.values, None, values.key_pem, values.passphrase)
    column = values.column if values is not None else None
    cols = tuple(columns)
    split_by_version = (
        fmt == "parquet"
        and column is not None
        and column.kind == "split"
        and "value_decoded" in cols
    )
    read = (*cols, "schema_version") if split_by_version and "schema_version" not in cols else cols
    version_at = read.index("schema_version") if split_by_version else None
    it = split_rows(split, read, filters, gaps, values)

    def path_of(key: int | None) -> str:
        tail = "" if key is None else f".v{key}"
        return os.path.join(parts_dir, f"part-{split.ordinal:08d}{tail}.{fmt}")

    if fmt == "jsonl":
        path = path_of(None)
        with open(path, "w", encoding="utf-8") as fh:
            for values in it:
                row = dict(zip(columns, values, strict=True))
                fh.write(json_line(row) + "\n")
                rows += 1
                flagged += _has_error(row.get("problems"))
        yield split.ordinal, {None: (path, rows)}, rows, flagged, gaps
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    problems_at = cols.index("problems") if "problems" in cols else None
    parts: dict[int | None, _Part] = {}

    def part(key: int | None) -> _Part:
        found = parts.get(key)
        if found is None:
            typed = column.part(key)[1] if split_by_version else column
            schema = arrow_schema(cols, typed)
            found = parts[key] = _Part(path_of(key), schema, pq.ParquetWriter(path_of(key), schema))
        return found

    value_at = cols.index("value") if "value" in cols else None
    decoded = values.values if values is not None else None
    try:
        part(None)  # the main part exists, rows or not
        for row in it:
            key = None
            if version_at is not None:
                key = column.part(row[version_at])[0]
                row = row[: len(cols)]
            p = part(key)
            p.batch.append(row)
            p.rows += 1
            rows += 1
            if problems_at is not None:
                flagged += _has_error(row[problems_at])
            if value_at is not None and row[value_at] is not None:
                p.held += len(row[value_at])
            if decoded is not None:  # decoded values: what they take, estimated
                p.held += decoded.take_held()
            if len(p.batch) >= PARQUET_BATCH_ROWS or p.held >= PARQUET_BATCH_BYTES:
                p.flush(pa)
        for p in parts.values():
            if p.batch or p.rows == 0:
                p.flush(pa)
    finally:
        for p in parts.values():
            p.writer.close()
    yield split.ordinal, {k: (p.path, p.rows) for k, p in parts.items()}, rows, flagged, gaps


@dataclass(slots=True)
class _Part:
    """One part file being written: its rows batched into row groups."""

    path: str
    schema: Any
    writer: Any
    batch: list[tuple[Any, ...]] = field(default_factory=list)
    rows: int = 0
    #: what the batched rows' values take (bytes, decoded values estimated)
    held: int = 0

    def flush(self, pa: Any) -> None:
        n = len(self.schema)
        cols = list(zip(*self.batch, strict=True)) if self.batch else [[] for _ in range(n)]
        self.batch.clear()
        self.held = 0
        table = pa.Table.from_arrays(
            [pa.array(list(col), type=self.schema.field(i).type) for i, col in enumerate(cols)],
            schema=self.schema,
        )
        del cols
        self.writer.write_table(table)
        del table
        pa.default_memory_pool().release_unused()  # the pool keeps what it freed (see _join)


def version_path(path: str | os.PathLike[str], version: int) -> Path:
    """Where the rows of schema version N go beside ``FILE.parquet``: ``FILE.vN.parquet``."""
    target = Path(path)
    suffix = target.suffix if target.suffix.lower() == ".parquet" else ""
    stem = target.name[: len(target.name) - len(suffix)] if suffix else target.name
    return target.with_name(f"{stem}.v{version}{suffix or '.parquet'}")


def version_outputs(
    out: Output, column: Any, columns: Sequence[str], *, force: bool = False
) -> dict[int, Output]:
    """The outputs of a value column split by schema version (one file per version beside
    ``out``), checked as every output is, before the work; none for another column."""
    from pulsarctl_py import outputs

    if column is None or column.kind != "split" or "value_decoded" not in columns:
        return {}
    if output_format(out.path, stream=out.stream) != "parquet":
        return {}
    if out.stream:
        raise LedgerctlError(
            f"{out.path}: the schema versions cannot be merged into one Parquet column, so "
            "each version's rows go to a file of their own beside --to: name a file, not a "
            "device or FIFO (or export JSON lines)"
        )
    prepared: dict[int, Output] = {}
    try:
        for version in sorted(column.versions):
            prepared[version] = outputs.prepare(
                version_path(out.path, version), export_output_kind(), force=force
            )
    except BaseException:
        for o in prepared.values():
            o.discard()
        raise
    return prepared


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
    #: what the export could not read or skipped (ledgers, entries)
    gaps: Gaps = field(default_factory=Gaps)
    #: how value_decoded was written, when it was not typed by the schema
    value_note: str | None = None
    #: every file written: {"path", "rows", "schema_version"} (None: the file named)
    files: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every entry of the topic exported, and no row with an error."""
        return self.gaps.complete and not self.rows_with_errors

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
            **self.gaps.to_json(),
            **({"value_note": self.value_note} if self.value_note else {}),
            "files": list(self.files),
        }


def output_format(path: str | os.PathLike[str], *, stream: bool = False) -> str:
    """The format a target's name asks for; a stream (a device, a FIFO, /dev/stdout)
    without one of the suffixes gets JSON lines."""
    name = str(path).lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".jsonl") or name.endswith(".ndjson"):
        return "jsonl"
    if stream:
        return "jsonl"
    raise LedgerctlError(f"{path}: the file name must end in .parquet or .jsonl")


def export_output_kind() -> Any:
    """What ``export --to`` writes (an earlier export of the same kind may be replaced)."""
    from pulsarctl_py import outputs

    return outputs.export_kind(frozenset(COLUMN_NAMES))


def export_plan(
    plan: Any,
    engine: Any,
    to: str | os.PathLike[str] | Output,
    *,
    columns: Sequence[str] = COLUMN_NAMES,
    filters: RowFilters | None = None,
    progress: Callable[[int], None] | None = None,
    gaps: Gaps | None = None,
    values: ValueOptions | None = None,
    versions: dict[int, Output] | None = None,
    force: bool = False,
) -> ExportResult:
    """Run ``plan`` on ``engine``; write its rows, in topic order, to one output ``to``
    (a path, checked as :func:`pulsarctl_py.outputs.prepare` does, or a prepared output).

    Each split's rows go to a part file in a folder beside the target (so executors of a
    cluster can write there when it is on a shared path; in the temporary directory for a
    device or FIFO); the parts are then joined in plan order into the output, and the
    folder removed. A file appears whole or not at all. ``gaps``: what the plan already left
    out (:func:`topic_plan`); the splits' own are added.

    A Parquet value column split by schema version (schema versions Avro cannot merge)
    writes the rows of version N to ``FILE.vN.parquet`` (``versions``: those outputs,
    prepared by :func:`version_outputs`, else prepared here) and every other row to
    ``to``; each file is typed by its own version.
    """
    import functools

    from pulsarctl_py import outputs

    out = to if isinstance(to, outputs.Output) else None
    if out is None:
        output_format(to)  # a bad name fails before anything is created
        out = outputs.prepare(to, export_output_kind(), force=force)
    column = values.column if values is not None else None
    if versions is None:
        try:
            versions = version_outputs(out, column, columns, force=force)
        except BaseException:
            out.discard()
            raise
    fmt = output_format(out.path, stream=out.stream)
    target = Path(out.path).absolute()
    everything = [out, *versions.values()]
    try:
        parts_dir = tempfile.mkdtemp(
            prefix=f".{target.name}.parts-", dir=None if out.stream else target.parent
        )
    except OSError as exc:
        for o in everything:
            o.discard()
        raise outputs.cannot_write(target, exc) from None
    files: list[dict[str, Any]] = []
    try:
        fn = functools.partial(
            write_part,
            fmt=fmt,
            parts_dir=parts_dir,
            columns=tuple(columns),
            filters=filters,
            values=values,
        )
        parts: list[tuple[int, dict[int | None, tuple[str, int]], int, int, Gaps]] = []
        for part in engine.map_splits(plan, fn):
            parts.append(part)
            if progress is not None:
                progress(len(parts))
        parts.sort(key=lambda p: p[0])
        targets: list[tuple[int | None, Output]] = [(None, out), *sorted(versions.items())]
        for key, output in targets:
            schema = None
            if fmt == "parquet":
                typed = column.part(key)[1] if versions else column
                schema = arrow_schema(columns, typed)
                if versions:
                    schema = schema.with_metadata(
                        _version_metadata(key, {v: o.path.name for v, o in versions.items()})
                    )
            paths = [p[1][key][0] for p in parts if key in p[1]]
            with output.open_binary() as fh:
                _join(fmt, paths, fh, schema)
            files.append(
                {
                    "path": str(output.path),
                    "rows": sum(p[1][key][1] for p in parts if key in p[1]),
                    "schema_version": key,
                }
            )
    finally:
        for o in everything:
            o.discard()  # after a commit: nothing left to drop
        shutil.rmtree(parts_dir, ignore_errors=True)
    total = Gaps()
    if gaps is not None:
        total.add(gaps)
    for part in parts:
        total.add(part[4])
    return ExportResult(
        plan.topic,
        engine.name,
        str(out.path),
        fmt,
        len(plan.splits),
        plan.entries,
        sum(p[2] for p in parts),
        sum(p[3] for p in parts),
        total,
        column.note if column is not None else None,
        files,
    )


def _version_metadata(key: int | None, names: dict[int, str]) -> dict[bytes, bytes]:
    """What a file of a split export says of itself in its Parquet metadata."""
    if key is None:
        doc = {"schema_version": None, "version_files": {str(v): n for v, n in names.items()}}
    else:
        doc = {"schema_version": key}
    return {b"ledgerctl.values": json.dumps(doc, sort_keys=True).encode()}


def _join(fmt: str, paths: Iterable[str], out: IO[bytes], schema: Any) -> None:
    if fmt == "jsonl":
        for path in paths:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pulsarctl_py.outputs import PARQUET_TAG_KEY

    # One row group in memory at a time, decoded on this thread: Arrow's thread pools
    # each keep a heap, and the pool keeps what it freed, so a threaded read left the
    # driver's RSS wherever the largest part's decoding had taken it (and higher with
    # more parts and more threads). Closed and released after every part, the join's
    # memory is one row group's, whatever the topic's size (docs/performance.md).
    pool = pa.default_memory_pool()
    schema = schema.with_metadata({**(schema.metadata or {}), PARQUET_TAG_KEY: b"export"})
    with pq.ParquetWriter(pa.PythonFile(out, mode="w"), schema) as writer:
        for path in paths:
            with pq.ParquetFile(path) as part:
                for group in range(part.num_row_groups):
                    table = part.read_row_group(group, use_threads=False)
                    if table.num_rows:
                        writer.write_table(table)
                    del table
            pool.release_unused()


# -- compact --export FILE.parquet -----------------------------------------------------------


class CompactedViewParquet:
    """``compact --export FILE.parquet``: the compacted view's rows
    (:func:`pulsarctl_py.compaction.run.export_lines`) written as Parquet as they come, to
    ``out`` (an output's file object: see :mod:`pulsarctl_py.outputs`).

    Columns: key, value (bytes), properties, position ("L:E[:B]"), publish_time,
    event_time, note; with ``values`` (the topic has a schema) also schema_version,
    schema_type, value_decoded (typed by ``column``, as export types it) and value_error;
    ``decoded``: the :class:`pulsarctl_py.values.Values` decoding them, whose estimate of
    what they take bounds a row group. Call :meth:`close` when the view is complete.
    """

    def __init__(
        self, out: IO[bytes], values: bool = False, column: Any = None, decoded: Any = None
    ) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from pulsarctl_py.outputs import PARQUET_TAG_KEY

        fields = [
            ("key", pa.string()),
            ("value", pa.binary()),
            ("properties", pa.map_(pa.string(), pa.string())),
            ("position", pa.string()),
            ("publish_time", pa.int64()),
            ("event_time", pa.int64()),
            ("note", pa.string()),
        ]
        if values:
            fields += [
                ("schema_version", pa.int64()),
                ("schema_type", pa.string()),
                ("value_decoded", column.arrow_type() if column is not None else pa.string()),
                ("value_error", pa.string()),
            ]
        self.schema = pa.schema(fields, metadata={PARQUET_TAG_KEY: b"compacted-view"})
        self._pa = pa
        # without a column the rows carry the decoded JSON value, turned into text here;
        # a "text" column's values are JSON text already (ValueColumn.value)
        self._dump = values and column is None
        self._writer = pq.ParquetWriter(pa.PythonFile(out, mode="w"), self.schema)
        self._batch: list[dict[str, Any]] = []
        self._held = 0  # what the batched values take: bytes, decoded values estimated
        self._decoded = decoded
        self.rows = 0

    def write_row(self, row: dict[str, Any]) -> None:
        value = row.get("value")
        out = {name: row.get(name) for name in self.schema.names}
        out["value"] = None if value is None else base64.b64decode(value)
        out["properties"] = list((row.get("properties") or {}).items())
        if self._dump and out["value_decoded"] is not None:
            out["value_decoded"] = json.dumps(
                out["value_decoded"], ensure_ascii=False, separators=(",", ":")
            )
        self._batch.append(out)
        self._held += 0 if out["value"] is None else len(out["value"])
        if self._decoded is not None:
            self._held += self._decoded.take_held()
        if len(self._batch) >= PARQUET_BATCH_ROWS or self._held >= PARQUET_BATCH_BYTES:
            self._flush()

    def _flush(self) -> None:
        self._writer.write_table(self._pa.Table.from_pylist(self._batch, schema=self.schema))
        self.rows += len(self._batch)
        self._batch.clear()
        self._held = 0

    def close(self) -> None:
        self._flush()
        self._writer.close()

    def abandon(self) -> None:
        """Stop writing a view cut short (its output is discarded): the writer is closed
        now, while its file is open, not later by the garbage collector."""
        self._batch.clear()
        try:
            self._writer.close()
        except Exception:  # the view is dropped whatever its writer says
            pass
