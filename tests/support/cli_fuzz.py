"""Fuzzing every command's options and paths: cases drawn from the Typer app's own
declared parameters, run in a worker process, judged by the CLI's promises.

Shared by tests/test_cli_fuzz.py (a bounded run in the suite) and scripts/fuzz_cli.py
(the long run, figures in docs/hostile-inputs.md).

* :func:`command_specs` walks the app: every leaf command with every option and argument,
  its type (flag, choice, integer, number, path, text, lists of them) and its role (an
  input path, an output path, a topic, a position, a time, a size, a store URL...).
* :func:`cases` is a Hypothesis strategy of argument lists: a command, then any of its
  parameters with values of their type and role (real topic names and positions of the
  world's demo store, misspellings, huge and negative integers, non-finite numbers,
  unicode, bytes that are not UTF-8, Rich markup, empty values) or of another type, and
  now and then an unknown option, a misspelled command or a stray argument.
* Paths come from the :class:`World`, built in a temporary directory: a demo store, a
  FIFO, device nodes made there with mknod (never the machine's own /dev), a JSON
  document nested 100,000 deep, a symlink loop, a directory, an empty file; as inputs
  also ``/`` and ``/proc/self/status``. Output paths are only ever inside the world.
  Store URLs are the world's own RocksDB store or ZooKeeper on a loopback port nobody
  listens on; the demo's bookie id is a loopback address. Nothing dials elsewhere.
* :class:`Worker` runs cases in one long-lived subprocess (so a case that reads a
  device forever meets a memory limit, not the machine's), in-process through
  ``pulsarctl_py.cli.main`` with stdout and stderr captured as a pipe would take them,
  under a per-case limit of CPU time and of wall-clock time (SIGPROF, SIGALRM). It
  restores the store after cases that may write.
* :func:`judge` says what is wrong with an outcome: a traceback, a hang, an exit code
  outside the documented ones, an error that is not one ``ledgerctl: error:`` line, a
  usage error that does not name the option, ``-o jsonl`` output that is not one JSON
  object per line.

Options that would start Spark (``--spark``, ``--engine spark``, ``--spark-master``, a
small ``--spark-threshold``) get only values that keep the run in this process: a JVM
per case would take the whole budget.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import io
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Any

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]

#: exit codes the CLI documents (0 ok, 1 findings, 2 usage, 3 store, 141 closed pipe)
EXIT_CODES = {0, 1, 2, 3}
#: a loopback port nobody listens on (the discard port; tests never listen there)
CLOSED_PORT = 9

# -- the app's parameters ---------------------------------------------------------------


class Kind(enum.StrEnum):
    FLAG = "flag"
    CHOICE = "choice"
    INT = "int"
    FLOAT = "float"
    PATH = "path"
    TEXT = "text"


@dataclasses.dataclass(frozen=True)
class Param:
    """One option or argument of a command, as the fuzzer sees it."""

    name: str  # the parameter's Python name
    opts: tuple[str, ...]  # option spellings; () for an argument
    secondary: tuple[str, ...]  # --no-... spellings of a boolean flag
    kind: Kind
    multiple: bool  # repeatable option, or an argument taking several values
    required: bool
    choices: tuple[str, ...] = ()
    role: str = ""

    @property
    def is_argument(self) -> bool:
        return not self.opts


@dataclasses.dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    params: tuple[Param, ...]


#: options that write where they point (Path-typed), by spelling; demo's DIR argument too
OUTPUT_OPTIONS = {"--plan", "--to", "--export", "--mapping", "--dump"}
#: Path parameters that read a plan or a verify report (read by pulsarctl_py.repair)
PLAN_INPUTS = {"plan_file", "--from-verify"}
#: the roles of text options and arguments, by name (option spelling or argument name)
ROLES = {
    "--topic": "topic",
    "topic": "topic",
    "shadow_topic": "topic",
    "--namespace": "namespace",
    "target": "ledger-or-position",
    "ledger": "ledger",
    "--from": "position",
    "--to": "position",
    "--position": "position",
    "--since": "time",
    "--until": "time",
    "--time": "time",
    "--min-age": "duration",
    "--max-message-size": "size",
    "--memory": "size",
    "--metadata-url": "url",
    "--bookkeeper-metadata-url": "url",
    "--where": "where",
    "--bookie-address": "address",
    "--bookie-protocol": "protocol",
    "--columns": "columns",
    "--password-env": "env",
    "--private-key-passphrase-env": "env",
    "--sample": "sample",
    "log": "log",
    "bookie": "bookie",
    "subscription": "subscription",
    "inputs": "decode-input",
    "--sequence-id": "sequence",
    "--property": "property",
    "--spark-master": "spark-master",
    "--spark-conf": "spark-conf",
    "--spark-threshold": "spark-threshold",
    "--ledger": "id",
    "--start": "id",
    "--index": "id",
    "--legacy-offset": "id",
}


def _kind(param: Any) -> tuple[Kind, tuple[str, ...]]:
    from pulsarctl_py.usage import _choices

    if getattr(param, "is_flag", False) or getattr(param, "is_bool_flag", False):
        return Kind.FLAG, ()
    choices = _choices(param)
    if choices:
        return Kind.CHOICE, tuple(choices)
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is None:  # pragma: no cover - a Typer on top of Click
        name = getattr(getattr(param, "type", None), "name", "")
        return {"integer": Kind.INT, "float": Kind.FLOAT, "path": Kind.PATH}.get(
            name, Kind.TEXT
        ), ()
    args = getattr(annotation, "__args__", ()) or ()
    inner = args[0] if args else annotation
    if inner is bool:
        return Kind.FLAG, ()
    if inner is int:
        return Kind.INT, ()
    if inner is float:
        return Kind.FLOAT, ()
    if isinstance(inner, type) and issubclass(inner, PurePath):
        return Kind.PATH, ()
    return Kind.TEXT, ()


def command_specs() -> list[Command]:
    """Every leaf command of the app with its parameters, from the app itself."""
    import typer

    from pulsarctl_py.cli import app

    found: list[Command] = []

    def walk(cmd: Any, path: tuple[str, ...], inherited: tuple[Param, ...]) -> None:
        params = []
        for p in cmd.params:
            if p.name in ("install_completion", "show_completion", "version", "help"):
                continue
            kind, choices = _kind(p)
            opts = tuple(o for o in p.opts if o.startswith("-"))
            label = opts[0] if opts else p.name
            role = ROLES.get(label, "")
            if kind is Kind.PATH:
                output = label in OUTPUT_OPTIONS or (path == ("demo",) and not opts)
                role = "output" if output else "input"
                if label in PLAN_INPUTS:
                    role = "plan-input"
            if kind is Kind.INT and not role:
                role = "count"
            params.append(
                Param(
                    name=p.name,
                    opts=opts,
                    secondary=tuple(getattr(p, "secondary_opts", ()) or ()),
                    kind=kind,
                    multiple=bool(getattr(p, "multiple", False)) or p.nargs == -1,
                    required=bool(p.required),
                    choices=choices,
                    role=role,
                )
            )
        subs = getattr(cmd, "commands", None) or {}
        if not subs:
            found.append(Command(path, (*inherited, *params)))
            return
        for name, sub in sorted(subs.items()):
            # a group's own options (repair --from-verify) come before the subcommand
            walk(sub, (*path, name), ())
        if path and any(not p.is_argument for p in params):
            found.append(Command(path, tuple(params)))

    walk(typer.main.get_command(app), (), ())
    return found


# -- the world ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class World:
    """A temporary directory holding everything cases point at."""

    root: Path

    @property
    def demo(self) -> Path:
        return self.root / "demo"

    @property
    def pristine(self) -> Path:
        return self.root / "pristine"

    @property
    def special(self) -> Path:
        return self.root / "special"

    @property
    def out(self) -> Path:
        return self.root / "out"

    def topics(self) -> list[str]:
        return json.loads((self.root / "topics.json").read_text())

    def input_paths(self) -> list[str]:
        s = self.special
        return [
            str(s / "text.txt"),
            str(s / "empty"),
            str(s / "dir"),
            str(s / "fifo"),
            str(s / "zero"),
            str(s / "null"),
            str(s / "deep.json"),
            str(s / "loop"),
            str(s / "link-to-text"),
            str(s / "plan.json"),
            str(s / "missing"),
            os.fsdecode(bytes(s) + b"/not-utf8-\xff"),
            str(self.demo / "metadata"),
            str(self.demo / "bookkeeper"),
            str(self.demo / "bookkeeper" / "current"),
            "/",
            "/proc/self/status",
            "-",
            "",
        ]

    def output_paths(self) -> list[str]:
        s, o = self.special, self.out
        return [
            str(o / "new.json"),
            str(o / "new.jsonl"),
            str(o / "new.parquet"),
            str(o / "new.txt"),
            str(o / "existing.json"),
            str(o),
            str(o / "missing-dir" / "x.jsonl"),
            str(s / "fifo"),
            str(s / "zero"),
            str(s / "null"),
            str(s / "link-to-text"),
            str(s / "text.txt"),
            "",
        ]


def build_world(root: Path) -> World:
    """Create the world under ``root`` (a fresh temporary directory)."""
    from pulsarctl_py.demo import create_demo

    world = World(root)
    summary = create_demo(world.pristine)
    shutil.copytree(world.pristine, world.demo, symlinks=True)
    (root / "topics.json").write_text(json.dumps([t.local_name for t in summary.topics]))
    s = world.special
    s.mkdir()
    (s / "text.txt").write_text("some text\n")
    (s / "empty").write_bytes(b"")
    (s / "dir").mkdir()
    (s / "plan.json").write_text('{"format": "not a plan"}\n')
    (s / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    os.mkfifo(s / "fifo")
    # device nodes made here (tests run as root), never the machine's own
    os.mknod(s / "zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    os.mknod(s / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.symlink(s / "loop", s / "loop")
    os.symlink(s / "text.txt", s / "link-to-text")
    Path(os.fsdecode(bytes(s) + b"/not-utf8-\xff")).write_text("x")
    world.out.mkdir()
    (world.out / "existing.json").write_text("{}\n")
    return world


# -- cases -------------------------------------------------------------------------------

INT64 = 2**63
HUGE_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**32, INT64 - 1, INT64, -INT64, -INT64 - 1, 10**30]
#: text that tends to break things: markup, emoji codes, escapes, format strings
NASTY = [
    "",
    " ",
    "-",
    "--",
    "-1",
    "[bold]x[/]",
    "[/]",
    "[link=http://127.0.0.1/]x",
    "192.0.2.1:1234,192.0.2.2:1234:1234:",
    ":smile:",
    "\x1b[31mred\x1b[0m",
    "a\nb",
    "%s%n",
    "{0}",
    "${HOME}",
    "\udcff",
    "a\udc80b",
    "\u202e",
    "é" * 300,
    "9" * 40,
    "٣",
    "x" * 5000,
]


def _text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(NASTY),
        st.text(max_size=12),
        st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40),
    )


def _int_text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HUGE_INTS).map(str),
        st.integers(-5, 60).map(str),
        st.integers().map(str),
        st.sampled_from(["1e3", "0x10", " 5", "5 ", "1_000", "+3", "٣", "nan", "1.5", "abc"]),
    )


@functools.cache
def _strategies(world: World, slow: bool) -> dict[str, st.SearchStrategy[str]]:
    topics = world.topics()
    full = [f"persistent://public/default/{t}" for t in topics]
    ids = st.one_of(st.integers(0, 20).map(str), _int_text())
    positions = st.one_of(
        st.tuples(st.integers(-2, 20), st.integers(-2, 12)).map(lambda p: f"{p[0]}:{p[1]}"),
        st.tuples(st.integers(0, 20), st.integers(0, 12), st.integers(-1, 12)).map(
            lambda p: f"{p[0]}:{p[1]}:{p[2]}"
        ),
        st.sampled_from(["4:2:9", "99999999999999999999:0", "4:99999999999999999999", "a:b"]),
        st.sampled_from(["earliest", "latest", "4", ":", "::", "4:2:1:0"]),
    )
    times = st.sampled_from(
        [
            "3h",
            "1d",
            "0s",
            "-5m",
            "99999999999999999999s",
            "2026-01-01T00:00:00Z",
            "2026-13-45T99:00:00Z",
            "yesterday",
            "now",
            "earliest",
            "latest",
            "1767225600000",
            "-1",
            "99999999999999999999",
            "1e308",
            "9999-12-31T23:59:59Z",
            "0001-01-01T00:00:00Z",
        ]
    )
    durations = st.sampled_from(["0s", "1h", "7d", "-1h", "9999999999999999999d", "1", "x"])
    sizes = st.sampled_from(
        ["5MiB", "512m", "1", "0", "-1", "1g", "1e9999", "99999999999999999999gb", "1.5k", "k"]
    )
    loopback = f"127.0.0.1:{CLOSED_PORT}"
    urls = st.one_of(
        st.sampled_from(
            [
                "rocksdb://metadata",
                f"rocksdb://{world.demo / 'metadata'}",
                f"rocksdb://{world.special / 'dir'}",
                f"rocksdb://{world.special / 'text.txt'}",
                f"rocksdb://{world.special / 'fifo'}",
                "rocksdb:///",
                "rocksdb:///proc/self/status",
                "rocksdb://",
                "rocksdb:",
                "metadata",
                "etcd://127.0.0.1:9/x",
                "zk:",
                "zk:/chroot",
                "zk:127.0.0.1:99999999999",
                "zk:127.0.0.1:-1",
                "zk:[::1",
                "file:///etc",
                "",
            ]
        ),
        # ZooKeeper that does not answer costs its connection timeout (5 s): long runs only
        *([st.just(f"zk:{loopback}/x")] if slow else []),
    )
    addresses = st.sampled_from(
        [
            f"127.0.0.1:3181={loopback}",
            f"x={loopback}",
            "127.0.0.1:3181=127.0.0.1:0",
            "127.0.0.1:3181=127.0.0.1:99999999",
            "=",
            "a=b",
            "noequals",
            "127.0.0.1:3181=[::1]:9",
            "127.0.0.1:3181=",
        ]
    )
    return {
        "topic": st.one_of(
            st.sampled_from(topics + full),
            st.sampled_from(topics).map(lambda t: t[:-1] + "x"),
            st.sampled_from(
                [
                    "persistent://public/default/batched-partition-99",
                    "non-persistent://public/default/batched",
                    "persistent://",
                    "public/default",
                    "a/b/c/d/e",
                    "/managed-ledgers/public/default/persistent/batched",
                    "persistent://public/default/[bold]x",
                ]
            ),
        ),
        "namespace": st.sampled_from(["public/default", "public", "x/y", "/", "a/b/c"]),
        "ledger-or-position": st.one_of(ids, positions),
        "ledger": ids,
        "id": ids,
        "count": st.one_of(st.integers(-3, 50).map(str), _int_text()),
        "position": positions,
        "time": times,
        "duration": durations,
        "size": sizes,
        "url": urls,
        "address": addresses,
        "protocol": st.sampled_from(["v3", "v2", "auto", "V3", "v9", ""]),
        "columns": st.sampled_from(["position,key", "key", "nope", ",", "position,position"]),
        "env": st.sampled_from(["LEDGERCTL_FUZZ_UNSET", "LEDGERCTL_FUZZ_SET", "", "=", "PATH"]),
        "sample": st.sampled_from(["batched-lz4", "encrypted", "nope", ""]),
        "log": st.sampled_from(["0", "1", "ff", "0.log", "-1", "x", "99999999999999999999"]),
        "bookie": st.sampled_from(["127.0.0.1:3181", "nope:1", "", "127.0.0.1:3181/x"]),
        "subscription": st.sampled_from(["sub", "__compaction", "nope", ""]),
        "decode-input": st.one_of(
            st.sampled_from(world.input_paths()),
            st.sampled_from(["0e01", "zz", "0" * 9999]),
        ),
        "where": st.sampled_from(
            [
                "id=1",
                "order.id=42",
                "name!=x",
                "=",
                "a",
                "a.=1",
                "..=1",
                "[bold]=1",
                "a=" + "9" * 40,
            ]
        ),
        "sequence": st.sampled_from(["1", "1-5", "5-1", "-", "a-b", "99999999999999999999"]),
        "property": st.sampled_from(["k=v", "k", "=", "k=", "[bold]=x"]),
        # what keeps Spark from starting: see the module docstring
        "spark-master": st.sampled_from(["", " "]),
        "spark-conf": st.sampled_from(["a=b", "noequals", "=", ""]),
        "spark-threshold": st.one_of(
            st.integers(10**9, INT64 - 1).map(str), st.sampled_from(["x", "", "1e3", str(INT64)])
        ),
        "input": st.sampled_from(world.input_paths()),
        "plan-input": st.sampled_from(world.input_paths()),
        "output": st.sampled_from(world.output_paths()),
    }


def _value(
    param: Param, roles: dict[str, st.SearchStrategy[str]], wild: bool
) -> st.SearchStrategy[str]:
    """Values for ``param``: of its type and role, and when ``wild`` also of any other."""
    if param.kind is Kind.CHOICE:
        choices = [c for c in param.choices if param.role != "spark-engine" or c != "spark"]
        good = st.sampled_from(choices)
        if not wild:
            return good
        bad = st.one_of(
            st.sampled_from(choices).map(lambda c: c[:-1] or "x"),
            st.sampled_from(choices).map(str.upper),
            _text(),
        )
        return st.one_of(good, good, good, bad)
    own = roles.get(param.role)
    if param.kind is Kind.INT:
        if own is None:
            return _int_text()
        return st.one_of(own, _int_text()) if wild else own
    if param.kind is Kind.FLOAT:
        good = st.sampled_from(["0.001", "0.5", "1", "5"])
        if not wild:
            return good
        return st.one_of(
            good,
            st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e308", "1e-320", "abc", ""]),
            st.sampled_from(["99999999999999999999"]),
        )
    if own is None:
        return _text()
    if param.kind is Kind.PATH:
        return own
    return st.one_of(own, own, own, _text()) if wild else own


def _engine(param: Param) -> Param:
    if param.kind is Kind.CHOICE and "--engine" in param.opts:
        return dataclasses.replace(param, role="spark-engine")
    return param


#: ``ledgerctl --max-message-size SIZE COMMAND ...``: the one option the root takes
ROOT_SIZE = Param(
    name="max_message_size",
    opts=("--max-message-size",),
    secondary=(),
    kind=Kind.TEXT,
    multiple=False,
    required=False,
    role="size",
)


@st.composite
def cases(draw: Any, world: World, commands: list[Command], slow: bool = False) -> list[str]:
    """One argument list: a command and some of its parameters (see the module doc).
    ``slow``: also cases that wait for a store that does not answer."""
    roles = _strategies(world, slow)
    command = draw(st.sampled_from(commands))
    # half the cases stay within each parameter's type and role, to get past parsing
    wild = draw(st.booleans())
    argv = list(command.path)
    options: list[list[str]] = []
    arguments: list[str] = []
    for param in map(_engine, command.params):
        if param.opts and "--spark" in param.opts and param.kind is Kind.FLAG:
            continue  # starts Spark
        if param.is_argument:
            if not draw(st.booleans()) and not (param.required and draw(st.integers(0, 9))):
                continue
            count = draw(st.integers(1, 3)) if param.multiple else 1
            arguments += [draw(_value(param, roles, wild)) for _ in range(count)]
            continue
        if draw(st.integers(0, 9)) >= (3 if wild else 2):  # each option in 2 or 3 of 10
            continue
        spelling = draw(st.sampled_from(param.opts + param.secondary))
        if param.kind is Kind.FLAG:
            options.append([spelling])
            continue
        for _ in range(draw(st.integers(1, 2)) if param.multiple else 1):
            options.append([spelling, draw(_value(param, roles, wild))])
    options = draw(st.permutations(options)) if options else []
    for option in options:
        argv += option
    argv += arguments
    twist = draw(st.integers(0, 19)) if wild else -1
    if twist == 0:  # an option nobody declared, or a near miss of one
        known = [o for p in command.params for o in p.opts if o.startswith("--")]
        near = st.sampled_from(known).map(lambda o: o[:-1]) if known else st.just("--x")
        argv.insert(draw(st.integers(len(command.path), len(argv))), draw(near | st.just("--zz")))
    elif twist == 1:  # a stray argument
        argv.append(draw(_text()))
    elif twist == 2:  # a misspelled command
        argv[0] = argv[0][:-1] + "x"
    elif twist == 3:  # an option without its value, at the end
        with_values = [o for p in command.params if p.kind is not Kind.FLAG for o in p.opts]
        if with_values:
            argv.append(draw(st.sampled_from(with_values)))
    if draw(st.integers(0, 9)) == 9:  # the root's own option, before the command
        argv[:0] = ["--max-message-size", draw(_value(ROOT_SIZE, roles, wild))]
    return argv


# -- running and judging -----------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    argv: list[str]
    code: int | None  # None: no exit code (a traceback or a hang)
    out: str
    err: str
    seconds: float
    crash: str = ""  # "traceback" or "hang"
    detail: str = ""  # the traceback, or what was running
    #: a worker that had run many cases died on this one, and a fresh worker ran it
    #: without a crash: what the old worker had piled up, not the case (see Worker.run)
    retried: str = ""


def judge(outcome: Outcome) -> list[str]:
    """What is wrong with ``outcome`` (empty: nothing)."""
    wrong: list[str] = []
    if outcome.crash:
        return [f"{outcome.crash}: {outcome.detail.strip().splitlines()[-1:]}"]
    code, err = outcome.code, outcome.err
    if code not in EXIT_CODES:
        wrong.append(f"exit code {code} is not one of the documented {sorted(EXIT_CODES)}")
    if "Traceback (most recent call last)" in err:
        wrong.append("a traceback on stderr")
    errors = [line for line in err.splitlines() if line.startswith("ledgerctl: error:")]
    if code == 2 and not errors and "Usage: ledgerctl" in outcome.out + err:
        return []  # a command group without its subcommand shows its help
    if code in (2, 3) and len(errors) != 1:
        wrong.append(f"exit {code} with {len(errors)} 'ledgerctl: error:' lines")
    if len(errors) > 1:
        wrong.append("more than one error line")
    if code == 2 and errors and re.search(r"\b(Usage:|Try '|Error: )", err):
        wrong.append("Click's own usage text")
    if "-o" in outcome.argv or "--output" in outcome.argv:
        fmt = _output_format(outcome.argv)
        if fmt == "jsonl" and code in (0, 1):
            for line in outcome.out.splitlines():
                try:
                    value = json.loads(line)
                except ValueError:
                    wrong.append(f"-o jsonl printed a line that is not JSON: {line[:80]!r}")
                    break
                if not isinstance(value, dict):
                    wrong.append(f"-o jsonl printed a line that is not an object: {line[:80]!r}")
                    break
        if fmt == "json" and code in (0, 1) and outcome.out.strip():
            try:
                json.loads(outcome.out)
            except ValueError:
                wrong.append("-o json printed text that is not one JSON document")
    return wrong


def _output_format(argv: list[str]) -> str | None:
    fmt = None
    for i, arg in enumerate(argv[:-1]):
        if arg in ("-o", "--output"):
            fmt = argv[i + 1]
    return fmt


class CaseTimeout(BaseException):
    """A case ran past its time (a BaseException: no ``except Exception`` swallows it)."""


#: flags and commands after which the world's store is restored (they may write to it)
WRITES = {"--apply", "--delete", "--force", "apply", "undo", "demo"}


def _fingerprint(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and directory under ``root`` with its type, size and mtime: what a
    case that writes changes (a few dozen stats, where a restore copies the store)."""
    found: dict[str, tuple[int, int, int]] = {}
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            found[entry.path] = (info.st_mode, info.st_size, info.st_mtime_ns)
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return found


