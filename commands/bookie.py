"""`ledgerctl bookie logs|log|journal|check`: a bookie's directories read offline.

Only --bookie-dir is needed (no metadata store). Like bookkeeper shell readlog,
readjournal and check-db-ledgers-index, these open the files directly: stop the bookie
first, or read a copy.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pulsarctl_py.commands.options import (
    BOOKIE_DIRS,
    METADATA_URL,
    PASSWORD_ENV,
    PASSWORD_FILE,
    metadata_options,
    password,
)
from pulsarctl_py.render import OutputFormat

if TYPE_CHECKING:
    from pulsarctl_py.stores.bookie import BookieStore

bookie_app = typer.Typer(
    help="A bookie's storage read offline: entry logs, journal, and index consistency; "
    "and the bookies a cluster's metadata store knows (list, info).",
    no_args_is_help=True,
)

OUTPUT = typer.Option(
    OutputFormat.AUTO,
    "--output",
    "-o",
    help="table or tree for people, json or jsonl for machines; auto is a table on a "
    "terminal and json when piped.",
)
#: for the commands that list one item per record: piped output is streamed JSON lines
SCAN_OUTPUT = typer.Option(
    OutputFormat.AUTO,
    "--output",
    "-o",
    help="table or tree for people, json or jsonl for machines; auto is a table on a "
    "terminal and jsonl (one record per line, streamed) when piped.",
)


class DigestChoice(enum.StrEnum):
    auto = "auto"
    crc32 = "crc32"
    crc32c = "crc32c"
    mac = "mac"
    dummy = "dummy"


@contextlib.contextmanager
def _bookie(dirs: list[Path] | None) -> Iterator[BookieStore]:
    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.stores.bookie import open_bookie

    resolved = resolve_bookie_dirs(dirs)
    if not resolved:
        raise LedgerctlError(
            "no bookie directory given: pass --bookie-dir, set LEDGERCTL_BOOKIE_DIRS, "
            "or put bookie_dirs in the nearest ledgerctl.toml"
        )
    store = open_bookie(resolved)
    try:
        yield store
    finally:
        store.close()


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _dash(value: object) -> str:
    """A value in a table cell: "-" when unknown, yes/no for flags (no Python reprs)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value is None else str(value)


def _report(err: Any, problems: list[Any]) -> None:
    """Print the problems met (once each); exit 1 when one of them is an error."""
    _print_problems(err, problems)
    if any(p.severity == "error" for p in problems):
        raise typer.Exit(1)


def _print_problems(err: Any, problems: list[Any]) -> None:
    seen = set()
    for p in problems:
        key = str(p)
        if key in seen:
            continue
        seen.add(key)
        colour = "red" if p.severity == "error" else "yellow"
        err.print(f"[{colour}]{p.severity}[/]: {_esc(key)}")


@bookie_app.command("logs")
def logs_command(bookie_dirs: list[Path] = BOOKIE_DIRS, output: OutputFormat = OUTPUT) -> None:
    """List the entry logs: id, size, header version, ledgers map, and bytes per ledger.

    Like bookkeeper shell readlogmetadata for every log. The bytes per ledger come from
    the log's ledgers map, or from scanning a log that has none (the active log).
    Exit status 1 when a log (or another file of the bookie) is damaged or unreadable.
    """
    from pulsarctl_py import bookie_views, render

    err = render.stderr_console()
    with _bookie(bookie_dirs) as store, render.progress(err, "reading entry logs") as advance:
        logs = bookie_views.entry_logs(store, advance)
        problems = list(store.problems)
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt is OutputFormat.JSON:
        render.write_json([log.to_json() for log in logs])
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl(log.to_json() for log in logs)
    else:
        out = render.stdout_console()
        out.print(_logs_tree(logs) if fmt is OutputFormat.TREE else _logs_table(logs))
        err.print(f"{len(logs)} entry logs, {sum(log.size for log in logs)} bytes")
    _report(err, problems)


def _ledger_sizes(sizes: dict[int, int]) -> str:
    return ", ".join(f"{lid}: {size}" for lid, size in sorted(sizes.items())) or "-"


def _logs_table(logs: list[Any]) -> Any:
    from rich.table import Table

    table = Table()
    for col in ("log", "file", "size", "version", "ledgers map", "ledgers (bytes)"):
        table.add_column(col, overflow="fold", justify="right" if col == "size" else "left")
    for log in logs:
        if log.size == 0:
            mapped = "empty (preallocated)"
        elif log.problem and log.header_version is None:
            mapped = f"[red]{_esc(log.problem)}[/]"
        else:
            mapped = "yes" if log.has_ledgers_map else "no (scanned)"
        table.add_row(
            str(log.log_id),
            log.path.name,
            str(log.size),
            _dash(log.header_version),
            mapped,
            _ledger_sizes(log.ledgers),
        )
    return table


