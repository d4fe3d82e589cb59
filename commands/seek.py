"""`ledgerctl seek`: find entries by time, continuous index, legacy KoP offset or position."""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from pulsarctl_py.commands import engine_options as eo
from pulsarctl_py.commands.completion import complete_topic
from pulsarctl_py.commands.options import (
    BOOKIE,
    BOOKIE_DIRS,
    METADATA_URL,
    PASSWORD_ENV,
    PASSWORD_FILE,
    BookieFlags,
    bookie_flags,
    metadata_options,
    password,
    tiered_options,
)
from pulsarctl_py.render import OutputFormat


class Rule(enum.StrEnum):
    broker = "broker"
    kop = "kop"
    compacted = "compacted"


class Era(enum.StrEnum):
    auto = "auto"
    ledger_entry = "ledger-entry"
    ledger_entry_batch = "ledger-entry-batch"


@bookie_flags
@metadata_options
@tiered_options
def seek(
    topic: str = typer.Argument(
        None, metavar="TOPIC", autocompletion=complete_topic, help="The topic to search."
    ),
    ledger: int = typer.Option(
        None, "--ledger", metavar="L", help="Search this one ledger instead of a topic."
    ),
    time: str = typer.Option(
        None,
        "--time",
        metavar="T",
        help="Target time: ISO-8601 (no zone = UTC), epoch ms, a duration before now "
        "(100m, 3h, 2d, 1w), earliest (the first entry, as a reset to MessageId.earliest) or "
        "latest (after the last entry, as MessageId.latest).",
    ),
    index: int = typer.Option(
        None,
        "--index",
        "--offset",
        metavar="N",
        help="Target continuous index (broker entry metadata; KoP 2.8+ offset).",
    ),
    legacy_offset: int = typer.Option(
        None, "--legacy-offset", metavar="N", help="Target pre-2.8 KoP offset."
    ),
    position: str = typer.Option(
        None, "--position", metavar="L:E[:B]", help="Show what is stored at this position."
    ),
    rule: Rule = typer.Option(
        Rule.broker,
        "--rule",
        help="For --time: broker (a subscription reset by time), kop (Kafka LIST_OFFSETS "
        "by timestamp), compacted (the compacted ledger, first publish_time >= T).",
    ),
    clock_skew: int = typer.Option(
        60_000,
        "--clock-skew",
        metavar="MS",
        help="Broker rule: managedLedgerCursorResetLedgerCloseTimestampMaxClockSkewMillis "
        "(the broker's default is 60000; -1 turns the close-time narrowing off).",
    ),
    skip_without_index: bool = typer.Option(
        False,
        "--skip-without-index",
        help="Entries without broker entry metadata count as older than every index "
        "(KoP's skipMessagesWithoutIndex) instead of stopping the search.",
    ),
    era: Era = typer.Option(
        Era.auto, "--era", help="Legacy KoP offset layout (auto: the one naming a stored entry)."
    ),
    explain: bool = typer.Option(
        False, "--explain", help="List every entry read: position, timestamp, comparison."
    ),
    exact: bool = typer.Option(
        False,
        "--exact",
        help="Also scan every entry (streamed) for the true first entry at or after the "
        "time and the regions where timestamps go backwards (in-process or on Spark: "
        "--engine).",
    ),
    engine: eo.EngineChoice = eo.ENGINE,
    spark: bool = eo.SPARK,
    spark_master: str = eo.SPARK_MASTER,
    spark_conf: list[str] = eo.SPARK_CONF,
    spark_threshold: int = eo.SPARK_THRESHOLD,
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    bookie: BookieFlags = BOOKIE,
    password_env: str = PASSWORD_ENV,
    password_file: Path = PASSWORD_FILE,
    output: OutputFormat = typer.Option(
        OutputFormat.AUTO,
        "--output",
        "-o",
        help="table for people, json for machines; auto is table on a terminal and json "
        "when piped.",
    ),
) -> None:
    """Find where a time, continuous index, KoP offset or position is stored in a topic.

    Reads entry heads only, probing in the broker's (or KoP's) own order: at most
    ceil(log2 N) + 3 entries for N entries searched (--rule compacted: + 1). Answers only
    from entries it read: when one it needs could not be read (an unreadable entry, a
    ledger missing from storage), it says where the answer lies and what was not read
    instead. Exit status 1 when the target cannot be answered (no such index, an empty
    topic, an entry it needs not read; with --exact, anything the scan could not read);
    3 when a store cannot be reached.
    """
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.positions import parse_position
    from pulsarctl_py.seek import SeekRequest, seek_topic
    from pulsarctl_py.timeparse import parse_time_ms

    if (topic is None) == (ledger is None):
        raise LedgerctlError("give a TOPIC or --ledger L (one of them)")
    pos = parse_position(position) if position is not None else None
    named = _named_time(time)
    if named == "latest" and rule is Rule.kop:
        # KoP answers Kafka's LATEST_TIMESTAMP with the log end offset, not by a search by
        # time; its search past the last entry answers differently
        raise LedgerctlError("--time latest applies to --rule broker and compacted, not kop")
    request = SeekRequest(
        topic=topic,
        ledger_id=ledger,
        time_ms=(NAMED_TIMES[named] if named else parse_time_ms(time))
        if time is not None
        else None,
        index=index,
        legacy_offset=legacy_offset,
        position=None if pos is None else (pos.ledger_id, pos.entry_id, pos.batch_index),
        rule=rule.value,
        clock_skew_ms=clock_skew,
        skip_without_index=skip_without_index,
        era=era.value,
        exact=exact,
    )
    kind = request.kind()
    if kind != "time" and (rule is not Rule.broker or exact):
        raise LedgerctlError("--rule and --exact apply to --time only")
    chosen = eo.engine_name(engine, spark, spark_master)
    if chosen is eo.EngineChoice.spark and not exact:
        raise LedgerctlError("--spark, --spark-master and --engine spark apply to --exact only")
    secret = password(password_env, password_file)
    with LedgerSource.open(
        metadata_url,
        bookie_dirs,
        secret,
        need_metadata=ledger is None,
        need_bookie=True,
        live=bookie.client(),
        tiered=True,
    ) as source:
        from pulsarctl_py.engines.select import listed_entries

        answer = seek_topic(
            source,
            request,
            lambda: eo.scan_reads(
                chosen if exact else eo.EngineChoice.local,
                False,
                spark_master if exact else None,
                spark_conf,
                spark_threshold,
                metadata_url=metadata_url,
                bookie_dirs=bookie_dirs,
                password=secret,
                source=source,
                entries=lambda limit: listed_entries(
                    source, None if topic is None else [topic], limit
                ),
                label="seek --exact on Spark",
            ),
        )
    if answer.partitioned:
        _show_partitions(answer, output, explain, named)
    else:
        _show(answer.results[0], output, explain, named)
    if not answer.answered:
        raise typer.Exit(1)


