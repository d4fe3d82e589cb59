"""One error style, text not markup, outputs that keep their promises, permission denied
is exit 3 (issue 21 points 3, 4, 5; issue 24 point 5 and its permission bullet).

Every test runs the CLI on a real store: the demo (a RocksDB metadata store and a
bookie directory) or a copy of it with what the test needs added.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cli_helpers import Result, ledgerctl_script, run, run_on_terminal
from tests.support.demo_env import demo, demo_root, isolate

#: the shared demo fixtures this module's tests use
FIXTURES = (demo, demo_root)
ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
INT64 = 2**63


def one_error_line(result: Result, code: int = 2) -> str:
    """The run ended with ``code`` and exactly one line on stderr, ledgerctl's own."""
    assert result.code == code, (result.code, result.err)
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("ledgerctl: error: "), result.err
    assert "Traceback" not in result.err and "Usage:" not in result.err
    return lines[0]


# -- one error style (issue 21 point 4) -------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["inspect", "--topic", "batched", "--limit", "abc"], ["--limit", "'abc'", "number"]),
        (["inspct"], ["no such command 'inspct'", "did you mean inspect?"]),
        (["topic", "lst"], ["topic:", "no such command 'lst'", "did you mean list?"]),
        (["inspect", "--topc", "batched"], ["no such option --topc", "did you mean --topic?"]),
        (["inspect", "--topic", "batched", "-o", "jsn"], ["--output", "'jsn'", "mean json?"]),
        (["topic", "info"], ["topic info:", "missing argument TOPIC"]),
        (["seek", "batched", "--time"], ["--time", "requires an argument"]),
        (["inspect", "4", "extra"], ["unexpected extra argument", "extra"]),
        (["compact", "batched", "--as-broker", "2.x"], ["--as-broker", "not one of pip-429"]),
        (["seek", "batched", "--ledger", str(INT64)], ["--ledger", str(INT64), "out of range"]),
        (["migrate", "index", "batched", "--start", str(INT64)], ["--start", "out of range"]),
        (["inspect", "4", "--limit", str(-INT64 - 1)], ["--limit", "greater than or equal to 0"]),
        (["seek", "batched", "--legacy-offset", str(-INT64 - 1)], ["--legacy-offset", "range"]),
        (["ledger", "replicas", str(INT64)], ["LEDGER", "out of range"]),
        (["verify", "batched", "--bookie-timeout", "nan"], ["--bookie-timeout", "not a finite"]),
        (["apply", ""], ["apply:", "an empty path"]),
        (["inspect", "--topic", "\udcff"], ["--topic", "not valid UTF-8"]),
        (["repair", "--plan", "x.json", "--apply"], ["repair:", "give a repair"]),
        # a command's own checks: the message names the options, said once
        (["compact", "batched", "--deep"], ["compact: --deep goes with --status"]),
        (["repair", "cursor", "batched", "sub"], ["repair cursor: give exactly one of --to"]),
        (["decode", "--max-message-size", "x"], ["decode: --max-message-size: 'x'"]),
    ],
)
def test_usage_errors_are_one_line_naming_the_option(
    capsys: pytest.CaptureFixture[str], demo: Path, args: list[str], expected: list[str]
) -> None:
    result = run(capsys, *args)
    line = one_error_line(result, 2)
    for fragment in expected:
        assert fragment in line, line
    assert result.out == ""


def test_ids_past_2_63_through_the_installed_script(demo: Path) -> None:
    """The two tracebacks of the issue, as an operator's shell runs them."""
    for args in (
        ["seek", "batched", "--ledger", str(INT64)],
        ["migrate", "index", "batched", "--start", str(INT64)],
    ):
        proc = subprocess.run(
            [ledgerctl_script(), *args], capture_output=True, text=True, timeout=60, cwd=demo
        )
        one_error_line(Result(proc.returncode, proc.stdout, proc.stderr), 2)


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "info", "batchd"],
        ["inspect", "--topic", "batchd"],
        ["export", "batchd", "--to", "x.jsonl"],
        ["verify", "batchd"],
        ["seek", "batchd", "--index", "1"],
        ["repair", "missing-ledgers", "batchd"],
        ["schema", "list", "batchd"],
        ["schema", "show", "public/default/batchd"],
    ],
)
def test_a_mistyped_topic_gets_the_closest_name(
    capsys: pytest.CaptureFixture[str], demo: Path, args: list[str]
) -> None:
    line = one_error_line(run(capsys, *args), 1)
    assert re.search(r"\(did you mean (persistent://public/default/)?batched\?\)", line), line


