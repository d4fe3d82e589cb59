"""One ZooKeeper session per store and mode within a command (pulsarctl_py.sessions):
stores opened inside ``sessions.shared()`` take the session an earlier store opened,
closing a store leaves it open, the scope's end closes it; a lost session is replaced; a
store opened outside a scope keeps a session of its own."""

from __future__ import annotations

import pytest

from pulsarctl_py import sessions
from pulsarctl_py.stores.metadata import MetadataStoreError, open_metadata_store


def _session_id(store: object) -> int:
    return store._client.client_id[0]  # type: ignore[attr-defined]


def test_a_command_opens_one_session_per_mode(scratch_zk: str) -> None:
    with sessions.shared():
        first = open_metadata_store(scratch_zk)
        reader = _session_id(first)
        first.close()
        second = open_metadata_store(scratch_zk)
        assert _session_id(second) == reader  # the same session, not closed by close()
        writer = open_metadata_store(scratch_zk, read_only=False)
        assert _session_id(writer) != reader  # another mode: a session of its own
        writer.put("/written", b"x", -1, ephemeral=True)
        writer.close()
        again = open_metadata_store(scratch_zk, read_only=False)
        assert again.get("/written") is not None  # the session, and its ephemeral, live on
        assert second.get("/written") is not None
        client = again._client  # type: ignore[attr-defined]
        again.close()
        second.close()
        assert client.connected
    assert not client.connected  # the scope's end closed it, and its ephemeral node went
    with open_metadata_store(scratch_zk) as after:
        assert after.get("/written") is None


def test_stores_outside_a_scope_keep_sessions_of_their_own(scratch_zk: str) -> None:
    with open_metadata_store(scratch_zk) as one, open_metadata_store(scratch_zk) as two:
        assert _session_id(one) != _session_id(two)
        client = one._client  # type: ignore[attr-defined]
    assert not client.connected


def test_another_chroot_is_another_session(scratch_zk: str) -> None:
    root = scratch_zk.rsplit("/", 2)[0]  # zk:host:port/scratch
    with sessions.shared():
        one, two = open_metadata_store(scratch_zk), open_metadata_store(root)
        assert _session_id(one) != _session_id(two)
        assert two.exists("/") is not None


def test_a_lost_session_is_replaced(scratch_zk: str) -> None:
    """The command's session is lost (its client no longer connected): the next store
    connects again instead of taking it, and the one store that held it says it lost it.
    (A server that restarts can also be met by kazoo reconnecting by itself, with a new
    session, before the next store opens: that client is connected and rightly taken.)"""
    with sessions.shared():
        held = open_metadata_store(scratch_zk, timeout=2.0)
        assert held.exists("/") is not None
        old = held._client  # type: ignore[attr-defined]
        old.stop()
        assert not old.connected
        with pytest.raises(MetadataStoreError):
            held.children("/")
        fresh = open_metadata_store(scratch_zk, timeout=10.0)
        assert fresh._client is not old  # type: ignore[attr-defined]
        assert fresh.exists("/") is not None
    assert not fresh._client.connected  # type: ignore[attr-defined]


def test_a_scope_is_its_threads_own(scratch_zk: str) -> None:
    """Two commands run in two threads of one process never take each other's session:
    the one that ends first would close it under the other."""
    import threading

    ids: dict[str, int] = {}

    def command(name: str, entered: threading.Barrier, opened: threading.Barrier) -> None:
        with sessions.shared():
            entered.wait(timeout=30)  # both scopes open before either store
            store = open_metadata_store(scratch_zk)
            ids[name] = _session_id(store)
            opened.wait(timeout=30)
            store.close()

    entered, opened = threading.Barrier(2), threading.Barrier(2)
    threads = [threading.Thread(target=command, args=(n, entered, opened)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert ids["a"] != ids["b"]
    with sessions.shared():
        assert sessions.current() is not None
        seen: list[object] = []
        worker = threading.Thread(target=lambda: seen.append(sessions.current()))
        worker.start()
        worker.join()
        assert seen == [None]  # a thread the command starts: no scope of its own
