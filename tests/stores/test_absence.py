"""What an absent entry proves (pulsarctl_py.stores.absence): missing only when every bookie
of its write set was read whole, else not covered; and whose data directories are, by the
cookie BookKeeper writes into each of them."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.stores.absence import Judge, Reach, reach_of_dirs, registered_cookies
from pulsarctl_py.stores.live.registry import parse_cookie

BOOKIES = [f"10.0.0.{i}:3181" for i in range(6)]


def _metadata(segments: dict[int, list[str]], write_quorum: int) -> lm.LedgerMetadata:
    size = len(next(iter(segments.values())))
    return lm.LedgerMetadata(
        ensemble_size=size,
        write_quorum_size=write_quorum,
        ack_quorum_size=write_quorum,
        state=lm.LedgerState.CLOSED,
        ensembles=segments,
        last_entry_id=10_000,
    )


@st.composite
def ledgers(draw: st.DrawFn) -> tuple[lm.LedgerMetadata, Reach, int, int]:
    size = draw(st.integers(1, 4))
    quorum = draw(st.integers(1, size))
    starts = sorted(set(draw(st.lists(st.integers(1, 60), max_size=3))) | {0})
    segments = {s: draw(st.permutations(BOOKIES))[:size] for s in starts}
    read = frozenset(draw(st.sets(st.sampled_from(BOOKIES))))
    first = draw(st.integers(0, 80))
    last = draw(st.integers(first - 1, first + 80))
    return _metadata(segments, quorum), Reach(whole=read), first, last


def _write_set(md: lm.LedgerMetadata, e: int) -> list[str]:
    ensemble = md.ensemble_for(e)
    return [ensemble[(e + i) % len(ensemble)] for i in range(md.write_quorum_size)]


@given(ledgers())
def test_an_entry_is_missing_exactly_when_its_whole_write_set_was_read(case) -> None:
    md, reach, first, last = case
    absence = Judge(md, reach)(first, last)
    missing = {e for e in range(first, last + 1) if set(_write_set(md, e)) <= reach.whole}
    uncovered = set(range(first, last + 1)) - missing
    assert absence.missing_count == len(missing)
    assert absence.uncovered_count == len(uncovered)
    listed = {e for a, b in absence.missing for e in range(a, b + 1)}
    assert listed == missing  # few enough to list them all
    assert {e for a, b in absence.uncovered for e in range(a, b + 1)} == uncovered
    # the bookies named are those of the uncovered entries' write sets that were not read
    named = {b for e in uncovered for b in _write_set(md, e) if b not in reach.whole}
    assert set(absence.unread) == named


def test_one_bookie_of_three_with_write_quorum_two_proves_nothing() -> None:
    """The sandbox's placement: each entry on two of three bookies."""
    md = _metadata({0: BOOKIES[:3]}, 2)
    for bookie in BOOKIES[:3]:
        absence = Judge(md, Reach(whole=frozenset({bookie})))(0, 999)
        assert absence.missing_count == 0 and absence.uncovered_count == 1000
    two = Judge(md, Reach(whole=frozenset(BOOKIES[:2])))(0, 8)
    # residue 0 lies on bookies 0 and 1: proven; residues 1 and 2 need bookie 2
    assert two.missing == [[0, 0], [3, 3], [6, 6]] and two.missing_count == 3
    assert set(two.unread) == {BOOKIES[2]}
    every = Judge(md, Reach.everything())(0, 999)
    assert every.missing_count == 1000 and every.uncovered_count == 0


def test_without_metadata_every_registered_bookie_must_be_read() -> None:
    reach = Reach(whole=frozenset(BOOKIES[:2]))
    assert Judge(None, reach, BOOKIES[:2])(0, 4).missing_count == 5
    partial = Judge(None, reach, BOOKIES[:3])(0, 4)
    assert partial.missing_count == 0 and set(partial.unread) == {BOOKIES[2]}
    # no bookie registered: which bookies the cluster has is unknown
    assert Judge(None, Reach.everything(), [])(0, 4).uncovered_count == 5


def _cookie(host: str, ledgers: list[Path], journals: list[Path]) -> bytes:
    def dirs(paths: list[Path]) -> str:
        return "\\t".join([str(len(paths)), *map(str, paths)])

    journal = ",".join(map(str, journals))
    return (
        f'5\nbookieHost: "{host}"\njournalDir: "{journal}"\nledgerDirs: "{dirs(ledgers)}"\n'
        'instanceId: "test"\n'
    ).encode()


def _bookie(root: Path, host: str, ledgers: int = 2, journal: bool = True) -> list[Path]:
    """A bookie's directories as BookKeeper makes them: each with ``current/VERSION``."""
    ledger_dirs = [root / f"ledgers-{i}" for i in range(ledgers)]
    journal_dirs = [root / "journal"] if journal else []
    data = _cookie(host, ledger_dirs, journal_dirs or ledger_dirs[:1])
    for d in [*ledger_dirs, *journal_dirs]:
        (d / "current").mkdir(parents=True)
        (d / "current" / "VERSION").write_bytes(data)
    assert parse_cookie(data).bookie_host == host
    return [d / "current" for d in [*ledger_dirs, *journal_dirs]]


def test_a_bookie_is_read_whole_only_with_every_directory_its_cookie_lists(
    tmp_path: Path,
) -> None:
    a = _bookie(tmp_path / "a", BOOKIES[0])
    b = _bookie(tmp_path / "b", BOOKIES[1])
    reach = reach_of_dirs(a[:2], a[2:])
    assert reach.whole == {BOOKIES[0]} and not reach.partial
    reach = reach_of_dirs(a[:1], a[2:])  # one of its two ledger directories
    assert not reach.whole and "1 of its 2 ledger directories" in reach.partial[BOOKIES[0]]
    reach = reach_of_dirs([*a[:2], *b[:2]], a[2:])  # b's journal not given
    assert reach.whole == {BOOKIES[0]}
    assert "journal" in reach.partial[BOOKIES[1]]
    # a journal sharing the ledger directory is given with it
    c = _bookie(tmp_path / "c", BOOKIES[2], ledgers=1, journal=False)
    assert reach_of_dirs(c, []).whole == {BOOKIES[2]}


def test_a_directory_without_its_cookie_is_known_by_the_registered_one(tmp_path: Path) -> None:
    a = _bookie(tmp_path / "a", BOOKIES[0], ledgers=1, journal=False)
    registered = {BOOKIES[0]: parse_cookie((a[0] / "VERSION").read_bytes())}
    (a[0] / "VERSION").unlink()
    assert reach_of_dirs(a, []).unknown == (str(a[0]),)  # whose it is: unknown
    assert reach_of_dirs(a, [], registered).whole == {BOOKIES[0]}
    assert registered_cookies(None) == {}