def test_a_topic_far_from_every_name_gets_no_guess(
    capsys: pytest.CaptureFixture[str], demo: Path
) -> None:
    line = one_error_line(run(capsys, "topic", "info", "zzzz"), 1)
    assert "did you mean" not in line


def test_a_topic_without_a_schema_is_not_called_unknown(
    capsys: pytest.CaptureFixture[str], demo: Path
) -> None:
    line = one_error_line(run(capsys, "schema", "list", "batched"), 1)
    assert "has no schema" in line and "did you mean" not in line and "no such topic" not in line


# -- messages are text, not markup (issue 21 point 3) -----------------------------------

#: a topic name holding Rich markup, emoji codes and an address list like the issue's
HOSTILE = "[bold]x[red]y[link=z]:1234:,192.0.2.2:1234:smile:"


@pytest.fixture(scope="module")
def hostile_demo(demo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo with one more topic, named :data:`HOSTILE`, listing batched's ledgers."""
    from pulsarctl_py.decoders.managed_ledger import TopicName
    from pulsarctl_py.stores.metadata import open_metadata_store

    root = tmp_path_factory.mktemp("hostile") / "demo"
    shutil.copytree(demo_root, root)
    source = TopicName.parse("persistent://public/default/batched")
    target = TopicName.parse(f"persistent://public/default/{HOSTILE}")
    with open_metadata_store(f"rocksdb://{root / 'metadata'}", read_only=False) as store:
        node = store.get(source.ml_path)
        assert node is not None
        store.put(target.ml_path, node.data, -1)
    return root


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "list", "-o", "table"],
        ["topic", "list", "-o", "tree"],
        ["topic", "info", HOSTILE, "-o", "tree"],
        ["topic", "info", HOSTILE, "-o", "table"],
        ["verify", HOSTILE, "-o", "table"],
        ["seek", HOSTILE, "--index", "1", "-o", "table"],
        ["compact", HOSTILE, "--status", "-o", "table"],
        ["export", HOSTILE, "--to", "out.jsonl", "-o", "table"],
    ],
)
def test_a_name_made_of_markup_and_emoji_codes_prints_as_it_is(
    capsys: pytest.CaptureFixture[str],
    hostile_demo: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: list[str],
) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(hostile_demo)
    result = run(capsys, *args)
    assert "Traceback" not in result.err
    shown = result.out + result.err
    assert HOSTILE in shown, shown
    assert "😄" not in shown and "🔢" not in shown
    Path(hostile_demo / "out.jsonl").unlink(missing_ok=True)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40))
def test_printed_text_is_text(text: str) -> None:
    """Any value, escaped as call sites escape it, prints as it is; unescaped, it never
    raises and never turns into an emoji; only ledgerctl's own style tags style."""
    import io

    from rich.markup import escape

    from pulsarctl_py import render

    def shown(markup: str) -> str:
        buf = io.StringIO()
        render.make_console(file=buf, width=10_000, soft_wrap=True).print(markup)
        return buf.getvalue()

    clean = text.replace("\r", "").replace("\n", "").replace("\t", "")
    if any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in clean):
        return  # control characters are Rich's own business (it drops some)
    assert shown(f"[red]x[/] {escape(clean)}") == f"x {clean}\n"
    plain = shown(f"[red]x[/] {clean}")
    words = {w for tag in re.findall(r"\[/?([a-z ]+)\]", clean) for w in tag.split()}
    if not words & render.STYLE_WORDS:
        assert plain == f"x {clean}\n"


