"""`ledgerctl migrate ...`: rewrite ledgers into new ones, swapped in by a plan.

Without --plan or --apply a migration only reads and reports what it would write. With
--plan FILE it writes the new ledgers (to the running bookies, with the cluster's
settings; or with --bookie-dir into a stopped bookie, refused while the bookie holds its
lock) and saves the plan that swaps them in; --apply applies that plan too. The plan file
is saved before each step of the writing; `ledgerctl undo FILE` restores the metadata and
deletes the new ledgers, also after an interrupted run.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands import options
from pulsarctl_py.commands.completion import complete_topic
from pulsarctl_py.commands.options import ACCEPT_DAMAGE, damage_note
from pulsarctl_py.commands.plans import PlanFlags, plan_options

migrate_app = typer.Typer(
    help="Migrate topic data: new ledgers written, then swapped in by a plan (see repair).",
    no_args_is_help=True,
)


class CompactedFormat(enum.StrEnum):
    pip_429 = "pip-429"
    classic = "classic"


def _stores(flags: PlanFlags) -> tuple[str, list[str], PlanFlags]:
    """The metadata URL and bookie dirs the flags name (or the defaults), and the flags
    naming them: the migration writes there, and its plan must be made there too."""
    import dataclasses

    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    url = str(resolve_metadata_url(flags.metadata_url))
    dirs = [str(d) for d in resolve_bookie_dirs(flags.bookie_dirs or None)]
    return (
        url,
        dirs,
        dataclasses.replace(flags, metadata_url=url, bookie_dirs=list(map(Path, dirs))),
    )


def _show(doc: dict[str, Any], flags: PlanFlags, title: str) -> None:
    """What a dry run found: JSON (-o json, or piped), or tables of the same (-o table)."""
    from pulsarctl_py import render

    fmt = render.resolve(render.OutputFormat(flags.output.value), render.OutputFormat.TABLE)
    if fmt is render.OutputFormat.JSON:
        render.write_json(doc)
        return
    out = render.stdout_console()
    for table in render.document_tables(doc, title):
        render.print_table(out, table)


@migrate_app.command("compacted")
@options.bookie_flags
@plan_options
@options.compacted_write_flags
def compacted(
    topic: str = typer.Argument(
        ..., metavar="TOPIC", autocompletion=complete_topic, help="The topic."
    ),
    fmt: CompactedFormat = typer.Option(
        ...,
        "--format",
        help="pip-429: kept batch indexes in field 31 (compacted_batch_indexes; the Java "
        "client reads it, older clients do not); classic: compacted_out placeholders.",
    ),
    accept_damage: bool = ACCEPT_DAMAGE,
    flags: PlanFlags = PlanFlags(),
    bookie: options.BookieFlags = options.BOOKIE,
    write: options.WriteFlags = options.WriteFlags(),
) -> None:
    """Rewrite the topic's compacted ledger in the other batch format, with the
    compaction's own writer (the broker's quorums, CRC32, empty password, the compactor's
    custom metadata), and re-point the __compaction cursor to it in a plan (its horizon
    kept). Without
    --plan/--apply: reads only, and reports the batches it would rewrite. A damaged entry
    stops it before anything is written, unless --accept-damage (then it is copied as the
    compaction copies it, listed in the report and the plan, and the exit status is 1)."""
    from pulsarctl_py.migrate_topic import migrate_compacted

    url, dirs, flags = _stores(flags)
    out = flags.plan_output(file_only=True)
    done = migrate_compacted(
        topic,
        fmt.value,
        metadata_url=url,
        bookie_dirs=dirs,
        out=out,
        client=bookie.client(),
        settings=write.settings,
        force_owned=write.force_owned,
        accept_damage=accept_damage,
        hooks=_Hooks(flags, _found_compacted),
    )
    if out is None:
        from pulsarctl_py import render

        _show(done.report, flags, f"migrate compacted {done.state.topic}")
        render.stderr_console().print(
            f"compacted ledger {done.state.ledger_id}: {len(done.entries)} entries to rewrite "
            f"as {fmt.value}; nothing written (give --plan FILE to write the new ledger)"
        )
    if done.stats.damaged_count:
        raise typer.Exit(1)


def _found_compacted(done: Any) -> None:
    from pulsarctl_py import render

    err = render.stderr_console()
    for text in done.crash:
        err.print(f"warning: {text}", markup=False, highlight=False)
    damage_note(done.report["damaged"], done.stats.damaged_count)


@migrate_app.command("index")
@options.bookie_flags
@plan_options
@options.data_write_flags
def index(
    topic: str = typer.Argument(
        ..., metavar="TOPIC", autocompletion=complete_topic, help="The topic."
    ),
    start: int = typer.Option(
        None,
        "--start",
        metavar="N",
        help="The index of the first migrated message; default: 0, or after the index of the "
        "entries before the first ledger without one.",
    ),
    mapping: Path = typer.Option(
        None,
        "--mapping",
        metavar="FILE",
        help="Save the mapping (JSON lines: old position, legacy KoP offset, new index) to "
        "FILE; default with --plan: PLAN.mapping.jsonl.",
    ),
    delete_old: bool = typer.Option(
        False, "--delete-old", help="The plan also deletes the old ledgers' metadata."
    ),
    accept_damage: bool = ACCEPT_DAMAGE,
    flags: PlanFlags = PlanFlags(),
    bookie: options.BookieFlags = options.BOOKIE,
    write: options.WriteFlags = options.WriteFlags(),
) -> None:
    """Continuous offsets for a topic whose ledgers lack broker entry metadata (KoP before
    2.8, or the index interceptor enabled late): every ledger from the first one without
    an index on is copied into a new ledger whose entries carry a continuous index
    (broker_timestamp = publish_time where none was recorded), and a plan swaps them into
    the topic's ledger list in one compare-and-set, raises the ML `index` property and
    moves cursors to the same entries of the new ledgers. The new ledgers are written as
    the managed ledger writes data ledgers: the topic's persistence policies (its
    topic-level ones, read from the namespace's __change_events as the broker reads them,
    else its namespace's) or the broker's quorums, managedLedgerDigestType and
    managedLedgerPassword (--broker-conf, the flags, $LEDGERCTL_MANAGED_LEDGER_PASSWORD);
    topic policies that cannot be read as the broker reads them stop it before anything
    is written. The old ledgers stay until
    --delete-old. Without --plan/--apply: reads only, and prints the mapping. A damaged
    entry (a digest or checksum that does not match, a payload that does not decode) stops
    it before anything is written, unless --accept-damage (then it is copied as stored,
    listed in the report and the plan, and the exit status is 1)."""
    from pulsarctl_py import render
    from pulsarctl_py.migrate_topic import migrate_index

    url, dirs, flags = _stores(flags)
    # every output checked before the work: the plan, then the mapping (default beside it)
    out = flags.plan_output(file_only=True)
    done = migrate_index(
        topic,
        start,
        metadata_url=url,
        bookie_dirs=dirs,
        out=out,
        mapping=mapping,
        force_outputs=flags.force,
        client=bookie.client(),
        settings=write.settings,
        force_owned=write.force_owned,
        delete_old=delete_old,
        accept_damage=accept_damage,
        hooks=_Hooks(flags, _found_index),
    )
    plan = done.plan
    if out is None:
        _show(plan.to_json() | {"mapping": plan.mapping}, flags, f"migrate index {plan.topic}")
        render.stderr_console().print(
            f"{len(plan.ledgers)} ledgers to copy with index {plan.start}..{plan.last_index}; "
            "nothing written (give --plan FILE to write the new ledgers)"
        )
    if plan.damaged:
        raise typer.Exit(1)


def _found_index(done: Any) -> None:
    from pulsarctl_py import render

    err = render.stderr_console()
    plan = done.plan
    damage_note(plan.damaged, len(plan.damaged))
    for skipped in plan.past_last:
        err.print(
            f"note: entries {skipped} are stored past the closed ledger's last entry: not "
            "copied (adds in flight when it was closed; readers never get them)",
            markup=False,
            highlight=False,
        )


class _Hooks:
    """What a migration tells, on stderr, and its plan run by the plan flags
    (:class:`pulsarctl_py.migrate_topic.MigrateHooks`)."""

    def __init__(self, flags: PlanFlags, found: Any) -> None:
        self._flags = flags
        self.found = found

    def announce(self, plan_file: Any, what: str) -> None:
        from pulsarctl_py.commands.plans import announce_plan_file

        announce_plan_file(plan_file, what)

    def written(self, ledgers: list[Any], warnings: list[str]) -> None:
        from pulsarctl_py.commands.plans import print_written

        print_written(ledgers, warnings)

    def say(self, text: str, kind: str = "") -> None:
        from rich.markup import escape

        from pulsarctl_py import render

        err = render.stderr_console()
        if kind == "plain":
            err.print(text, markup=False, highlight=False)
        else:
            err.print(escape(text))

    def run(self, build: Any, out: Any) -> Any:
        return self._flags.run(build, out)


def register(app: typer.Typer) -> None:
    app.add_typer(migrate_app, name="migrate")
