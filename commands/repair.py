"""`ledgerctl repair ...`, `orphans`, `apply`, `undo`: metadata repairs as plans.

Every repair prints its plan (keys, versions, decoded diff, what becomes unreachable) and
writes nothing; ``--plan FILE`` saves it, ``--apply`` saves and applies it. ``apply FILE``
executes a saved plan with compare-and-set, ``undo FILE`` restores what it replaced.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pulsarctl_py.commands import options
from pulsarctl_py.commands.completion import complete_topic

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.outputs import Output
    from pulsarctl_py.plans import Draft, Outcome, Plan


class PlanOutput(enum.StrEnum):
    auto = "auto"
    table = "table"
    json = "json"


repair_app = typer.Typer(
    help="Repair topic metadata: each repair prints a plan, and writes only with --apply.",
    invoke_without_command=True,
)

OUTPUT = typer.Option(
    PlanOutput.auto,
    "--output",
    "-o",
    help="table (a readable plan) or json (the plan file's content); auto is table on a "
    "terminal and json when piped.",
)
PLAN_FILE = typer.Option(
    None, "--plan", metavar="FILE", help="Save the plan (JSON) to FILE, for review and `apply`."
)
APPLY = typer.Option(
    False,
    "--apply",
    help="Apply the plan now (saved first to --plan FILE, default ./ledgerctl-plan-<time>.json; "
    "the backup goes beside it). The topics must be unloaded.",
)

FORCE = typer.Option(
    False,
    "--force",
    help="Overwrite an existing --plan or --mapping file that is not ledgerctl's own "
    "output of that kind (default: refuse). Devices, FIFOs and symbolic links are never "
    "replaced.",
)

YES = typer.Option(
    False,
    "--yes",
    "-y",
    help="Write without asking. On a terminal ledgerctl shows the plan and asks before it "
    "writes; scripts (no terminal) are never asked.",
)

#: apply and undo: the store of a saved plan
PLAN_STORE = typer.Option(
    None,
    "--metadata-url",
    metavar="URL",
    help="The metadata store; default: the one the plan names (it must be the same).",
)


@dataclass(frozen=True, slots=True)
class PlanFlags:
    """The options of every command that makes a plan (see :data:`plan_options`)."""

    metadata_url: str | None = None
    bookie_dirs: list[Path] | None = None
    plan_file: Path | None = None
    apply: bool = False
    output: PlanOutput = PlanOutput.auto
    force: bool = False
    yes: bool = False

    @property
    def given(self) -> bool:
        """Whether any of them was given on the command line."""
        return bool(
            self.metadata_url
            or self.bookie_dirs
            or self.plan_file
            or self.apply
            or self.output is not PlanOutput.auto
            or self.force
        )

    def plan_output(self, *, file_only: bool = False) -> Output | None:
        """The --plan output, checked now, before any work (a timestamped new file for
        --apply without --plan). A device or FIFO takes the plan (it discards or streams
        it) unless ``file_only`` or --apply: then the plan must be a regular file."""
        from pulsarctl_py import outputs
        from pulsarctl_py.errors import LedgerctlError

        path = self.plan_file
        if path is None and self.apply:
            path = _default_plan_path()
        if path is None:
            return None
        out = outputs.prepare(path, outputs.PLAN, force=self.force)
        if out.stream and (self.apply or file_only):
            out.discard()
            raise LedgerctlError(
                f"--plan {path} is not a regular file: "
                + (
                    "--apply keeps the plan and its backup in files, for undo"
                    if self.apply
                    else "this command writes ledgers that only the saved plan references"
                )
            )
        stale = None if out.stream else _replaced_plan_backup(out)
        if stale is not None:
            out.remove_on_commit(stale)
        return out

    def run(self, build: Callable[[Draft, LedgerSource], Any], out: Output | None = None) -> Plan:
        """Draft, print, save and (with --apply) apply the plan ``build`` drafts; ``out``
        is the --plan output when the caller prepared it already."""
        if out is None:
            out = self.plan_output()
        return run_repair(
            self.metadata_url, self.bookie_dirs, out, self.apply, self.output, build, yes=self.yes
        )


#: --metadata-url, --bookie-dir, --plan, --apply, -o: the command receives ``flags``
_plan_flags = options.option_set(
    "flags",
    PlanFlags,
    {
        "metadata_url": (str, options.METADATA_URL),
        "bookie_dirs": (list[Path], options.BOOKIE_DIRS),
        "plan_file": (Path, PLAN_FILE),
        "apply": (bool, APPLY),
        "output": (PlanOutput, OUTPUT),
        "force": (bool, FORCE),
        "yes": (bool, YES),
    },
)


def plan_options(command: options.Command) -> options.Command:
    """The options of a command that makes a plan, with the metadata flags after
    --metadata-url."""
    return options.metadata_options(_plan_flags(command))


def _replaced_plan_backup(out: Output) -> Path | None:
    """A plan about to be replaced may have a backup beside it. While that plan is
    applied (or its apply was cut short) the backup is its undo: refuse. Once it was
    undone the backup is history: return it, to be removed with the old plan. So is the
    record of an apply that changed nothing, unless the plan wrote ledgers (its values,
    in place, reference them: replacing the plan would take them back)."""
    from pulsarctl_py.documents import load_document
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.plans import BACKUP_FORMAT, UNCHANGED, UNDONE, backup_path

    backup = backup_path(out.path)
    if not out.replaces_existing or not os.path.lexists(backup):
        return None
    try:
        doc = load_document(backup, "plan backup")
        status = doc.get("status") if isinstance(doc, dict) else None
        undone = doc.get("format") == BACKUP_FORMAT and (
            status == UNDONE
            or (status == UNCHANGED and not load_document(out.path, "plan").get("written"))
        )
    except (LedgerctlError, AttributeError):
        undone = False
    if undone:
        return backup
    out.discard()
    raise LedgerctlError(
        f"will not overwrite {out.path}: it is a plan that was applied (its backup "
        f"{backup} is beside it) and its undo needs both; choose a new name, or undo it first"
    )


def _warn(message: str) -> None:
    from rich.markup import escape

    from pulsarctl_py import render

    render.stderr_console().print(f"[yellow]warning:[/] {escape(message)}")


def print_plan(plan: Plan, output: PlanOutput) -> None:
    """The plan on stdout: JSON, or readable text with the decoded diff of every key."""
    from rich.markup import escape

    from pulsarctl_py import render

    fmt = render.resolve(render.OutputFormat(output.value), render.OutputFormat.TABLE)
    for w in plan.warnings:
        _warn(w)
    if fmt is render.OutputFormat.JSON:
        render.write_json(plan.to_json())
        return
    out = render.stdout_console()
    if plan.empty:
        out.print("nothing to repair: the plan changes no key")
        return
    js = plan.to_json()
    out.print(
        f"[bold]plan[/]: {len(plan.changes)} key{'s' if len(plan.changes) != 1 else ''} in "
        f"{escape(plan.metadata_url)}; topics to unload: {escape(', '.join(plan.topics) or '-')}"
    )
    if plan.bookie:
        out.print(
            f"and {len(plan.bookie)} bookie index entr{'ies' if len(plan.bookie) != 1 else 'y'} "
            "(the bookie must be stopped)"
        )
    for change in js["changes"]:
        version = "absent" if change["version"] is None else f"version {change['version']}"
        out.print(f"\n[bold]{change['action']}[/] {escape(change['key'])} ({version})")
        for why in change["why"]:
            out.print(f"  because: {escape(why)}")
        for line in change["diff"][2:]:
            colour = {"+": "green", "-": "red", "@": "cyan"}.get(line[:1])
            text = escape(line)
            out.print(f"  [{colour}]{text}[/]" if colour else f"  {text}")
    for bc in js.get("bookie", []):
        out.print(f"\n[bold]delete[/] {escape(bc['removes']['text'])}")
        for why in bc["why"]:
            out.print(f"  because: {escape(why)}")
        out.print(f"  [red]- {escape(bc['summary'])}[/]")
    u = js["unreachable"]
    out.print("\n[bold]unreachable after this plan[/]:")
    entries = f"{u['entries']}{'+' if u['entries_unknown'] else ''}"
    out.print(
        f"  ledgers: {', '.join(map(str, u['ledgers'])) or 'none'}; entries: {entries}; "
        f"bytes: {u['size']}"
        + (
            f"; messages: {u['messages']}{'+' if u['messages_unknown'] else ''}"
            if u["messages"] is not None
            else ""
        )
        + (
            f"; time range{_basis(u.get('time_range_basis') or [])}: {u['time_range'][0]} .. "
            f"{u['time_range'][1]}"
            if u["time_range"]
            else ""
        )
    )
    for c in u["cursors"]:
        moved = ", ".join(
            f"{k.replace('_', ' ')} {v}"
            for k, v in c.items()
            if k.startswith("entries_") and v is not None
        )
        out.print(
            f"  cursor {escape(c['cursor'])} of {escape(c['topic'])}: {c['from']} -> {c['to']}"
            + (f" ({moved})" if moved else "")
        )


class NotConfirmed(Exception):
    """The operator answered no (or nothing) at the prompt: nothing was written."""


def store_text(plan: Plan, store: Any | None = None) -> str:
    """The store a write goes to, for people: the metadata store's URL, where BookKeeper's
    ledger metadata lives when the plan changes some, and the bookie directories whose
    indexes it changes."""
    url = plan.metadata_url if store is None else _absolute(store)
    text = url
    if any(c.kind == "ledger" for c in plan.changes) and plan.binding is not None:
        text += f" (ledger metadata under {plan.binding.roots['ledgers']})"
    dirs = sorted({bc.current for bc in plan.bookie})
    if dirs:
        text += f"; bookie directories {', '.join(dirs)}"
    return text


def _absolute(store: Any) -> str:
    from pulsarctl_py.plans.binding import absolute_url

    try:
        return absolute_url(store.url)
    except Exception:  # a URL that does not parse back is shown as the store gives it
        return str(store.url)


def confirm(action: str, plan: Plan, yes: bool) -> None:
    """Ask before a write when a person is there to answer (stdin and stderr are
    terminals) and ``--yes`` was not given; anything but y/yes is no
    (:class:`NotConfirmed`, exit 1, nothing written)."""
    import sys

    if yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return
    from rich.markup import escape

    from pulsarctl_py import render

    keys = len(plan.changes)
    what = f"{keys} key{'s' if keys != 1 else ''}"
    if plan.bookie:
        what += (
            f" and {len(plan.bookie)} bookie index entr{'ies' if len(plan.bookie) != 1 else 'y'}"
        )
    err = render.stderr_console()
    # "[y/N]" escaped: Rich would take it for a markup tag and print nothing
    err.print(f"{action} {what} in {escape(store_text(plan))}? {escape('[y/N]')} ", end="")
    try:
        answer = sys.stdin.readline()
    except (OSError, ValueError):
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise NotConfirmed(f"{action.lower()} not confirmed: nothing written")


def _basis(basis: list[str]) -> str:
    """What a plan's time range was taken from, for people."""
    texts = {
        "data": "of the data",
        "close times": "bounds from the ledgers' close times, the data unread",
    }
    said = [texts.get(b, b) for b in basis]
    return f" ({'; '.join(said)})" if said else ""


