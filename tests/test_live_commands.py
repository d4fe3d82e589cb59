"""Every command that reads ledgers, given only the metadata URL, reads the running bookies.

The demo's bookie directory is served by a test bookie (tests/live_bookie.py); each command
runs once with ``--bookie-dir`` (offline) and once with only ``--metadata-url`` and an
address override for the bookie id in the demo's ledger metadata. The answers must be the
same (but for what only a bookie's files can tell: fence bit, master key), and the bookie
must have served the reads. Listings stay metadata-only: they never connect.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.demo.builder import BOOKIE_DIR, BOOKIE_ID, METADATA_DIR
from tests.cli_helpers import run
from tests.live_bookie import TestBookie
from tests.live_world import away_from_bookie_dirs, demo_root

#: what a bookie's files tell and a running bookie's read protocol does not
FILE_ONLY = {"fenced", "has_master_key", "source", "limbo"}


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


def _without_file_facts(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _without_file_facts(v) for k, v in doc.items() if k not in FILE_ONLY}
    if isinstance(doc, list):
        return [_without_file_facts(v) for v in doc]
    return doc


def _both(capsys: Any, demo: Path, b: TestBookie, *args: str) -> tuple[Any, Any, int]:
    """(offline result, live result, reads the bookie served for the live one)."""
    offline = run(capsys, *args, "--metadata-url", _url(demo), "--bookie-dir", demo / BOOKIE_DIR)
    before = sum(1 for r in b.requests if r.op == "read")
    live = run(capsys, *args, "--metadata-url", _url(demo),
               "--bookie-address", f"{BOOKIE_ID}={b.address}")  # fmt: skip
    reads = sum(1 for r in b.requests if r.op == "read") - before
    return offline, live, reads


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "--all", "-o", "json"],
        ["topic", "info", "plain", "-o", "json"],  # its cursor's state is in a cursor ledger
        ["ledger", "meta", "3", "-o", "json"],
        ["inspect", "--topic", "batched", "-o", "json"],
        ["seek", "with-index", "--index", "3", "-o", "json"],
        ["seek", "seek-times", "--time", "2026-11-24T00:00:00Z", "-o", "json"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_reading_commands_go_live_with_only_the_metadata_url(
    capsys: pytest.CaptureFixture[str], demo: Path, bookie: TestBookie, args: list[str]
) -> None:
    offline, live, reads = _both(capsys, demo, bookie, *args)
    assert offline.code in (0, 1), offline.err
    assert (live.code, live.err.count("Traceback")) == (offline.code, 0), live.err
    assert _without_file_facts(live.json()) == _without_file_facts(offline.json())
    assert reads > 0  # the entries came from the bookie, not from a file


def test_compact_reads_live_and_apply_writes_to_registered_bookies(
    capsys: pytest.CaptureFixture[str], demo: Path, bookie: TestBookie, tmp_path: Path
) -> None:
    offline, live, reads = _both(capsys, demo, bookie, "compact", "tombstones", "-o", "json")
    assert (offline.code, live.code) == (0, 0), live.err
    got, want = live.json(), offline.json()
    got.pop("seconds"), want.pop("seconds")
    assert got == want and got["entries_in"] > 0 and reads >= got["entries_in"]
    # without --bookie-dir, --apply writes to the registered, writable bookies: the demo's
    # bookie is stopped (none registered), so there is nowhere to write, and nothing is
    refused = run(capsys, "compact", "tombstones", "--apply", "--metadata-url", _url(demo),
                  "--plan", tmp_path / "p.json",
                  "--bookie-address", f"{BOOKIE_ID}={bookie.address}")  # fmt: skip
    assert refused.code == 3 and "not enough writable bookies" in refused.err
    assert refused.err.strip().splitlines()[-1].startswith("ledgerctl: error: ")
    assert not (tmp_path / "p.json").exists()


def test_export_reads_live(
    capsys: pytest.CaptureFixture[str], demo: Path, bookie: TestBookie, tmp_path: Path
) -> None:
    files = [tmp_path / "offline.jsonl", tmp_path / "live.jsonl"]
    offline = run(capsys, "export", "batched", "--to", files[0], "-o", "json",
                  "--metadata-url", _url(demo), "--bookie-dir", demo / BOOKIE_DIR)  # fmt: skip
    live = run(capsys, "export", "batched", "--to", files[1], "-o", "json",
               "--metadata-url", _url(demo),
               "--bookie-address", f"{BOOKIE_ID}={bookie.address}")  # fmt: skip
    assert (offline.code, live.code) == (0, 0), live.err
    text = files[0].read_text()
    assert text and files[1].read_text() == text
    assert sum(1 for r in bookie.requests if r.op == "read") >= 10  # batched: 10 entries


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
