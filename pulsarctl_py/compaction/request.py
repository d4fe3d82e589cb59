"""``ledgerctl compact`` as one library call: the request a command builds from its options,
and :func:`compact_topic`, which runs the whole verb and returns what the command renders.

The sequence (Pulsar's ``TwoPhaseCompactor``, then the write spine):

1. with ``--apply``/``--plan``, the topic as it is before the work (:func:`.planned.read_before`:
   the compare-and-set the plan is checked against);
2. the ``--export`` output checked, and the topic's schemas read for its rows;
3. the compaction computed (:func:`.run.compact`), on the engine ``--engine`` names;
4. with ``--apply``/``--plan``, the compacted ledger written with its plan, and the plan applied
   (:func:`.planned.write_compaction`): as the broker's ``TwoPhaseCompactor`` does, the ledger
   is created once phase one is done and each entry added while phase two produces it (the
   compute's ``write`` sink); whether anything is written is decided before it is created.

Nothing here prints: ``say(text, kind)`` hears what a person is told while it works (``kind``
"warning", "note" or ""), in the order it happens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core import CompactedEntry, CompactionOptions
from .planned import CompactionWrite, Say
from .run import CompactionReport


@dataclass(slots=True)
class SparkChoice:
    """The engine flags as parsed: ``engine`` auto, local or spark, and Spark's session."""

    engine: str = "local"
    threshold: int | None = None
    master: str | None = None
    conf: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CompactWriteRequest:
    """``--apply``/``--plan``: where the plan goes (an output prepared before the work), and
    how the compacted ledger is written."""

    plan_out: Any
    apply: bool
    delete_old: bool
    #: the write settings (:func:`pulsarctl_py.writesettings.resolve_write_settings`)
    settings: Any
    #: the bookie client options the ledger is written with
    client: Any
    #: ``--force-owned``
    force_owned: bool = False


@dataclass(slots=True)
class CompactRequest:
    """Everything ``compact`` was asked (except ``--status``: :func:`.status.topic_status`)."""

    topic: str
    metadata_url: str | None
    bookie_dirs: list[str] | None
    options: CompactionOptions
    #: the broker settings ``options`` were made from (:class:`.settings.CompactorSettings`)
    broker: Any
    engine: SparkChoice
    memory: int
    full: bool = False
    generation: str = "pre-pip-429"
    progress: bool = False
    #: the bookie client options the entries are read with
    live: Any = None
    #: ``--export FILE`` (None: no view), ``--force`` over a foreign file, and ``--values``
    export: Path | None = None
    force_export: bool = False
    values: str = "auto"
    write: CompactWriteRequest | None = None


@dataclass(slots=True)
class CompactOutcome:
    """What ``compact`` did: the report, and what was written (None: nothing)."""

    report: CompactionReport
    written: CompactionWrite | None = None


def compact_topic(request: CompactRequest, *, say: Say | None = None) -> CompactOutcome:
    """Run ``compact`` as :mod:`this module <.request>` describes. Raises
    :class:`~pulsarctl_py.errors.DataError` when the topic has no keyed message and
    keyless messages are dropped (compaction would drop everything)."""
    from .planned import read_before, write_compaction
    from .run import compact

    say = say or _quiet
    write = request.write
    before = None
    if write is not None:
        from pulsarctl_py.stores.metadata.url import resolve_metadata_url

        # what the write will be checked against: read BEFORE the compaction is computed,
        # so that a change made while it computes fails the compare-and-set
        before = read_before(
            str(resolve_metadata_url(request.metadata_url)),
            request.topic,
            force=write.force_owned,
        )
        for w in before.warnings:
            say(w, "warning")
    written: list[CompactionWrite | None] = []

    def write_it(report: CompactionReport, entries: Any = None) -> CompactionWrite | None:
        assert write is not None and before is not None
        return write_compaction(
            report,
            state["state"],
            before=before,
            bookie_dirs=request.bookie_dirs,
            delete_old=write.delete_old,
            settings=write.settings,
            options=write.client,
            force=write.force_owned,
            full=request.full,
            plan_out=write.plan_out,
            apply=write.apply,
            say=say,
            entries=entries,
        )

    failed: list[Exception] = []

    def sink(report: CompactionReport, entries: Iterator[CompactedEntry]) -> None:
        """Phase one is done: write the compacted ledger while phase two runs."""
        if _drops_everything(request, report):
            return  # refused once phase two ends, as before: nothing is written
        ended: list[bool] = []

        def payloads() -> Iterator[bytes | memoryview]:
            for entry in entries:
                yield entry.data
            ended.append(True)

        try:
            written.append(write_it(report, payloads()))
        except Exception as exc:
            if not ended:
                raise  # phase two did not end: no view, no ledger
            # phase two ended (its --export view stands, as it did when the write came
            # after the compute): a failure of the steps after it is raised once the view
            # is saved
            failed.append(exc)

    with _view_output(
        request.export,
        request.force_export,
        lambda: _value_options(request),
    ) as (view, value_options):
        state: dict[str, Any] = {}
        report = compact(
            request.topic,
            metadata_url=request.metadata_url,
            bookie_dirs=request.bookie_dirs,
            options=request.options,
            full=request.full,
            memory=request.memory,
            engine=request.engine.engine,
            pick_engine=lambda entries: _start_engine(request.engine, entries),
            export=view,
            write=sink if write is not None else None,
            progress=request.progress,
            generation=request.generation,
            on_state=lambda s: state.update(state=s),
            live=request.live,
            values=value_options,
            settings=request.broker,
        )
    for w in report.warnings:
        say(w, "warning")
    if request.options.format == "pip-429":
        from .core import PIP_429_CLIENT_CRASH

        report.warnings.append(PIP_429_CLIENT_CRASH)
    outcome = CompactOutcome(report)
    if report.stats.entries_in and report.keys == 0 and not request.broker.retain_null_key:
        from pulsarctl_py.errors import DataError

        raise DataError(
            f"{report.topic} has no keyed messages: compaction would drop everything "
            "(pass --retain-null-key to keep keyless messages)"
        )
    if failed:
        raise failed[0]
    if write is not None and not written:
        # the sink was never called: phase one found nothing the broker would compact
        outcome.written = write_it(report)
    elif written:
        outcome.written = written[0]
    return outcome