#: what an outcome's note says, for people (None: a plain run)
_NOTES = {
    "already applied": "already applied: every change holds the planned value; nothing written",
    "already undone": "nothing restored: already undone (every key holds its old value); "
    "nothing written",
    "nothing to restore": "nothing restored: every key holds its old value (the apply never "
    "committed); nothing written",
    "apply changed nothing": "nothing restored: its apply changed nothing (every change "
    "held already when it ran); nothing written",
    "never applied: the ledgers it wrote are deleted": "nothing restored: the plan was never "
    "applied",
    "the command stopped while it wrote: what it wrote is deleted": "nothing restored: the "
    "command stopped while it wrote, before the plan was complete",
}
#: at most this many keys of each kind are named on stderr (-o json lists every one)
_SHOWN = 20


def print_outcome(outcome: Outcome, plan: Plan | None = None, store: Any | None = None) -> None:
    """What apply or undo did, for people (stderr): how many of the plan's keys were
    written (named when few), the keys left unchanged and the keys refused, each with why;
    and for undo what became of the ledgers the plan wrote."""
    from rich.markup import escape

    from pulsarctl_py import render

    err = render.stderr_console()
    if plan is not None:
        err.print(f"store: {escape(store_text(plan, store))}")
    keys = outcome.keys_written
    said = _NOTES.get(outcome.note or "")
    if said is not None and not keys:
        err.print(escape(said))
    else:
        verb = "applied" if outcome.action == "apply" else "restored"
        if outcome.note == "resumed":
            verb = "resumed the interrupted apply"
        err.print(f"{verb}: {len(keys)} key(s) written, {len(outcome.unchanged)} unchanged")
    listed = [("written", w) for w in keys] if len(keys) <= _SHOWN else []
    listed += [("unchanged", u) for u in outcome.unchanged]
    listed += [("refused", r) for r in outcome.refused]
    for title, item in listed[: 3 * _SHOWN]:
        if "written_ledger" in item:
            continue  # a ledger the plan wrote: below
        why = item.get("reason") or item.get("action")
        err.print(
            f"  {title}: {escape(str(item.get('key')))}" + (f" ({escape(why)})" if why else "")
        )
    if len(listed) > 3 * _SHOWN:
        err.print(f"  ... {len(listed) - 3 * _SHOWN} more (-o json lists every key)")
    for item in [*outcome.written, *outcome.unchanged, *outcome.refused]:
        if "written_ledger" in item:
            done = item["action"] if item["action"] != "left" else f"left ({item['reason']})"
            err.print(f"ledger {item['written_ledger']} the plan wrote: {escape(done)}")
    if outcome.backup:
        err.print(f"backup: {escape(outcome.backup)}")
    if outcome.action == "apply" and keys:
        err.print(f"undo with: ledgerctl undo {escape(outcome.plan)}")


