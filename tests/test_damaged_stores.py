"""Every read command on damaged copies of the demo data (issue 7, point 9).

Each damage of tests/support/damage.py is applied to a fresh copy of ``ledgerctl demo``; then
every read command runs in it and must end without a traceback, with exit 0, 1 (a
finding) or 3 (one line: the store cannot be read), and with every file's bytes unchanged.
The commands that read what was damaged must say so (exit 1 or 3); the metadata-only
commands must not fail because bookie storage is damaged. Permission damages run the
commands as an unprivileged user (the suite runs as root, who may read anything).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import damage
from tests.support.damage_runner import run_one
from tests.support.demo_env import demo_root, isolate

ROOT = Path(__file__).resolve().parent.parent
#: the shared fixture the damage copies start from
FIXTURES = (demo_root,)
NOBODY = 65534

#: command id -> arguments (JSON output: what scripts read)
COMMANDS: dict[str, list[str]] = {
    "inspect-ledger": ["inspect", "4", "-o", "json"],
    "inspect-topic": ["inspect", "--topic", "batched", "-o", "json"],
    "verify": ["verify", "--all", "-o", "json"],
    "topic-list": ["topic", "list", "-o", "json"],
    "topic-info": ["topic", "info", "batched", "-o", "json"],
    "ledger-list": ["ledger", "list", "-o", "json"],
    "ledger-meta": ["ledger", "meta", "4", "-o", "json"],
    "bookie-logs": ["bookie", "logs", "-o", "json"],
    "bookie-log": ["bookie", "log", "0", "-o", "json"],
    "bookie-journal": ["bookie", "journal", "-o", "json"],
    "bookie-check": ["bookie", "check", "-o", "json"],
}
READERS = {"inspect-ledger", "inspect-topic", "verify"}
METADATA_ONLY = {"topic-list", "ledger-list"}

#: damage -> the commands that read what it damaged: they must exit 1 or 3
MUST_REPORT: dict[str, set[str]] = {
    "deny-entry-log": READERS | {"ledger-meta", "bookie-logs", "bookie-log", "bookie-check"},
    "deny-all-entry-logs": READERS | {"ledger-meta", "bookie-logs", "bookie-log", "bookie-check"},
    "deny-index-dirs": READERS | {"ledger-meta", "bookie-check"},
    "deny-metadata-dir": READERS | {"topic-list", "topic-info", "ledger-list", "ledger-meta"},
    "deny-journal": READERS | {"bookie-journal", "bookie-check"},
    "deny-current-dir": set(COMMANDS),
    "corrupt-metadata-block": READERS | {"ledger-meta"},
    "flip-locations-bytes": READERS | {"ledger-meta", "bookie-check"},
    "delete-locations": READERS | {"ledger-meta", "bookie-check"},
    "delete-ledgers-index": READERS | {"ledger-meta", "bookie-check"},
    "delete-both-indexes": READERS | {"ledger-meta", "bookie-check"},
    "garbage-locations": READERS | {"ledger-meta", "bookie-check"},
    "garbage-ledgers-index": READERS | {"ledger-meta", "bookie-check"},
    "huge-ledgers-map": {"bookie-logs", "bookie-check"},
    "cut-entry-log": READERS | {"ledger-meta", "bookie-logs", "bookie-log", "bookie-check"},
    "cut-journal-below-mark": READERS | {"bookie-journal", "bookie-check"},
    "zero-entry-log-header": {"bookie-logs", "bookie-log", "bookie-check"},
    "garbage-last-mark": READERS | {"bookie-journal", "bookie-check"},
}
#: exact codes where the kind of end is certain: a store the user may not read is 3
EXACT_CODE: dict[tuple[str, str], int] = {
    ("deny-metadata-dir", "topic-list"): 3,
    ("deny-metadata-dir", "verify"): 3,
    ("deny-current-dir", "bookie-check"): 3,
    ("deny-current-dir", "inspect-ledger"): 3,
    ("corrupt-metadata-block", "verify"): 3,
    ("deny-entry-log", "bookie-log"): 3,
    ("cut-entry-log", "bookie-log"): 1,
    ("delete-locations", "verify"): 1,
    ("flip-locations-bytes", "inspect-ledger"): 1,
}
#: damages after which the metadata-only commands cannot work at all
METADATA_DAMAGES = {"deny-metadata-dir", "corrupt-metadata-block", "deny-current-dir"}


def test_every_damage_has_expectations() -> None:
    assert set(MUST_REPORT) == set(damage.DAMAGES)


@pytest.fixture
def pristine(demo_root: Path) -> Path:
    """The undamaged demo (made once per module): every damage works on a copy of it."""
    return demo_root


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


def _copy(pristine: Path, tmp_path: Path, name: str) -> Path:
    root = tmp_path / "demo"
    shutil.copytree(pristine, root)
    for dirpath, dirs, files in os.walk(root):  # readable by anyone, as a bookie's files
        for entry in dirs:
            os.chmod(os.path.join(dirpath, entry), 0o755)
        for entry in files:
            os.chmod(os.path.join(dirpath, entry), 0o644)
    os.chmod(tmp_path, 0o755)
    damage.DAMAGES[name](root)
    return root


def _run_in_process(root: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    monkeypatch.chdir(root)
    return [run_one(args) for args in COMMANDS.values()]


def _run_command(root: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> dict:
    monkeypatch.chdir(root)
    return run_one(COMMANDS[command])


def _run_as_nobody(root: Path, commands: list[list[str]] | None = None) -> list[dict]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "HOME": str(root.parent),
        "XDG_CONFIG_HOME": str(root.parent / "no-user-config"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": "/tmp",
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
        input=json.dumps(list(COMMANDS.values()) if commands is None else commands),
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _judge(name: str, results: list[dict]) -> list[str]:
    wrong = []
    for command, result in zip(COMMANDS, results, strict=True):
        code, err = result["code"], result["stderr"]
        where = f"{name} / {command}"
        if result["crash"] is not None:
            wrong.append(f"{where}: traceback\n{result['crash']}")
            continue
        if code not in (0, 1, 3):
            wrong.append(f"{where}: exit {code}: {err[-300:]}")
        if code == 3:
            lines = err.strip().splitlines()
            if len(lines) != 1 or not lines[0].startswith("ledgerctl: error: "):
                wrong.append(f"{where}: exit 3 without one error line: {err[-300:]}")
        if "Traceback" in err:
            wrong.append(f"{where}: a traceback on stderr")
        if (name, command) in EXACT_CODE and code != EXACT_CODE[name, command]:
            wrong.append(f"{where}: exit {code}, not {EXACT_CODE[name, command]}")
        if command in MUST_REPORT[name] and code not in (1, 3):
            wrong.append(f"{where}: exit {code}, the damage went unreported")
        if command in METADATA_ONLY and name not in METADATA_DAMAGES and code != 0:
            wrong.append(f"{where}: a metadata-only command failed ({code}): {err[-300:]}")
        if code == 1 and result["stdout"].strip():
            json.loads(result["stdout"])  # findings still come as the JSON promised
    return wrong


@pytest.mark.parametrize("name", sorted(damage.BYTES))
def test_read_commands_on_damaged_bytes(
    name: str,
    pristine: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    isolated: None,
) -> None:
    root = _copy(pristine, tmp_path, name)
    before = damage.tree_digest(root)
    results = _run_in_process(root, monkeypatch)
    assert damage.tree_digest(root) == before, "a read-only command changed a file"
    wrong = _judge(name, results)
    assert not wrong, "\n".join(wrong)


def _can_drop_privileges() -> str | None:
    if os.geteuid() != 0:
        return "needs root to run the commands as another, unprivileged user"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    return None


@pytest.mark.skipif(_can_drop_privileges() is not None, reason=str(_can_drop_privileges()))
@pytest.mark.parametrize("name", sorted(damage.PERMISSION))
def test_read_commands_as_a_user_denied_access(name: str, pristine: Path, isolated: None) -> None:
    # pytest's own tmp dirs are private to root: the user could not even reach the copy
    base = Path(tempfile.mkdtemp(prefix="ledgerctl-damage-"))
    try:
        root = _copy(pristine, base, name)
        before = damage.tree_digest(root)
        results = _run_as_nobody(root)
        assert damage.tree_digest(root) == before, "a read-only command changed a file"
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)
    wrong = _judge(name, results)
    assert not wrong, "\n".join(wrong)


def test_pristine_demo_is_clean(
    pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: None
) -> None:
    """The damage tests mean something: undamaged, every command exits 0."""
    root = tmp_path / "demo"
    shutil.copytree(pristine, root)
    results = _run_in_process(root, monkeypatch)
    assert [(r["args"][:2], r["code"], r["crash"]) for r in results] == [
        (args[:2], 0, None) for args in COMMANDS.values()
    ]


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("delete-locations", "storage-index-unusable"),
        ("delete-ledgers-index", "storage-index-unusable"),
        ("garbage-locations", "storage-index-unusable"),
        ("cut-journal-below-mark", "storage-damaged"),
        ("flip-locations-bytes", "storage-damaged"),
    ],
)
def test_verify_names_what_a_bookie_could_not_serve(
    name: str,
    check: str,
    pristine: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    isolated: None,
) -> None:
    """Entries found only by scanning the logs are not "ok": a bookie could not serve them."""
    root = _copy(pristine, tmp_path, name)
    result = _run_command(root, monkeypatch, "verify")
    assert result["code"] == 1, result["stderr"]
    doc = json.loads(result["stdout"])
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert check in {f["check"] for f in errors}, errors
    assert doc["summary"]["ok"] is False


def test_inspect_reports_an_index_rebuilt_by_scanning(
    pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: None
) -> None:
    root = _copy(pristine, tmp_path, "delete-locations")
    result = _run_command(root, monkeypatch, "inspect-ledger")
    assert result["code"] == 1
    summary = json.loads(result["stdout"])["summary"]
    assert summary["entries"] > 0  # still read, by scanning the entry logs
    (problem,) = summary["problems"]
    assert problem["check"] == "storage-index-unusable"
    assert "could not serve" in problem["message"]


def test_a_cut_entry_log_is_not_zero_records(
    pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: None
) -> None:
    root = _copy(pristine, tmp_path, "cut-entry-log")
    result = _run_command(root, monkeypatch, "bookie-log")
    assert result["code"] == 1
    doc = json.loads(result["stdout"])
    assert doc["records"] == []
    assert any("shorter than its 1024-byte header" in p["message"] for p in doc["problems"])


def test_a_ledgers_map_claiming_more_than_the_file(
    pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: None
) -> None:
    root = _copy(pristine, tmp_path, "huge-ledgers-map")
    result = _run_command(root, monkeypatch, "bookie-logs")
    assert result["code"] == 1
    assert "the ledgers map claims 1000000" in result["stderr"]


@pytest.mark.skipif(_can_drop_privileges() is not None, reason=str(_can_drop_privileges()))
def test_a_private_sibling_of_the_bookie_dirs_is_skipped(pristine: Path, isolated: None) -> None:
    """A data root holding ledgers/current and a private lost+found still opens as a user."""
    base = Path(tempfile.mkdtemp(prefix="ledgerctl-damage-"))
    try:
        os.chmod(base, 0o755)
        data = base / "data"
        shutil.copytree(pristine / "bookkeeper" / "current", data / "ledgers" / "current")
        subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
        (data / "lost+found").mkdir(mode=0o700)
        (result,) = _run_as_nobody(data, [["bookie", "logs", "--bookie-dir", ".", "-o", "json"]])
        assert result["crash"] is None and result["code"] == 0, result["stderr"]
        assert len(json.loads(result["stdout"])) == len(damage.entry_logs(pristine))
    finally:
        shutil.rmtree(base, ignore_errors=True)