def _drops_everything(request: CompactRequest, report: CompactionReport) -> bool:
    """Phase one found no keyed message in a plan with entries, and keyless messages are
    dropped: :func:`compact_topic` refuses the compaction once it ends (nothing written)."""
    plan = report.plan
    return (
        plan is not None
        and bool(plan.entries)
        and report.keys == 0
        and not request.broker.retain_null_key
    )


def status_of(
    topic: str,
    metadata_url: str | None,
    bookie_dirs: list[str] | None,
    *,
    generation: str,
    deep: bool,
    broker: Any,
    admin_url: str | list[str] | None = None,
) -> Any:
    """``compact --status``: the topic's compaction as stored, with its checks
    (:func:`.status.compaction_status`), under the broker settings ``broker``, and the
    answers of the broker that has the topic loaded (``admin_url``, else the registered
    brokers: :func:`pulsarctl_py.broker_view.compaction_view`)."""
    from pulsarctl_py.broker_view import compaction_view
    from pulsarctl_py.ledgers import LedgerSource

    from .status import compaction_status

    # the topic's offloaded ledgers are read from tiered storage (the checks read the tail
    # and --deep recomputes over every ledger); the compacted ledger itself stays in
    # BookKeeper: the broker never offloads it (ManagedLedgerImpl offloads the managed
    # ledger's own ledgers; the compactor's ledger is not one of them)
    with LedgerSource.open(metadata_url, bookie_dirs, need_metadata=True, tiered=True) as source:
        status = compaction_status(
            source,
            topic,
            generation=generation,
            deep=deep,
            metadata_url=metadata_url,
            bookie_dirs=bookie_dirs,
            retain_null_key=broker.retain_null_key,
            keep_entry_metadata=broker.keep_entry_metadata,
            order=broker.order,
        )
        status.broker = compaction_view(source, status, admin_url)
        return status


def _quiet(text: str, kind: str) -> None:
    return None


def _value_options(request: CompactRequest) -> Any:
    """The topic's schemas for the --export rows (None: values stay bytes)."""
    if request.values == "raw":
        return None
    from pulsarctl_py.export import ValueOptions, output_format
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.outputs import is_stream_path
    from pulsarctl_py.values import values_for

    export = request.export
    assert export is not None
    with LedgerSource.open(
        request.metadata_url, request.bookie_dirs, need_metadata=True, live=request.live
    ) as source:
        schemas = values_for(source, request.topic, required=request.values != "auto")
    if schemas is None:
        return None
    column = None
    if output_format(export, stream=is_stream_path(export)) == "parquet":
        from pulsarctl_py.value_columns import value_column

        column = value_column(schemas)
        if column.kind == "split":
            # one view, one column: versions Avro cannot merge are JSON text here
            column = None
    return ValueOptions(schemas, column)


@contextlib.contextmanager
def _view_output(
    export: Path | None, force: bool, values_of: Callable[[], Any]
) -> Iterator[tuple[Any, Any]]:
    """The --export output, checked before the work, and the topic's schemas for its rows
    (``values_of()``, read once the path is known to be writable): yields the text file
    the compaction writes its JSON lines to, or for FILE.parquet the Parquet view that
    takes its rows, and the values ((None, None) without --export). The output is
    committed when the block ends normally."""
    if export is None:
        yield None, None
        return
    from pulsarctl_py import outputs
    from pulsarctl_py.export import CompactedViewParquet

    out = outputs.prepare(export, outputs.COMPACTED_VIEW, force=force)
    try:
        values = values_of()
    except BaseException:
        out.discard()
        raise
    if not export.name.lower().endswith(".parquet"):
        with out.open_text() as fh:
            yield fh, values
        return
    with out.open_binary() as fh:
        view = CompactedViewParquet(
            fh,
            values is not None,
            values.column if values is not None else None,
            values.values if values is not None else None,
        )
        try:
            yield view, values
        except BaseException:
            view.abandon()  # before its file closes: the output is discarded
            raise
        view.close()


def _start_engine(chosen: SparkChoice, entries: int) -> str:
    """The engine for a plan of ``entries`` entries (auto: Spark from the threshold on,
    as export picks it); a Spark session starts here."""
    from pulsarctl_py.engines.select import pick

    name = pick(chosen.engine, entries, chosen.threshold)
    if name == "spark":
        from pulsarctl_py.spark.session import get_session, parse_conf

        get_session(chosen.master, parse_conf(chosen.conf))
    return name
