"""A ZooKeeper metadata store through kazoo, with a time limit on connecting and on every call.

kazoo is imported only when a ZooKeeperStore is opened. An unreachable ensemble gives one
:class:`MetadataStoreError` line after ``timeout`` seconds; every call waits at most
``timeout`` seconds for its answer. Digest credentials are passed in (see
``url.zk_auth_from_env``) and never shown. Versions and compare-and-set are ZooKeeper's own.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from pulsarctl_py import sessions
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.errors import MetadataConflict, MetadataStoreError

from .base import (
    MetadataStore,
    Node,
    Op,
    Stat,
    validate_path,
)
from .url import MetadataUrl, ZkDigestAuth, parse_metadata_url

DEFAULT_TIMEOUT = 5.0
DEFAULT_SESSION_TIMEOUT = 10.0

_logging_quieted = False


def _quiet_kazoo_logging() -> None:
    """kazoo logs every failed connection attempt; with no logging set up Python would
    print those to stderr. A NullHandler stops that without hiding them from an
    application that configures logging."""
    global _logging_quieted
    if not _logging_quieted:
        logging.getLogger("kazoo").addHandler(logging.NullHandler())
        _logging_quieted = True


def _stat(zstat: Any) -> Stat:
    return Stat(
        version=zstat.version,
        created_ms=zstat.ctime,
        modified_ms=zstat.mtime,
        ephemeral=zstat.ephemeralOwner != 0,
        owner=zstat.ephemeralOwner,
        data_length=zstat.dataLength,
        num_children=zstat.numChildren,
        creation=f"czxid {zstat.czxid}",
    )


class _SharedSession:
    """A command's ZooKeeper session (pulsarctl_py.sessions), closed when it ends."""

    __slots__ = ("client", "timeout")

    def __init__(self, client: Any, timeout: float) -> None:
        self.client = client
        self.timeout = timeout

    def close_shared(self) -> None:
        ZooKeeperStore._shutdown(self.client, self.timeout)


