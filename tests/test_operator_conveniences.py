"""Conveniences an operator expects of a command-line tool: no colour when asked (NO_COLOR,
--no-color), Ctrl-C that says "interrupted" and exits 130."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli_helpers import ledgerctl_script, run, run_on_terminal
from tests.support.demo_env import demo, demo_root  # noqa: F401 (fixtures)

ESC = b"\x1b["
#: a colour or style (SGR) sequence; cursor movement of a progress display is not colour
SGR = re.compile(rb"\x1b\[[0-9;]*m")


def test_the_error_line_is_red_on_a_terminal_unless_colour_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    code, _, screen = run_on_terminal("decode", "/nonexistent", stdout_tty=False)
    assert code == 2 and ESC + b"31mledgerctl: error:" in screen
    code, _, screen = run_on_terminal("--no-color", "decode", "/nonexistent", stdout_tty=False)
    assert code == 2 and ESC not in screen
    assert b"ledgerctl: error: cannot read input /nonexistent" in screen
    monkeypatch.setenv("NO_COLOR", "1")
    code, _, screen = run_on_terminal("decode", "/nonexistent", stdout_tty=False)
    assert code == 2 and ESC not in screen and b"ledgerctl: error:" in screen
    monkeypatch.setenv("NO_COLOR", "")  # empty: not set (no-color.org)
    code, _, screen = run_on_terminal("decode", "/nonexistent", stdout_tty=False)
    assert ESC in screen


def test_no_colour_in_tables_on_a_terminal(
    demo: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    _, _, coloured = run_on_terminal("verify", "--all", "-o", "table", cwd=demo)
    assert SGR.search(coloured)  # the check is able to fail: tables are coloured by default
    _, _, screen = run_on_terminal("--no-color", "verify", "--all", "-o", "table", cwd=demo)
    assert not SGR.search(screen) and b"ledgerctl: error" not in screen
    assert b"12 topics" in screen
    monkeypatch.setenv("NO_COLOR", "1")
    _, _, screen = run_on_terminal("verify", "--all", "-o", "table", cwd=demo)
    assert not SGR.search(screen) and b"12 topics" in screen


def _blocked_reading(pid: int, timeout: float = 60) -> None:
    """Wait until the process waits for its stdin pipe (the command is running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            wchan = ""
        if "pipe" in wchan:
            return
        time.sleep(0.05)
    pytest.fail(f"ledgerctl did not start reading its stdin (wchan {wchan!r})")


def test_ctrl_c_says_interrupted_and_exits_130() -> None:
    proc = subprocess.Popen(
        [ledgerctl_script(), "decode"],  # reads entries from stdin, which never come
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ},
    )
    try:
        _blocked_reading(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == 130, err
    assert err.decode() == "ledgerctl: interrupted\n"
    assert out == b""


def test_a_keyboard_interrupt_raised_by_another_handler_says_interrupted(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PySpark's SIGINT handler cancels the Spark jobs and raises KeyboardInterrupt, which
    typer turns into a silent exit 130: the one line is still said."""
    import pulsarctl_py.topics

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pulsarctl_py.topics, "iter_topics", interrupted)
    r = run(capsys, "topic", "list", "-o", "jsonl")
    assert r.code == 130
    assert r.err == "ledgerctl: interrupted\n" and r.out == ""


def test_py4j_errors_on_the_root_logger_print_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    """What py4j logs on the root logger when Ctrl-C breaks a call (a traceback) is not
    printed once a Spark session was started (tests/cluster/spark/test_live_source.py starts
    real ones)."""
    import logging

    from pulsarctl_py.spark.session import hush_root_logging

    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()
    try:
        hush_root_logging()
        try:
            raise RuntimeError("reentrant call")
        except RuntimeError:
            logging.exception("Exception while sending command.")
        assert capfd.readouterr().err == ""
    finally:
        root.handlers[:] = saved


def test_seek_time_earliest_and_latest(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
) -> None:
    first = run(capsys, "ledger", "list", "-o", "json").json()
    ledgers = sorted(
        r["ledger_id"] for r in first if r["topic"] == "persistent://public/default/batched"
    )
    r = run(capsys, "seek", "batched", "--time", "earliest", "-o", "json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["target"] == {"kind": "time", "value": "earliest"}
    assert doc["position"] == f"{ledgers[0]}:0" and not doc["end"]
    r = run(capsys, "seek", "batched", "--time", "Latest", "-o", "json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["target"]["value"] == "latest"
    assert doc["end"] and doc["position"] is None
    r = run(capsys, "seek", "batched", "--time", "latest", "-o", "table")
    assert "seek time latest" in r.out and "after the last entry" in r.out
    r = run(capsys, "seek", "batched", "--time", "earliest", "--rule", "kop", "-o", "json")
    assert r.code == 0 and r.json()["position"] == f"{ledgers[0]}:0"
    r = run(capsys, "seek", "batched", "--time", "latest", "--rule", "kop")
    assert r.code == 2
    assert (
        r.err == "ledgerctl: error: --time latest applies to --rule broker and compacted, not kop\n"
    )


def test_the_nearest_config_file_with_paths_relative_to_it(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    deeper = demo / "notes" / "incident-42"
    deeper.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(deeper)  # two levels below the demo's ledgerctl.toml
    r = run(capsys, "topic", "list", "-o", "json")
    assert r.code == 0, r.err
    assert "persistent://public/default/batched" in {t["topic"] for t in r.json()}
    url = resolve_metadata_url()
    assert url.target == str(demo.resolve() / "metadata")  # absolute: fit for executors
    r = run(capsys, "config", "-o", "json")
    assert r.code == 0, r.err
    rows = {row["setting"]: row for row in r.json()}
    config = str(demo.resolve() / "ledgerctl.toml")
    assert rows["config files"]["value"] == [config]
    assert rows["metadata_url"] == {
        "setting": "metadata_url",
        "value": f"rocksdb://{demo.resolve() / 'metadata'}",
        "source": config,
        "origin": "config",
        "overrides": [],
    }
    assert rows["bookie_dirs"]["value"] == [str(demo.resolve() / "bookkeeper")]
    assert rows["bookie_dirs"]["source"] == config
    assert rows["bookkeeper_metadata_url"]["source"] == "default: /ledgers of the metadata store"
    assert rows["bookkeeper_metadata_url"]["origin"] == "default"
    monkeypatch.setenv("LEDGERCTL_METADATA_URL", "zk:127.0.0.1:2181/pulsar")
    monkeypatch.setenv("LEDGERCTL_ZK_AUTH", "user:secret-password")
    r = run(capsys, "config", "-o", "json")
    rows = {row["setting"]: row for row in r.json()}
    assert rows["metadata_url"]["source"] == "LEDGERCTL_METADATA_URL"
    assert rows["metadata_url"]["value"] == "zk:127.0.0.1:2181/pulsar"
    # the config file's value, hidden by the variable, is named
    assert rows["metadata_url"]["overrides"] == [
        {"value": f"rocksdb://{demo.resolve() / 'metadata'}", "source": config, "origin": "config"}
    ]
    assert rows["zk_auth"]["value"] == "set"
    assert "secret-password" not in r.out
    r = run(capsys, "config", "-o", "table")
    assert "LEDGERCTL_METADATA_URL" in r.out and "secret-password" not in r.out


def test_config_without_any_setting_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.demo_env import isolate

    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    r = run(capsys, "config", "-o", "json")
    assert r.code == 0, r.err
    rows = {row["setting"]: row for row in r.json()}
    assert rows["config files"]["value"] == []
    assert rows["metadata_url"]["value"] is None
    assert rows["metadata_url"]["source"].startswith("not set: no metadata store given")
    assert rows["bookie_dirs"]["value"] == [] and rows["bookie_dirs"]["origin"] == "default"


ORDERS = "persistent://public/default/orders"
PARTS = [f"{ORDERS}-partition-{i}" for i in range(3)]


def test_seek_on_a_partitioned_topic_answers_per_partition(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
) -> None:
    one = []
    for part in PARTS:
        r = run(capsys, "seek", part, "--time", "earliest", "-o", "json")
        assert r.code == 0, r.err
        one.append(r.json())
    r = run(capsys, "seek", "orders", "--time", "earliest", "-o", "json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["topic"] == ORDERS and doc["partitions"] == one
    r = run(capsys, "seek", "orders", "--time", "latest", "-o", "jsonl")
    lines = [json.loads(line) for line in r.out.splitlines()]
    assert [d["topic"] for d in lines] == PARTS and all(d["end"] for d in lines)
    r = run(capsys, "seek", "orders", "--position", "1:0")
    assert r.code == 2 and "is a partitioned topic: --position and --exact need one" in r.err


def test_export_of_a_partitioned_topic_by_its_base_name(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    parts = b""
    for i, part in enumerate(PARTS):
        out = tmp_path / f"p{i}.jsonl"
        assert run(capsys, "export", part, "--to", out, "-o", "json").code == 0
        parts += out.read_bytes()
    whole = tmp_path / "orders.jsonl"
    r = run(capsys, "export", "orders", "--to", whole, "-o", "json")
    assert r.code == 0, r.err
    assert r.json()["topic"] == ORDERS and r.json()["complete"]
    assert whole.read_bytes() == parts  # every partition's rows, in partition order
    topics = [json.loads(line)["topic"] for line in whole.read_text().splitlines()]
    assert sorted(set(topics)) == PARTS and topics == sorted(topics)
    r = run(capsys, "export", "no-such-topic", "--to", tmp_path / "x.jsonl")
    assert r.code == 1 and "not found" in r.err


def _complete(words: str, cwd: Path) -> tuple[int, list[str]]:
    """What bash completion offers for the last of ``words`` (ledgerctl's own completion
    protocol, as the script --install-completion installs runs it)."""
    done = subprocess.run(
        [ledgerctl_script()],
        cwd=cwd,
        env={
            **os.environ,
            "_LEDGERCTL_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout.split()


def test_topic_names_complete(demo: Path) -> None:  # noqa: F811
    code, got = _complete("ledgerctl seek ord", demo)
    assert code == 0 and got == [
        "orders",
        "orders-partition-0",
        "orders-partition-1",
        "orders-partition-2",
    ]
    code, got = _complete("ledgerctl verify public/default/batched", demo)
    assert got == ["public/default/batched", "public/default/batched-shadow"]
    code, got = _complete("ledgerctl export persistent://public/default/pl", demo)
    assert got == ["persistent://public/default/plain"]
    code, got = _complete("ledgerctl repair cursor tomb", demo)
    assert got == ["tombstones"]
    # no store to read: no candidates, no error, no hang
    started = time.monotonic()
    code, got = _complete("ledgerctl seek --metadata-url zk:127.0.0.1:1 ord", demo)
    assert code == 0 and got == [] and time.monotonic() - started < 30