def _user_facing_strings() -> Iterator[tuple[str, int, str]]:
    """String constants of the package that reach users: every one but the docstrings of
    modules, classes and functions that are not commands."""
    for folder in ("commands", "pulsarctl_py", "decoders"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name.endswith("_pb2.py"):
                continue
            tree = ast.parse(path.read_text())
            docstrings = set()
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and (
                    node.body
                    and isinstance(node.body[0], ast.Expr)
                    and isinstance(node.body[0].value, ast.Constant)
                ):
                    if folder != "commands" or not isinstance(node, ast.FunctionDef):
                        docstrings.add(id(node.body[0].value))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if id(node) not in docstrings:
                        yield f"{folder}/{path.relative_to(ROOT / folder)}", node.lineno, node.value


def test_no_user_facing_text_cites_the_fact_sheet() -> None:
    """Say the rule itself ("KoP answers the entry's last offset..."), not "formats.md §13"."""
    cited = [
        f"{path}:{line}: {text[:80]!r}"
        for path, line, text in _user_facing_strings()
        if "formats.md" in text or "§" in text or "operators.md" in text
    ]
    assert not cited, "\n".join(cited)
    reference = (ROOT / "docs" / "cli.md").read_text()
    assert "formats.md" not in reference and "§" not in reference


# -- outputs keep their promises (issue 21 point 5) -------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["seek", "batched", "--index", "3"],
        ["seek", "with-index", "--time", "2026-11-21T10:49:43.700Z"],
        ["export", "batched", "--to", "rows.jsonl"],
        ["topic", "info", "batched"],
        ["ledger", "meta", "4"],
        ["verify", "--all"],
        ["inspect", "4"],
    ],
)
def test_jsonl_is_one_object_per_line_everywhere(
    capsys: pytest.CaptureFixture[str], demo: Path, args: list[str]
) -> None:
    result = run(capsys, *args, "-o", "jsonl")
    assert result.code in (0, 1), result.err
    lines = result.out.splitlines()
    assert lines, result.err
    for line in lines:
        assert isinstance(json.loads(line), dict), line
    Path(demo / "rows.jsonl").unlink(missing_ok=True)


def test_migrate_table_is_a_table_of_what_the_json_holds(
    capsys: pytest.CaptureFixture[str], demo: Path
) -> None:
    doc = run(capsys, "migrate", "index", "batched", "-o", "json").json()
    table = run(capsys, "migrate", "index", "batched", "-o", "table")
    assert table.code == 0, table.err
    assert not table.out.lstrip().startswith("{")
    for name in ("first_index", "last_index", "old_position", "legacy_kop_offset"):
        assert name in table.out
    for row in doc["mapping"]:
        assert row["old_position"] in table.out and str(row["legacy_kop_offset"]) in table.out


def test_compact_takes_the_engine_choices_of_export(
    capsys: pytest.CaptureFixture[str], demo: Path
) -> None:
    help_text = " ".join(run(capsys, "compact", "--help").out.split())
    assert "--engine <auto|local|spark>" in help_text and "--spark-threshold" in help_text
    auto = run(capsys, "compact", "batched", "--engine", "auto", "-o", "json")
    assert auto.code == 0, auto.err
    assert auto.json()["engine"] == "local"  # 10 entries: far below the threshold
    big = run(
        capsys, "compact", "batched", "--spark-threshold", str(10**9), "-o", "json"
    )  # auto is the default
    assert big.code == 0 and big.json()["engine"] == "local"


def _frames(screen: bytes) -> set[str]:
    """What a live display drew, frame by frame (escape sequences split them)."""
    text = ANSI.sub("\n", screen.decode("utf-8", "replace").replace("\r", "\n"))
    return {line.strip() for line in text.splitlines() if line.strip()}


def test_compaction_shows_one_progress_line_per_phase_not_a_line_a_second(demo: Path) -> None:
    code, piped, screen = run_on_terminal(
        "compact", "batched", "--progress", "-o", "json", stdout_tty=False, cwd=demo
    )
    assert code == 0
    json.loads(piped)
    frames = _frames(screen)
    assert any("compact: phase one" in f for f in frames), frames
    assert any("compact: phase two" in f for f in frames), frames
    # the display is redrawn in place: never the old "ledgerctl compact: ..." log lines
    assert not any(f.startswith("ledgerctl compact:") for f in frames), frames
    assert not any("None" in f for f in frames), frames


