"""The ledger writer for running bookies, against test bookies and a real ZooKeeper.

What it must do as BookKeeper's client does: ensemble from the writable bookies, metadata
v3 created OPEN then closed with compare-and-set, each entry to its write set with the
piggybacked LAC, pipelined in a bounded window, never RECOVERY_ADD; and on any failure
delete what it created. The real bookies of scripts/sandbox read what it writes in
tests/cluster/sandbox/test_writes.py.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookie_wire as wire
from pulsarctl_py.decoders import bookkeeper as bk
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders.checksums import DigestType, master_key
from pulsarctl_py.stores.ledger_writer import LedgerConfig
from pulsarctl_py.stores.live.client import BookieUnavailable, ClientOptions
from pulsarctl_py.stores.live.writer import LedgerHandle as LedgerWriter
from pulsarctl_py.stores.live.writer import (
    NotEnoughBookies,
    choose_ensemble,
    write_ledger,
)
from pulsarctl_py.stores.metadata import open_metadata_store, read_ledger
from tests.support.verify_world import bookkeeper_root_nodes
from tests.support.write_bookie import WriteBookie

PASSWORD = b"secret-ml-password"
CONFIG = LedgerConfig(3, 2, 2, DigestType.CRC32C, PASSWORD, {"application": b"pulsar"})


@pytest.fixture
def zk_store(scratch_zk: str) -> Iterator:
    store = open_metadata_store(scratch_zk, read_only=False)
    try:
        # a formatted cluster's BookKeeper root
        for key, value in bookkeeper_root_nodes().items():
            store.put(key, value, -1)
        yield store
    finally:
        store.close()


def _register(store, bookies: list[WriteBookie], readonly: list[WriteBookie] = ()) -> None:
    for b in bookies:
        store.put(f"/ledgers/available/{b.address}", b"", -1)
    for b in readonly:
        store.put(f"/ledgers/available/readonly/{b.address}", b"", -1)


@pytest.fixture
def bookies(zk_store) -> Iterator[list[WriteBookie]]:
    found = [WriteBookie() for _ in range(3)]
    _register(zk_store, found)
    try:
        yield found
    finally:
        for b in found:
            b.close()


def _options(timeout: float = 5.0) -> ClientOptions:
    return ClientOptions(timeout=timeout)


def _ledger_nodes(store) -> list[str]:
    from pulsarctl_py.stores.metadata import iter_ledger_paths

    return [path for _, path in iter_ledger_paths(store, "/ledgers")]


def test_entries_go_to_their_write_sets_with_the_lac_and_the_metadata_closes(
    zk_store, bookies
) -> None:
    payloads = [f"entry-{i}".encode() * (i + 1) for i in range(50)]
    written = write_ledger(zk_store.bookkeeper(), CONFIG, payloads, _options(), window=7)
    by_addr = {b.address: b for b in bookies}
    ensemble = written.ensemble
    assert sorted(ensemble) == sorted(by_addr)
    length = 0
    lacs = []
    for e, payload in enumerate(payloads):
        length += len(payload)
        holders = [b for b in bookies if (written.ledger_id, e) in b.entries]
        expected = {ensemble[(e + i) % 3] for i in range(2)}
        assert {b.address for b in holders} == expected
        for b in holders:
            body = b.entries[(written.ledger_id, e)]
            layer, _, _ = bk.parse(body, 0, len(body), DigestType.CRC32C, PASSWORD)
            assert layer.check is not None and layer.check.ok
            ledger, entry, lac, total = bk.HEADER.unpack_from(body, 0)
            assert (ledger, entry, total) == (written.ledger_id, e, length)
            assert -1 <= lac < e
            lacs.append(lac)
            assert body.endswith(payload)
    assert lacs[0] == -1 and max(lacs) > 0  # the LAC travels with later entries
    for b in bookies:
        assert not b.errors
        assert all(a.master_key == master_key(PASSWORD) for a in b.adds)
        assert not any(a.recovery for a in b.adds)
    record = read_ledger(zk_store, written.ledger_id, "/ledgers")
    md = record.metadata
    assert md.state is lm.LedgerState.CLOSED
    assert (md.last_entry_id, md.length) == (49, length)
    assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (3, 2, 2)
    assert md.ensembles == {0: ensemble}
    assert md.digest_type is DigestType.CRC32C and md.password == PASSWORD
    assert md.ctime is None and md.ctoken == 0
    assert md.custom_metadata == {"application": b"pulsar"}
    assert record.stat.version == 1  # created once, closed once


def test_the_window_bounds_what_is_in_flight(zk_store, bookies) -> None:
    for b in bookies:
        b.delay = 0.002
    write_ledger(zk_store.bookkeeper(), CONFIG, [b"x" * 10] * 300, _options(), window=8)
    # each bookie gets 2 of every 3 entries: at most 8 entries in flight reach one bookie
    assert 1 < max(b.max_batch for b in bookies) <= 8


def test_read_only_bookies_are_never_chosen(zk_store) -> None:
    ok = [WriteBookie() for _ in range(2)]
    ro = WriteBookie()
    try:
        _register(zk_store, ok, [ro])
        cfg = LedgerConfig(2, 2, 1, DigestType.CRC32, b"", {})
        for _ in range(5):
            written = write_ledger(zk_store.bookkeeper(), cfg, [b"a", b"b"], _options())
            assert ro.address not in written.ensemble
        assert not ro.adds
        with pytest.raises(NotEnoughBookies, match="needs an ensemble of 3, 2 are"):
            write_ledger(zk_store.bookkeeper(), CONFIG, [b"a"], _options())
    finally:
        for b in [*ok, ro]:
            b.close()


def test_not_enough_bookies_creates_nothing(zk_store) -> None:
    with pytest.raises(NotEnoughBookies):
        write_ledger(zk_store.bookkeeper(), CONFIG, [b"a"], _options())
    assert _ledger_nodes(zk_store) == []


@pytest.mark.parametrize(
    "fault",
    [
        {"fail_at": (5, "EREADONLY")},
        {"fail_at": (0, "EIO")},
        {"close_at": 7},
        {"silent_at": 3},
    ],
    ids=["refused", "io-error-first", "connection-closed", "silent"],
)
def test_a_failing_bookie_fails_the_ledger_and_its_metadata_is_deleted(zk_store, fault) -> None:
    good = [WriteBookie(), WriteBookie()]
    bad = WriteBookie(**fault)
    try:
        _register(zk_store, [*good, bad])
        # every bookie stores every entry (write quorum 3): the bad one sees the entry it
        # fails on; the ack quorum (2) would be met without it, and still the ledger fails
        every = LedgerConfig(3, 3, 2, DigestType.CRC32C, PASSWORD, {})
        with pytest.raises(BookieUnavailable) as caught:
            write_ledger(zk_store.bookkeeper(), every, [b"p"] * 20, _options(timeout=1.0))
        assert bad.address in str(caught.value)
        assert "\n" not in str(caught.value)
        assert _ledger_nodes(zk_store) == []  # nothing references the ledger
    finally:
        for b in [*good, bad]:
            b.close()


def test_an_empty_ledger_is_created_and_closed(zk_store, bookies) -> None:
    written = write_ledger(zk_store.bookkeeper(), CONFIG, [], _options())
    md = read_ledger(zk_store, written.ledger_id, "/ledgers").metadata
    assert md.state is lm.LedgerState.CLOSED and md.last_entry_id == -1 and md.length == 0
    assert not any(b.adds for b in bookies)


def test_metadata_changed_behind_the_writer_is_left_alone(zk_store, bookies) -> None:
    from pulsarctl_py.stores.metadata import MetadataConflict

    writer = LedgerWriter(zk_store.bookkeeper(), CONFIG, _options())
    with pytest.raises(MetadataConflict, match="changed while ledgerctl wrote"):
        with writer:
            writer.create()
            writer.add(b"a")
            # someone opened the ledger (a recovery rewrites the metadata)
            node = zk_store.get(writer.path)
            zk_store.put(writer.path, node.data, node.stat.version)
            writer.close()
    assert zk_store.get(writer.path) is not None  # not ours any more: not deleted


def test_an_existing_ledger_id_is_passed_over(zk_store, bookies) -> None:
    # a restored tree restarts the id generator: ids that exist already are skipped
    taken = lm.ledger_path(0, lm.LedgerLayout.HIERARCHICAL, "/ledgers")
    zk_store.put(taken, b"not ours", -1)
    written = write_ledger(zk_store.bookkeeper(), CONFIG, [b"a"], _options())
    assert written.ledger_id != 0
    assert zk_store.get(taken).data == b"not ours"


def test_v2_is_refused_for_writes(zk_store) -> None:
    from pulsarctl_py.errors import LedgerctlError

    with pytest.raises(LedgerctlError, match="protocol v3"):
        LedgerWriter(zk_store.bookkeeper(), CONFIG, ClientOptions(v2=True))


def test_bad_quorums_are_refused() -> None:
    from pulsarctl_py.errors import LedgerctlError

    with pytest.raises(LedgerctlError, match="ensemble >= write quorum >= ack quorum"):
        LedgerConfig(2, 3, 2, DigestType.CRC32C)


def test_password_never_shows() -> None:
    assert "secret" not in repr(CONFIG) and "secret" not in CONFIG.describe()


@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=20, unique=True), st.integers(1, 20))
def test_ensembles_are_distinct_registered_bookies(ports: list[int], size: int) -> None:
    bookies = [f"10.0.0.1:{p}" for p in ports]
    if size > len(bookies):
        with pytest.raises(NotEnoughBookies):
            choose_ensemble(bookies, size, random.Random(0))
        return
    chosen = choose_ensemble(bookies, size, random.Random(size))
    assert len(set(chosen)) == size and set(chosen) <= set(bookies)


@given(
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.binary(max_size=40),
    st.binary(max_size=3000),
)
def test_add_request_equals_the_generated_encoding(txn, ledger, entry, key, body) -> None:
    assert wire.v3_add_request(txn, ledger, entry, key, body) == wire.v3_add_request_pb(
        txn, ledger, entry, key, body
    )
    parsed = wire.parse_add_request(wire.v3_add_request(txn, ledger, entry, key, body)[4:])
    assert (parsed.txn_id, parsed.ledger_id, parsed.entry_id) == (txn, ledger, entry)
    assert (parsed.master_key, parsed.body, parsed.recovery) == (key, body, False)


def test_tls_is_started_before_the_first_add(zk_store, tmp_path) -> None:
    from tests.support.live_bookie import make_tls_files, tls_server_context

    files = make_tls_files(tmp_path / "tls")
    bookies = [WriteBookie(tls=tls_server_context(files)) for _ in range(3)]
    try:
        _register(zk_store, bookies)
        options = ClientOptions(tls=True, ca_file=files["ca"])
        written = write_ledger(zk_store.bookkeeper(), CONFIG, [b"x" * 50] * 30, options)
        assert written.entries == 30
        for b in bookies:
            assert b.plain == ["tls"] and len(b.entries) == 20 and not b.errors
        # a bookie id whose host the certificate does not name is refused, nothing created
        zk_store.delete(f"/ledgers/available/{bookies[0].address}")
        other = f"localhost.invalid:{bookies[0].port}"
        zk_store.put(f"/ledgers/available/{other}", b"", -1)
        before = _ledger_nodes(zk_store)
        redirect = ClientOptions(
            tls=True, ca_file=files["ca"], addresses=((other, bookies[0].address),)
        )
        with pytest.raises(BookieUnavailable, match="TLS handshake failed"):
            write_ledger(zk_store.bookkeeper(), CONFIG, [b"x"], redirect)
        assert _ledger_nodes(zk_store) == before
    finally:
        for b in bookies:
            b.close()


@pytest.fixture
def small_limit() -> Iterator[int]:
    from pulsarctl_py.decoders import limits

    before = limits.max_message_size()
    limits.set_max_message_size(1024)
    try:
        yield limits.max_frame()
    finally:
        limits.set_max_message_size(before)


def test_an_entry_over_the_frame_limit_is_refused_before_it_is_sent(
    zk_store, bookies, small_limit
) -> None:
    from pulsarctl_py.errors import LedgerctlError

    # the last payload fits the maximum message size plus the padding, not with the frame
    payloads = [b"a" * 100, b"b" * (small_limit - 50)]
    with pytest.raises(LedgerctlError, match=r"over the limit of .*--max-message-size") as caught:
        write_ledger(zk_store.bookkeeper(), CONFIG, payloads, _options())
    assert "\n" not in str(caught.value)
    assert _ledger_nodes(zk_store) == []  # the ledger it created is deleted
    for b in bookies:  # the large entry never left: only the first one was sent
        assert all(a.entry_id == 0 for a in b.adds)
    # a frame just within the limit is written
    fits = small_limit - 4 - 200
    written = write_ledger(zk_store.bookkeeper(), CONFIG, [b"c" * fits], _options())
    assert written.entries == 1
