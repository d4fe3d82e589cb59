"""`ledgerctl repair ...`, `orphans`, `apply`, `undo`: metadata repairs as plans.

Every repair prints its plan (keys, versions, decoded diff, what becomes unreachable) and
writes nothing; ``--plan FILE`` saves it, ``--apply`` saves and applies it. ``apply FILE``
executes a saved plan with compare-and-set, ``undo FILE`` restores what it replaced. The
plan flags and the printing of plans and outcomes are shared with every command that
writes (:mod:`.plans`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pulsarctl_py.commands import options
from pulsarctl_py.commands.completion import complete_topic
from pulsarctl_py.commands.plans import (
    FORCE,
    NOTHING_TO_APPLY,
    OUTCOME_OUTPUT,
    PLAN_STORE,
    YES,
    PlanFlags,
    PlanOutput,
    apply_now,
    check_offload_env,
    confirmed,
    live_apply,
    open_writable,
    outcome_json,
    plan_options,
    print_plan,
    run_outcome,
    warn,
)

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.plans import Draft, Outcome

repair_app = typer.Typer(
    help="Repair topic metadata: each repair prints a plan, and writes only with --apply.",
    invoke_without_command=True,
)


@repair_app.callback()
@plan_options
def repair_root(
    ctx: typer.Context,
    from_verify: Path = typer.Option(
        None,
        "--from-verify",
        metavar="FILE",
        help="Plan the repairs for the findings in FILE, the output of `verify -o json` or "
        "`verify -o jsonl` ('-' reads stdin).",
    ),
    flags: PlanFlags = PlanFlags(),
) -> None:
    """Repair topic metadata. Without a subcommand: --from-verify FILE plans the repair of
    every finding verify reported that a repair handles (missing ledgers, cursors out of
    range, a lost compacted ledger, shadow drift, orphan ledgers)."""
    if ctx.invoked_subcommand is not None:
        if from_verify is not None:
            raise typer.BadParameter(
                "--from-verify takes no subcommand", param_hint="--from-verify"
            )
        if flags.given:
            # the subcommand has its own: these would be silently ignored
            raise typer.BadParameter(
                f"put the options after the subcommand: ledgerctl repair "
                f"{ctx.invoked_subcommand} ... --option"
            )
        return
    if from_verify is None:
        if flags.given:  # options, but nothing they could apply to
            commands = ", ".join(sorted(getattr(ctx.command, "commands", {}) or {}))
            ctx.fail(f"give a repair ({commands}) or --from-verify FILE")
        typer.echo(ctx.get_help())
        raise typer.Exit(2)
    from pulsarctl_py.repair.from_verify import from_verify as plan_from_verify
    from pulsarctl_py.repair.from_verify import load_verify_report

    out = flags.plan_output()
    try:
        report = load_verify_report(from_verify)
    except BaseException:
        if out is not None:
            out.discard()
        raise
    unhandled: list[dict[str, Any]] = []

    def build(draft: Draft, source: LedgerSource) -> None:
        unhandled.extend(plan_from_verify(draft, report, source))

    flags.run(build, out)
    for item in unhandled:
        warn(f"not repaired: {item['check']} ({item['topic'] or '-'}): {item['reason']}")


@repair_app.command("missing-ledgers")
@plan_options
def missing_ledgers(
    topic: str = typer.Argument(
        ...,
        metavar="TOPIC",
        autocompletion=complete_topic,
        help="The topic (any spelling verify takes).",
    ),
    recreate: bool = typer.Option(
        False,
        "--recreate",
        help="Recreate the metadata of ledgers without it from the entries the bookies "
        "still hold, instead of dropping them.",
    ),
    complete_ensemble: bool = typer.Option(
        False,
        "--complete-ensemble",
        help="With --recreate, when bookies of the cluster cannot be read (stopped, or "
        "their directories not given): recreate the original ensemble with them in it, "
        "at the ensemble size and write quorum of the topic's other ledgers (or of "
        "--broker-conf), in the one order the copies read follow; never a smaller "
        "ensemble. Without it such a ledger is refused.",
    ),
    password_env: str = options.PASSWORD_ENV,
    password_file: Path = options.PASSWORD_FILE,
    flags: PlanFlags = PlanFlags(),
) -> None:
    """Drop from the topic's ledger list the ledgers whose data is gone: no BookKeeper
    metadata and no entry on any bookie of the cluster, or closed with entries and none
    of them on any bookie of their ensembles; cursors inside them move to the next
    ledger's start. The plan lists the entries, bytes and time range lost.

    A loss is judged only on every replica: the running bookies (no --bookie-dir), or the
    whole directories (ledger and journal, per cookie) of every bookie that should hold
    the entries. A ledger whose bookies were not all read is kept and named in a
    warning ("not judged"), as is one without metadata whose entries are still on the
    bookies; with --recreate its metadata is recreated from them (ensemble from the
    bookies holding it, last entry and length from the data, the digest type that
    verifies, the password whose master key is the bookie's), read back through it
    before the plan is made, and it stays in the topic."""
    from pulsarctl_py.repair.missing_ledgers import missing_ledgers as drop_missing

    secret = options.password(password_env, password_file)
    flags.run(
        lambda d, s: drop_missing(
            d,
            topic,
            s,
            recreate=recreate,
            password=secret,
            complete_ensemble=complete_ensemble,
        ),
    )


@repair_app.command("cursor")
@plan_options
def cursor(
    topic: str = typer.Argument(
        ...,
        metavar="TOPIC",
        autocompletion=complete_topic,
        help="The topic, or a partitioned topic's base name (every partition).",
    ),
    subscription: str = typer.Argument(
        None, metavar="[SUB]", help="The subscription (cursor); or --all-subscriptions."
    ),
    all_subscriptions: bool = typer.Option(
        False,
        "--all-subscriptions",
        help="Every subscription of the topic (of each partition); the broker's own "
        "cursors (__compaction, deduplication, replicators) are left and named.",
    ),
    to: str = typer.Option(
        None,
        "--to",
        metavar="L:E",
        help="The next entry to deliver (as pulsar-admin reset-cursor): mark-delete L:E-1.",
    ),
    at_time: str = typer.Option(
        None,
        "--time",
        metavar="T",
        help="The first entry a broker's reset by time reads (ISO-8601, epoch ms, or a "
        "duration ago: 3h); needs --bookie-dir.",
    ),
    earliest: bool = typer.Option(False, "--earliest", help="Back to the topic's first entry."),
    latest: bool = typer.Option(False, "--latest", help="To the topic's end (nothing backlogged)."),
    skip: int = typer.Option(
        None,
        "--skip",
        metavar="N",
        min=1,
        help="Skip N entries, as pulsar-admin topics skip (entries acknowledged one by one "
        "are passed over; a batch is one entry).",
    ),
    clear_backlog: bool = typer.Option(
        False,
        "--clear-backlog",
        help="Mark everything delivered, as pulsar-admin topics clear-backlog.",
    ),
    flags: PlanFlags = PlanFlags(),
) -> None:
    """Move subscriptions offline, as the broker writes them, in one plan with one change
    per cursor: a reset (--to, --time, --earliest, --latest, as reset-cursor), --skip N
    or --clear-backlog; for SUB or --all-subscriptions; on TOPIC, or on every partition
    of a partitioned topic given by its base name (its partitioned-topic metadata says
    how many; a declared partition without a managed ledger is refused). The whole state
    moves into the znode (cursorsLedgerId = -1), which the broker then reads; the
    mark-delete properties are cleared (a reset keeps the __compaction cursor's), the
    cursor (subscription) properties kept. A reset forgets the individual acks; a skip
    keeps those after the new position; clear-backlog leaves none."""
    from pulsarctl_py.positions import parse_position
    from pulsarctl_py.repair.cursors import cursor_operation

    modes = (to is not None, at_time is not None, earliest, latest, skip is not None)
    if sum(modes) + clear_backlog != 1:
        raise typer.BadParameter(
            "give exactly one of --to L:E, --time T, --earliest, --latest, --skip N, "
            "--clear-backlog"
        )
    if (subscription is None) == (not all_subscriptions):
        raise typer.BadParameter(
            "give a subscription SUB or --all-subscriptions (not both)",
            param_hint="SUB",
        )
    time_ms = None
    if at_time is not None:
        from pulsarctl_py.timeparse import parse_time_ms

        time_ms = parse_time_ms(at_time)
    target = None
    if to is not None:
        pos = parse_position(to, batch=False)
        target = (pos.ledger_id, pos.entry_id)

    def build(draft: Draft, source: LedgerSource) -> None:
        cursor_operation(
            draft,
            topic,
            subscription,
            source,
            to=target,
            earliest=earliest,
            latest=latest,
            time_ms=time_ms,
            skip=skip,
            clear_backlog=clear_backlog,
        )

    flags.run(build)


@repair_app.command("clamp-cursors")
@plan_options
def clamp_cursors(
    topic: str = typer.Argument(
        ..., metavar="TOPIC", autocompletion=complete_topic, help="The topic."
    ),
    flags: PlanFlags = PlanFlags(),
) -> None:
    """Move cursors that are past their ledger's last entry back to it, and cursors in a
    ledger the topic does not list to the next listed ledger's start (or the topic's end)."""
    from pulsarctl_py.repair.cursors import clamp_cursors as clamp

    flags.run(lambda d, s: clamp(d, topic, s))


@repair_app.command("compaction")
@plan_options
def compaction(
    topic: str = typer.Argument(
        ..., metavar="TOPIC", autocompletion=complete_topic, help="The topic."
    ),
    clear: bool = typer.Option(
        False,
        "--clear",
        help="Clear a CompactedTopicLedger whose ledger has no BookKeeper metadata, and move "
        "the __compaction cursor to the topic's start so the next compaction reads all keys.",
    ),
    to: int = typer.Option(
        None,
        "--to",
        metavar="LEDGER",
        min=0,
        help="Re-point CompactedTopicLedger to LEDGER (a ledger `compact --apply` wrote for "
        "this topic) and the __compaction mark-delete to its pulsar/compactedTo horizon.",
    ),
    flags: PlanFlags = PlanFlags(),
) -> None:
    """Repair the compaction pointer of a topic (the __compaction cursor's
    CompactedTopicLedger): --clear a pointer to a lost ledger, or --to LEDGER. A ledger
    whose custom metadata names another topic is refused."""
    from pulsarctl_py.repair.compaction_pointer import clear_compaction, point_compaction

    if clear == (to is not None):
        raise typer.BadParameter("say what to do: --clear or --to LEDGER", param_hint="--clear")
    flags.run(
        (lambda d, s: clear_compaction(d, topic, s))
        if clear
        else (lambda d, s: point_compaction(d, topic, to, s)),
    )


@repair_app.command("ledger-meta")
@plan_options
def ledger_meta(
    ledger: str = typer.Argument(..., metavar="LEDGER", help="Ledger id."),
    restore: Path = typer.Option(
        ...,
        "--restore",
        metavar="FILE",
        help="The metadata to put back: a file `ledger meta --dump` (or bookkeeper shell "
        "ledgermetadata -dumptofile) wrote.",
    ),
    flags: PlanFlags = PlanFlags(),
) -> None:
    """Put a ledger's metadata back from a dump, byte for byte, as a plan (like bookkeeper
    shell ledgermetadata -restorefromfile, reviewed and undoable): the file must parse as
    ledger metadata; the ledger's znode is replaced, or created where BookKeeper's layout
    puts it when the ledger has none. A dump that would make a closed ledger shorter (or
    open again) is named in a warning."""
    from pulsarctl_py.positions import parse_ledger_id
    from pulsarctl_py.repair.restore_metadata import restore_ledger_metadata

    ledger_id = parse_ledger_id(ledger)
    flags.run(lambda d, s: restore_ledger_metadata(d, ledger_id, restore))


@repair_app.command("shadow")
@plan_options
def shadow(
    shadow_topic: str = typer.Argument(..., metavar="SHADOW", help="The shadow topic."),
    flags: PlanFlags = PlanFlags(),
) -> None:
    """Resync a shadow topic from its source (PIP-180): the ledger list with entries, sizes
    and offload contexts; its own properties kept, and no terminated position (a broker
    never writes the source's into a shadow). Shadow cursors in ledgers the source no
    longer lists move to the next ledger's start."""
    from pulsarctl_py.repair.shadow import shadow as resync

    flags.run(lambda d, s: resync(d, shadow_topic, s))


@plan_options
@options.tiered_options
def orphans(
    delete: bool = typer.Option(
        False,
        "--delete",
        help="Plan deleting the orphans' ledger metadata and, in the --bookie-dir "
        "directories (a stopped bookie), their bookie index entries (see --apply).",
    ),
    min_age: str = typer.Option(
        "24h",
        "--min-age",
        metavar="DURATION",
        help="Only ledgers created at least this long ago (100m, 3h, 2d, 1w; 0 for all); a "
        "younger one, or one of unknown age, is kept. The age is the ledger metadata's ctime, "
        "else its node's creation time in the metadata store. Default a day: the broker "
        "lists a ledger it rolls to within managedLedgerMetadataOperationsTimeoutSeconds "
        "(60 s), but references the ledger of a compaction only when the compaction ends, "
        "which can take hours on a large topic.",
    ),
    offloaded: bool = typer.Option(
        False,
        "--offloaded",
        help="List instead what the offloaders left in tiered storage that no managed "
        "ledger references: jcloud objects and unfinished multipart uploads, filesystem "
        "offloader directories, in every location the offload contexts name (or "
        "$LEDGERCTL_OFFLOAD_URL; $LEDGERCTL_S3_ENDPOINT for the endpoint). Judged only "
        "when every managed ledger decodes and every listing is whole. With --delete: a "
        "plan deleting them, bound to those locations (an orphan of a topic whose broker "
        "runs an offload now is kept); apply checks every managed ledger, object and the "
        "broker again (exit 5 when one changed), copies each object and directory into "
        "the plan's backup, then deletes; undo puts them back (aborted multipart uploads "
        "cannot be).",
    ),
    flags: PlanFlags = PlanFlags(),
) -> None:
    """List BookKeeper ledgers tagged application=pulsar that no topic, cursor or
    compaction references (schema ledgers aside). A topic whose references cannot all be
    read (its metadata does not decode, or a cursor ledger is unreadable: pass
    --bookie-dir) keeps its ledgers. A ledger a running ledgerctl command is writing (its
    lease), one named by a plan neither applied nor undone, and one younger than
    --min-age or of unknown age is kept: listed apart, with the reason, never deleted.
    Exit 1 when orphans are listed.

    With --delete: a plan deleting their ledger metadata and, in the --bookie-dir
    directories, their entries in that bookie's index (RocksDB ledgers/locations keys or
    .idx files; entry log bytes stay until the bookie compacts them); running bookies drop
    the entries on their next garbage collection."""
    from rich.markup import escape

    from pulsarctl_py import render
    from pulsarctl_py.repair.orphans import delete_orphans, list_orphans
    from pulsarctl_py.timeparse import parse_duration_ms

    age = 0 if min_age.strip() == "0" else parse_duration_ms(min_age)
    if flags.apply and not delete:
        raise typer.BadParameter("--apply needs --delete", param_hint="--apply")
    if flags.plan_file is not None and not delete:
        raise typer.BadParameter(
            "--plan needs --delete (a listing makes no plan)", param_hint="--plan"
        )
    if offloaded:
        if delete:
            from pulsarctl_py.repair.offload_orphans import (
                delete_offload_orphans,
                s3_endpoint_from_env,
            )
            from pulsarctl_py.stores.tiered.locate import resolve_offload_url

            flags.run(
                lambda d, s: delete_offload_orphans(
                    d,
                    offload_url=resolve_offload_url(None),
                    s3_endpoint=s3_endpoint_from_env(),
                    min_age_ms=age,
                ),
                metadata_only=True,
            )
            return
        _offload_orphans(flags, age)
        return
    if delete:
        flags.run(lambda d, s: delete_orphans(d, s, min_age_ms=age))
        return
    listing = list_orphans(flags.metadata_url, flags.bookie_dirs, min_age_ms=age)
    found, kept = listing.orphans, listing.kept
    fmt = render.resolve(render.OutputFormat(flags.output.value), render.OutputFormat.TABLE)
    if fmt is render.OutputFormat.JSON:
        render.write_json(listing.to_json())
    elif found:
        from rich.table import Table

        table = Table()
        for col in ("ledger", "kind", "state", "bytes", "created", "age", "owner"):
            table.add_column(col, overflow="fold")
        for o in found:
            owner = o.owner or "-"
            if o.owner_exists is False:
                owner += " (gone)"
            table.add_row(
                str(o.ledger_id),
                o.kind,
                o.state,
                str(o.length),
                render.iso_ms(o.created_ms),
                f"{render.human_duration(o.age_ms)} ({o.age_basis})",
                owner,
            )
        render.stdout_console().print(table)
    err = render.stderr_console()
    for o in kept:
        err.print(
            f"kept: {o.kind} ledger {o.ledger_id} of {escape(o.owner or 'no topic')}, "
            f"{escape(o.kept or '')}"
        )
    err.print(
        f"{len(found)} orphan ledger{'s' if len(found) != 1 else ''}"
        + (f"; {len(kept)} unreferenced but kept" if kept else "")
    )
    if found:
        raise typer.Exit(1)


def _offload_orphans(flags: PlanFlags, min_age_ms: int) -> None:
    """``orphans --offloaded``: the listing (exit 1 when orphans are listed)."""
    from rich.markup import escape

    from pulsarctl_py import render
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.repair.offload_orphans import judge_offload_orphans, s3_endpoint_from_env
    from pulsarctl_py.stores.tiered.locate import resolve_offload_url

    with LedgerSource.open(flags.metadata_url, None, need_metadata=True, metadata_only=True) as src:
        assert src.metadata is not None
        judged = judge_offload_orphans(
            src.metadata,
            offload_url=resolve_offload_url(None),
            s3_endpoint=s3_endpoint_from_env(),
            min_age_ms=min_age_ms,
        )
    found = [o for o in judged if o.kept is None]
    kept = [o for o in judged if o.kept is not None]
    fmt = render.resolve(render.OutputFormat(flags.output.value), render.OutputFormat.TABLE)
    if fmt is render.OutputFormat.JSON:
        render.write_json(
            {
                "offload_orphans": [o.to_json() for o in found],
                "kept": [o.to_json() for o in kept],
                "min_age_ms": min_age_ms,
            }
        )
    elif found:
        from rich.table import Table

        table = Table()
        for col in ("location", "ledger", "uuid", "what", "bytes", "age", "why"):
            table.add_column(col, overflow="fold")
        for o in found:
            what = ", ".join(o.paths + [f"upload {k}" for k, _u in o.uploads])
            table.add_row(
                o.location,
                str(o.ledger_id),
                o.uuid,
                what,
                str(o.size),
                render.human_duration(o.age_ms),
                o.why,
            )
        render.stdout_console().print(table)
    err = render.stderr_console()
    for o in kept:
        err.print(f"kept: offload {o.uuid} of ledger {o.ledger_id}, {escape(o.kept or '')}")
    err.print(
        f"{len(found)} orphan offload{'s' if len(found) != 1 else ''}"
        + (f"; {len(kept)} unreferenced but kept" if kept else "")
    )
    if found:
        raise typer.Exit(1)


@options.metadata_options
@options.live_options
def apply(
    plan_file: Path = typer.Argument(..., metavar="FILE", help="A plan saved with --plan."),
    metadata_url: str = PLAN_STORE,
    output: PlanOutput = OUTCOME_OUTPUT,
    yes: bool = YES,
    force_owned: bool = options.FORCE_OWNED,
) -> None:
    """Execute a saved plan exactly: every key must still hold the value the plan read
    (compare-and-set), else nothing is written (exit 5); every ledger the plan's values add
    must exist and be the topic's (a topic's ledger list: its data ledgers, or its shadow
    source's; a cursor's CompactedTopicLedger: a compacted ledger of that topic; its
    cursorsLedgerId: that cursor's ledger), else nothing is written (exit 2). The old
    values are written to FILE.backup.json first; `ledgerctl undo FILE` restores them. On a
    terminal the plan is shown and the write asked for (--yes: without asking); the store
    written is printed, and what was done (-o json: on stdout): the keys written,
    unchanged, already applied, refused and why, the ledgers swapped in, deleted and left
    for undo. Refused while a live broker owns one of the plan's topics (--force-owned
    overrides)."""
    from pulsarctl_py.plans import Plan

    plan = Plan.load(plan_file)
    as_json = outcome_json(output)
    if as_json:  # stdout is the outcome's: the plan's warnings only, on stderr
        for w in plan.warnings:
            warn(w)
    else:
        print_plan(plan, output)
    if plan.empty and not plan.written:
        if as_json:
            from pulsarctl_py import render
            from pulsarctl_py.plans import Outcome

            render.write_json(
                Outcome("apply", str(plan_file), None, note=NOTHING_TO_APPLY).to_json()
            )
        return
    confirmed("Apply", plan, yes, f"ledgerctl apply {plan_file}")
    with open_writable(metadata_url or plan.metadata_url) as store:
        run_outcome(
            lambda: live_apply(store, plan_file, lambda: apply_now(plan_file, store)),
            as_json,
            plan,
            store,
            plan_path=plan_file,
        )


@options.metadata_options
@options.live_options
def undo(
    plan_file: Path = typer.Argument(..., metavar="FILE", help="A plan given to `apply`."),
    metadata_url: str = PLAN_STORE,
    output: PlanOutput = OUTCOME_OUTPUT,
    yes: bool = YES,
    force_owned: bool = options.FORCE_OWNED,
    new_plan: Path = typer.Option(
        None,
        "--plan",
        metavar="NEW",
        help="When keys the apply wrote were rewritten since (a broker loaded the topic): "
        "save the new plan that puts the backed-up state back over them to NEW, for review "
        "and `apply`.",
    ),
    force: bool = FORCE,
) -> None:
    """Restore what `apply FILE` replaced, from FILE.backup.json (or the plan's old values):
    every key still holding the applied value is set back with compare-and-set; keys
    already at their old value are left. A key rewritten since the apply (a broker loaded
    the topic: a new ledger in its list, cursor positions persisted) refuses the undo
    (exit 5, nothing written): per key the value the apply wrote, the value now and the
    backed-up one are shown, and a new plan that puts the backed-up state back over the
    current versions, keeping what the broker added (ledgers it rolled to, cursors it
    moved that the plan did not touch), is offered: saved with --plan NEW, then `ledgerctl
    apply NEW`. A key both the plan and the broker changed (a cursor the plan moved and
    consumers moved since) cannot be put back, and the refusal says why.
    What the old values point at is checked as apply checks it: a ledger gone or not the
    topic's is refused (exit 2), unless it was so when the plan was applied. An apply that
    changed nothing (every change held already) is undone by restoring nothing. On a
    terminal the restore is asked for (--yes: without asking); the store written is
    printed, and what was done. Ledgers the command wrote before its plan (compact,
    migrate) are deleted, also when the command stopped before the plan was complete.
    Refused while a live broker owns one of the plan's topics (--force-owned overrides)."""
    from pulsarctl_py.plans import UNLOAD_WARNING, Plan, undo_plan

    plan = Plan.load(plan_file)
    if plan.topics and UNLOAD_WARNING in plan.warnings:
        # the one warning that holds for the undo as well; the others were the apply's
        warn(
            "the topics this plan changed must not be loaded by a broker for the undo either "
            f"(--unload unloads them): {', '.join(plan.topics)}"
        )
    if not plan.empty or plan.written:
        confirmed("Undo: restore", plan, yes, f"ledgerctl undo {plan_file}")
    as_json = outcome_json(output)
    from pulsarctl_py.repair.migrate import ledgers_undo_keeps

    out = PlanFlags(plan_file=new_plan, force=force).plan_output(file_only=True)
    with open_writable(metadata_url or plan.metadata_url) as store:

        def run() -> Outcome:
            check_offload_env(plan_file)
            if plan.changes:
                return live_apply(store, plan_file, lambda: undo_plan(plan_file, store), undo=True)
            return undo_plan(plan_file, store)

        run_outcome(
            run,
            as_json,
            plan,
            store,
            action="undo",
            plan_path=plan_file,
            new_plan=out,
            left=ledgers_undo_keeps(plan),
        )


def register(app: typer.Typer) -> None:
    app.add_typer(repair_app, name="repair")
    app.command("orphans")(orphans)
    app.command("apply")(apply)
    app.command("undo")(undo)
