"""Where LedgerSource reads an offloaded ledger from: the reader chosen by the offload's
driver, the overrides, the jcloud reader in the filesystem reader's shape, and the settings
(precedence) that choose them."""

from __future__ import annotations

import pickle

import pytest

from pulsarctl_py.decoders.errors import EXIT_FINDINGS, EXIT_USAGE, LedgerctlError
from pulsarctl_py.engines.base import build_scan_plan
from pulsarctl_py.ledgers import resolve_tiered
from pulsarctl_py.stores.tiered.jcloud import JcloudLedger
from pulsarctl_py.stores.tiered.locate import JcloudReader, TieredLedger, open_tiered
from tests.stores.tiered.test_jcloud import LEDGER, UUID, _blocks, ledger_of, pulsar_entries
from tests.support.jcloud_writer import MemoryObjects


def _loc(driver: str = "S3", **kw: object) -> TieredLedger:
    props = (
        {"bucket": "b", "serviceEndpoint": "http://127.0.0.1:1"}
        if driver == "S3"
        else {"storageBasePath": "file:///nowhere"}
    )
    fields: dict[str, object] = {
        "ledger_id": LEDGER,
        "managed_ledger": "t/ns/persistent/x",
        "entries": 3,
        "size": 30,
        "uid": UUID,
        "complete": True,
        "bookkeeper_deleted": True,
        "driver": driver,
        "properties": props,
    }
    fields.update(kw)
    return TieredLedger(**fields)  # type: ignore[arg-type]


def _one_line(exc: pytest.ExceptionInfo[LedgerctlError], code: int) -> str:
    text = exc.value.one_line()
    assert exc.value.exit_code == code and "\n" not in text
    return text


@pytest.mark.parametrize(
    ("driver", "url", "says"),
    [
        ("S3", "file:///copy", "read from s3://bucket, not file:///copy"),
        ("filesystem", "s3://bucket", "read from file:///dir, not s3://bucket"),
        ("google-cloud-storage", None, "only the filesystem offloader's and the S3 drivers'"),
    ],
)
def test_a_copy_or_driver_it_cannot_read_is_one_line(
    driver: str, url: str | None, says: str
) -> None:
    with pytest.raises(LedgerctlError) as exc:
        open_tiered(_loc(driver), url)
    assert says in _one_line(exc, EXIT_USAGE)


def test_an_interrupted_offload_is_a_finding() -> None:
    with pytest.raises(LedgerctlError) as exc:
        open_tiered(_loc(complete=False))
    text = _one_line(exc, EXIT_FINDINGS)
    assert "never completed" in text and "BookKeeper copy is gone" in text


def test_where_names_the_object_or_directory() -> None:
    assert _loc().where() == f"s3://b/{UUID}-ledger-{LEDGER}"
    assert _loc("filesystem").where() == f"file:///nowhere/t/ns/persistent/x/{LEDGER}-{UUID}"


def test_jcloud_reader_has_the_filesystem_readers_shape() -> None:
    """metadata() and entries with ``error`` set for a damaged block's entries (with
    keep_going), raising without it."""
    entries = pulsar_entries(12)
    _, _, spans = _blocks(entries)
    ledger, _objects, data, index = ledger_of(entries, max_block_size=300)
    reader = JcloudReader(ledger)
    assert reader.metadata().last_entry_id == len(entries) - 1
    got = list(reader.read_entries(0, None))
    assert [e.data for e in got] == entries and all(e.error is None for e in got)
    # the second block's header damaged: its entries come out unreadable, the rest whole
    offset, first, last = spans[1]
    broken = bytearray(data)
    broken[offset] ^= 0xFF
    objects = MemoryObjects()
    objects.put_ledger(UUID, LEDGER, bytes(broken), index, "1")
    damaged = JcloudReader(JcloudLedger(objects, LEDGER, UUID))
    got = list(damaged.read_entries(0, None, keep_going=True))
    assert [e.entry_id for e in got] == list(range(len(entries)))
    bad = [e.entry_id for e in got if e.error is not None]
    assert bad == list(range(first, last + 1))
    assert all(f"ledger {LEDGER}" in e.error for e in got if e.error)
    with pytest.raises(LedgerctlError, match="damaged header"):
        list(damaged.read_entries(0, None))


def test_settings_resolve_flag_env_and_refuse_a_bad_prefer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    from pulsarctl_py import precedence

    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]
    for name in ("LEDGERCTL_OFFLOAD_URL", "LEDGERCTL_S3_ENDPOINT", "LEDGERCTL_PREFER"):
        monkeypatch.delenv(name, raising=False)
    assert resolve_tiered() == {"offload_url": None, "s3_endpoint": None, "prefer": "tiered"}
    monkeypatch.setenv("LEDGERCTL_S3_ENDPOINT", "http://env:9000")
    monkeypatch.setenv("LEDGERCTL_PREFER", "BookKeeper")
    with precedence.flags(offload_url="s3://copy"):
        assert resolve_tiered() == {
            "offload_url": "s3://copy",
            "s3_endpoint": "http://env:9000",
            "prefer": "bookkeeper",
        }
    monkeypatch.setenv("LEDGERCTL_PREFER", "bookies")
    with pytest.raises(LedgerctlError) as exc:
        resolve_tiered()
    assert "LEDGERCTL_PREFER" in _one_line(exc, EXIT_USAGE)


def test_splits_carry_the_drivers_offload_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERCTL_OFFLOAD_URL", "file:///copy")
    monkeypatch.delenv("LEDGERCTL_S3_ENDPOINT", raising=False)
    monkeypatch.delenv("LEDGERCTL_PREFER", raising=False)
    (split,) = build_scan_plan("t", [(1, 3, 30)], bookie_dirs=["bk"]).splits
    split = pickle.loads(pickle.dumps(split))  # as an executor gets it
    assert split.source_options() == {
        "tiered": True,
        "offload_url": "file:///copy",
        "s3_endpoint": None,
        "prefer": "tiered",
    }
    (plain,) = build_scan_plan("t", [(1, 3, 30)], bookie_dirs=["bk"], tiered=False).splits
    assert plain.source_options() == {"tiered": False}