def _default_plan_path() -> Path:
    return Path(time.strftime("ledgerctl-plan-%Y%m%dT%H%M%SZ.json", time.gmtime()))


def _open_writable(url: str) -> Any:
    from pulsarctl_py.stores.metadata import open_metadata_store

    return open_metadata_store(url, read_only=False)


def run_repair(
    metadata_url: str | None,
    bookie_dirs: list[Path] | None,
    out: Output | None,
    apply: bool,
    output: PlanOutput,
    build: Callable[[Draft, LedgerSource], Any],
    *,
    yes: bool = False,
) -> Plan:
    """Draft a repair on the stores, print its plan, save it to ``out`` (prepared before
    the work), apply it when asked (after a confirmation on a terminal, unless ``yes``)."""
    from rich.markup import escape

    from pulsarctl_py import render
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.plans import Draft, apply_plan

    try:
        with LedgerSource.open(metadata_url, bookie_dirs or None, need_metadata=True) as source:
            assert source.metadata is not None
            draft = Draft(source.metadata)
            build(draft, source)
            plan = draft.plan()
    except BaseException:
        if out is not None:
            out.discard()
        raise
    # saved before anything is printed: a reader that stops early (`| head`) ends the
    # printing (quietly, exit 141), never the save
    where = None
    if out is not None:
        if apply and plan.empty:
            out.discard()  # nothing to apply: no timestamped file left behind
        else:
            plan.write(out)
            where = "discarded (" + str(out) + ")" if out.stream else f"saved to {out}"
    try:
        print_plan(plan, output)
    finally:
        if where is not None:
            render.stderr_console().print(f"plan {escape(where)}")
    if apply and not plan.empty:
        assert out is not None and not out.stream
        _confirmed("Apply", plan, yes, f"ledgerctl apply {out.path}")
        with _open_writable(plan.metadata_url) as store:
            _not_owned(store, plan.topics, False)
            print_outcome(apply_plan(out.path, store), plan, store)
    return plan


