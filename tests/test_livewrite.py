"""The gate of every write verb (pulsarctl_py.livewrite) on a real ZooKeeper holding a
broker's registration and bundle ownership, the broker being a tiny local HTTP server (or
nothing listening): a loaded topic is refused naming the broker and --unload; brokers
that cannot be asked are refused unless --force-owned, which says what it skipped; an
unowned bundle asks nobody. The real broker's side is tests/cluster/sandbox/test_live_writes.py.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from pulsarctl_py import livewrite
from pulsarctl_py.errors import TopicLoaded
from pulsarctl_py.stores.metadata import open_metadata_store

TOPIC = "persistent://public/default/orders"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Broker(http.server.BaseHTTPRequestHandler):
    loaded: ClassVar[set[str]] = set()
    asked: ClassVar[list[str]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).asked.append(self.path)
        body = json.dumps({"public/default": {t: {} for t in self.loaded}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def broker() -> Iterator[str]:
    _Broker.loaded, _Broker.asked = set(), []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Broker)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def cluster(scratch_zk: str, zk_connect: str) -> Iterator[Any]:
    """The scratch chroot with a registered broker; ``own(url)`` makes that broker own the
    bundle of public/default (an ephemeral node, as the broker's session holds it)."""
    from kazoo.client import KazooClient

    chroot = scratch_zk.split(zk_connect, 1)[1]
    zk = KazooClient(hosts=zk_connect + chroot, timeout=10.0)
    zk.start(timeout=30)

    class Cluster:
        url = scratch_zk

        def register(self, url: str, extensible: bool = False) -> None:
            name = url.split("://", 1)[1]
            data: dict[str, str] = {"webServiceUrl": url}
            if extensible:  # ExtensibleLoadManagerImpl's BrokerLookupData names itself
                data["loadManagerClassName"] = (
                    "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
                )
            zk.create(
                f"/loadbalance/brokers/{name}",
                json.dumps(data).encode(),
                makepath=True,
                ephemeral=True,
            )

        def own(self, url: str) -> None:
            zk.create(
                "/namespace/public/default/0x00000000_0xffffffff",
                json.dumps({"nativeUrl": "pulsar://x:6650", "httpUrl": url}).encode(),
                makepath=True,
                ephemeral=True,
            )

    try:
        yield Cluster()
    finally:
        zk.stop()
        zk.close()


def test_a_loaded_topic_is_refused_naming_the_broker_and_unload(cluster: Any, broker: str) -> None:
    cluster.register(broker)
    cluster.own(broker)
    _Broker.loaded = {TOPIC}
    with open_metadata_store(cluster.url) as store:
        with pytest.raises(TopicLoaded) as err:
            livewrite.prepare(store, [TOPIC])
        assert err.value.exit_code == 4
        line = err.value.one_line()
        assert broker in line and "--unload" in line and TOPIC in line
        # --force-owned does not skip a broker that answers
        with pytest.raises(TopicLoaded):
            livewrite.prepare(store, [TOPIC], force=True)
        _Broker.loaded = {"persistent://public/default/other"}
        assert livewrite.prepare(store, [TOPIC]) == []
    assert _Broker.asked and set(_Broker.asked) == {"/admin/v2/broker-stats/bookieops"}


def test_brokers_that_cannot_be_asked_refuse_unless_force_owned(cluster: Any) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    cluster.register(dead)
    cluster.own(dead)
    with open_metadata_store(cluster.url) as store:
        with pytest.raises(TopicLoaded) as err:
            livewrite.prepare(store, [TOPIC])
        line = err.value.one_line()
        assert err.value.exit_code == 4
        assert "cannot ask the brokers" in line and dead in line and "--force-owned" in line
        (warning,) = livewrite.prepare(store, [TOPIC], force=True)
        assert warning.startswith("--force-owned: did not ask") and dead in warning


def test_an_unowned_bundle_asks_no_broker(cluster: Any, broker: str) -> None:
    cluster.register(broker)  # registered, owning nothing: the topic cannot be loaded
    _Broker.loaded = {TOPIC}  # (a broker that would say otherwise is not asked)
    with open_metadata_store(cluster.url) as store:
        assert livewrite.prepare(store, [TOPIC]) == []
    assert _Broker.asked == []


def test_with_the_extensible_load_manager_every_broker_is_asked(cluster: Any, broker: str) -> None:
    """No ownership node to go by: every registered broker is asked."""
    cluster.register(broker, extensible=True)
    _Broker.loaded = {TOPIC}
    with open_metadata_store(cluster.url) as store:
        with pytest.raises(TopicLoaded, match="is loaded by the broker"):
            livewrite.prepare(store, [TOPIC])


# -- what the unload and a reload rewrite: rebased or refused --------------------------------


def _ml(ledgers: list[tuple[int, int | None]], prop: str | None = None) -> bytes:
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

    info = mlpb.ManagedLedgerInfo()
    for lid, entries in ledgers:
        lg = info.ledgerInfo.add(ledgerId=lid)
        if entries is not None:
            lg.entries, lg.size = entries, entries * 10
    if prop is not None:
        info.properties.add(key="p", value=prop)
    return mld.build_info(info)


def _ledger(store: Any, lid: int, state: str, last: int = -1) -> None:
    from pulsarctl_py.decoders import ledger_metadata as lm

    md = lm.LedgerMetadata(
        1, 1, 1, lm.LedgerState[state], {0: ["127.0.0.1:3181"]}, last_entry_id=last
    )
    store.put(lm.ledger_path(lid, lm.LedgerLayout.HIERARCHICAL, "/ledgers"), lm.build(md))


def _plan_for(tmp: Any, store: Any, url: str, old: bytes, new: bytes) -> Any:
    from pulsarctl_py.plans.binding import Binding
    from pulsarctl_py.plans.change import Change
    from pulsarctl_py.plans.document import Plan

    node = store.get(ML)
    change = Change(ML, "managed-ledger", old, new, node.stat.version, ["t"], node.stat.creation)
    path = tmp / "plan.json"
    if path.exists():
        path.unlink()
    binding = Binding.of(store)
    Plan(binding.metadata_url, [change], topics=[TOPIC], binding=binding).save(path)
    return path


ML = "/managed-ledgers/public/default/persistent/orders"


def test_a_reloads_ledgers_are_rebased_and_anything_else_refused(
    scratch_zk: str, tmp_path: Any
) -> None:
    """The plan read [10 (5 entries), 20 (the broker's open ledger)] and sets a property;
    the unload and a client's reload made it [10, 30]: 20 held nothing and is gone, 30 is
    closed and empty. Rebased: the property set on [10, 30], said. A 30 that holds entries,
    is still open (loaded again), or a first ledger that changed: refused or unloaded again."""
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.errors import PlanConflict
    from pulsarctl_py.livewrite import _Reloaded, rebase
    from pulsarctl_py.plans.document import Plan

    old, new = _ml([(10, 5), (20, None)]), _ml([(10, 5), (20, None)], prop="x")
    with open_metadata_store(scratch_zk, read_only=False) as store:
        store.put("/ledgers/INSTANCEID", b"test-instance")
        store.put(
            "/ledgers/LAYOUT", b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n"
        )
        store.put(ML, old)
        plan = _plan_for(tmp_path, store, scratch_zk, old, new)
        store.put(ML, _ml([(10, 5), (30, None)]), expected_version=store.get(ML).stat.version)
        _ledger(store, 10, "CLOSED", 4)
        _ledger(store, 30, "CLOSED")
        said: list[str] = []
        assert rebase(plan, store, said.append)
        (change,) = Plan.load(plan).changes
        assert change.version == store.get(ML).stat.version
        info = mld.parse_ml_info(change.new).message
        assert [lg.ledgerId for lg in info.ledgerInfo] == [10, 30]
        assert mld.ml_properties(info) == {"p": "x"}
        assert "empty ledger 20 dropped" in said[0] and "empty ledger 30 added" in said[0]

        for state, last, error in (("CLOSED", 2, PlanConflict), ("OPEN", -1, _Reloaded)):
            plan = _plan_for(tmp_path, store, scratch_zk, old, new)
            _ledger(store, 30, state, last)
            with pytest.raises(error):
                rebase(plan, store, said.append)
        _ledger(store, 30, "CLOSED")
        plan = _plan_for(tmp_path, store, scratch_zk, _ml([(10, 4), (20, None)]), new)
        with pytest.raises(PlanConflict, match="ledger 10"):
            rebase(plan, store, said.append)