def _logs_tree(logs: list[Any]) -> Any:
    from rich.tree import Tree

    tree = Tree("[bold]entry logs[/]")
    for log in logs:
        node = tree.add(
            f"[bold]{_esc(log.path.name)}[/] id {log.log_id}  {log.size} bytes  header v"
            f"{_dash(log.header_version)}  ledgers map {'yes' if log.has_ledgers_map else 'no'}"
        )
        for lid, size in sorted(log.ledgers.items()):
            node.add(f"ledger {lid}: {size} bytes")
        if log.problem:
            node.add(f"[yellow]{_esc(log.problem)}[/]")
    return tree


@bookie_app.command("log")
def log_command(
    log: str = typer.Argument(
        ...,
        metavar="LOG",
        help="The entry log: its id (decimal, or 0x hex), file name (<hex id>.log) or path.",
    ),
    ledger: int = typer.Option(
        None, "--ledger", "-l", min=0, max=2**63 - 1, help="Only the records of this ledger."
    ),
    decode: bool = typer.Option(
        False, "--decode", help="Decode each entry as a Pulsar entry, down to its messages."
    ),
    digest_type: DigestChoice = typer.Option(
        DigestChoice.auto,
        "--digest-type",
        help="Digest type of the ledgers; auto detects CRC32C, CRC32 and (with a password) MAC.",
    ),
    password_env: str = PASSWORD_ENV,
    password_file: Path = PASSWORD_FILE,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    output: OutputFormat = SCAN_OUTPUT,
) -> None:
    """List the records of one entry log, with their digests verified.

    Like bookkeeper shell readlog: per record the position of its size field, the offset
    of the entry (as its location stores it), ledger, entry, size and the LAC it carries;
    plus the digest check readlog skips. Exit status 1 when a digest does not match or
    the log is damaged.
    """
    from pulsarctl_py import bookie_views, render
    from pulsarctl_py.decoders.checksums import DigestType

    kind = None if digest_type is DigestChoice.auto else DigestType.parse(digest_type.value)
    secret = password(password_env, password_file)
    fmt = render.resolve(output, OutputFormat.TABLE, piped=OutputFormat.JSONL)
    err = render.stderr_console()
    bad = 0
    with _bookie(bookie_dirs) as store:
        target = bookie_views.resolve_log(store, log)
        records = bookie_views.log_records(
            store, target, ledger_id=ledger, digest_type=kind, password=secret, decode=decode
        )
        if fmt is OutputFormat.JSONL:
            for rec in records:
                bad += rec.digest_ok is False
                render.write_jsonl([rec.to_json()])
        elif fmt is OutputFormat.JSON:

            def streamed() -> Iterator[Any]:
                nonlocal bad
                for rec in records:
                    bad += rec.digest_ok is False
                    yield rec.to_json()

            render.write_json_stream(
                "records",
                streamed(),
                lambda: {"log": log, "problems": [p.to_json() for p in store.problems]},
            )
        else:
            with render.progress(err, "reading records") as advance:
                rows = []
                for rec in records:
                    rows.append(rec)
                    bad += rec.digest_ok is False
                    advance()
            out = render.stdout_console()
            out.print(_records_table(rows, decode))
            if fmt is OutputFormat.TREE and decode:
                for rec in rows:
                    if rec.entry is not None:
                        label = f"{rec.ledger_id}:{rec.entry_id}"
                        out.print(render.entry_tree(rec.entry, label))
            err.print(f"{len(rows)} records, {bad} digest mismatches")
        problems = list(store.problems)
    _print_problems(err, problems)
    if bad or any(p.severity == "error" for p in problems):
        raise typer.Exit(1)


def _digest_text(rec: Any) -> str:
    if rec.digest_ok is None:
        return f"[yellow]? {rec.digest_type or 'unknown'}[/]"
    return f"[green]ok {rec.digest_type}[/]" if rec.digest_ok else f"[red]✗ {rec.digest_type}[/]"


def _records_table(rows: list[Any], decode: bool) -> Any:
    from rich.table import Table

    from pulsarctl_py.render import iso_ms

    table = Table()
    cols = ["position", "offset", "ledger", "entry", "size", "LAC", "digest"]
    if decode:
        cols += ["messages", "publish time", "decoded"]
    for col in cols:
        table.add_column(col, overflow="fold")
    for rec in rows:
        cells = [
            str(rec.position),
            str(rec.offset),
            str(rec.ledger_id),
            str(rec.entry_id),
            str(rec.size),
            _dash(rec.lac),
            _digest_text(rec),
        ]
        if decode:
            entry = rec.entry
            if entry is None:
                cells += ["-", "-", _esc(rec.problem or "-")]
            else:
                status = "ok" if entry.ok else "; ".join(str(p) for p in entry.problems)
                cells += [str(len(entry.messages)), iso_ms(entry.publish_time), _esc(status)]
        table.add_row(*cells)
    return table


