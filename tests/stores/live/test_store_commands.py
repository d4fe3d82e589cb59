"""Which store a command reads, counted at the bookie: what a real bookie cannot tell.

That every command that reads ledgers, given only the metadata URLs, reads the running
bookies and answers as from their files is shown on the real cluster
(tests/cluster/sandbox/test_reads.py: inspect, topic info, ledger meta, verify, seek, compact and
its --status/--export, export, orphans). What stays here: compact --apply when no bookie
is registered to write to (a sandbox's bookies are), and what needs a bookie that counts
the connections it accepted and the reads it served, which a real bookie does not report:
the address override from the environment is the one dialled, listings never connect, and
a --bookie-dir wins over the running bookies (no connection at all). The demo's bookie
directory is served by a test bookie (tests/support/live_bookie.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsarctl_py.demo.model import BOOKIE_DIR, BOOKIE_ID, METADATA_DIR
from tests.support.cli_helpers import run
from tests.support.live_bookie import TestBookie
from tests.support.live_world import away_from_bookie_dirs, demo_root


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_root(tmp_path_factory, "live-commands")


@pytest.fixture()
def bookie(demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestBookie]:
    away_from_bookie_dirs(tmp_path, monkeypatch)  # the demo's ledgerctl.toml names one
    with TestBookie(demo / BOOKIE_DIR) as b:
        yield b


def _url(demo: Path) -> str:
    return f"rocksdb://{demo / METADATA_DIR}"


def test_compact_apply_with_no_registered_bookie_writes_nothing(
    capsys: pytest.CaptureFixture[str], demo: Path, bookie: TestBookie, tmp_path: Path
) -> None:
    # without --bookie-dir, --apply writes to the registered, writable bookies: the demo's
    # bookie is stopped (none registered), so there is nowhere to write, and nothing is
    # written (not even the plan)
    refused = run(capsys, "compact", "tombstones", "--apply", "--metadata-url", _url(demo),
                  "--plan", tmp_path / "p.json",
                  "--bookie-address", f"{BOOKIE_ID}={bookie.address}")  # fmt: skip
    assert refused.code == 3 and "not enough writable bookies" in refused.err
    assert refused.err.strip().splitlines()[-1].startswith("ledgerctl: error: ")
    assert not (tmp_path / "p.json").exists()


def test_the_environment_names_the_bookie_too(
    capsys: pytest.CaptureFixture[str],
    demo: Path,
    bookie: TestBookie,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEDGERCTL_BOOKIE_ADDRESSES", f"{BOOKIE_ID}={bookie.address}")
    res = run(capsys, "verify", "plain", "--metadata-url", _url(demo), "-o", "json")
    assert res.code == 0, res.err
    assert res.json()["summary"]["entries"] > 0 and bookie.requests


@pytest.mark.parametrize("args", [["topic", "list"], ["ledger", "list"]])
def test_listings_never_connect_to_a_bookie(
    capsys: pytest.CaptureFixture[str],
    demo: Path,
    bookie: TestBookie,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
) -> None:
    monkeypatch.setenv("LEDGERCTL_BOOKIE_ADDRESSES", f"{BOOKIE_ID}={bookie.address}")
    res = run(capsys, *args, "--metadata-url", _url(demo), "-o", "json")
    assert res.code == 0, res.err
    assert res.json()  # something was listed
    assert bookie.accepted == 0 and not bookie.requests


def test_a_bookie_dir_still_wins(
    capsys: pytest.CaptureFixture[str], demo: Path, bookie: TestBookie
) -> None:
    res = run(capsys, "inspect", "--topic", "batched", "-o", "json",
              "--metadata-url", _url(demo), "--bookie-dir", demo / BOOKIE_DIR,
              "--bookie-address", f"{BOOKIE_ID}={bookie.address}")  # fmt: skip
    assert res.code == 0, res.err
    assert bookie.accepted == 0  # the files were read, the bookie was never asked
