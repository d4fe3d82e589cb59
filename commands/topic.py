"""`ledgerctl topic list|info`: topics as their managed ledgers and cursors describe them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands.completion import complete_topic
from pulsarctl_py.commands.options import (
    ADMIN_URL,
    BOOKIE,
    BOOKIE_DIRS,
    METADATA_URL,
    NO_PROGRESS,
    QUIET,
    BookieFlags,
    bookie_flags,
    metadata_options,
)
from pulsarctl_py.render import OutputFormat

topic_app = typer.Typer(
    help="Topics from the metadata store: their ledgers, cursors, backlogs and properties.",
    no_args_is_help=True,
)

OUTPUT = typer.Option(
    OutputFormat.AUTO,
    "--output",
    "-o",
    help="table or tree for people, json or jsonl for machines; auto is a table (list) or "
    "tree (info) on a terminal and json when piped.",
)


@topic_app.command("list")
@metadata_options
def list_command(
    namespace: str = typer.Option(
        None, "--namespace", "-n", metavar="TENANT/NS", help="Only the topics of this namespace."
    ),
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    output: OutputFormat = OUTPUT,
    quiet: bool = QUIET,
    no_progress: bool = NO_PROGRESS,
) -> None:
    """List the topics under /managed-ledgers, partitions grouped under their topic.

    Columns: topic, ledgers, entries, size (bytes), cursors. The open last ledger of a
    topic is counted from bookie storage (LAC + 1) when a bookie dir is given; otherwise
    its entries are unknown and the totals are marked with '+'.
    """
    from pulsarctl_py import render
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.topics import iter_topics

    err = render.stderr_console()
    fmt = render.resolve(output, OutputFormat.TABLE)
    tally = [0, 0, 0]  # topics, partitioned, managed ledgers

    def counted(rows: Any) -> Any:
        for row in rows:
            tally[0] += 1
            tally[1] += row.partitioned
            tally[2] += len(row.partitions) or 1
            yield row

    # rows are written as they are read: a store of 10^5 topics is never held whole
    with (
        LedgerSource.open(
            metadata_url, bookie_dirs, need_metadata=True, metadata_only=True
        ) as source,
        render.progress(err, "reading topics", not (quiet or no_progress)) as advance,
    ):
        rows = counted(iter_topics(source, namespace=namespace, advance=advance))
        if fmt is OutputFormat.JSON:
            render.write_json_list((r.to_json() for r in rows), no_floats=True)
            return
        if fmt is OutputFormat.JSONL:
            render.write_jsonl((r.to_json() for r in rows), no_floats=True)
            return
        out = render.stdout_console()
        for page in render.pages(rows):
            if fmt is OutputFormat.TREE:
                out.print(_list_tree(page))
            else:
                render.print_table(out, _list_table(page))
    if not quiet:
        err.print(f"{tally[0]} topics, {tally[1]} partitioned; {tally[2]} managed ledgers")


def _count(value: int, exact: bool) -> str:
    return f"{value}{'' if exact else '+'}"


def _list_table(rows: list[Any]) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table()
    table.add_column("topic", no_wrap=True)  # names stay whole: they are copied
    for name in ("ledgers", "entries", "size", "cursors"):
        table.add_column(name, justify="right")
    for row in rows:
        style = "bold" if row.partitioned else None
        table.add_row(
            Text(row.topic + (f"  ({len(row.partitions)} partitions)" if row.partitioned else "")),
            str(row.ledgers),
            _count(row.entries, row.exact),
            _count(row.size, row.exact),
            str(row.cursors),
            style=style,
        )
        for part in row.partitions:
            table.add_row(
                Text(f"  └ {part.topic.rsplit('/', 1)[-1]}"),
                str(part.ledgers),
                _count(part.entries, part.exact),
                _count(part.size, part.exact),
                str(part.cursors),
            )
    return table


def _list_tree(rows: list[Any]) -> Any:
    from rich.markup import escape
    from rich.tree import Tree

    def text(row: Any) -> str:
        return (
            f"{escape(row.topic)}  ledgers {row.ledgers}  entries "
            f"{_count(row.entries, row.exact)}  size {_count(row.size, row.exact)}  "
            f"cursors {row.cursors}"
        )

    tree = Tree("[bold]topics[/]")
    for row in rows:
        node = tree.add(("[bold]" if row.partitioned else "") + text(row))
        for part in row.partitions:
            node.add(text(part))
    return tree


@topic_app.command("info")
@bookie_flags
@metadata_options
def info_command(
    topic: str = typer.Argument(
        ...,
        metavar="TOPIC",
        autocompletion=complete_topic,
        help="persistent://tenant/ns/topic, tenant/ns/topic, or a short name in public/default.",
    ),
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    bookie: BookieFlags = BOOKIE,
    output: OutputFormat = OUTPUT,
    admin_url: list[str] = ADMIN_URL,
) -> None:
    """Show a topic: ledgers, cursors with mark-delete and backlog, properties, compaction.

    A partitioned topic's base name shows every partition its partitioned-topic metadata
    declares: a row each and the total (ledgers, entries, size, each subscription's
    backlog summed); -o json gives {partitions: [...], total: {...}}. A declared partition
    without a managed ledger is a finding (exit 1).

    Ledgers show entries, size and close time; the open last ledger is counted from bookie
    storage (LAC + 1) when given. Each cursor shows its mark-delete position, where its
    state lives (the znode, or a cursor ledger whose last entry is read when storage is
    given) and its backlog in entries. Also shown: the ML properties (index,
    PULSAR.SHADOW_SOURCE, ...), the terminated position, the compaction horizon (the
    __compaction cursor's mark-delete) and the compacted ledger (its CompactedTopicLedger
    property). Times are ISO-8601 here and epoch milliseconds in JSON.

    When a broker has the topic loaded (asked through its admin API, never loading it:
    --admin-url, else the brokers registered in the metadata store), its in-memory view
    is shown beside the stored one: its ledgers, cursors, compacted ledger,
    lastConfirmedEntry and state, its compaction status and lastError, and how they
    differ from storage (verify's broker-* findings). Without a broker to ask, the
    topic is shown from storage and a line says the broker was not asked.
    """
    from pulsarctl_py import render
    from pulsarctl_py.broker_view import BrokerLookup, topic_view
    from pulsarctl_py.compaction.status import topic_with_compaction
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.topics import partitioned_topic_info

    with LedgerSource.open(
        metadata_url, bookie_dirs, need_metadata=True, live=bookie.client()
    ) as source:
        partitioned = partitioned_topic_info(source, topic)
        if partitioned is None:
            info, compaction = topic_with_compaction(source, topic)
            view = topic_view(source, info, BrokerLookup(source.metadata, admin_url or None))
    fmt = render.resolve(output, OutputFormat.TREE)
    if partitioned is not None:
        _show_partitioned(partitioned, fmt)
        return
    doc = info.to_json()
    if compaction is not None:
        doc["compaction_status"] = compaction.to_json()
    doc["broker"] = view.to_json()
    if fmt is OutputFormat.JSON:
        render.write_json(doc)
        return
    if fmt is OutputFormat.JSONL:
        render.write_jsonl([doc])
        return
    out = render.stdout_console()
    if fmt is OutputFormat.TABLE:
        for table in _info_tables(info):
            out.print(table)
        if view.stats is not None:
            out.print(_broker_table(view))
    else:
        tree = _info_tree(info)
        if view.stats is not None:
            _broker_tree(tree, view)
        out.print(tree)
    err = render.stderr_console()
    for problem in info.problems + [p for c in info.cursors for p in c.problems]:
        err.print(f"[yellow]warning[/]: {_esc(problem)}")
    err.print(_esc(view.line()))
    for d in view.findings:
        err.print(
            f"  [{_COLOURS.get(d.severity or '', 'white')}]{d.severity}[/] {d.check}: "
            f"{_esc(d.message)}"
        )
    if compaction is not None:
        last = compaction.to_json()["last_message_position"] or "-"
        err.print(f"compaction: last message position {last}, {len(compaction.checks)} finding(s)")
        for check in compaction.checks:
            err.print(f"  {check['severity']} {check['check']}: {_esc(check['message'])}")


_COLOURS = {"error": "red", "warning": "yellow", "info": "cyan"}


def _broker_tree(tree: Any, view: Any) -> None:
    stats = view.stats
    node = tree.add(
        f"[bold]broker[/] {_esc(view.url or '')}  state {_esc(str(stats.get('state')))}  "
        f"lastConfirmedEntry {_esc(str(stats.get('lastConfirmedEntry')))}"
    )
    ledgers = node.add(f"ledgers ({len(stats['ledgers'])})")
    for li in stats["ledgers"]:
        ledgers.add(f"{li['ledgerId']}  entries {li['entries']}  size {li['size']}")
    cursors = node.add(f"cursors ({len(stats['cursors'])})")
    for name, c in stats["cursors"].items():
        cursors.add(f"[magenta]{_esc(name)}[/]  mark-delete {_esc(str(c['markDeletePosition']))}")
    compacted = stats.get("compactedLedger") or {}
    node.add(f"compacted ledger {compacted.get('ledgerId', '-')}")
    if view.compaction is not None:
        comp = view.compaction
        node.add(
            f"compaction {_esc(str(comp.get('status')))}"
            + (f"  lastError {_esc(comp['lastError'])}" if comp.get("lastError") else "")
            + (f"  ({_esc(comp['error'])})" if comp.get("error") else "")
        )
    if view.differences:
        diffs = node.add(f"differences from storage ({len(view.differences)})")
        for d in view.differences:
            what = "expected" if d.severity is None else d.severity
            diffs.add(f"{what} {d.check}: {_esc(d.message)}")


def _broker_table(view: Any) -> Any:
    from rich.table import Table

    stats = view.stats
    table = Table(title=f"broker {view.url}", show_header=False)
    table.add_column("name")
    table.add_column("value", overflow="fold")
    table.add_row("state", str(stats.get("state")))
    table.add_row("lastConfirmedEntry", str(stats.get("lastConfirmedEntry")))
    table.add_row("ledgers", " ".join(str(li["ledgerId"]) for li in stats["ledgers"]))
    for name, c in stats["cursors"].items():
        table.add_row(_esc(f"cursor {name}"), str(c["markDeletePosition"]))
    compacted = stats.get("compactedLedger") or {}
    table.add_row("compacted ledger", str(compacted.get("ledgerId", "-")))
    if view.compaction is not None:
        table.add_row(
            "compaction",
            f"{view.compaction.get('status')} {view.compaction.get('lastError') or ''}".strip(),
        )
    for d in view.differences:
        table.add_row(d.check, _esc(d.message))
    return table


def _show_partitioned(info: Any, fmt: OutputFormat) -> None:
    """A partitioned topic: JSON, or one table (a row per partition, then the total)."""
    from rich.table import Table
    from rich.text import Text

    from pulsarctl_py import render

    doc = info.to_json()
    if fmt is OutputFormat.JSON:
        render.write_json(doc)
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl([doc])
    else:
        subs = [s.name for s in info.subscriptions()]
        table = Table(title=f"{info.topic} ({len(info.partitions)} partitions)")
        table.add_column("partition", no_wrap=True)
        for col in ("ledgers", "entries", "size"):
            table.add_column(col, justify="right")
        for sub in subs:
            table.add_column(Text(f"backlog {sub}"), justify="right", overflow="fold")
        rows = {p.topic: p for p in info.partitions}
        names = [p.topic for p in info.partitions] + list(info.missing)
        names.sort(key=lambda n: int(n.rsplit("-partition-", 1)[-1]))
        for name in names:
            part = rows.get(name)
            local = Text(name.rsplit("/", 1)[-1])
            if part is None:
                table.add_row(local, *(["[red]missing[/]"] + [""] * (2 + len(subs))))
                continue
            by_name = {c.name: c for c in part.cursors}
            cells = []
            for sub in subs:
                c = by_name.get(sub)
                cells.append(
                    "-"
                    if c is None
                    else "?"
                    if c.backlog is None
                    else f"{c.backlog}{'' if c.backlog_exact else '+'}"
                )
            table.add_row(
                local,
                str(len(part.ledgers)),
                _count(part.entries, part.exact),
                _count(part.size, part.exact),
                *cells,
            )
        exact = info.exact and not info.missing
        table.add_row(
            Text("total", style="bold"),
            str(info.ledgers),
            _count(info.entries, exact),
            _count(info.size, exact),
            *(f"{s.backlog}{'' if s.backlog_exact else '+'}" for s in info.subscriptions()),
            style="bold",
        )
        render.print_table(render.stdout_console(), table)
    err = render.stderr_console()
    for part in info.partitions:
        for problem in part.problems + [p for c in part.cursors for p in c.problems]:
            err.print(f"[yellow]warning[/]: {_esc(part.topic)}: {_esc(problem)}")
    for finding in info.findings:
        err.print(f"[red]finding[/]: {_esc(finding)}")
    if info.findings:
        raise typer.Exit(1)


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _pos(value: tuple[int, int] | None) -> str:
    return "-" if value is None else f"{value[0]}:{value[1]}"


def _ledger_line(li: Any) -> str:
    from pulsarctl_py.render import iso_ms

    entries = "?" if li.entries is None else str(li.entries)
    size = "?" if li.size is None else str(li.size)
    when = "open" if li.open else iso_ms(li.timestamp)
    extra = ""
    if li.open:
        extra = f" (entries from {li.source}"
        extra += f", {li.beyond_lac} past the LAC)" if li.beyond_lac else ")"
    if li.stored != "bookies":
        extra += " offloaded" + (", BookKeeper copy kept" if li.stored == "both" else "")
    if li.problem:
        extra += f" [yellow]{_esc(li.problem)}[/]"
    return f"{li.ledger_id}  entries {entries}  size {size}  {when}{extra}"


def _cursor_line(c: Any) -> str:
    state = (
        "state in znode"
        if c.state_in == "znode"
        else f"state in cursor ledger {c.cursors_ledger_id}"
        + ("" if c.mark_delete_source == "cursor-ledger" else " (not read; znode snapshot shown)")
    )
    backlog = "?" if c.backlog is None else f"{c.backlog}{'' if c.backlog_exact else '+'}"
    special = f" [dim]({c.special})[/]" if c.special else ""
    return (
        f"[magenta]{_esc(c.name)}[/]{special}  mark-delete {_pos(c.mark_delete)}  "
        f"backlog {backlog}  {state}"
    )


def _info_tree(info: Any) -> Any:
    from rich.tree import Tree

    from pulsarctl_py.render import iso_ms

    tree = Tree(
        f"[bold]{_esc(info.topic)}[/]  entries {info.entries}"
        f"{'' if info.exact else '+'}  size {info.size}"
    )
    tree.add(f"managed ledger {_esc(info.path)}  version {info.version}")
    tree.add(f"znode {info.encoding}" + (f" ({info.compression})" if info.compression else ""))
    if info.terminated_at is not None:
        tree.add(f"[red]terminated at {_pos(info.terminated_at)}[/]")
    ledgers = tree.add(f"[bold]ledgers[/] ({len(info.ledgers)})")
    for li in info.ledgers:
        ledgers.add(_ledger_line(li))
    cursors = tree.add(f"[bold]cursors[/] ({len(info.cursors)})")
    for c in info.cursors:
        node = cursors.add(_cursor_line(c))
        if c.acked_ranges or c.acked_bitsets:
            node.add(
                f"individually acked: {len(c.acked_ranges)} ranges, "
                f"{len(c.acked_bitsets)} ledger bitsets"
            )
        if c.last_active:
            node.add(f"last active {iso_ms(c.last_active)}")
        for name, value in c.properties.items():
            node.add(_esc(f"property {name} = {value}"))
        for name, value in c.cursor_properties.items():
            node.add(_esc(f"cursor property {name} = {value}"))
    if info.compaction_cursor is not None:
        comp = tree.add("[bold]compaction[/]")
        comp.add(f"horizon {_pos(info.compaction_horizon)}")
        ledger = info.compacted_ledger
        comp.add(f"compacted ledger {'-' if ledger is None else ledger}")
    props = tree.add(f"[bold]properties[/] ({len(info.properties)})")
    for key, value in info.properties.items():
        props.add(_esc(f"{key} = {value}"))
    return tree


def _info_tables(info: Any) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    from pulsarctl_py.render import iso_ms

    ledgers = Table(title=f"{info.topic} ledgers")
    for col in ("ledger", "entries", "size", "closed", "entries from", "stored"):
        ledgers.add_column(col, justify="right" if col in ("entries", "size") else "left")
    for li in info.ledgers:
        ledgers.add_row(
            str(li.ledger_id),
            "?" if li.entries is None else str(li.entries),
            "?" if li.size is None else str(li.size),
            "open" if li.open else iso_ms(li.timestamp),
            li.source,
            li.stored,
        )
    cursors = Table(title=f"{info.topic} cursors")
    for col in ("cursor", "mark-delete", "from", "state in", "backlog", "last active"):
        cursors.add_column(col, overflow="fold")
    for c in info.cursors:
        cursors.add_row(
            Text(c.name),
            _pos(c.mark_delete),
            c.mark_delete_source,
            "znode" if c.state_in == "znode" else f"ledger {c.cursors_ledger_id}",
            "?" if c.backlog is None else f"{c.backlog}{'' if c.backlog_exact else '+'}",
            iso_ms(c.last_active),
        )
    facts = Table(title=f"{info.topic} facts", show_header=False)
    facts.add_column("name")
    facts.add_column("value", overflow="fold")
    facts.add_row("terminated at", _pos(info.terminated_at))
    facts.add_row("compaction horizon", _pos(info.compaction_horizon))
    ledger = info.compacted_ledger
    facts.add_row("compacted ledger", "-" if ledger is None else str(ledger))
    for key, value in info.properties.items():
        facts.add_row(Text(f"property {key}"), Text(str(value)))
    return [ledgers, cursors, facts]


def register(app: typer.Typer) -> None:
    app.add_typer(topic_app, name="topic")
