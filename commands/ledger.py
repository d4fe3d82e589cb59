"""`ledgerctl ledger list|meta`: BookKeeper ledgers with Pulsar's custom metadata decoded."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands import options as opts
from pulsarctl_py.commands.options import (
    BOOKIE_DIRS,
    METADATA_URL,
    NO_PROGRESS,
    QUIET,
    metadata_options,
)
from pulsarctl_py.render import OutputFormat

ledger_app = typer.Typer(
    help="BookKeeper ledgers: their metadata, owners (topic, cursor, compacted topic) and "
    "the bookie's view of them.",
    no_args_is_help=True,
)

OUTPUT = typer.Option(
    OutputFormat.AUTO,
    "--output",
    "-o",
    help="table or tree for people, json or jsonl for machines; auto is a table (list) or "
    "tree (meta) on a terminal and json when piped.",
)


class Kind(enum.StrEnum):
    data = "data"
    cursor = "cursor"
    compacted = "compacted"
    schema = "schema"
    unknown = "unknown"


@ledger_app.command("list")
@metadata_options
def list_command(
    topic: str = typer.Option(
        None,
        "--topic",
        "-t",
        help="Only the ledgers of this topic: its data and cursor ledgers and its "
        "compacted ledgers.",
    ),
    kind: Kind = typer.Option(
        None,
        "--kind",
        help="Only ledgers of this kind, from Pulsar's custom metadata (unknown: none).",
    ),
    bookie: str = typer.Option(
        None,
        "--bookie",
        metavar="ID",
        help="Only the ledgers with this bookie (host:port, as the ensembles name it) in "
        "one of their ensembles, like bookkeeper shell listledgers -bookieid. A bookie "
        "neither registered nor in any ensemble is an error (exit 1).",
    ),
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    output: OutputFormat = OUTPUT,
    quiet: bool = QUIET,
    no_progress: bool = NO_PROGRESS,
) -> None:
    """List the ledgers in the metadata store (like bookkeeper shell listledgers -m).

    Columns: ledger id, state, entries (LAC + 1), length, digest, kind, owner (topic,
    cursor or compacted topic) and creation time. An open ledger's LAC comes from bookie
    storage when a bookie dir is given, else it is unknown.
    """
    from pulsarctl_py import render
    from pulsarctl_py.ledger_views import iter_ledger_rows
    from pulsarctl_py.ledgers import LedgerSource

    err = render.stderr_console()
    fmt = render.resolve(output, OutputFormat.TABLE)
    count = 0
    # rows are written as they are read: a store of 10^5 ledgers is never held whole
    with (
        LedgerSource.open(
            metadata_url, bookie_dirs, need_metadata=True, metadata_only=True
        ) as source,
        render.progress(err, "reading ledgers", not (quiet or no_progress)) as advance,
    ):
        rows = iter_ledger_rows(
            source,
            topic=topic,
            kind=kind.value if kind else None,
            bookie=bookie,
            advance=advance,
        )
        if fmt is OutputFormat.JSON:
            render.write_json_list((r.to_json() for r in rows), no_floats=True)
            return
        if fmt is OutputFormat.JSONL:
            render.write_jsonl((r.to_json() for r in rows), no_floats=True)
            return
        out = render.stdout_console()
        for page in render.pages(rows):
            count += len(page)
            if fmt is OutputFormat.TREE:
                out.print(_tree(page))
            else:
                render.print_table(out, _table(page))
            for row in page:
                if row.error:
                    err.print(f"[yellow]warning[/]: ledger {row.ledger_id}: {_esc(row.error)}")
    if not quiet:
        err.print(f"{count} ledgers")


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _owner(row: Any) -> str:
    if row.kind == "cursor":
        return f"{row.topic} cursor {row.cursor}"
    if row.kind == "compacted":
        return f"{row.topic} (compacted)"
    if row.kind == "schema":
        return f"schema {row.schema_id}"
    return row.topic or "-"


def _unknown(value: int | None) -> str:
    return "?" if value is None else str(value)


def _dash(value: object) -> str:
    """A value in a table cell: "-" when unknown, yes/no for flags (no Python reprs)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value is None else str(value)