#: each world's store fingerprint as its last restore left it
_BASELINE: dict[Path, dict[str, tuple[int, int, int]]] = {}


def _restore(world: World) -> None:
    shutil.rmtree(world.demo, ignore_errors=True)
    shutil.copytree(world.pristine, world.demo, symlinks=True)
    _BASELINE[world.root] = _fingerprint(world.demo)


def _restore_if_written(world: World) -> None:
    if world.root not in _BASELINE or _fingerprint(world.demo) != _BASELINE[world.root]:
        _restore(world)


def _mend(world: World) -> None:
    """Put back what a case replaced in the world (a FIFO or a device turned into a
    regular file by a command that wrote there, the output directory's contents)."""
    s = world.special
    nodes = {
        "fifo": (stat.S_ISFIFO, lambda p: os.mkfifo(p)),
        "zero": (stat.S_ISCHR, lambda p: os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 5))),
        "null": (stat.S_ISCHR, lambda p: os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))),
    }
    for name, (kind, make) in nodes.items():
        path = s / name
        try:
            ok = kind(path.lstat().st_mode)
        except FileNotFoundError:
            ok = False
        if not ok:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
            make(path)
    if not (s / "link-to-text").is_symlink():
        (s / "link-to-text").unlink(missing_ok=True)
        os.symlink(s / "text.txt", s / "link-to-text")
    for path, text in ((s / "text.txt", "some text\n"), (world.out / "existing.json", "{}\n")):
        try:
            same = path.lstat().st_size == len(text) and path.read_text() == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            path.unlink(missing_ok=True)
            path.write_text(text)
    for item in world.out.iterdir():
        if item.name != "existing.json":
            shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()


