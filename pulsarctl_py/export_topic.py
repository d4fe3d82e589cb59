"""``ledgerctl export`` as one library call: the request a command builds from its options,
and :func:`export_topic`, which runs it and returns the :class:`~pulsarctl_py.export.ExportResult`
the command renders.

The sequence: the output checked (and its temporary file made) before the work; the topic's
scan plan and schemas read from the stores; the value columns chosen; a file per schema version
Avro cannot merge checked beside the output; the plan exported on the engine ``--engine``
picks (:func:`pulsarctl_py.export.export_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarctl_py.export import ExportResult, RowFilters


@dataclass(slots=True)
class ExportRequest:
    """Everything ``export`` was asked, parsed and checked."""

    topic: str
    to: Path
    filters: RowFilters
    #: ``--force``: overwrite an existing file that is not an earlier export
    force: bool = False
    metadata_url: str | None = None
    bookie_dirs: list[Path] | None = None
    #: the bookie client options the entries are read with
    live: Any = None
    #: ``--values``: raw, auto, decoded or both
    values: str = "auto"
    #: ``--columns`` (None: all)
    columns: list[str] | None = None
    #: the consumer's private key (PEM, checked) and its passphrase
    key_pem: bytes | None = None
    passphrase: bytes | None = None
    split_entries: int | None = None
    #: ``--engine`` (auto, local or spark) and Spark's session
    engine: str = "local"
    spark_master: str | None = None
    spark_conf: list[tuple[str, str]] = field(default_factory=list)
    spark_threshold: int | None = None


def export_topic(request: ExportRequest, *, console: Any = None) -> ExportResult:
    """Export the topic as ``request`` asks. ``console``: where progress is shown (the
    splits done, Spark's tasks); None shows none."""
    from pulsarctl_py import outputs, render
    from pulsarctl_py.config import resolve_bookie_dirs, resolve_ledger_password
    from pulsarctl_py.coverage import Gaps
    from pulsarctl_py.engines.select import open_engine, pick
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.export import (
        COLUMN_NAMES,
        EXPORT_SPLIT_ENTRIES,
        VALUE_COLUMNS,
        ValueOptions,
        absolute_url,
        export_output_kind,
        export_plan,
        output_format,
        topic_plan,
        version_outputs,
    )
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    topic = request.topic
    # checked (and its temporary file made) before the work; an output never written is
    # dropped when it is collected
    out = outputs.prepare(request.to, export_output_kind(), force=request.force)
    url = absolute_url(resolve_metadata_url(request.metadata_url))
    dirs = resolve_bookie_dirs(request.bookie_dirs)
    gaps = Gaps()
    with LedgerSource.open(
        url,
        dirs,
        resolve_ledger_password(None, None),
        need_metadata=True,
        need_bookie=True,
        live=request.live,
        tiered=True,
    ) as source:
        plan = topic_plan(
            source,
            topic,
            metadata_url=url,
            bookie_dirs=[str(d) for d in dirs],
            split_entries=request.split_entries or EXPORT_SPLIT_ENTRIES,
            gaps=gaps,
        )
        schemas = None
        if request.values != "raw":
            from pulsarctl_py.values import values_for

            schemas = values_for(source, topic, required=request.values != "auto")
    column = None
    if schemas is not None and output_format(out.path, stream=out.stream) == "parquet":
        from pulsarctl_py.value_columns import value_column

        column = value_column(schemas)
    asked = request.columns
    cols = tuple(asked) if asked else COLUMN_NAMES + (VALUE_COLUMNS if schemas else ())
    if schemas is None and any(c in VALUE_COLUMNS for c in cols):
        raise LedgerctlError(f"{topic} has no schema: no decoded value columns")
    value_options = ValueOptions(schemas, column, request.key_pem, request.passphrase)
    # versions Avro cannot merge: a file per version beside --to, checked before the work
    versions = version_outputs(out, column, cols, force=request.force)
    name = pick(request.engine, plan.entries, request.spark_threshold)
    runner = open_engine(
        name,
        master=request.spark_master,
        conf=request.spark_conf,
        console=console,
        label=f"exporting {plan.topic}",
    )
    try:
        with render.progress(
            console, f"exporting {plan.topic}: splits", enabled=console is not None
        ) as advance:
            return export_plan(
                plan,
                runner,
                out,
                columns=cols,
                filters=request.filters,
                progress=lambda _n: advance(),
                gaps=gaps,
                values=value_options,
                versions=versions,
            )
    finally:
        runner.close()
