"""Replay the crash corpus (tests/data/fuzz-crashes/): what once crashed never does again."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarctl_py.decoders import DecodeOptions, decode_entry
from pulsarctl_py.decoders.entry import Depth, Outer
from tests.support.fuzz_targets import (
    CRASHES,
    TARGETS,
    corpus,
    render_everything,
    run_target,
    target_of,
)


def test_corpus_is_there_and_described() -> None:
    files = corpus()
    assert len(files) >= 5
    readme = (CRASHES / "README.md").read_text()
    for path in files:
        assert target_of(path) in TARGETS
        if not (CRASHES / f"{path.stem}.txt").exists():  # named by hand: described
            assert path.name in readme, path.name


@pytest.mark.parametrize("path", corpus(), ids=lambda p: p.stem)
def test_corpus_input_no_longer_crashes(path: Path) -> None:
    data = path.read_bytes()
    target = target_of(path)
    if target != "entry":
        run_target(target, data)
        return
    for outer in Outer:
        for depth in Depth:
            entry = decode_entry(data, DecodeOptions(outer=outer, depth=depth))
            assert render_everything(entry, human=True) > 0