class ZooKeeperStore(MetadataStore):
    """Pulsar/BookKeeper metadata in a ZooKeeper ensemble."""

    #: Stat.created_ms is the znode's ctime (the server's clock when it was created)
    creation_basis = "zookeeper-ctime"

    def __init__(
        self,
        url: MetadataUrl | str,
        *,
        read_only: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        auth: ZkDigestAuth | None = None,
    ) -> None:
        parsed = parse_metadata_url(url) if isinstance(url, str) else url
        if parsed.scheme != "zk":
            raise LedgerctlError(f"{parsed} is not a ZooKeeper URL")
        self.url = str(parsed)
        self.location = parsed
        self.read_only = read_only
        self.timeout = timeout
        self._client: Any = None
        #: the session is a command's (pulsarctl_py.sessions): close() leaves it open
        self._shared = False

        from kazoo import exceptions as kex

        self._kex = kex
        held = sessions.current()
        key = (parsed.connect_string, read_only, auth.credential if auth else None, session_timeout)
        found = held.get(key) if held is not None else None
        if isinstance(found, _SharedSession) and found.client.connected:
            self._client = found.client
            self._shared = True
            return
        client = self._connect(parsed, read_only, timeout, session_timeout, auth)
        self._client = client
        if parsed.chroot:
            try:
                present = self.exists("/")
            except LedgerctlError:
                self.close()
                raise
            if present is None:
                self.close()
                raise MetadataStoreError(
                    f"the ZooKeeper chroot {parsed.chroot} does not exist at {parsed.target}"
                )
        if held is not None:
            held[key] = _SharedSession(client, timeout)
            self._shared = True
            if found is not None:  # a session that was lost: closed now, not at the end
                found.close_shared()

    def _connect(
        self,
        parsed: MetadataUrl,
        read_only: bool,
        timeout: float,
        session_timeout: float,
        auth: ZkDigestAuth | None,
    ) -> Any:
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        _quiet_kazoo_logging()
        client = KazooClient(
            hosts=parsed.connect_string,
            timeout=session_timeout,
            auth_data=[("digest", auth.credential)] if auth is not None else None,
            read_only=read_only,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            command_retry=None,
        )
        try:
            # not client.start(timeout): on a time-out it joins kazoo's connection thread,
            # which waits for the session timeout when the peer never answers
            client.start_async().wait(timeout=timeout)
        except Exception as exc:  # kazoo raises several types for a bad connect string
            self._shutdown(client, 0.0)
            raise MetadataStoreError(
                f"cannot connect to ZooKeeper at {self.url}: {type(exc).__name__}: {exc}"
            ) from None
        if not client.connected:
            state = str(client.client_state)
            self._shutdown(client, 0.0)
            if "AUTH_FAILED" in state:
                raise MetadataStoreError(f"ZooKeeper at {self.url} refused the digest credentials")
            raise MetadataStoreError(f"cannot reach ZooKeeper at {self.url} within {timeout:g} s")
        return client

    @staticmethod
    def _shutdown(client: Any, wait: float) -> None:
        """Stop kazoo's threads, waiting at most ``wait`` seconds.

        kazoo's ``stop()`` joins its connection thread, which can sit in a socket read for
        the whole session timeout when the server does not answer; it runs on a daemon
        thread so that a dead server never holds the command up.
        """

        def stop() -> None:
            try:
                client.stop()
            finally:
                client.close()

        worker = threading.Thread(target=stop, name="ledgerctl-zk-close", daemon=True)
        worker.start()
        worker.join(wait)

    def close(self) -> None:
        self._close_bookkeeper()
        client, self._client = self._client, None
        if client is not None and not self._shared:
            self._shutdown(client, self.timeout)

    # -- calls with a time limit -------------------------------------------------------------

    def _connected(self) -> Any:
        if self._client is None:
            raise MetadataStoreError(f"the ZooKeeper store {self.url} is closed")
        return self._client

    def _wait(self, result: Any, what: str, path: str) -> Any:
        kex = self._kex
        try:
            return result.get(timeout=self.timeout)
        except self._client.handler.timeout_exception:
            raise MetadataStoreError(
                f"ZooKeeper at {self.url} did not answer {what} {path} within {self.timeout:g} s"
            ) from None
        except (kex.ConnectionLoss, kex.SessionExpiredError, kex.ConnectionClosedError) as exc:
            raise MetadataStoreError(
                f"lost the ZooKeeper connection to {self.url} during {what} {path} "
                f"({type(exc).__name__})"
            ) from None
        except kex.NoAuthError:
            raise MetadataStoreError(
                f"ZooKeeper denied {what} {path}: not authorized (set LEDGERCTL_ZK_AUTH "
                "or LEDGERCTL_ZK_AUTH_FILE)"
            ) from None

    # -- reads ---------------------------------------------------------------------------------

    def get(self, path: str) -> Node | None:
        client = self._connected()
        try:
            data, zstat = self._wait(client.get_async(validate_path(path)), "get", path)
        except self._kex.NoNodeError:
            return None
        return Node(bytes(data or b""), _stat(zstat))

    def exists(self, path: str) -> Stat | None:
        client = self._connected()
        zstat = self._wait(client.exists_async(validate_path(path)), "exists", path)
        return None if zstat is None else _stat(zstat)

    def children(self, path: str) -> list[str]:
        client = self._connected()
        try:
            names = self._wait(client.get_children_async(validate_path(path)), "children", path)
        except self._kex.NoNodeError:
            return []
        return sorted(names)

    # -- writes --------------------------------------------------------------------------------

    def _create(
        self, path: str, data: bytes, ephemeral: bool, sequential: bool
    ) -> tuple[str, Stat]:
        client = self._connected()
        try:
            created, zstat = self._wait(
                client.create_async(
                    path,
                    data,
                    ephemeral=ephemeral,
                    sequence=sequential,
                    makepath=True,
                    include_data=True,
                ),
                "create",
                path,
            )
        except self._kex.NodeExistsError:
            raise MetadataConflict(path, "already exists") from None
        return created, _stat(zstat)

    def _set(self, path: str, data: bytes, version: int) -> Stat:
        client = self._connected()
        try:
            zstat = self._wait(client.set_async(path, data, version), "set", path)
        except self._kex.BadVersionError:
            raise MetadataConflict(path, f"is not at version {version}") from None
        except self._kex.NoNodeError:
            raise MetadataConflict(path, "does not exist") from None
        return _stat(zstat)

    def _put(
        self,
        path: str,
        data: bytes,
        expected_version: int | None,
        ephemeral: bool,
        sequential: bool,
    ) -> tuple[str, Stat]:
        if sequential or expected_version == -1:
            return self._create(path, data, ephemeral, sequential)
        if expected_version is not None:
            return path, self._set(path, data, expected_version)
        for _ in range(3):
            try:
                return path, self._set(path, data, -1)
            except MetadataConflict:
                pass
            try:
                return self._create(path, data, ephemeral, False)
            except MetadataConflict:
                continue
        raise MetadataConflict(path, "changed repeatedly while being written")

    def _delete(self, path: str, expected_version: int | None) -> None:
        client = self._connected()
        version = -1 if expected_version is None else expected_version
        kex = self._kex
        try:
            self._wait(client.delete_async(path, version), "delete", path)
        except kex.BadVersionError:
            raise MetadataConflict(path, f"is not at version {version}") from None
        except kex.NoNodeError:
            raise MetadataConflict(path, "does not exist") from None
        except kex.NotEmptyError:
            raise LedgerctlError(f"cannot delete {path}: it has children") from None

    def _commit(self, ops: list[Op]) -> list[Stat | None]:
        """One ZooKeeper multi; parents of created nodes must exist already."""
        if not ops:
            return []
        client = self._connected()
        txn = client.transaction()
        for op in ops:
            if op.kind == "check":
                txn.check(op.path, -1 if op.version is None else op.version)
            elif op.kind == "create":
                txn.create(op.path, op.data)
            elif op.kind == "set":
                txn.set_data(op.path, op.data, -1 if op.version is None else op.version)
            elif op.kind == "delete":
                txn.delete(op.path, -1 if op.version is None else op.version)
            else:
                raise LedgerctlError(f"unknown transaction operation {op.kind!r}")
        results = self._wait(txn.commit_async(), "transaction", ops[0].path if ops else "/")
        kex = self._kex
        out: list[Stat | None] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(result, kex.RolledBackError):
                continue
            if isinstance(result, Exception):
                raise MetadataConflict(
                    op.path,
                    f"transaction {op.kind} failed ({type(result).__name__}); nothing was applied",
                )
        for op, result in zip(ops, results, strict=True):
            out.append(_stat(result) if op.kind == "set" else None)
        return out
