"""The native fast paths of compaction write the same bytes as the general path.

Phase one and phase two take keys, sizes and record boundaries from the native batch
splitter and rebuild kept batches from the original record bytes; the general path parses
every record into a protobuf and serializes the batch again. Over the reference model's
generated histories (every codec, tombstones, keyless, placeholders already in batches,
encrypted batches, chunks, markers, broker entry metadata), both paths must give identical
phase-one records, identical compacted entries (byte for byte) and identical statistics.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from pulsarctl_py.compaction import core
from pulsarctl_py.compaction.core import CompactionOptions, phase_one
from pulsarctl_py.decoders.speedups import native
from tests.compaction.test_core import OPTIONS, history, run, specs

pytestmark = pytest.mark.skipif(native is None, reason="the native module is not built")


def _general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # the general path is what runs when the splitter finds a batch irregular (and the
    # native compaction helpers are not there)
    monkeypatch.setattr(core, "_native_split", lambda entry: None)
    monkeypatch.setattr(core, "_native", lambda: None)


@settings(max_examples=150, deadline=None)
@given(entries=specs(), opts=OPTIONS)
def test_fast_and_general_paths_write_the_same_bytes(entries, opts):
    _raws, fast_out, fast_stats = run(entries, opts, None)
    with pytest.MonkeyPatch.context() as mp:
        _general_path(mp)
        _raws, slow_out, slow_stats = run(entries, opts, None)
    assert [(c.position, c.data, c.messages, c.batch_index) for c in fast_out] == [
        (c.position, c.data, c.messages, c.batch_index) for c in slow_out
    ]
    assert dataclasses.asdict(fast_stats) == dataclasses.asdict(slow_stats)


@settings(max_examples=100, deadline=None)
@given(entries=specs())
def test_fast_phase_one_gives_the_same_records(entries):

    raws = history(entries)
    opts = CompactionOptions()
    fast = list(phase_one(raws, opts))
    with pytest.MonkeyPatch.context() as mp:
        _general_path(mp)
        slow = list(phase_one(raws, opts))
    assert fast == slow


def test_the_fast_path_is_taken(monkeypatch):
    """Guard: a plain batch goes through the native helpers, phase one's and phase two's,
    and is rebuilt in C (else the tests above are moot)."""
    from tests.compaction.test_core import Msg, Spec

    calls: list[str] = []
    for name in ("compact_offer", "compact_keep"):
        original = getattr(native, name)
        monkeypatch.setattr(
            native, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a)
        )
    rebuilds: list[int] = []
    slow = core._rebuild_plain
    monkeypatch.setattr(core, "_rebuild_plain", lambda *a: rebuilds.append(1) or slow(*a))
    batch = Spec("batch", [Msg("a", b"1"), Msg("b", b"2"), Msg("a", b"3")], codec=1)
    _raws, out, stats = run([batch], CompactionOptions(), None)
    assert calls == ["compact_offer", "compact_keep"]
    assert not rebuilds and len(out) == 1 and stats.kept == 2