def test_spark_says_it_is_starting_and_never_counts_none_tasks(demo: Path) -> None:
    code, _, screen = run_on_terminal(
        "export",
        "batched",
        "--to",
        "spark.jsonl",
        "--engine",
        "spark",
        "-o",
        "json",
        stdout_tty=False,
        cwd=demo,
    )
    Path(demo / "spark.jsonl").unlink(missing_ok=True)
    assert code == 0, screen[-2000:]
    frames = _frames(screen)
    assert any("starting Spark (local[*])" in f for f in frames), frames
    assert not any("None" in f for f in frames), frames


def test_the_progress_display_is_one_display(tmp_path: Path) -> None:
    """Work inside work (Spark's tasks inside an export) is a line of the same display:
    Rich would refuse a second live display, and two would fight over the terminal."""
    import io

    from pulsarctl_py import render

    console = render.make_console(file=io.StringIO(), force_terminal=True, width=80)
    with render.activity(console, "outer", unit="splits") as outer:
        outer.advance()
        with render.activity(console, "inner", total=4, unit="tasks") as inner:
            inner.update(completed=2)
            assert render._display is not None and len(render._display.tasks) == 2
        assert len(render._display.tasks) == 1
    assert render._display is None


def test_status_table_shows_what_the_json_has(
    capsys: pytest.CaptureFixture[str],
    demo_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "demo"
    shutil.copytree(demo_root, root)
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(root)
    assert run(capsys, "compact", "batched", "--apply", "-o", "json").code == 0
    doc = run(capsys, "compact", "batched", "--status", "-o", "json").json()
    table = run(capsys, "compact", "batched", "--status", "-o", "table").out
    for name in ("reader_hangs", "delivered_last", "generation"):
        assert f"last_message.{name}" in table
    assert doc["last_message"]["delivered_last"] in table
    age = re.search(r"│ age\s+│ ([^│]+?)\s+│", table)
    assert age is not None, table
    if doc["created_ms"] is None:  # ledger metadata without a creation time: no age
        assert age.group(1) == "-"
        return
    # a duration for people, not "425145 s": one or two units
    assert re.fullmatch(r"\d+ (ms|s|min|h|d)( \d+ (s|min|h))?", age.group(1)), age.group(1)
    assert str(doc["created_ms"]) not in table  # the creation time is shown as a date


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "-"),
        (850, "850 ms"),
        (42_000, "42 s"),
        (192_000, "3 min 12 s"),
        (3_600_000, "1 h"),
        (425_145_000, "4 d 22 h"),
    ],
)
def test_durations_are_for_people(ms: int | None, text: str) -> None:
    from pulsarctl_py.render import human_duration

    assert human_duration(ms) == text


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "list", "-o", "table"],
        ["topic", "info", "seek-times", "-o", "table"],
        ["verify", "--all", "-o", "table"],
        ["ledger", "list", "-o", "table"],
    ],
)
def test_ids_and_names_are_never_broken_in_tables(demo: Path, args: list[str]) -> None:
    code, _, screen = run_on_terminal(*args, cwd=demo, columns=40, stderr_tty=False)
    assert code in (0, 1)
    text = ANSI.sub("", screen.decode("utf-8", "replace"))
    names = re.findall(r"persistent://public/default/[\w-]+", text)
    assert names, text
    for name in names:  # a name found whole ends where a table cell ends
        assert name.rsplit("/", 1)[-1] in {
            "batched",
            "batched-shadow",
            "chunked",
            "encrypted",
            "plain",
            "seek-times",
            "tombstones",
            "with-index",
            "orders",
            "orders-partition-0",
            "orders-partition-1",
            "orders-partition-2",
            "shop-orders",
        }, name
    for stamp in re.findall(r"2026-\d\d-\d\dT[\d:.]*", text):
        assert re.fullmatch(r"2026-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}", stamp), stamp
    assert "…" not in text


def test_counts_agree_between_demo_verify_topic_info_and_ledger_list(
    capsys: pytest.CaptureFixture[str], demo: Path, tmp_path: Path
) -> None:
    summary = run(capsys, "demo", str(tmp_path / "again"), "-o", "json").json()
    verify = run(capsys, "verify", "--all", "-o", "json").json()["summary"]
    ledgers = run(capsys, "ledger", "list", "-o", "json").json()
    # verify checks the topics' ledgers; the schema ledgers (the demo's shop-orders has
    # two) are the schema storage's, listed by ledger list and counted by the demo
    schema = [r for r in ledgers if r.get("kind") == "schema"]
    assert (
        verify["ledgers"] + len(schema),
        verify["entries"] + sum(r["entries"] for r in schema),
    ) == (
        summary["ledgers"],
        summary["entries"],
    )
    assert (len(ledgers), sum(r["entries"] for r in ledgers)) == (
        summary["ledgers"],
        summary["entries"],
    )
    for topic in summary["topics"]:
        name = topic["name"] if "name" in topic else topic["topic"]
        info = run(capsys, "topic", "info", name, "-o", "json").json()
        assert info["entries"] == topic["entries"], name