@bookie_app.command("journal")
def journal_command(
    ledger: int = typer.Option(
        None, "--ledger", "-l", min=0, max=2**63 - 1, help="Only the records of this ledger."
    ),
    after_mark: bool = typer.Option(
        False, "--after-mark", help="Only the records after lastMark (what replay would read)."
    ),
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    output: OutputFormat = SCAN_OUTPUT,
) -> None:
    """List the journal files and their records, with the lastMark position.

    Like bookkeeper shell readjournal and lastmark: per record its position, ledger,
    entry, size and type: data (with the LAC it carries), master key (shown only as set),
    fence, or explicit LAC (with its value). Records after lastMark are those a
    restarting bookie would replay into its ledger storage. Exit status 1 when a journal
    or lastMark file is damaged or unreadable (or another file of the bookie is).
    """
    from pulsarctl_py import bookie_views, render

    fmt = render.resolve(output, OutputFormat.TABLE, piped=OutputFormat.JSONL)
    err = render.stderr_console()
    with _bookie(bookie_dirs) as store:
        marks = bookie_views.last_marks(store)
        files = bookie_views.journals(store)

        def records(j: Any) -> Iterator[Any]:
            return bookie_views.journal_records(
                store, j, ledger_id=ledger, after_mark_only=after_mark
            )

        if fmt is OutputFormat.JSONL:
            for j in files:
                render.write_jsonl(r.to_json() for r in records(j))
        elif fmt is OutputFormat.JSON:
            render.write_json(
                {
                    "last_marks": [m.to_json() for m in marks],
                    "journals": [
                        dict(j.to_json(), records=[r.to_json() for r in records(j)]) for j in files
                    ],
                }
            )
        else:
            out = render.stdout_console()
            for m in marks:
                err.print(f"lastMark: journal {m.journal_id} ({m.journal_id:x}.txn) at {m.offset}")
            for j in files:
                rows = list(records(j))
                out.print(_journal_table(j, rows))
                err.print(
                    f"{_esc(j.path.name)}: version {_dash(j.version)}, {j.size} bytes, {len(rows)} "
                    f"records, replay from {_dash(j.replay_from)}"
                )
        problems = list(store.problems)
    _report(err, problems)