def _table(rows: list[Any]) -> Any:
    from rich.table import Table

    from pulsarctl_py.render import iso_ms

    table = Table()
    for col in (
        "ledger",
        "state",
        "entries",
        "length",
        "digest",
        "kind",
        "owner",
        "created",
        "stored",
    ):
        table.add_column(
            col,
            overflow="fold",
            no_wrap=col == "owner",  # topic names stay whole: they are copied
            justify="right" if col in ("entries", "length") else "left",
        )
    for row in rows:
        table.add_row(
            str(row.ledger_id),
            _state(row),
            _unknown(row.entries),
            _unknown(row.length),
            row.digest_type or "-",
            row.kind,
            _owner(row),
            iso_ms(row.ctime),
            row.stored,
        )
    return table


def _state(row: Any) -> str:
    if row.state:
        return str(row.state)
    # a ledger only tiered storage holds has no BookKeeper metadata (nothing damaged)
    return "offloaded" if row.stored == "tiered" else "[red]damaged[/]"


def _tree(rows: list[Any]) -> Any:
    from rich.tree import Tree

    from pulsarctl_py.render import iso_ms

    tree = Tree("[bold]ledgers[/]")
    for row in rows:
        node = tree.add(
            f"[bold]{row.ledger_id}[/] {_state(row)}  entries {_unknown(row.entries)}"
            f"  length {_unknown(row.length)}  {row.digest_type or '-'}  stored {row.stored}"
        )
        node.add(f"{row.kind}: {_esc(_owner(row))}")
        node.add(f"path {_esc(row.path)}  created {iso_ms(row.ctime)}")
    return tree


@ledger_app.command("meta")
@opts.bookie_flags
@metadata_options
def meta_command(
    ledger: str = typer.Argument(..., metavar="LEDGER", help="Ledger id."),
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    bookie: opts.BookieFlags = opts.BOOKIE,
    output: OutputFormat = OUTPUT,
    dump: Path = typer.Option(
        None,
        "--dump",
        metavar="FILE",
        help="Also write the ledger's metadata, byte for byte as BookKeeper stores it, to "
        "FILE (like bookkeeper shell ledgermetadata -dumptofile; `repair ledger-meta "
        "--restore FILE` plans putting it back). It holds the ledger's password: the file "
        "is readable by its owner only. An earlier dump is replaced, any other file refused "
        "unless --force.",
    ),
    force: bool = typer.Option(
        False, "--force", help="With --dump: overwrite a FILE that is not an earlier dump."
    ),
) -> None:
    """Show a ledger's full metadata and the bookies' view of it.

    Metadata (like bookkeeper shell ledgermetadata): format version, state, quorums,
    ensembles, last entry and length, digest type, creation time, custom metadata decoded,
    and the znode path. The bookies' view comes from the bookie's files with --bookie-dir
    (whether the ledger is fenced, whether the bookie holds its master key, its explicit
    LAC, the last entry stored); without one, from the running bookies of the ledger's
    last ensemble, asked over the network (READ_LAC and a read of the last entry: the
    last entry they hold, its LAC and the explicit LAC; fence state and master key cannot
    be asked, and show as unknown). When those bookies do not answer, the metadata is
    still printed in full and the view says "unreachable" with the reason (exit 0).
    The password and the master key are never printed, only whether one is set. Exit
    status 1 when the bookie storage is damaged (an unusable index: its view is then
    rebuilt by scanning the entry logs).
    """
    from pulsarctl_py import render
    from pulsarctl_py.ledger_views import ledger_meta
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.positions import parse_ledger_id

    ledger_id = parse_ledger_id(ledger)  # one line for ids past 2^63-1, not a traceback
    if dump is not None:
        _dump(ledger_id, metadata_url, dump, force)
    with LedgerSource.open(metadata_url, bookie_dirs, live=bookie.client()) as source:
        meta = ledger_meta(source, ledger_id)
    doc = meta.to_json()
    fmt = render.resolve(output, OutputFormat.TREE)
    if fmt is OutputFormat.JSON:
        render.write_json(doc)
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl([doc])
    else:
        out = render.stdout_console()
        out.print(_meta_table(doc) if fmt is OutputFormat.TABLE else _meta_tree(doc))
    err = render.stderr_console()
    for problem in meta.storage_problems:
        err.print(f"[red]error[/]: bookie storage: {_esc(problem)}")
    if meta.storage_problems:
        raise typer.Exit(1)


