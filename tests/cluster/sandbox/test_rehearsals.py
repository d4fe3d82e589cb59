"""Every runbook rehearsed on the sandbox, as its "Rehearse it" section says.

The ```sh rehearse blocks of each runbook in docs/runbooks run line by line, with the
runner and the `# exit N` convention of tests/test_guide_runbooks.py, against the session's
sandbox: with the environment `scripts/sandbox env` prints, ``$SANDBOX`` the sandbox's
directory and ``$RUN`` a suffix of this run (the blocks name their topics with it, so a
reused sandbox gets new ones), in a working directory where ``scripts/sandbox`` is the
repository's. No broker is stopped: the live path. A runbook stops at its first failing
line (the next lines build on it). Afterwards the topics the rehearsal made are deleted
through the broker, so that the session's cluster stays healthy for the tests after it
(``verify --all`` in test_verify.py).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import urllib.parse
import uuid
from pathlib import Path

import pytest

from tests.support.fixtures.sandbox import sandbox_script
from tests.test_guide_runbooks import parse_steps, run_steps

ROOT = Path(__file__).resolve().parents[3]
RUNBOOKS = sorted((ROOT / "docs" / "runbooks").glob("*.md"))
REHEARSE = "sh rehearse"
#: a line's time limit: `without-index` restarts the broker twice, and on two busy cores
#: a broker start alone has taken a minute
LINE_S = 300
#: this run's suffix of the rehearsals' topic names
RUN = uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
def rehearsal(sandbox) -> dict[str, str]:
    """What every rehearsal shares: the environment `scripts/sandbox env` prints."""
    printed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sandbox"), "env", str(sandbox.dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    env = {}
    for line in printed.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = shlex.split(value)[0] if value else ""
    assert "LEDGERCTL_METADATA_URL" in env, printed
    env["SANDBOX"] = str(sandbox.dir)
    # the runner gives each runbook a HOME of its own: the jars stay where they were fetched
    env["LEDGERCTL_SANDBOX_CACHE"] = str(sandbox_script().cache_root())
    return env


def _delete_topics(sandbox, suffix: str) -> None:
    """The rehearsal's topics (named with ``suffix``), shadows first, through the broker."""
    tenants = sandbox.admin("GET", "/tenants")
    for tenant in tenants:
        for ns in sandbox.admin("GET", f"/namespaces/{tenant}"):
            topics = [t for t in sandbox.admin("GET", f"/persistent/{ns}") if suffix in t]
            for topic in sorted(topics, key=lambda t: "shadow" not in t):
                sandbox.admin(
                    "DELETE",
                    sandbox.topic_path(topic) + "?" + urllib.parse.urlencode({"force": "true"}),
                    ok=(200, 204, 404),
                )


@pytest.mark.parametrize("page", RUNBOOKS, ids=lambda p: p.stem)
def test_runbook_rehearses_on_the_sandbox(
    page: Path, sandbox, rehearsal: dict[str, str], tmp_path: Path
) -> None:
    steps = parse_steps(page.read_text(encoding="utf-8"), REHEARSE)
    assert steps, f'{page.name} has no ```{REHEARSE} block (its "Rehearse it" section)'
    work = tmp_path / "work"
    work.mkdir()
    (work / "scripts").symlink_to(ROOT / "scripts")
    state = tmp_path / "state"
    state.mkdir()
    suffix = f"{RUN}{RUNBOOKS.index(page)}"
    env = {**rehearsal, "RUN": suffix}
    try:
        failures = run_steps(steps, work, state, env, stop_at_failure=True, timeout=LINE_S)
    finally:
        _delete_topics(sandbox, suffix)
    assert not failures, "\n".join(failures)