def run_in_process(
    argv: list[str], world: World, timeout: float, wall: float | None = None
) -> Outcome:
    """Run one case through ``pulsarctl_py.cli.main`` here, stdout and stderr captured as
    pipes take them (UTF-8, stdout strict), stdin empty.

    A hang is ``timeout`` seconds of CPU (a loop), or ``wall`` seconds of waiting (a
    read that blocks; default six times ``timeout``, at least two minutes): CPU time, so
    that a case on a busy or niced machine is not called hung for waiting its turn."""
    from pulsarctl_py.cli import main

    os.chdir(world.demo)  # again each time: a restore replaces the directory
    out, err = io.BytesIO(), io.BytesIO()
    saved = sys.stdout, sys.stderr, sys.stdin
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True)
    sys.stderr = io.TextIOWrapper(
        err, encoding="utf-8", errors="backslashreplace", write_through=True
    )
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")

    where: list[str] = []
    wall = wall if wall is not None else max(6 * timeout, 120.0)

    def expire(signum: int, frame: Any) -> None:
        what = "CPU" if signum == signal.SIGPROF else "wall-clock"
        spent = timeout if signum == signal.SIGPROF else wall
        where[:] = [f"over {spent:g} s of {what} time in:\n"]
        where.extend(traceback.format_stack(frame, limit=16))
        raise CaseTimeout

    old = signal.signal(signal.SIGALRM, expire), signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, timeout)
    signal.setitimer(signal.ITIMER_REAL, wall)
    started = time.monotonic()
    code: int | None = None
    crash = detail = ""
    try:
        code = main(list(argv))
    except CaseTimeout:
        crash, detail = "hang", "".join(where)
    except BaseException as exc:  # the point: the CLI may end only with an exit code
        crash, detail = "traceback", "".join(traceback.format_exception(exc))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGALRM, old[0])
        signal.signal(signal.SIGPROF, old[1])
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a stream a case closed or broke
                pass
        # read before the wrappers go: a TextIOWrapper closes its buffer when collected
        written = out.getvalue(), err.getvalue()
        sys.stdout, sys.stderr, sys.stdin = saved
        if WRITES & set(argv):
            _restore_if_written(world)
        _mend(world)
    return Outcome(
        list(argv),
        code,
        written[0].decode("utf-8", "replace"),
        written[1].decode("utf-8", "replace"),
        time.monotonic() - started,
        crash,
        detail,
    )


