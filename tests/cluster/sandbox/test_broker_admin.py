"""The broker admin client (pulsarctl_py.stores.broker) against the sandbox's real broker.

Whether a broker opened a topic's managed ledger is seen in the metadata store: opening
one writes its managed-ledger node (a new ledger), so that node's version is the oracle for
"asking did not load the topic".
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from pulsarctl_py.stores.broker import AdminAuth, BrokerAdmin, brokers, where_loaded
from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic


def _version(store: Any, topic: str) -> int:
    node = store.get(resolve_topic(topic).ml_path)
    assert node is not None, topic
    return node.stat.version


def _wait(cond: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_loaded_topics_is_loaded_and_unload_on_the_real_broker(sandbox: Any) -> None:
    topic = f"persistent://public/default/admin-{uuid.uuid4().hex[:8]}"
    client = sandbox.client()
    try:
        client.create_producer(topic).send(b"one")
    finally:
        client.close()  # the topic stays loaded; a producer would load it again at once
    store = open_metadata_store(sandbox.metadata_url)
    admin = BrokerAdmin(sandbox.web_url, AdminAuth())
    assert [b.url for b in brokers(store, auth=AdminAuth())] == [sandbox.web_url]
    assert topic in admin.loaded_topics() and admin.is_loaded(topic)
    found = where_loaded(store, topic, auth=AdminAuth())
    assert found is not None and found.url == sandbox.web_url
    assert admin.internal_stats(topic)["ledgers"]

    admin.unload(topic)
    _wait(lambda: not admin.is_loaded(topic), "the unload")
    before = _version(store, topic)
    # asked several times, through every question that must not load it: not loaded
    for _ in range(3):
        assert topic not in admin.loaded_topics()
        assert not admin.is_loaded(topic)
        assert where_loaded(store, topic, auth=AdminAuth()) is None
        assert where_loaded(store, topic, sandbox.web_url, auth=AdminAuth()) is None
    time.sleep(0.5)  # a load would have written the node by now (it takes ~30 ms)
    assert _version(store, topic) == before
    assert not admin.is_loaded(topic)
    # the oracle works: internalStats does load it, and the node moves
    admin.internal_stats(topic)
    assert admin.is_loaded(topic)
    assert _version(store, topic) > before
    admin.unload(topic)


def test_an_admin_url_that_is_no_broker_is_one_line(sandbox: Any) -> None:
    from pulsarctl_py.stores.broker import BrokerRefused

    with pytest.raises(BrokerRefused, match="HTTP 404"):
        BrokerAdmin(sandbox.web_url + "/nothing-here").loaded_topics()
