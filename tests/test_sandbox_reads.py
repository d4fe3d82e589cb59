"""Reads from the real cluster of scripts/sandbox, given only where its metadata lives."""

from __future__ import annotations

import json
import subprocess
import sys

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]


def _run(sandbox, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*LEDGERCTL, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _bare_env(sandbox) -> dict[str, str]:
    env = sandbox.env()
    env.pop("LEDGERCTL_METADATA_URL")
    env.pop("LEDGERCTL_BOOKKEEPER_METADATA_URL")
    return env


def _values(stdout: str) -> list[bytes]:
    import base64

    out = []
    for line in stdout.splitlines():
        entry = json.loads(line)
        out += [base64.b64decode(m["value"]) for m in entry.get("messages", [])]
    return out


def test_inspect_reads_the_running_bookies_given_both_urls(sandbox_world) -> None:
    box = sandbox_world.sandbox
    done = _run(
        box,
        "inspect",
        "--topic",
        sandbox_world.short("keyed"),
        "--metadata-url",
        box.metadata_url,
        "--bookkeeper-metadata-url",
        box.bookkeeper_metadata_url,
        "-o",
        "jsonl",
        env=_bare_env(box),
    )
    assert done.returncode == 0, done.stderr
    assert _values(done.stdout) == [s.value for s in sandbox_world.topics["keyed"]]


def test_broker_conf_alone_names_both_stores(sandbox_world) -> None:
    box = sandbox_world.sandbox
    done = _run(
        box,
        "inspect",
        "--topic",
        sandbox_world.short("keyed"),
        "--broker-conf",
        box.state["broker"]["conf"],
        "-o",
        "jsonl",
        env=_bare_env(box),
    )
    assert done.returncode == 0, done.stderr
    assert len(_values(done.stdout)) == len(sandbox_world.topics["keyed"])


def test_without_bookkeepers_place_the_answer_says_where_it_looked(sandbox_world) -> None:
    box = sandbox_world.sandbox
    env = _bare_env(box)
    done = _run(box, "ledger", "list", "--metadata-url", box.metadata_url, env=env)
    assert done.returncode == 1
    assert "no BookKeeper ledgers" in done.stderr and "--bookkeeper-metadata-url" in done.stderr
    done = _run(
        box,
        "inspect",
        "--topic",
        sandbox_world.short("keyed"),
        "--metadata-url",
        box.metadata_url,
        "-o",
        "jsonl",
        env=env,
    )
    assert done.returncode != 0
