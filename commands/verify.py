"""`ledgerctl verify`: check that topics' metadata and their stored ledgers agree."""

from __future__ import annotations

import enum
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pulsarctl_py.commands import engine_options as eo
from pulsarctl_py.commands import options
from pulsarctl_py.commands.completion import complete_topic

if TYPE_CHECKING:
    from rich.table import Table

    from pulsarctl_py.verify import Finding, ProgressCallback, VerifyStats


class VerifyOutput(enum.StrEnum):
    auto = "auto"
    table = "table"
    json = "json"
    jsonl = "jsonl"
    openmetrics = "openmetrics"


_COLOURS = {"error": "red", "warning": "yellow", "info": "cyan"}


@options.bookie_flags
@options.metadata_options
@options.tiered_options
def verify(
    topic: str = typer.Argument(
        None,
        metavar="TOPIC",
        autocompletion=complete_topic,
        help="The topic to verify: persistent://tenant/ns/topic, tenant/ns/topic, a short "
        "name (public/default), or a managed-ledger name. A partitioned topic stands for "
        "its partitions.",
        show_default=False,
    ),
    all_topics: bool = typer.Option(
        False,
        "--all",
        help="Verify every topic, and look for orphan ledgers (Pulsar ledgers nothing references).",
    ),
    metadata_url: str = options.METADATA_URL,
    bookie_dirs: list[Path] = options.BOOKIE_DIRS,
    bookie: options.BookieFlags = options.BOOKIE,
    password_env: str = options.PASSWORD_ENV,
    password_file: Path = options.PASSWORD_FILE,
    output: VerifyOutput = typer.Option(
        VerifyOutput.auto,
        "--output",
        "-o",
        help="table for people, json (findings and a summary) or jsonl (one finding per "
        "line) for machines, openmetrics for node exporter's textfile collector (gauges "
        "per topic and for the run; written also when the run stops on an error, with "
        "success 0); auto is table on a terminal and json when piped.",
    ),
    quiet: bool = options.QUIET,
    no_progress: bool = options.NO_PROGRESS,
    strict: bool = options.STRICT,
    max_message_size: str = options.MAX_MESSAGE_SIZE,
    engine: eo.EngineChoice = eo.ENGINE,
    spark: bool = eo.SPARK,
    spark_master: str = eo.SPARK_MASTER,
    spark_conf: list[str] = eo.SPARK_CONF,
    spark_threshold: int = eo.SPARK_THRESHOLD,
    admin_url: list[str] = options.ADMIN_URL,
) -> None:
    """Check that topic metadata and the stored ledgers agree; list what does not.

    Checks: every ledger a topic lists exists in BookKeeper metadata and in storage;
    entry counts and sizes match; every digest and checksum verifies, and every payload
    decodes (decompressed up to --max-message-size, split into its batch records, as
    inspect decodes it); cursors point
    inside existing ledgers, at or before their last entry; the compacted ledger exists
    and names the topic; broker entry metadata indexes are continuous and the "index"
    property is not behind; timestamps are monotone (non-monotonic regions listed);
    shadow topics list only their source's ledgers; with --all, no Pulsar ledger is
    orphaned; a topic a broker has loaded is served as stored (its ledger list, compacted
    ledger and cursors, from its admin API, asked without loading any topic: --admin-url,
    else the brokers registered in the metadata store; without one, a line says the
    broker was not asked). Each finding has a severity (error, warning, info) and a check id; see
    the guide for the rule behind each.

    The entry scans run in-process or on Spark (--engine), with the same findings.

    Exit status 1 when any finding is an error, else 0 (warnings and info included).
    """
    from pulsarctl_py import render
    from pulsarctl_py.broker_view import BrokerLookup
    from pulsarctl_py.engines.select import listed_entries
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.ledgers import LedgerSource, resolve_tiered
    from pulsarctl_py.verify import VerifyStats, verify_topics
    from pulsarctl_py.verify.metrics import FindingTally

    if (topic is None) == (not all_topics):
        raise typer.BadParameter("give a TOPIC or --all (one of them)", param_hint="TOPIC")
    eo.engine_name(engine, spark, spark_master)
    resolve_tiered()  # a bad --prefer is refused before anything is read
    password = options.password(password_env, password_file)
    topics = None if all_topics else [topic]
    metrics = output is VerifyOutput.openmetrics
    fmt = (
        render.OutputFormat.JSONL
        if metrics
        else render.resolve(render.OutputFormat(output.value), render.OutputFormat.TABLE)
    )
    stats = VerifyStats()
    started = time.monotonic()
    tally = FindingTally()
    try:
        with (
            LedgerSource.open(
                metadata_url,
                bookie_dirs or None,
                password,
                need_metadata=True,
                live=bookie.client(),
            ) as source,
            eo.scan_reads(
                engine,
                spark,
                spark_master,
                spark_conf,
                spark_threshold,
                metadata_url=metadata_url,
                bookie_dirs=bookie_dirs,
                password=password,
                source=source,
                entries=lambda count: listed_entries(source, topics, count),
                label="verifying on Spark",
                progress=False,
            ) as reads,
            _progress(not (quiet or no_progress)) as progress,
        ):
            assert source.metadata is not None
            lookup = BrokerLookup(source.metadata, admin_url or None)
            findings = verify_topics(
                source,
                topics,
                progress=progress,
                stats=stats,
                reads=reads,
                max_uncompressed=None,
                brokers=lookup,
            )
            collected: list[Finding] = []
            if metrics:
                for _finding in tally.take(findings):
                    pass
            elif fmt is render.OutputFormat.JSONL:
                render.write_jsonl(f.to_json() for f in findings)
            else:
                collected = list(findings)
    except LedgerctlError:
        if metrics:  # the scrape shows the failed run, not the last good one
            _write_metrics(stats, tally, False, started)
        raise
    if metrics:
        _write_metrics(stats, tally, True, started)
    elif fmt is render.OutputFormat.JSON:
        render.write_json(
            {
                "findings": [f.to_json() for f in collected],
                "summary": stats.to_json(),
                "broker": lookup.to_json(),
            }
        )
    elif fmt is not render.OutputFormat.JSONL and collected:
        render.print_table(render.stdout_console(), _table(collected))
    if not quiet:
        render.stderr_console().print(lookup.line(), markup=False)
        _summary(stats)
    if not stats.ok or (strict and stats.unverified):
        raise typer.Exit(1)


