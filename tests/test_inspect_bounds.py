"""`inspect --max-message-size` (issue 7 point 10): a stored entry that claims a huge
uncompressed size is a finding with bounded memory, and the cap is overridable.

The bookie directory is written with ledgerctl's own writers; peak RSS is measured the way
tests/test_bounds.py measures it (a fresh ``ledgerctl`` process, ``wait4``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.decoders import bookkeeper
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, master_key
from pulsarctl_py.stores.bookie import write_db_ledger_dir
from tests.support.cli_helpers import run
from tests.test_bounds import BASELINE, MiB, run_measured, zstd_bomb

LEDGER = 7


def _bookie_dir(root: Path, payloads: list[bytes]) -> Path:
    """A DbLedgerStorage bookie dir whose ledger LEDGER holds ``payloads`` (CRC32C)."""
    entries, length = [], 0
    for entry_id, payload in enumerate(payloads):
        length += len(payload)
        header = BookieEntryHeader(LEDGER, entry_id, entry_id - 1, length)
        entries.append(bookkeeper.build(header, payload, DigestType.CRC32C, b""))
    write_db_ledger_dir(root / "current", entries, master_key(b""))
    return root


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("LEDGERCTL_METADATA_URL", "LEDGERCTL_BOOKIE_DIRS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))


@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS from wait4 on Linux")
def test_inspect_reports_a_stored_bomb_with_bounded_memory(tmp_path: Path, clean_env: None) -> None:
    bookie = _bookie_dir(tmp_path / "bookie", [zstd_bomb(400 * MiB)])  # under the old 512 MiB cap
    assert sum(f.stat().st_size for f in bookie.rglob("*") if f.is_file()) < 2 * MiB
    code, rss, err = run_measured(
        "inspect", str(LEDGER), "--bookie-dir", str(bookie), "-o", "json", "--quiet"
    )
    assert code == 1, err
    assert rss < BASELINE, f"peak RSS {rss / MiB:.0f} MiB"


def test_inspect_cap_is_a_finding_naming_the_flag_and_overridable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, clean_env: None
) -> None:
    size = 2 * MiB
    bookie = str(_bookie_dir(tmp_path / "bookie", [zstd_bomb(size)]))
    base = ("inspect", str(LEDGER), "--bookie-dir", bookie, "-o", "json", "--quiet")

    ok = run(capsys, *base)  # the 64 MiB default decodes it
    assert ok.code == 0, ok.err
    (entry,) = ok.json()["entries"]
    assert entry["ok"] is True and len(entry["messages"]) == 1

    low = run(capsys, *base, "--max-message-size", "1MiB")
    assert low.code == 1, low.err
    (entry,) = low.json()["entries"]
    assert entry["ok"] is False and entry["messages"] == []
    (problem,) = entry["problems"]
    assert problem["severity"] == "error"
    assert f"uncompressed_size {size} exceeds the limit of {MiB} bytes" in problem["message"]
    assert "--max-message-size" in problem["message"]

    for raised in ("3MiB", "3m", str(size)):
        again = run(capsys, *base, "--max-message-size", raised)
        assert again.code == 0, (raised, again.err)
        assert json.loads(again.out)["entries"][0]["ok"] is True


@pytest.mark.parametrize("bad", ["abc", "0", "5 parsecs", "-1"])
def test_max_message_size_bad_values_are_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, clean_env: None, bad: str
) -> None:
    bookie = str(_bookie_dir(tmp_path / "bookie", [zstd_bomb(1024)]))
    result = run(capsys, "inspect", str(LEDGER), "--bookie-dir", bookie, "--max-message-size", bad)
    assert result.code == 2
    assert "--max-message-size" in result.err and "Traceback" not in result.err


@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS from wait4 on Linux")
def test_verify_reports_a_stored_bomb_as_inspect_does_with_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    """verify decodes payloads as inspect does, under the same --max-message-size: a bomb
    past it is entry-undecodable, never allocated."""
    from tests.support import verify_world

    real = verify_world._Builder.pulsar_entry

    def with_bomb(self: Any, ledger_id: int, entry_id: int, *, bem: bool) -> bytes:
        data = real(self, ledger_id, entry_id, bem=bem)
        if (ledger_id, entry_id) == (40, 1):
            data = self.pulsar[(ledger_id, entry_id)] = zstd_bomb(400 * MiB)
        return data

    monkeypatch.setattr(verify_world._Builder, "pulsar_entry", with_bomb)
    world = verify_world.build_world(tmp_path / "world")
    args = ("--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir))
    code, rss, err = run_measured("verify", verify_world.PLAIN, "-o", "json", *args)
    assert code == 1, err
    assert rss < BASELINE, f"peak RSS {rss / MiB:.0f} MiB"
    # the same entry read by inspect is a finding under the default cap
    code, rss, err = run_measured("inspect", "--topic", verify_world.PLAIN, "-o", "json", *args)
    assert code == 1, err
    assert rss < BASELINE, f"peak RSS {rss / MiB:.0f} MiB"