def _dump(ledger_id: int, metadata_url: str | None, path: Path, force: bool) -> None:
    """Write the ledger's stored metadata bytes to ``path``, and say so."""
    from rich.markup import escape

    from pulsarctl_py import render
    from pulsarctl_py.ledger_views import dump_ledger_metadata

    done = dump_ledger_metadata(ledger_id, metadata_url, path, force=force)
    render.stderr_console().print(
        f"ledger {ledger_id}: {done.size} bytes of metadata ({escape(done.path)}) "
        f"written to {escape(done.to)}; it holds the ledger's password"
    )


def _facts(doc: dict[str, Any]) -> list[tuple[str, str]]:
    from pulsarctl_py.render import iso_ms

    md = doc.get("metadata") or {}
    rows = [
        ("path", doc.get("path") or "- (not in the metadata store)"),
        ("kind", doc["kind"]),
        ("topic", doc.get("topic") or "-"),
        ("state", doc.get("state") or "-"),
        ("LAC", _unknown(doc.get("lac"))),
        ("entries", _unknown(doc.get("entries"))),
    ]
    if md:
        rows += [
            ("format version", str(md["format_version"])),
            (
                "ensemble / write / ack",
                f"{md['ensemble_size']} / {md['write_quorum_size']} / {md['ack_quorum_size']}",
            ),
            ("last entry id", str(md["last_entry_id"])),
            ("length", str(md["length"])),
            ("digest", md["digest_type"] or "- (no password stored)"),
            ("password", "set" if md["has_password"] else "not set"),
            ("created", iso_ms(md["ctime"])),
            ("ctoken", str(md["ctoken"])),
        ]
        for first, bookies in md["ensembles"].items():
            rows.append((f"ensemble from entry {first}", ", ".join(bookies)))
        for key, value in md["custom_metadata"].items():
            rows.append((f"custom {key}", value))
    if doc.get("metadata_error"):
        rows.append(("metadata error", doc["metadata_error"]))
    b = doc.get("bookie")
    if b is not None and b.get("unreachable"):
        rows.append(("bookies", f"unreachable: {b['unreachable']}"))
    elif b is not None:
        master = b["has_master_key"]
        rows += [
            ("bookie: exists", _dash(b["exists"])),
            ("bookie: fenced", _dash(b["fenced"])),
            ("bookie: explicit LAC", _dash(b["explicit_lac"])),
            ("bookie: master key", "-" if master is None else "set" if master else "not set"),
            ("bookie: last entry", _dash(b["last_entry_id"])),
            ("bookie: LAC in last entry", _dash(b["last_entry_lac"])),
            (
                "bookie: view from",
                "the running bookies" if b["source"] == "live" else f"index {b['source']}",
            ),
        ]
    return rows


def _meta_tree(doc: dict[str, Any]) -> Any:
    from rich.tree import Tree

    tree = Tree(f"[bold]ledger {doc['ledger_id']}[/]")
    for name, value in _facts(doc):
        tree.add(f"{name}: {_esc(str(value))}")
    return tree


