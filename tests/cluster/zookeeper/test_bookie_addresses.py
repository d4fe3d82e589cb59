"""Bookie ids resolved to addresses through their registrations, against a real ZooKeeper.

A bookie configured with ``bookieId`` (a name, not host:port) is named by that id in ledger
metadata and registers its address as the ``bookie-rpc`` endpoint of its BookieServiceInfo
(``<root>/available/<id>``); BookKeeper's ``DefaultBookieAddressResolver`` connects there.
The readers and the writer must do the same, and ``--bookie-address`` still wins. The real
bookie of scripts/sandbox registered under a custom id is read and written in
tests/cluster/sandbox/test_placement.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.proto import bookkeeper_data_formats_pb2 as dfpb
from pulsarctl_py.stores.ledger_writer import LedgerConfig
from pulsarctl_py.stores.live.client import BookiePool, BookieUnavailable, ClientOptions
from pulsarctl_py.stores.live.registry import AddressBook
from pulsarctl_py.stores.live.writer import write_ledger
from pulsarctl_py.stores.metadata import open_metadata_store, read_ledger
from tests.support.write_bookie import WriteBookie

ROOT = "/ledgers"


@pytest.fixture
def zk_store(scratch_zk: str) -> Iterator:
    store = open_metadata_store(scratch_zk, read_only=False)
    try:
        yield store
    finally:
        store.close()


def _service_info(*endpoints: tuple[str, str, int]) -> bytes:
    """A BookieServiceInfoFormat as a bookie registers it: (protocol, host, port)..."""
    msg = dfpb.BookieServiceInfoFormat()
    for protocol, host, port in endpoints:
        msg.endpoints.add(id=protocol, host=host, port=port, protocol=protocol)
    msg.properties["autoRecoveryDaemonEnabled"] = "false"
    return msg.SerializeToString()


def _register(store, bookie_id: str, data: bytes, readonly: bool = False) -> None:
    folder = "available/readonly" if readonly else "available"
    store.put(f"{ROOT}/{folder}/{bookie_id}", data, -1)


def test_a_registered_id_resolves_to_its_bookie_rpc_endpoint(zk_store) -> None:
    # an http endpoint first, as a bookie with its http server on registers it
    _register(
        zk_store,
        "bookie-1",
        _service_info(("http", "10.0.0.9", 8000), ("bookie-rpc", "10.0.0.7", 3181)),
    )
    _register(zk_store, "bookie-ro", _service_info(("bookie-rpc", "fe80::1", 4181)), True)
    _register(zk_store, "127.0.0.1:3181", b"")  # a bookie older than 4.12: no service info
    book = AddressBook(zk_store.bookkeeper())
    one = book.resolve("bookie-1")
    assert (one.address, one.host, one.registered) == ("10.0.0.7:3181", "10.0.0.7", True)
    ro = book.resolve("bookie-ro")  # read-only bookies are looked up too
    assert (ro.address, ro.host) == ("[fe80::1]:4181", "fe80::1")
    legacy = book.resolve("127.0.0.1:3181")
    assert (legacy.address, legacy.registered) == ("127.0.0.1:3181", False)
    gone = book.resolve("10.1.1.1:3181")  # not registered (not running): the id itself
    assert (gone.address, gone.host, gone.registered) == ("10.1.1.1:3181", "10.1.1.1", False)


def test_a_registration_without_a_bookie_rpc_endpoint_is_said_not_guessed(zk_store) -> None:
    _register(zk_store, "bookie-http", _service_info(("http", "10.0.0.9", 8000)))
    _register(zk_store, "bookie-bad", b"\xff\xff not protobuf")
    book = AddressBook(zk_store.bookkeeper())
    with pytest.raises(BookieUnavailable, match=r"publishes no bookie-rpc endpoint.*http"):
        book.resolve("bookie-http")
    with pytest.raises(BookieUnavailable, match="does not parse"):
        book.resolve("bookie-bad")
    # a reader names the bookie and the reason when it connects, not before
    pool = BookiePool(ClientOptions(timeout=1), book)
    with pytest.raises(BookieUnavailable, match=r"bookie bookie-http: .*no bookie-rpc"):
        pool.get("bookie-http").read_lac(1)
    # --bookie-address still reaches it
    given = ClientOptions(addresses=(("bookie-http", "127.0.0.1:1"),))
    conn = BookiePool(given, book).get("bookie-http")
    assert conn.address == "127.0.0.1:1" and conn.broken is None


def test_bookie_address_wins_over_the_registration(zk_store) -> None:
    _register(zk_store, "bookie-1", _service_info(("bookie-rpc", "bookie-1.example", 3181)))
    book = AddressBook(zk_store.bookkeeper())
    conn = BookiePool(ClientOptions(addresses=(("bookie-1", "127.0.0.1:13181"),)), book).get(
        "bookie-1"
    )
    assert conn.address == "127.0.0.1:13181"
    assert conn.tls_host == "bookie-1.example"  # the certificate names the registered host
    assert conn.name == "bookie-1 at 127.0.0.1:13181"
    plain = BookiePool(ClientOptions(), book).get("bookie-1")
    assert plain.address == "bookie-1.example:3181"


def test_the_writer_reaches_bookies_registered_under_names(zk_store) -> None:
    """Three bookies whose ids are not addresses: the ensemble names the ids, the entries
    go to the addresses their registrations publish."""
    bookies = [WriteBookie() for _ in range(3)]
    try:
        for i, b in enumerate(bookies):
            _register(zk_store, f"bookie-{i}", _service_info(("bookie-rpc", "127.0.0.1", b.port)))
        config = LedgerConfig(3, 2, 2, DigestType.CRC32C, b"pw", {})
        written = write_ledger(zk_store.bookkeeper(), config, [b"x" * 10] * 30, ClientOptions())
        assert sorted(written.ensemble) == ["bookie-0", "bookie-1", "bookie-2"]
        record = read_ledger(zk_store, written.ledger_id)
        assert record.metadata.ensembles == {0: written.ensemble}
        stored = {i: {e for (_, e) in b.entries} for i, b in enumerate(bookies)}
        assert sum(len(s) for s in stored.values()) == 30 * 2  # write quorum 2
        for e in range(30):  # each entry on its write set, by id
            ws = {written.ensemble[(e + k) % 3] for k in range(2)}
            assert {f"bookie-{i}" for i, s in stored.items() if e in s} == ws
    finally:
        for b in bookies:
            b.close()