def _journal_table(journal: Any, rows: list[Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"{journal.path.name} (journal {journal.journal_id})")
    for col in ("position", "ledger", "entry", "size", "type", "LAC", "after lastMark"):
        table.add_column(col)
    for rec in rows:
        kind = rec.kind
        if kind == "master-key":
            kind = "master key (set)" if rec.master_key_set else "master key (empty)"
        table.add_row(
            str(rec.position),
            str(rec.ledger_id),
            str(rec.entry_id),
            str(rec.size),
            kind,
            _dash(rec.lac),
            "yes" if rec.after_mark else "",
        )
    return table


@bookie_app.command("check")
def check_command(bookie_dirs: list[Path] = BOOKIE_DIRS, output: OutputFormat = OUTPUT) -> None:
    """Check the bookie's index against its entry logs, both ways.

    Like bookkeeper shell check-db-ledgers-index, lists the ledgers index (exists, fenced,
    explicit LAC, master key set); then scans every entry log and reports entries in a log
    but not in the index, index entries whose location does not hold them (errors), log
    copies the index no longer points to and entries only in the journal (info).
    Exit status 1 when there is an error.
    """
    from pulsarctl_py import bookie_views, render

    err = render.stderr_console()
    with _bookie(bookie_dirs) as store:
        status = (
            err.status("checking the index against the entry logs")
            if err.is_terminal
            else contextlib.nullcontext()
        )
        with status:
            result = bookie_views.check(store)
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt is OutputFormat.JSON:
        render.write_json(result.to_json())
    elif fmt is OutputFormat.JSONL:
        doc = result.to_json()
        render.write_jsonl(doc["findings"] + [{"summary": {k: doc[k] for k in _SUMMARY}}])
    else:
        out = render.stdout_console()
        out.print(_index_table(result.ledgers))
        if result.findings:
            out.print(_findings_table(result.findings))
        _print_problems(err, result.problems)
        colour = "green" if result.ok else "red"
        err.print(
            f"[{colour}]{result.errors} errors[/], {len(result.findings)} findings; "
            f"{result.entries_in_logs} entries in logs, {result.entries_in_index} in the index, "
            f"{len(result.ledgers)} ledgers"
        )
    if not result.ok:
        raise typer.Exit(1)


_SUMMARY = ("ok", "errors", "warnings", "entries_in_logs", "entries_in_index")


def _index_table(ledgers: list[Any]) -> Any:
    from rich.table import Table

    table = Table(title="ledgers index")
    for col in ("ledger", "exists", "fenced", "explicit LAC", "master key", "last entry", "index"):
        table.add_column(col)
    for lg in ledgers:
        table.add_row(
            str(lg.ledger_id),
            _dash(lg.exists),
            _dash(lg.fenced),
            _dash(lg.explicit_lac),
            "set" if lg.has_master_key else "-",
            _dash(lg.last_entry_id),
            lg.source,
        )
    return table


def _findings_table(findings: list[Any]) -> Any:
    from rich.table import Table

    from pulsarctl_py.bookie_views import severity

    table = Table(title="findings")
    for col in ("severity", "kind", "ledger", "entry", "where", "message"):
        table.add_column(col, overflow="fold")
    for f in findings:
        sev = severity(f.kind)
        where = "-" if f.location is None else f"{f.location.path.name}@{f.location.offset}"
        table.add_row(
            f"[red]{sev}[/]" if sev == "error" else sev,
            f.kind,
            _dash(f.ledger_id),
            _dash(f.entry_id),
            where,
            _esc(f.message),
        )
    return table


@bookie_app.command("list")
@metadata_options
def list_command(metadata_url: str = METADATA_URL, output: OutputFormat = OUTPUT) -> None:
    """List the bookies the metadata store knows, without connecting to them.

    A bookie is listed when it is registered as available (writable or read-only) or
    has a cookie. Columns: bookie id, state (available, read-only, not running), the
    endpoint it advertises, whether it has a cookie and whether the cookie's instance id
    is the cluster's.
    """
    from pulsarctl_py import render
    from pulsarctl_py.stores.live.registry import read_bookies

    rows = read_bookies(metadata_url)
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt is OutputFormat.JSON:
        render.write_json([r.to_json() for r in rows])
        return
    if fmt is OutputFormat.JSONL:
        render.write_jsonl(r.to_json() for r in rows)
        return
    render.stdout_console().print(_bookies_table(rows))
    render.stderr_console().print(f"{len(rows)} bookies")


def _bookies_table(rows: list[Any]) -> Any:
    from rich.table import Table

    table = Table()
    for col in ("bookie", "state", "endpoint", "cookie", "instance id"):
        table.add_column(col, overflow="fold")
    for r in rows:
        eps = ", ".join(f"{e['host']}:{e['port']}" for e in r.endpoints) or "-"
        match = {True: "matches", False: "[red]differs[/]", None: "-"}[r.instance_matches]
        table.add_row(_esc(r.bookie_id), r.state, _esc(eps), "yes" if r.cookie else "no", match)
    return table


@bookie_app.command("info")
@metadata_options
def info_command(
    bookie: str = typer.Argument(..., metavar="BOOKIE_ID", help="Bookie id, e.g. host:3181."),
    metadata_url: str = METADATA_URL,
    output: OutputFormat = OUTPUT,
) -> None:
    """Show what the metadata store knows about one bookie: state, endpoints, cookie.

    The cookie gives the bookie's host, journal, ledger and index dirs and the cluster
    instance id it joined; a cookie whose instance id is not the cluster's is flagged.
    Exit status 1 when the bookie is unknown.
    """
    from pulsarctl_py import render
    from pulsarctl_py.stores.live.registry import read_bookies

    record = read_bookies(metadata_url, bookie)[0]
    doc = record.to_json()
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt is OutputFormat.JSON:
        render.write_json(doc)
        return
    if fmt is OutputFormat.JSONL:
        render.write_jsonl([doc])
        return
    from rich.table import Table

    table = Table(title=f"bookie {bookie}", show_header=False)  # titles are text
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_row("state", record.state)
    for ep in record.endpoints:
        table.add_row(
            f"endpoint {_esc(ep['id'])}", _esc(f"{ep['protocol']}://{ep['host']}:{ep['port']}")
        )
    for key, value in record.properties.items():
        table.add_row(f"property {_esc(key)}", _esc(value))
    cookie = record.cookie
    if cookie is None:
        table.add_row("cookie", "none")
    else:
        table.add_row("cookie layout", _dash(cookie.layout))
        table.add_row("cookie bookie host", _esc(_dash(cookie.bookie_host)))
        table.add_row("journal dirs", _esc(", ".join(cookie.journal_dirs) or "-"))
        table.add_row("ledger dirs", _esc(", ".join(cookie.ledger_dirs) or "-"))
        if cookie.index_dirs:
            table.add_row("index dirs", _esc(", ".join(cookie.index_dirs)))
        table.add_row("cookie instance id", _dash(cookie.instance_id))
        if cookie.error:
            table.add_row("cookie error", _esc(cookie.error))
    table.add_row("cluster instance id", _dash(record.cluster_instance_id))
    render.stdout_console().print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(bookie_app, name="bookie")
