"""ledgerctl on Apache Spark: the ``ledgerctl`` data source for your own PySpark jobs.

One call makes it available in a session::

    from pulsarctl_py.spark import register
    register(spark)
    df = (spark.read.format("ledgerctl")
          .option("topic", "persistent://public/default/orders")
          .option("metadata-url", "rocksdb:///pulsar/data/metadata")
          .option("bookie-dir", "/pulsar/data/bookkeeper")
          .load())

Options: ``topic`` or ``ledger`` (one of them), ``metadata-url`` (default: as the CLI,
$LEDGERCTL_METADATA_URL or the nearest ledgerctl.toml), ``bookkeeper-metadata-url`` and
``broker-conf`` (where BookKeeper's metadata lives when it is not ``/ledgers`` of that
store, as the CLI's flags of the same names), ``bookie-dir`` (several separated by
``,``), the running bookies' client settings as the CLI's flags of the same names
take them (``bookie-address``: ``ID=HOST:PORT`` pairs separated by ``,``;
``bookie-tls``: true or false; ``bookie-ca-file``; ``bookie-timeout`` in seconds;
``bookie-protocol``: v3, v2 or auto; each over its ``LEDGERCTL_BOOKIE_*`` variable on the
driver, and a client certificate and key only from those variables, never an option),
``offload-url``, ``s3-endpoint`` and ``prefer`` (where offloaded ledgers are read, as the
CLI's flags of the same names), ``split-entries`` (entries per partition, default 10000),
and inspect's filters ``key``,
``since``, ``until`` (times as the CLI takes them).

One row per message (columns: :data:`pulsarctl_py.export.COLUMNS`); partitions are entry
ranges of the topic's ledgers, read on the executors by ledgerctl's decoders. When the
topic has a schema, ``value`` is the typed value, as Apache's own pulsar-spark connector
gives a topic with a schema: a struct of the Avro or JSON schema's fields when its versions
merge into the latest by Avro's resolution rules (nested records as structs), a
primitive's own type, else the value as JSON text; then ``value_bytes`` (the payload
bytes), ``schema_version`` and ``schema_type`` follow. A value that does not decode with
its schema is null, its bytes in ``value_bytes`` and the error in ``problems``. The option
``values``: ``auto`` (the default) and ``both`` as said (``both`` requires a schema),
``decoded`` the same without ``value_bytes``, ``raw`` the payload bytes in ``value`` and no
value columns (the topic's schema is not read). A topic without a schema, or whose schema
versions keep values as bytes (NONE, BYTES, AUTO), keeps ``value`` as the payload bytes. With a
``bookie-dir`` the executors must reach the same paths (a shared file system); without
one they read the running bookies named in ledger metadata, with the client options the
driver resolved (carried in each split), so they need only network access to the bookies
and to the metadata store. Offloaded ledgers are read by the executors from tiered storage
(each split carries the S3 location and endpoint, never credentials: an executor reads S3
with its own environment's, AWS's chain or Pulsar's ACCESS_KEY_ID/ACCESS_KEY_SECRET, and
needs boto3).
Spark does not tell Python data sources which columns a query uses; give the reader a
schema with only the columns you need (``.schema("ledger_id bigint, entry_id bigint,
publish_time bigint")``) and, when none of them is a message column (key, value,
properties, event_time, null_value), payloads are never decompressed. A given schema that
declares ``value binary`` gets the payload bytes in it, as ``values raw`` would (the
topic's schema is read only if another value column is asked for); with ``values
decoded`` that is an error.

The Python the session's workers run (``PYSPARK_PYTHON`` or ``spark.pyspark.python``)
must have ledgerctl installed: the executors read with its decoders.

This package imports pyspark; nothing else in ledgerctl imports it except the Spark engine.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.export import (
    COLUMN_NAMES,
    COLUMNS,
    EXPORT_SPLIT_ENTRIES,
    RowFilters,
    check_columns,
    split_rows,
)

FORMAT = "ledgerctl"
#: the columns added when the topic has a schema (``value`` itself is then the typed value)
VALUE_COLUMNS: tuple[str, ...] = ("value_bytes", "schema_version", "schema_type")
#: the choices of the option ``values``
VALUE_CHOICES = ("auto", "raw", "decoded", "both")


def register(spark: Any) -> None:
    """Make ``spark.read.format("ledgerctl")`` available in this session."""
    spark.dataSource.register(LedgerctlDataSource)


class SplitPartition(InputPartition):
    """One split of the scan plan (a ledger's entry range) as a Spark partition."""

    def __init__(self, split: Any) -> None:
        super().__init__(split.ordinal)
        self.split = split


class LedgerctlDataSource(DataSource):
    """Messages of a topic (or one ledger) read where BookKeeper stores them."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _values(self) -> Any:
        """The topic's schemas and value column (read once, on the driver), or None."""
        if not hasattr(self, "_value_options"):
            probe = LedgerctlReader(dict(self.options), full_schema())
            self._value_options = values_of(probe)
        return self._value_options

    def schema(self) -> StructType:
        choice = values_choice(dict(self.options))
        return full_schema(self._values(), value_bytes=choice != "decoded")

    def reader(self, schema: StructType) -> DataSourceReader:
        check_names(schema.fieldNames())  # an unknown name is said before any store opens
        wanted = wants_values(schema, values_choice(dict(self.options)))
        return LedgerctlReader(dict(self.options), schema, self._values() if wanted else None)


def check_names(names: Sequence[str]) -> None:
    """Refuse a column the data source does not have, naming the ones it has."""
    known = COLUMN_NAMES + VALUE_COLUMNS
    unknown = [n for n in names if n not in known]
    if unknown:
        hint = (
            " (the decoded value is the column value, its payload bytes value_bytes)"
            if "value_decoded" in unknown
            else ""
        )
        raise LedgerctlError(
            f"unknown column(s) {', '.join(unknown)}: the columns are {', '.join(known)}{hint}"
        )
    if not names:
        raise LedgerctlError("no columns selected")


def values_choice(options: dict[str, str]) -> str:
    """The option ``values`` (auto, raw, decoded or both)."""
    choice = (_option(options, "values") or "auto").lower()
    if choice not in VALUE_CHOICES:
        raise LedgerctlError(f"values {choice!r}: use {', '.join(VALUE_CHOICES[:-1])} or both")
    return choice


def wants_values(schema: StructType, choice: str) -> bool:
    """Whether reading the columns of ``schema`` needs the topic's schema: a value column,
    or ``value`` declared as anything but the payload bytes (``values decoded`` always
    types ``value``, so reads the schema to say what it is)."""
    if choice == "raw":
        return False
    names = schema.fieldNames()
    if any(n in VALUE_COLUMNS for n in names):
        return True
    if "value" not in names:
        return False
    return choice == "decoded" or schema["value"].dataType.simpleString() != "binary"


def _option(options: dict[str, str], name: str) -> str | None:
    for key, value in options.items():
        if key.lower() == name:
            return value
    return None


def _boolean(name: str, value: str) -> bool:
    from pulsarctl_py.stores.live.config import flag_value

    flag = flag_value(value)
    if flag is None:
        raise LedgerctlError(f"{name} {value!r}: use true or false")
    return flag


def spark_type(ddl: str) -> Any:
    """The Spark type of one of our column types (no session needed, unlike DDL parsing)."""
    from pyspark.sql import types as t

    simple = {
        "string": t.StringType(),
        "bigint": t.LongType(),
        "int": t.IntegerType(),
        "binary": t.BinaryType(),
        "boolean": t.BooleanType(),
        "map<string,string>": t.MapType(t.StringType(), t.StringType()),
        "array<string>": t.ArrayType(t.StringType()),
    }
    return simple[ddl]


def value_type(values: Any) -> Any:
    """The Spark type of a typed ``value``: the Arrow type of its column (a struct of the
    Avro or JSON schema's fields, a primitive's type, or JSON text)."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(values.column.arrow_type())


def _types(values: Any = None, value_bytes: bool = True) -> dict[str, Any]:
    """Each known column's Spark type: with ``values`` (the topic has a schema) ``value``
    typed by it and the value columns (``value_bytes`` unless the option values is
    decoded)."""
    out = {n: spark_type(d) for n, d in COLUMNS}
    if values is not None:
        out["value"] = value_type(values)
        if value_bytes:
            out["value_bytes"] = spark_type("binary")
        out["schema_version"] = spark_type("bigint")
        out["schema_type"] = spark_type("string")
    return out


def full_schema(values: Any = None, value_bytes: bool = True) -> StructType:
    """Every column; with ``values`` (the topic has a schema) ``value`` typed, then
    value_bytes (unless ``value_bytes`` is false), schema_version and schema_type."""
    from pyspark.sql.types import StructField

    return StructType([StructField(n, t) for n, t in _types(values, value_bytes).items()])


def _check_types(schema: StructType, values: Any, choice: str) -> tuple[str, ...]:
    """The columns of the rows :func:`split_rows` gives for ``schema``, in its order (the
    names of pulsarctl_py.export: a typed ``value`` is its ``value_decoded``, ``value_bytes``
    its ``value``); a column of a type we do not give is refused."""
    names = schema.fieldNames()
    check_names(names)
    if values is None and any(c in VALUE_COLUMNS for c in names):
        raise LedgerctlError(
            f"no value columns ({', '.join(VALUE_COLUMNS)}): the topic has no schema "
            "(or the option values is raw)"
        )
    expected = _types(values, value_bytes=choice != "decoded")
    rows: list[str] = []
    for field in schema.fields:
        got = field.dataType.simpleString()
        if field.name not in expected:
            raise LedgerctlError(
                f"no column {field.name} with the option values decoded: use auto or both"
            )
        # containers compare with their null flags: compare the type names only
        want = expected[field.name].simpleString()
        if field.name == "value" and values is not None and got == "binary" and want != got:
            if choice == "decoded":
                raise LedgerctlError(
                    f"column value is {want} with the option values decoded, not binary: "
                    "use the option values raw (or auto) for the payload bytes"
                )
            rows.append("value")  # the payload bytes, as the option values raw gives them
            continue
        if got != want:
            raise LedgerctlError(f"column {field.name} is {want}, not {got}")
        typed = field.name == "value" and values is not None
        rows.append("value_decoded" if typed else _ROW_NAMES.get(field.name, field.name))
    return check_columns(rows, values=True)


#: a Spark column's name in the rows of pulsarctl_py.export where it differs
_ROW_NAMES = {"value_bytes": "value"}


class LedgerctlReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType, values: Any = None) -> None:
        from pulsarctl_py.timeparse import parse_time_ms

        self.values = values
        self.values_choice = values_choice(options)
        self.columns = _check_types(schema, values, self.values_choice)
        self.topic = _option(options, "topic")
        ledger = _option(options, "ledger")
        if (self.topic is None) == (ledger is None):
            raise LedgerctlError('give the option "topic" or "ledger", one of them')
        try:
            self.ledger = None if ledger is None else int(ledger)
            self.split_entries = int(_option(options, "split-entries") or EXPORT_SPLIT_ENTRIES)
        except ValueError as exc:
            raise LedgerctlError(f"ledger and split-entries are integers: {exc}") from None
        self.metadata_url = _option(options, "metadata-url")
        self.bookkeeper_metadata_url = _option(options, "bookkeeper-metadata-url")
        self.broker_conf = _option(options, "broker-conf")
        # where offloaded ledgers are read, as the CLI's flags of the same names; the driver
        # resolves them into the splits (never credentials: each executor has its own)
        self.offload_url = _option(options, "offload-url")
        self.s3_endpoint = _option(options, "s3-endpoint")
        self.prefer = _option(options, "prefer")
        dirs = _option(options, "bookie-dir")
        self.bookie_dirs = [d for d in (dirs or "").split(",") if d]
        addresses = _option(options, "bookie-address")
        self.bookie_addresses = [addresses] if addresses else None
        tls, ca_file = _option(options, "bookie-tls"), _option(options, "bookie-ca-file")
        self.bookie_tls = None if tls is None else _boolean("bookie-tls", tls)
        self.bookie_ca_file = Path(ca_file) if ca_file else None
        timeout = _option(options, "bookie-timeout")
        try:
            self.bookie_timeout = None if timeout is None else float(timeout)
        except ValueError:
            raise LedgerctlError(f"bookie-timeout {timeout!r} is not a number of seconds") from None
        self.bookie_protocol = _option(options, "bookie-protocol")
        since, until = _option(options, "since"), _option(options, "until")
        self.filters = RowFilters(
            key=_option(options, "key"),
            since=parse_time_ms(since) if since else None,
            until=parse_time_ms(until) if until else None,
        )

    def partitions(self) -> Sequence[InputPartition]:
        return [SplitPartition(s) for s in plan_for(self).splits]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, SplitPartition)
        yield from split_rows(partition.split, self.columns, self.filters, values=self.values)


def values_of(reader: LedgerctlReader) -> Any:
    """The reader's topic's schemas and the type of its ``value`` column
    (:class:`pulsarctl_py.export.ValueOptions`), or None: the option ``values`` is raw, or
    (auto) the topic has no schema. One DataFrame has one column type: schema versions
    Avro cannot merge give ``value`` as JSON text."""
    if reader.values_choice == "raw":
        return None
    from pulsarctl_py.export import ValueOptions
    from pulsarctl_py.value_columns import ValueColumn, value_column
    from pulsarctl_py.values import RAW_TYPES, values_for

    with _source(reader) as (source, _url, _dirs):
        schemas = values_for(
            source, reader.topic, reader.ledger, required=reader.values_choice != "auto"
        )
    if schemas is None:
        return None
    # versions whose values stay bytes (NONE, BYTES, AUTO; pulsarctl_py.values.build_decoder),
    # or none left undeleted: no typed value to give, value stays the payload
    live = [s for s in schemas.schemas if not s.deleted and s.type is not None]
    if all(s.type in RAW_TYPES for s in live):
        if reader.values_choice == "auto":
            return None
        kinds = ", ".join(sorted({s.type.name for s in live})) or "deleted"
        raise LedgerctlError(
            f"the schema versions of {reader.topic or f'ledger {reader.ledger}'} are {kinds}: "
            "its values stay bytes; use the option values auto or raw"
        )
    column = value_column(schemas)
    if column.kind == "split":
        column = ValueColumn("text", "string", column.note)
    return ValueOptions(schemas, column)


@contextlib.contextmanager
def _source(reader: LedgerctlReader) -> Iterator[tuple[Any, str | None, list[str]]]:
    """The stores the reader's options name (the CLI's resolution), opened on the driver:
    (source, absolute metadata URL or None, absolute bookie directories)."""
    from pulsarctl_py import precedence

    # where BookKeeper's metadata lives, as the CLI's flags say it: the splits carry the
    # URL in a text form that names BookKeeper's place too
    with precedence.flags(
        bookkeeper_metadata_url=reader.bookkeeper_metadata_url,
        broker_conf=reader.broker_conf,
        offload_url=reader.offload_url,
        s3_endpoint=reader.s3_endpoint,
        prefer=reader.prefer,
    ):
        with _opened(reader) as opened:
            yield opened


@contextlib.contextmanager
def _opened(reader: LedgerctlReader) -> Iterator[tuple[Any, str | None, list[str]]]:
    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.export import absolute_url
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    dirs = [os.path.abspath(d) for d in resolve_bookie_dirs(reader.bookie_dirs)]
    try:
        url: str | None = absolute_url(resolve_metadata_url(reader.metadata_url))
    except LedgerctlError:
        if reader.topic is not None:
            raise
        url = None  # a bare bookie directory is enough to read one ledger
    live = None
    if not dirs:
        from pulsarctl_py.stores.live.config import resolve_client_options

        live = resolve_client_options(
            addresses=reader.bookie_addresses,
            tls=reader.bookie_tls,
            ca_file=reader.bookie_ca_file,
            timeout=reader.bookie_timeout,
            protocol=reader.bookie_protocol,
        )
    from pulsarctl_py.topicpolicies import install as install_topic_policies

    install_topic_policies()
    with LedgerSource.open(url, dirs, need_bookie=True, live=live, tiered=True) as source:
        yield source, url, dirs


def plan_for(reader: LedgerctlReader) -> Any:
    """The scan plan of the reader's topic or ledger, built from metadata on the driver."""
    from pulsarctl_py.coverage import Gaps
    from pulsarctl_py.engines import build_scan_plan
    from pulsarctl_py.errors import DataError
    from pulsarctl_py.export import topic_plan

    with _source(reader) as (source, url, dirs):
        if reader.topic is not None:
            gaps = Gaps()
            plan = topic_plan(
                source,
                reader.topic,
                metadata_url=url,
                bookie_dirs=dirs,
                split_entries=reader.split_entries,
                gaps=gaps,
            )
            if gaps.ledgers_missing:
                # a DataFrame has no summary to say it: refuse rather than read less
                raise DataError(
                    f"{plan.topic}: {gaps.errors()[0]}; the rows would not be the whole topic"
                    + (
                        f" ({len(gaps.ledgers_missing)} ledgers not read)"
                        if len(gaps.ledgers_missing) > 1
                        else ""
                    )
                )
            return plan
        assert reader.ledger is not None
        view = source.ledger(reader.ledger)
        entries = 0 if view.last_stored is None else view.last_stored + 1
        md = view.metadata
        name = md.pulsar().managed_ledger if md is not None else None
        return build_scan_plan(
            name or "",
            [(reader.ledger, entries, md.length if md is not None else None)],
            bookie_dirs=dirs,
            metadata_url=url,
            live=source.live_options,
            split_entries=reader.split_entries,
        )