def _env(world: World) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("LEDGERCTL_", "PYSPARK", "SPARK"))
    }
    env.update(
        XDG_CONFIG_HOME=str(world.root / "no-user-config"),
        LEDGERCTL_FUZZ_SET="secret",
        COLUMNS="120",
        PYTHONHASHSEED="0",
        # few malloc arenas: the memory limit counts address space, and every thread's
        # 64 MiB arena reservation would count against it
        MALLOC_ARENA_MAX="2",
    )
    return env


class Worker:
    """One subprocess running cases in-process (``python -m tests.support.cli_fuzz WORLD``).

    It reads argument lists as JSON lines and answers each with an Outcome as JSON, on
    its own descriptors (the commands' output goes to captured streams; what native
    code writes to fd 1 and 2 goes to /dev/null). A hang or a traceback restarts it.
    """

    def __init__(
        self, world: World, timeout: float, memory_mib: int = 1024, wall: float | None = None
    ) -> None:
        self.world, self.timeout, self.memory_mib = world, timeout, memory_mib
        self.wall = wall if wall is not None else max(6 * timeout, 120.0)
        self.proc: subprocess.Popen[str] | None = None
        self.cases = 0  # run by the current process

    def _start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.cli_fuzz",
                str(self.world.root),
                str(self.timeout),
                str(self.memory_mib),
                str(self.wall),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=_env(self.world),
        )

    #: cases a worker runs before a fresh one takes over (what one case leaves behind in
    #: the process, caches and threads, must not add up to the memory limit)
    RECYCLE = 1000

    def run(self, argv: list[str]) -> Outcome:
        before = self.cases  # cases this worker ran before this one
        outcome = self._run(argv)
        if outcome.crash and before > 0:
            # the case may have met what the cases before it left: a fresh worker decides
            self.close()
            again = self._run(argv)
            if not again.crash:
                again.retried = f"{outcome.crash} after {before} cases: {outcome.detail}"
            return again
        return outcome

    def _run(self, argv: list[str]) -> Outcome:
        if self.proc is None or self.proc.poll() is not None or self.cases >= self.RECYCLE:
            self.close()
            self.proc = self._start()
        self.cases += 1
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:  # the worker died: killed by the memory limit, or a native crash
            code = self.proc.wait(timeout=30)
            self.proc = None
            return Outcome(argv, None, "", "", 0.0, "traceback", f"worker died ({code})")
        outcome = Outcome(**json.loads(line))
        if outcome.crash:
            self.close()
        return outcome

    def close(self) -> None:
        self.cases = 0
        if self.proc is not None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(root: Path, timeout: float, memory_mib: int, wall: float) -> None:
    """The worker's loop (see :class:`Worker`)."""
    limit = memory_mib << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    world = World(root)
    _restore(world)  # whatever a worker before this one left half done
    os.chdir(world.demo)
    for line in requests:
        outcome = run_in_process(json.loads(line), world, timeout, wall)
        answers.write(json.dumps(dataclasses.asdict(outcome)) + "\n")
        if outcome.crash:
            return


def run_cases(world: World, argvs: Iterator[list[str]], timeout: float) -> Iterator[Outcome]:
    with Worker(world, timeout) as worker:
        for argv in argvs:
            yield worker.run(argv)


if __name__ == "__main__":
    _serve(Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
