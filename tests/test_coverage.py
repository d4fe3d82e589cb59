"""Gaps and Tracker (pulsarctl_py.coverage): what a scan could not read, counted exactly."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.coverage import LISTED, Gaps, Tracker


@given(
    first=st.integers(0, 50),
    length=st.integers(0, 80),
    data=st.data(),
    repeat=st.booleans(),
    runs=st.booleans(),
)
def test_the_tracker_finds_exactly_the_ids_not_seen(first, length, data, repeat, runs):
    last = first + length - 1
    ids = sorted(data.draw(st.sets(st.integers(first, max(first, last)), max_size=length)))
    unreadable = set(data.draw(st.sets(st.sampled_from(ids), max_size=3))) if ids else set()
    gaps = Gaps()
    tracker = Tracker(gaps, 7, first, last)
    if runs:  # the native runs of the head path: ids in order, a chunk at a time
        unreadable = set()
        cut = data.draw(st.integers(0, len(ids)))
        tracker.see_run(ids[:cut])
        tracker.see_run(ids[cut:])
    else:
        for i in ids:
            tracker.see(i, "bad" if i in unreadable else None)
            if repeat:
                tracker.see(i)  # told twice: counted once
    tracker.see(first - 1)  # before the range: ignored
    tracker.finish()
    expected_missing = set(range(first, last + 1)) - set(ids)
    assert gaps.missing_count == len(expected_missing)
    listed = {e for _, a, b in gaps.missing for e in range(a, b + 1)}
    assert listed <= expected_missing
    if len(gaps.missing) < LISTED:
        assert listed == expected_missing
    assert gaps.unreadable_count == len(unreadable)
    assert gaps.complete == (not expected_missing and not gaps.unreadable_count)
    # merged, and sent back from an executor, the counts stay
    total = Gaps()
    total.add(pickle.loads(pickle.dumps(gaps)))
    total.add(gaps)
    assert total.missing_count == 2 * gaps.missing_count
    assert len(total.errors()) <= 2 * (3 * LISTED + 3)


def test_errors_are_one_line_each_and_count_what_is_not_listed():
    gaps = Gaps()
    for i in range(LISTED + 5):
        gaps.entries_missing(3, 2 * i, 2 * i)
    gaps.ledger_missing(4, 10, "no entry of it is in storage")
    gaps.entries_past_last(5, 3, 4)
    lines = gaps.errors()
    assert lines[0] == "ledger 4 (10 entries) is not read: no entry of it is in storage"
    assert lines[-1] == "5 more entries are not in storage"
    # entries past a closed ledger's end are no part of it: a note, not an error
    (note,) = gaps.notes()
    assert note.startswith("entries 5:3..4 are stored past the closed ledger's last entry 2")
    assert all("\n" not in line for line in [*lines, note])
    doc = gaps.to_json()
    assert doc["complete"] is False and doc["entries_missing"] == LISTED + 5
    assert doc["ledgers_missing"] == [4] and doc["entries_past_last"] == 2
    assert doc["notes"] == [note]
    only_past = Gaps()
    only_past.entries_past_last(5, 3, 4)
    assert only_past.complete and only_past.errors() == []