@contextmanager
def _progress(enabled: bool = True) -> Iterator[ProgressCallback | None]:
    """A transient progress display on stderr, only when stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from pulsarctl_py import render
    from pulsarctl_py.verify import VerifyProgress

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[entries]} entries", markup=False),
        TimeElapsedColumn(),
        console=render.stderr_console(),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    task = bar.add_task("verify", total=None, entries=0)

    def update(p: VerifyProgress) -> None:
        if p.stage == "orphans":
            what = "looking for orphan ledgers"
        elif p.topic is None:
            what = "verify"
        else:
            what = p.topic + (f" ledger {p.ledger_id}" if p.ledger_id is not None else "")
        bar.update(
            task,
            description=what,
            total=p.topics_total or None,
            completed=p.topics_done,
            entries=p.entries,
        )

    with bar:
        yield update


def _write_metrics(stats: VerifyStats, tally: Any, success: bool, started: float) -> None:
    """The run as OpenMetrics text on stdout (:mod:`pulsarctl_py.verify.metrics`)."""
    from pulsarctl_py.verify.metrics import openmetrics

    text = openmetrics(
        stats,
        tally,
        success=success,
        duration_s=time.monotonic() - started,
        timestamp_s=time.time(),
    )
    sys.stdout.write(text)
    sys.stdout.flush()


def _table(findings: list[Finding]) -> Table:
    from rich.markup import escape
    from rich.table import Table

    table = Table()
    for col in ("severity", "check", "topic", "ledger", "entry", "message"):
        table.add_column(col, overflow="fold", no_wrap=col == "topic")
    for f in findings:
        colour = _COLOURS.get(f.severity, "white")
        table.add_row(
            f"[{colour}]{f.severity}[/]",
            f.check,
            escape(f.topic or "-"),
            "-" if f.ledger_id is None else str(f.ledger_id),
            "-" if f.entry_id is None else str(f.entry_id),
            escape(f.message),
        )
    return table


def _summary(stats: VerifyStats) -> None:
    from pulsarctl_py import render

    s = stats.to_json()
    err = render.stderr_console()
    verdict = "[green]ok[/]" if stats.ok else "[red]errors found[/]"
    err.print(
        f"{s['topics']} topic{'s' if s['topics'] != 1 else ''}, {s['ledgers']} ledgers, "
        f"{s['entries']} entries: [red]{s['errors']} errors[/], "
        f"[yellow]{s['warnings']} warnings[/], [cyan]{s['info']} info[/] - {verdict}"
    )


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