def _confirmed(action: str, plan: Plan, yes: bool, again: str) -> None:
    """:func:`confirm`, as a one-line error (exit 1) when the answer is no; ``again`` is
    the command that does it later."""
    from pulsarctl_py.errors import DataError

    try:
        confirm(action, plan, yes)
    except NotConfirmed as exc:
        raise DataError(f"{exc} (later: {again})") from None


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
    from pulsarctl_py.repair.repairs import from_verify as plan_from_verify
    from pulsarctl_py.repair.repairs import load_verify_report

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
        _warn(f"not repaired: {item['check']} ({item['topic'] or '-'}): {item['reason']}")


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
    from pulsarctl_py.repair import repairs

    secret = options.password(password_env, password_file)
    flags.run(
        lambda d, s: repairs.missing_ledgers(
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
        ..., metavar="TOPIC", autocompletion=complete_topic, help="The topic."
    ),
    subscription: str = typer.Argument(..., metavar="SUB", help="The subscription (cursor)."),
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
    flags: PlanFlags = PlanFlags(),
) -> None:
    """Reset a cursor offline, as the broker's reset-cursor writes it: the whole state
    moves into the znode (cursorsLedgerId = -1), which the broker then reads; individual
    acks and the mark-delete properties are cleared (the __compaction cursor's kept),
    the cursor (subscription) properties kept."""
    from pulsarctl_py.positions import parse_position
    from pulsarctl_py.repair import repairs

    if sum((to is not None, at_time is not None, earliest, latest)) != 1:
        raise typer.BadParameter("give exactly one of --to L:E, --time T, --earliest, --latest")
    time_ms = None
    if at_time is not None:
        from pulsarctl_py.timeparse import parse_time_ms

        time_ms = parse_time_ms(at_time)
    target = None
    if to is not None:
        pos = parse_position(to, batch=False)
        target = (pos.ledger_id, pos.entry_id)

    def build(draft: Draft, source: LedgerSource) -> None:
        repairs.reset_cursor(
            draft,
            topic,
            subscription,
            source,
            to=target,
            earliest=earliest,
            latest=latest,
            time_ms=time_ms,
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
    from pulsarctl_py.repair import repairs

    flags.run(
        lambda d, s: repairs.clamp_cursors(d, topic, s),
    )


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
    from pulsarctl_py.repair import repairs

    if clear == (to is not None):
        raise typer.BadParameter("say what to do: --clear or --to LEDGER", param_hint="--clear")
    flags.run(
        (lambda d, s: repairs.clear_compaction(d, topic, s))
        if clear
        else (lambda d, s: repairs.point_compaction(d, topic, to, s)),
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
    from pulsarctl_py.repair import repairs

    ledger_id = parse_ledger_id(ledger)
    flags.run(lambda d, s: repairs.restore_ledger_metadata(d, ledger_id, restore))


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
    from pulsarctl_py.repair import repairs

    flags.run(
        lambda d, s: repairs.shadow(d, shadow_topic, s),
    )


@plan_options
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
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.plans import Draft
    from pulsarctl_py.repair import repairs
    from pulsarctl_py.timeparse import parse_duration_ms

    age = 0 if min_age.strip() == "0" else parse_duration_ms(min_age)
    if flags.apply and not delete:
        raise typer.BadParameter("--apply needs --delete", param_hint="--apply")
    if flags.plan_file is not None and not delete:
        raise typer.BadParameter(
            "--plan needs --delete (a listing makes no plan)", param_hint="--plan"
        )
    if delete:
        flags.run(lambda d, s: repairs.delete_orphans(d, s, min_age_ms=age))
        return
    with LedgerSource.open(
        flags.metadata_url, flags.bookie_dirs or None, need_metadata=True
    ) as source:
        assert source.metadata is not None
        judged = list(repairs.judge_orphans(Draft(source.metadata), source, min_age_ms=age))
    found = [o for o in judged if o.kept is None]
    kept = [o for o in judged if o.kept is not None]
    fmt = render.resolve(render.OutputFormat(flags.output.value), render.OutputFormat.TABLE)
    if fmt is render.OutputFormat.JSON:
        render.write_json(
            {
                "orphans": [o.to_json() for o in found],
                "kept": [o.to_json() for o in kept],
                "min_age_ms": age,
            }
        )
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


#: apply and undo: what was done, as JSON or for people
OUTCOME_OUTPUT = typer.Option(
    PlanOutput.auto,
    "--output",
    "-o",
    help="json: the outcome on stdout (the keys written, unchanged and refused, each with "
    "why); table: the plan (apply) on stdout. The outcome is said on stderr either way; auto "
    "is table on a terminal and json when piped.",
)


def _outcome_json(output: PlanOutput) -> bool:
    from pulsarctl_py import render

    fmt = render.resolve(render.OutputFormat(output.value), render.OutputFormat.TABLE)
    return fmt is render.OutputFormat.JSON


def _run_outcome(run: Callable[[], Outcome], as_json: bool, plan: Plan, store: Any) -> Outcome:
    """Apply or undo, and say what happened: the outcome as JSON on stdout when asked
    (also when the plan was refused: with the key refused and why, before the one-line
    error), and for people on stderr."""
    from pulsarctl_py import render
    from pulsarctl_py.errors import LedgerctlError

    try:
        outcome = run()
    except LedgerctlError as exc:
        refused = getattr(exc, "outcome", None)
        if as_json and refused is not None:
            render.write_json(refused.to_json())
        raise
    if as_json:
        render.write_json(outcome.to_json())
    print_outcome(outcome, plan, store)
    return outcome


@options.metadata_options
def apply(
    plan_file: Path = typer.Argument(..., metavar="FILE", help="A plan saved with --plan."),
    metadata_url: str = PLAN_STORE,
    output: PlanOutput = OUTCOME_OUTPUT,
    yes: bool = YES,
    force_owned: bool = options.FORCE_OWNED,
) -> None:
    """Execute a saved plan exactly: every key must still hold the value the plan read
    (compare-and-set), else nothing is written (exit 1); every ledger the plan's values add
    must exist and be the topic's (a topic's ledger list: its data ledgers, or its shadow
    source's; a cursor's CompactedTopicLedger: a compacted ledger of that topic; its
    cursorsLedgerId: that cursor's ledger), else nothing is written (exit 2). The old
    values are written to FILE.backup.json first; `ledgerctl undo FILE` restores them. On a
    terminal the plan is shown and the write asked for (--yes: without asking); the store
    written is printed, and what was done: the keys written, unchanged, refused. Refused
    while a live broker owns one of the plan's topics (--force-owned overrides)."""
    from pulsarctl_py.plans import Plan, apply_plan

    plan = Plan.load(plan_file)
    as_json = _outcome_json(output)
    if as_json:  # stdout is the outcome's: the plan's warnings only, on stderr
        for w in plan.warnings:
            _warn(w)
    else:
        print_plan(plan, output)
    if plan.empty and not plan.written:
        if as_json:
            from pulsarctl_py import render
            from pulsarctl_py.plans import Outcome

            render.write_json(Outcome("apply", str(plan_file), None).to_json())
        return
    _confirmed("Apply", plan, yes, f"ledgerctl apply {plan_file}")
    with _open_writable(metadata_url or plan.metadata_url) as store:
        _not_owned(store, plan.topics, force_owned)
        _run_outcome(lambda: apply_plan(plan_file, store), as_json, plan, store)


def _not_owned(store: Any, topics: list[str], force: bool) -> None:
    """Refuse to write the metadata of topics a live broker owns (pulsarctl_py.ownership)."""
    from pulsarctl_py.ownership import check_not_owned

    for w in check_not_owned(store, topics, force=force):
        _warn(w)


@options.metadata_options
def undo(
    plan_file: Path = typer.Argument(..., metavar="FILE", help="A plan given to `apply`."),
    metadata_url: str = PLAN_STORE,
    output: PlanOutput = OUTCOME_OUTPUT,
    yes: bool = YES,
    force_owned: bool = options.FORCE_OWNED,
) -> None:
    """Restore what `apply FILE` replaced, from FILE.backup.json (or the plan's old values):
    every key still holding the applied value is set back with compare-and-set; keys
    already at their old value are left; a key changed since aborts with nothing written.
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
        _warn(
            "the topics this plan changed must be unloaded before the undo too (no broker "
            f"may own them): {', '.join(plan.topics)}"
        )
    if not plan.empty or plan.written:
        _confirmed("Undo: restore", plan, yes, f"ledgerctl undo {plan_file}")
    as_json = _outcome_json(output)
    with _open_writable(metadata_url or plan.metadata_url) as store:
        if plan.changes:
            _not_owned(store, plan.topics, force_owned)
        _run_outcome(lambda: undo_plan(plan_file, store), as_json, plan, store)
    from pulsarctl_py import render

    ours = {w.ledger_id for w in plan.written}
    written = [
        ledger
        for r in plan.repairs
        for ledger in (
            [
                *(r.get("new_ledgers") or {}).values(),
                (r.get("migration") or {}).get("written_ledger"),
            ]
        )
        if isinstance(ledger, int) and ledger not in ours
    ]
    if written:
        render.stderr_console().print(
            f"ledgers the migration wrote stay, referenced by nothing: "
            f"{', '.join(map(str, sorted(written)))} (`ledgerctl orphans --delete` removes them)"
        )


def register(app: typer.Typer) -> None:
    app.add_typer(repair_app, name="repair")
    app.command("orphans")(orphans)
    app.command("apply")(apply)
    app.command("undo")(undo)
