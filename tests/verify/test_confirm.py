"""verify on a cluster the broker changes while it reads: a finding that compares two reads
made at different times is reported only if fresh reads confirm it (pulsarctl_py/verify
/confirm.py).

The worlds here are the verify world's healthy data; the metadata store answers the first
read of one topic's managed-ledger znode with what it held a moment earlier (the read
verify made just before the broker's step), and every later read with what it holds now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from pulsarctl_py.verify import VerifyStats, verify_topics
from pulsarctl_py.verify.confirm import confirmed
from pulsarctl_py.verify.core import ERROR, Finding
from tests.support.verify_world import ORDERS, World, build_world


class EarlierFirstRead:
    """A metadata store whose first read of ``path`` answers ``earlier`` (the node as it was
    before the broker's step), like a read that straddled it; everything else is the
    store's."""

    def __init__(self, store: Any, path: str, earlier: bytes) -> None:
        self._store = store
        self._path = path
        self._earlier: bytes | None = earlier
        self.stale_reads = 0

    def get(self, path: str) -> Any:
        node = self._store.get(path)
        if path == self._path and self._earlier is not None and node is not None:
            data, self._earlier = self._earlier, None
            self.stale_reads += 1
            return node._replace(data=data)
        return node

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("confirm") / "world")


def _verify(world: World, earlier: bytes) -> tuple[list[Finding], VerifyStats, int]:
    from pulsarctl_py.stores.metadata import resolve_topic

    path = resolve_topic(ORDERS).ml_path
    stats = VerifyStats()
    with world.source() as source:
        store = EarlierFirstRead(source.metadata, path, earlier)
        source.metadata = store
        findings = list(verify_topics(source, [ORDERS], stats=stats))
    return findings, stats, store.stale_reads


def _earlier_list(world: World, edit: Any) -> bytes:
    from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic

    store = open_metadata_store(world.metadata_url)
    try:
        node = store.get(resolve_topic(ORDERS).ml_path)
        assert node is not None
        info = mlpb.ManagedLedgerInfo()
        info.ParseFromString(node.data)
    finally:
        store.close()
    edit(info)
    return info.SerializeToString()


def _before_rollover(info: mlpb.ManagedLedgerInfo) -> None:
    """The list before the broker rolled to ledger 12 (11 still the last, open)."""
    kept = [li for li in info.ledgerInfo if li.ledgerId != 12]
    del info.ledgerInfo[:]
    for li in kept:
        copy = info.ledgerInfo.add()
        copy.CopyFrom(li)
    info.ledgerInfo[-1].ClearField("entries")
    info.ledgerInfo[-1].ClearField("size")


def _before_trim(info: mlpb.ManagedLedgerInfo) -> None:
    """The list before the broker trimmed ledger 9 (consumed; since deleted from BookKeeper)."""
    kept = list(info.ledgerInfo)
    del info.ledgerInfo[:]
    info.ledgerInfo.add(ledgerId=9, entries=3, size=300, timestamp=1)
    for li in kept:
        info.ledgerInfo.add().CopyFrom(li)


@pytest.mark.parametrize(
    ("edit", "raced"),
    [(_before_rollover, "cursor-unknown-ledger"), (_before_trim, "ledger-missing-metadata")],
)
def test_a_read_that_straddles_a_broker_step_is_no_finding(
    healthy: World, edit: Any, raced: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier = _earlier_list(healthy, edit)
    before = healthy.digest()
    # without the second judgement the straddling read is a finding (what verify said
    # before on a live cluster)
    import pulsarctl_py.verify.confirm as confirm_module

    monkeypatch.setattr(confirm_module, "confirmed", lambda run, topic, found: found)
    findings, _, stale = _verify(healthy, earlier)
    assert stale == 1
    assert raced in {f.check for f in findings if f.severity == ERROR}, findings
    monkeypatch.undo()
    findings, stats, stale = _verify(healthy, earlier)
    assert stale == 1
    assert findings == [], [(f.check, f.message) for f in findings]
    assert stats.unconfirmed >= 1 and stats.ok
    assert healthy.digest() == before


def test_a_finding_that_holds_on_the_second_read_is_reported(tmp_path: Path) -> None:
    """The cursor really is past the topic's last ledger: both reads say so."""
    world = build_world(tmp_path / "w", "cursor-unknown-ledger")
    from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic

    store = open_metadata_store(world.metadata_url)
    try:
        node = store.get(resolve_topic(ORDERS).ml_path)
        assert node is not None
        same = node.data
    finally:
        store.close()
    findings, stats, stale = _verify(world, same)
    assert stale == 1
    assert [f.check for f in findings] == ["cursor-unknown-ledger"]
    assert stats.unconfirmed == 0


def test_findings_without_a_second_judgement_pass_through() -> None:
    finding = Finding(ERROR, "entry-corrupt", ORDERS, 10, 1, "bad", {})
    assert list(confirmed(None, None, [finding])) == [finding]  # type: ignore[arg-type]