def _meta_table(doc: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"ledger {doc['ledger_id']}", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for name, value in _facts(doc):
        table.add_row(name, str(value))
    return table


@ledger_app.command("replicas")
@opts.bookie_flags
@metadata_options
def replicas_command(
    ledger: int = typer.Argument(..., metavar="LEDGER", help="Ledger id."),
    first: int = typer.Option(0, "--from", metavar="E", help="First entry id to compare."),
    last: int = typer.Option(
        None,
        "--to",
        metavar="E",
        help="Last entry id to compare. Default: the lastEntryId of a closed ledger, else "
        "the last entry any bookie of the last ensemble holds.",
    ),
    metadata_url: str = METADATA_URL,
    bookie: opts.BookieFlags = opts.BOOKIE,
    password_env: str = opts.PASSWORD_ENV,
    password_file: Path = opts.PASSWORD_FILE,
    output: OutputFormat = OUTPUT,
) -> None:
    """Read every replica of a ledger's entries from the running bookies and compare them.

    Each entry is read from every bookie of its write set (bookies from the ledger
    metadata; reads only, never fencing). Reported: divergent entries (replicas with
    different bytes, and which bookie disagrees with the majority), replicas whose digest
    does not verify, missing replicas, bookies that could not be asked, entries with fewer
    good copies than the write quorum, and the last entry up to which every replica is
    present and agrees (where a close could be planned). Exit status 1 when anything is
    reported, 3 when no bookie could be reached.
    """
    from pulsarctl_py import render
    from pulsarctl_py.stores.live.replicas import check_replicas

    client = bookie.client()
    report = check_replicas(
        metadata_url,
        ledger,
        first,
        last,
        options=client,
        password=opts.password(password_env, password_file),
    )
    _check_reachable(report)
    doc = report.to_json()
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt is OutputFormat.JSON:
        render.write_json(doc)
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl([doc])
    else:
        render.stdout_console().print(_replicas_table(doc))
    err = render.stderr_console()
    agreed = doc["last_agreed_entry"]
    err.print(
        f"ledger {ledger}: {doc['entries_checked']} entries checked, "
        f"{len(doc['divergent'])} divergent, {len(doc['bad_digest'])} with a bad digest, "
        f"{len(doc['missing'])} with missing replicas, {len(doc['unreachable'])} not "
        f"fully readable, {len(doc['below_write_quorum'])} below the write quorum; "
        f"all replicas agree up to entry {_dash(agreed)}"
    )
    if not report.ok:
        raise typer.Exit(1)


def _check_reachable(report: Any) -> None:
    """No bookie answered at all: the store is unavailable (exit 3), not a finding."""
    from pulsarctl_py.errors import StoreUnavailable

    if report.checked and report.bookies and all(report.bookies.values()):
        errors = "; ".join(sorted(set(report.bookies.values())))
        raise StoreUnavailable(f"ledger {report.ledger_id}: no bookie answered: {errors}")


def _replicas_table(doc: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"ledger {doc['ledger_id']} replicas ({doc['state']})")
    for col in ("entry", "finding", "bookies", "detail"):
        table.add_column(col, overflow="fold")
    rows: list[tuple[int, str, str, str]] = []
    for row in doc["divergent"]:
        groups = {c["digest"] for c in row["copies"] if c["digest"]}
        rows.append(
            (
                row["entry_id"],
                "divergent",
                ", ".join(row["disagreeing"]),
                f"{len(groups)} different copies",
            )
        )
    for kind, state in (
        ("bad_digest", "bad-digest"),
        ("missing", "missing"),
        ("unreachable", "unreachable"),
    ):
        for row in doc[kind]:
            bad = [c for c in row["copies"] if c["state"] == state]
            detail = "; ".join(sorted({c["detail"] or "" for c in bad} - {""}))
            rows.append(
                (
                    row["entry_id"],
                    kind.replace("_", " "),
                    ", ".join(c["bookie"] for c in bad),
                    detail,
                )
            )
    for row in doc["below_write_quorum"]:
        good = sum(1 for c in row["copies"] if c["state"] == "ok")
        rows.append(
            (
                row["entry_id"],
                "below write quorum",
                ", ".join(row["write_set"]),
                f"{good} of {doc['write_quorum']} good copies",
            )
        )
    for entry_id, finding, bookies, detail in sorted(rows, key=lambda r: r[0]):
        table.add_row(str(entry_id), finding, _esc(bookies), _esc(detail))
    return table


def register(app: typer.Typer) -> None:
    app.add_typer(ledger_app, name="ledger")
