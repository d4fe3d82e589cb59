"""What every command that writes shares: the plan flags, and saying what a plan and its
apply or undo do.

* :class:`PlanFlags` / :func:`plan_options`: ``--metadata-url``, ``--bookie-dir``,
  ``--plan``, ``--apply``, ``-o``, ``--force``, ``--yes`` (the plan output checked
  before any work);
* :func:`run_plan`: draft a plan (:func:`pulsarctl_py.plans.draft.make_plan`), save it,
  print it, and with ``--apply`` ask (on a terminal) and apply it
  (:func:`pulsarctl_py.plans.apply_plan`);
* :func:`print_plan`, :func:`print_outcome`, :func:`run_outcome`: the plan and the
  outcome of apply and undo, for people and as JSON;
* for the commands that write ledgers before their plan (``compact``, ``migrate``):
  :func:`say` (what the library tells while it works), :func:`announce_plan_file`,
  :func:`print_written`.

The repairs, ``apply`` and ``undo`` are in :mod:`.repair`; ``compact`` and ``migrate``
use this module too.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pulsarctl_py.commands import options

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.outputs import Output
    from pulsarctl_py.plans import Draft, Outcome, Plan
    from pulsarctl_py.plans.writing import PlanFile


class PlanOutput(enum.StrEnum):
    auto = "auto"
    table = "table"
    json = "json"


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

    def run(
        self,
        build: Callable[[Draft, LedgerSource], Any],
        out: Output | None = None,
        *,
        metadata_only: bool = False,
    ) -> Plan:
        """Draft, print, save and (with --apply) apply the plan ``build`` drafts; ``out``
        is the --plan output when the caller prepared it already."""
        if out is None:
            out = self.plan_output()
        return run_plan(
            self.metadata_url,
            self.bookie_dirs,
            out,
            self.apply,
            self.output,
            build,
            yes=self.yes,
            metadata_only=metadata_only,
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
    --metadata-url, and --unload, --admin-url, --force-owned (:func:`options.live_options`)."""
    return options.metadata_options(_plan_flags(options.live_options(command)))


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


def warn(message: str) -> None:
    from rich.markup import escape

    from pulsarctl_py import render

    render.stderr_console().print(f"[yellow]warning:[/] {escape(message)}")