@pytest.mark.parametrize(("index", "position"), [(2, "6:1:0"), (6, "10:0"), (3, "6:2:0")])
def test_a_one_message_batch_is_answered_as_l_e_0(
    capsys: pytest.CaptureFixture[str], demo: Path, index: int, position: str
) -> None:
    """with-index holds 6:1, a batch of one message (num_messages_in_batch = 1), and
    10:0, a message sent without batching: the client names them 6:1:0 and 10:0."""
    doc = run(capsys, "seek", "with-index", "--index", str(index), "-o", "json").json()
    assert doc["position"] == position


# -- permission denied is exit 3 (issue 24) ---------------------------------------------

NOBODY = 65534


def _as_nobody(root: Path, commands: list[list[str]]) -> list[dict[str, Any]]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "HOME": str(root),
        "XDG_CONFIG_HOME": str(root / "no-user-config"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    proc = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            sys.executable,
            "-m",
            "tests.support.damage_runner",
        ],
        input=json.dumps(commands),
        capture_output=True,
        text=True,
        cwd=root / "demo",
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def denied(demo_root: Path) -> Iterator[Path]:
    """A demo copy the unprivileged user may read, with files and directories it may not."""
    assert os.geteuid() == 0 and shutil.which("setpriv"), "run the suite as root (setpriv)"
    base = Path(tempfile.mkdtemp(prefix="ledgerctl-denied-"))
    base.chmod(0o755)
    root = base / "demo"
    shutil.copytree(demo_root, root)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    for name in ("secret", "key.pem", "plan.json", "entry.hex"):
        (root / name).write_text("{}\n")
        (root / name).chmod(0o600)
    (root / "closed").mkdir(mode=0o700)
    (root / "readonly").mkdir(mode=0o555)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


READ_DENIED = [
    ["inspect", "4", "--password-file", "secret"],
    ["inspect", "4", "--private-key", "key.pem"],
    ["decode", "entry.hex"],
    ["apply", "plan.json"],
    ["undo", "plan.json"],
    ["repair", "--from-verify", "plan.json"],
    ["verify", "--all", "--password-file", "secret"],
    ["bookie", "logs", "--bookie-dir", "closed"],
    ["inspect", "4", "--bookie-dir", "closed"],
    ["topic", "list", "--metadata-url", "rocksdb://closed"],
    ["export", "batched", "--to", "readonly/rows.jsonl"],
    ["compact", "batched", "--export", "readonly/rows.jsonl"],
    ["demo", "readonly/demo"],
    ["topic", "list", "--broker-conf", "secret"],
    ["schema", "list", "batched", "--metadata-url", "rocksdb://closed"],
]


def test_permission_denied_is_exit_3_for_files_directories_and_stores(denied: Path) -> None:
    results = _as_nobody(denied, READ_DENIED)
    wrong = []
    for result in results:
        lines = result["stderr"].strip().splitlines()
        if result["crash"] or result["code"] != 3 or len(lines) != 1:
            wrong.append(f"{result['args']}: exit {result['code']}: {result['stderr'][-300:]}")
        elif not lines[0].startswith("ledgerctl: error: ") or "ermission denied" not in lines[0]:
            wrong.append(f"{result['args']}: {lines[0]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "args",
    [
        ["repair", "missing-ledgers", "batched", "--plan", "readonly/plan.json"],
        ["migrate", "index", "batched", "--mapping", "readonly/mapping.jsonl"],
    ],
)
def test_an_unwritable_plan_or_mapping_is_exit_3(denied: Path, args: list[str]) -> None:
    (result,) = _as_nobody(denied, [args])
    assert result["code"] == 3, result["stderr"]
    assert "cannot write" in result["stderr"]
