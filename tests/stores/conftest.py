"""Fixtures for the store tests: one real ZooKeeper per test session.

Set LEDGERCTL_SKIP_ZK=1 to skip the tests that need it; otherwise a server that cannot be
started fails them with the reason and the install command.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.zookeeper import (
    SKIP_ENV,
    ZooKeeperServer,
    ZooKeeperUnavailable,
    load_dump,
    restore_with_kazoo,
    zookeeper_server,
)

DATA = Path(__file__).resolve().parent.parent / "data"
LIVE = DATA / "bookkeeper" / "live-dbledgerstorage"
STOPPED_DUMP = LIVE / "zookeeper" / "zk-dump-bookie-stopped.json"
RESTORED_CHROOT = "/restored-bookie-stopped"


def _server() -> Iterator[ZooKeeperServer]:
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: ZooKeeper tests skipped on request")
    failure = None
    try:
        with zookeeper_server() as server:
            yield server
    except ZooKeeperUnavailable as exc:
        failure = str(exc)
    if failure is not None:
        pytest.fail(f"cannot start the test ZooKeeper: {failure}", pytrace=False)


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ZooKeeperServer]:
    """A running ZooKeeper on 127.0.0.1 (session-wide)."""
    yield from _server()


@pytest.fixture
def private_zk_server() -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of one test's own (for tests that stop or disturb the server)."""
    yield from _server()


@pytest.fixture(scope="session")
def zk_connect(zk_server: ZooKeeperServer) -> str:
    """The connect string (host:port) of the session's ZooKeeper."""
    return zk_server.connect_string


@pytest.fixture(scope="session")
def restored_zk(zk_connect: str) -> str:
    """The ZooKeeper tree of the stopped bookie restored under a chroot; its zk: URL."""
    restore_with_kazoo(zk_connect, load_dump(STOPPED_DUMP), RESTORED_CHROOT)
    return f"zk:{zk_connect}{RESTORED_CHROOT}"


@pytest.fixture
def scratch_zk(zk_connect: str, request: pytest.FixtureRequest) -> str:
    """A zk: URL whose chroot is private to one test."""
    from kazoo.client import KazooClient

    chroot = "/scratch/" + request.node.name.replace("[", "_").replace("]", "_").replace("/", "_")
    client = KazooClient(hosts=zk_connect, timeout=10.0)
    client.start(timeout=10)
    try:
        if client.exists(chroot):
            client.delete(chroot, recursive=True)
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    return f"zk:{zk_connect}{chroot}"