def print_plan(plan: Plan, output: PlanOutput) -> None:
    """The plan on stdout: JSON, or readable text with the decoded diff of every key."""
    from rich.markup import escape

    from pulsarctl_py import render

    fmt = render.resolve(render.OutputFormat(output.value), render.OutputFormat.TABLE)
    for w in plan.warnings:
        warn(w)
    if fmt is render.OutputFormat.JSON:
        render.write_json(plan.to_json())
        return
    out = render.stdout_console()
    if plan.empty:
        out.print("nothing to repair: the plan changes no key")
        return
    js = plan.to_json()
    if plan.offload:  # planned alone: no key, no topic
        out.print(
            f"[bold]plan[/]: {len(plan.offload)} offload object(s)/directories in "
            f"{escape(', '.join(sorted({oc.location for oc in plan.offload})))} (metadata "
            f"store {escape(plan.metadata_url)}, read only)"
        )
    else:
        topics = escape(", ".join(plan.topics) or "-")
        out.print(
            f"[bold]plan[/]: {len(plan.changes)} key{'s' if len(plan.changes) != 1 else ''} in "
            f"{escape(plan.metadata_url)}; topics to unload: {topics}"
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
    for oc in plan.offload:
        action = "abort" if oc.kind == "upload" else "delete"
        out.print(f"\n[bold]{action}[/] {escape(oc.summary())}")
        for why in oc.why:
            out.print(f"  because: {escape(why)}")
        if oc.kind == "upload":
            out.print("  [yellow]cannot be undone[/]: an aborted upload's parts are gone")
        else:
            out.print("  copied into the plan's backup first; `undo` puts it back")
    if plan.offload:
        return  # the tiered side changes no key and makes no ledger unreachable
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
    places = sorted({oc.location for oc in plan.offload})
    if places:
        text += f"; offload locations {', '.join(places)}"
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
    if plan.offload:
        what = f"{len(plan.offload)} offload object(s)/directories"
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
    "put back already": "nothing restored: every key holds its backed-up state, with what "
    "the broker added since (a new plan of `undo` was applied); nothing written",
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
    _print_ledgers(err, outcome)
    if outcome.backup and not outcome.refused:
        err.print(f"backup: {escape(outcome.backup)}")
    if outcome.action == "apply" and keys:
        err.print(f"undo with: ledgerctl undo {escape(outcome.plan)}")


def _ids(ledgers: list[int]) -> str:
    return ", ".join(map(str, sorted(set(ledgers))))


def _print_ledgers(err: Any, outcome: Outcome) -> None:
    """What the write did to whole ledgers (:class:`~pulsarctl_py.plans.Outcome`)."""
    if outcome.action == "apply":
        if outcome.ledgers_written:
            err.print(
                f"ledgers swapped in (written by the command): {_ids(outcome.ledgers_written)}"
            )
        if outcome.ledgers_deleted:
            err.print(f"ledgers deleted: {_ids(outcome.ledgers_deleted)}")
        if outcome.ledgers_left:
            err.print(
                f"ledgers left for `undo` (referenced by nothing now, kept): "
                f"{_ids(outcome.ledgers_left)}"
            )
        return
    if outcome.ledgers_left:
        err.print(
            f"ledgers the migration wrote stay, referenced by nothing: "
            f"{_ids(outcome.ledgers_left)} (`ledgerctl orphans --delete` removes them)"
        )


def print_rebase(rebase: Any) -> None:
    """An undo refused because keys moved on since the apply (:mod:`pulsarctl_py.plans.rebase`),
    for people: per key what changed since the apply and what the new plan does (or why
    it cannot be put back), and where the new plan is."""
    from rich.markup import escape

    from pulsarctl_py import render

    err = render.stderr_console()

    def diff(lines: list[str]) -> None:
        for line in lines[2:]:
            colour = {"+": "green", "-": "red", "@": "cyan"}.get(line[:1])
            err.print(f"    [{colour}]{escape(line)}[/]" if colour else f"    {escape(line)}")

    for drift in rebase.drifts:
        err.print(
            f"[bold]changed since the apply[/]: {escape(drift.change.key)} (applied value -> now)"
        )
        diff(drift.to_json()["changed_since_apply"])
        if drift.refused is not None:
            err.print(f"  cannot be put back: {escape(drift.refused)}")
            continue
        err.print("  the new plan (now -> backed-up state, what the broker added kept):")
        diff(drift.to_json()["new_plan_diff"])
        for note in drift.notes:
            err.print(f"  {escape(note)}")
    if rebase.plan is None:
        return
    if not rebase.plan.changes:
        err.print("nothing to put back: the store holds the backed-up state already")
    elif rebase.saved is not None:
        err.print(
            f"new plan saved to {escape(rebase.saved)}: review it, then `ledgerctl apply "
            f"{escape(rebase.saved)}` (compare-and-set against the current versions; its own "
            "backup and undo)"
        )
    else:
        err.print(
            "a new plan puts the backed-up state back: `ledgerctl undo "
            f"{escape(rebase.plan_path)} --plan FILE` saves it for review and `ledgerctl apply "
            "FILE`"
        )


def _default_plan_path() -> Path:
    return Path(time.strftime("ledgerctl-plan-%Y%m%dT%H%M%SZ.json", time.gmtime()))


def open_writable(url: str) -> Any:
    from pulsarctl_py.stores.metadata import open_metadata_store

    return open_metadata_store(url, read_only=False)


def run_plan(
    metadata_url: str | None,
    bookie_dirs: list[Path] | None,
    out: Output | None,
    apply: bool,
    output: PlanOutput,
    build: Callable[[Draft, LedgerSource], Any],
    *,
    yes: bool = False,
    metadata_only: bool = False,
) -> Plan:
    """Draft a repair on the stores, print its plan, save it to ``out`` (prepared before
    the work), apply it when asked (after a confirmation on a terminal, unless ``yes``)."""
    from rich.markup import escape

    from pulsarctl_py import render
    from pulsarctl_py.plans.draft import make_plan

    try:
        plan = make_plan(metadata_url, bookie_dirs, build, metadata_only=metadata_only)
        if plan.topics and unload_first(plan.metadata_url, plan.topics):
            # planned again after the unload: the plan reads what the broker persisted
            # when it closed the topic (cursor positions), not what it had cached
            plan = make_plan(metadata_url, bookie_dirs, build, metadata_only=metadata_only)
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
    # with --apply and JSON, stdout is the outcome's (what happened), not the plan's (saved)
    as_json = apply and outcome_json(output)
    try:
        if as_json:
            for w in plan.warnings:
                warn(w)
        else:
            print_plan(plan, output)
    finally:
        if where is not None:
            render.stderr_console().print(f"plan {escape(where)}")
    if apply and plan.empty:
        if as_json:
            from pulsarctl_py.plans import Outcome

            render.write_json(Outcome("apply", "", None, note=NOTHING_TO_APPLY).to_json())
        return plan
    if apply:
        assert out is not None and not out.stream
        confirmed("Apply", plan, yes, f"ledgerctl apply {out.path}")
        with open_writable(plan.metadata_url) as store:
            run_outcome(
                lambda: live_apply(store, out.path, lambda: apply_now(out.path, store)),
                as_json,
                plan,
                store,
                plan_path=out.path,
            )
    return plan


#: the note of an apply whose plan changes nothing
NOTHING_TO_APPLY = "nothing to apply"


def confirmed(action: str, plan: Plan, yes: bool, again: str) -> None:
    """:func:`confirm`, as a one-line error (exit 1) when the answer is no; ``again`` is
    the command that does it later."""
    from pulsarctl_py.errors import DataError

    try:
        confirm(action, plan, yes)
    except NotConfirmed as exc:
        raise DataError(f"{exc} (later: {again})") from None


#: apply and undo: what was done, as JSON or for people
OUTCOME_OUTPUT = typer.Option(
    PlanOutput.auto,
    "--output",
    "-o",
    help="json: the outcome on stdout (the keys written, unchanged and refused, each with "
    "why); table: the plan (apply) on stdout. The outcome is said on stderr either way; auto "
    "is table on a terminal and json when piped.",
)


def outcome_json(output: PlanOutput) -> bool:
    from pulsarctl_py import render

    fmt = render.resolve(render.OutputFormat(output.value), render.OutputFormat.TABLE)
    return fmt is render.OutputFormat.JSON


def run_outcome(
    run: Callable[[], Outcome],
    as_json: bool,
    plan: Plan,
    store: Any,
    *,
    action: str = "apply",
    plan_path: Path | None = None,
    new_plan: Output | None = None,
    left: list[int] | None = None,
) -> Outcome:
    """Apply or undo, and say what happened: the outcome as JSON on stdout when asked
    (also when the plan was refused: with the key refused and why, before the one-line
    error), and for people on stderr. An undo refused because keys moved on since the
    apply shows what changed, and saves the new plan that puts the backup back to
    ``new_plan`` (undo --plan FILE) when there is one. ``left``: the ledgers an undo leaves
    referenced by nothing (a migration's). A refusal before the write began (the check
    that no live broker has the topics, inside ``run``) is an outcome of ``action`` on
    ``plan_path`` too."""
    from pulsarctl_py import render
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.plans.apply import refused_outcome

    try:
        outcome = run()
    except LedgerctlError as exc:
        refused = getattr(exc, "outcome", None)
        if refused is None and plan_path is not None:
            refused = refused_outcome(action, plan_path, exc)
        rebase = getattr(exc, "rebase", None)
        if rebase is not None:
            if new_plan is not None and rebase.plan is not None and rebase.plan.changes:
                rebase.plan.write(new_plan)
                rebase.saved = str(new_plan.path)
                if refused is not None:
                    refused.rebase = rebase.to_json()
            elif new_plan is not None:
                new_plan.discard()
            print_rebase(rebase)
        elif new_plan is not None:
            new_plan.discard()
        if as_json and refused is not None:
            render.write_json(refused.to_json())
        raise
    if new_plan is not None:
        new_plan.discard()  # undone: no new plan needed
    if left:
        outcome.ledgers_left.extend(left)
    if as_json:
        render.write_json(outcome.to_json())
    print_outcome(outcome, plan, store)
    return outcome


def unload_first(metadata_url: str, topics: list[str]) -> bool:
    """With --unload: unload those of ``topics`` a broker has loaded (before a plan is
    made), and say so; whether one was. Without it: nothing (the apply refuses)."""
    from pulsarctl_py import livewrite
    from pulsarctl_py.stores.metadata import open_metadata_store

    if not livewrite.current().unload:
        return False
    with open_metadata_store(metadata_url) as store:
        done = livewrite.unload_loaded(store, topics, say=warn)
    for topic in done:
        say(f"unloaded {topic} before planning", "note")
    return bool(done)


def apply_now(plan_path: Path, store: Any) -> Outcome:
    """:func:`~pulsarctl_py.plans.apply_plan` with what the command was given: the admin
    URL and --force-owned (a plan deleting offload objects asks the brokers whether an
    offload runs), warnings on stderr; a plan deleting offload objects is refused when the
    offload URL or S3 endpoint in effect names another location (:func:`check_offload_env`)."""
    from pulsarctl_py import livewrite
    from pulsarctl_py.plans import apply_plan

    check_offload_env(plan_path)
    live = livewrite.current()
    return apply_plan(
        plan_path,
        store,
        say=lambda text: say(text, "warning"),
        admin_url=list(live.admin_url) or None,
        force_owned=live.force_owned,
    )


def check_offload_env(plan_path: Path) -> None:
    """Refuse a plan deleting offload objects when ``LEDGERCTL_OFFLOAD_URL`` (or
    ledgerctl.toml's) or ``LEDGERCTL_S3_ENDPOINT`` names another location than the plan's
    (:func:`pulsarctl_py.plans.offload.check_overrides`)."""
    from pulsarctl_py.plans import Plan

    plan = Plan.load(plan_path)
    if not plan.offload:
        return
    from pulsarctl_py.plans.offload import check_overrides
    from pulsarctl_py.repair.offload_orphans import s3_endpoint_from_env
    from pulsarctl_py.stores.tiered.locate import resolve_offload_url

    check_overrides(plan, resolve_offload_url(None), s3_endpoint_from_env())


def live_apply(
    store: Any, plan_path: Path, run: Callable[[], Outcome], *, undo: bool = False
) -> Outcome:
    """Apply or undo through the live-broker gate (:func:`pulsarctl_py.livewrite.apply`):
    refused while a broker has a topic of the plan loaded, unless --unload; what it did
    said on stderr."""
    from pulsarctl_py import livewrite

    return livewrite.apply(store, plan_path, run, undo=undo, say=lambda t: say(t, "note"))


# -- the commands that write ledgers before their plan (compact, migrate) ----------------------


def say(text: str, kind: str = "") -> None:
    """What the library tells while it writes (see
    :data:`pulsarctl_py.compaction.planned.Say`), on stderr: ``kind`` "warning" or "note"
    names it so; "" says it as it is."""
    from rich.markup import escape

    from pulsarctl_py import render

    err = render.stderr_console()
    if kind == "warning":
        err.print(f"[yellow]warning:[/] {escape(text)}")
    elif kind == "note":
        err.print(f"note: {escape(text)}")
    else:
        err.print(escape(text))


def announce_plan_file(plan_file: PlanFile, what: str) -> None:
    """Before the writing: what the plan file gave back of an earlier run, and where the
    plan goes (the file ``undo`` takes if the command is interrupted)."""
    from pulsarctl_py import render

    err = render.stderr_console()
    for line in plan_file.reclaimed:
        err.print(line, markup=False, highlight=False)
    err.print(
        f"writing {what}; the plan: {plan_file.out} (`ledgerctl undo {plan_file.out}` deletes "
        "them if this command is interrupted)",
        markup=False,
        highlight=False,
    )


def print_written(ledgers: Iterable[Any], warnings: list[str]) -> None:
    """The warnings of the run and the ledgers it wrote (referenced by nothing until the
    plan is applied)."""
    from rich.markup import escape

    from pulsarctl_py import render

    err = render.stderr_console()
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}")
    for ledger in ledgers:
        for note in ledger.notes:
            err.print(f"[yellow]warning:[/] {escape(note)}")
        err.print(
            f"wrote ledger {ledger.ledger_id} ({ledger.entries} entries, {escape(ledger.config)}"
            f", to {escape(ledger.where)}); referenced by nothing until the plan is applied"
        )