def _show_partitions(answer, output: OutputFormat, explain: bool, named) -> None:
    """A partitioned topic's answers, one per partition, in partition order."""
    from pulsarctl_py import render

    fmt = render.resolve(output, OutputFormat.TABLE)
    docs = []
    for result in answer.results:
        doc = result.to_json(explain)
        if named is not None:
            doc["target"]["value"] = named
        docs.append(doc)
    if fmt is OutputFormat.JSON:
        render.write_json({"topic": answer.topic, "partitions": docs})
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl(docs)
    else:
        for result in answer.results:
            _show(result, output, explain, named)


#: --time earliest|latest as times every rule answers the way a reset to
#: MessageId.earliest / MessageId.latest does: the first entry (every entry is at or after
#: time 0), after the last entry (no entry is at or after the largest Java long)
NAMED_TIMES = {"earliest": 0, "latest": 2**63 - 1}


def _named_time(time: str | None) -> str | None:
    if time is None:
        return None
    word = time.strip().lower()
    return word if word in NAMED_TIMES else None


def _show(result, output: OutputFormat, explain: bool, named: str | None = None) -> None:
    import json

    from pulsarctl_py import render

    fmt = render.resolve(output, OutputFormat.TABLE)
    data = result.to_json(explain)
    if named is not None:
        data["target"]["value"] = named
    if fmt in (OutputFormat.JSON, OutputFormat.JSONL):
        render.write_document(data, fmt)
        return
    from rich.table import Table
    from rich.text import Text

    out = render.stdout_console()
    err = render.stderr_console()
    target = data["target"]
    shown = target["value"]
    if target["kind"] == "time" and isinstance(shown, int):
        shown = render.iso_ms(shown)
    title = f"seek {target['kind']} {shown}"
    if data["rule"]:
        title += f" (rule {data['rule']})"
    table = Table(title=title, show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    answer = data["position"] or ("after the last entry" if data["end"] else "none")
    if data.get("not_read"):
        answer = "cannot be answered exactly (entries it needs were not read)"
    table.add_row("topic", Text(str(data["topic"] or f"ledger {data['ledger_id']}")))
    table.add_row("answer", answer)
    if data.get("answer_range"):
        span = data["answer_range"]
        table.add_row("answer lies", f"between {span['first']} and {span['last']}")
    if data["entry_timestamp"] is not None:
        table.add_row(
            "entry timestamp",
            f"{render.iso_ms(data['entry_timestamp'])} ({data['timestamp_source']})",
        )
    if data["index"] is not None:
        table.add_row("index (last message)", str(data["index"]))
    if data["kafka_offset"] is not None:
        table.add_row("kafka offset", str(data["kafka_offset"]))
    if data.get("search_range"):
        sr = data["search_range"]
        table.add_row(
            "search range",
            f"{sr['start']} .. {sr['end']} ({sr['entries']} entries"
            + (", narrowed by ledger close times" if sr["narrowed_by_close_time"] else "")
            + ")",
        )
    if data.get("exact"):
        ex = data["exact"]
        if ex.get("answer_range"):
            span = ex["answer_range"]
            shown = f"cannot be answered exactly: between {span['first']} and " + (
                span["last"] or "the end"
            )
        else:
            shown = str(ex["first_at_or_after"] or "after the last entry")
        table.add_row("exact (linear scan)", shown)
    for msg in data.get("messages", []):
        table.add_row(
            f"message {msg.get('batch_index', '')}", Text(json.dumps(msg, ensure_ascii=False))
        )
    table.add_row("entries read", str(data["entries_read"]))
    out.print(table)
    if explain:
        probes = Table(title="probes, in the order they were read")
        for col in ("phase", "position", "timestamp", "source", "comparison"):
            probes.add_column(col)
        for p in data["probes"]:
            probes.add_row(
                p["phase"],
                p["position"],
                render.iso_ms(p["timestamp"]) if p["timestamp"] is not None else "-",
                p["source"] or "-",
                Text(p["comparison"] if p["error"] is None else f"unreadable: {p['error']}"),
            )
        out.print(probes)
    for text in data["warnings"]:
        err.print(f"warning: {text}", markup=False, highlight=False)
    for text in data["findings"]:
        err.print(f"finding: {text}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("seek")(seek)
