"""Metadata-store sessions shared within one command.

A command opens the metadata store several times (a compaction: its plan check, the
topic's state, the lease, the written ledger's record, the plan), each a ZooKeeper
session of its own: a connection, a handshake and kazoo's threads, then a close that
waits for the server, some 20 ms each. Inside :func:`shared` (the CLI runs every command
in one) a ZooKeeper store of the same ensemble, chroot, credentials and mode takes the
session an earlier store of the command opened, and closing a store leaves it open; the
sessions close when the command ends. One session also sees its own writes in order, which
separate sessions do not promise. Outside :func:`shared` (a library caller, a test) every
store has a session of its own, as before.

This module imports nothing: the CLI enters it before it knows whether the command reads
a store at all.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Session(Protocol):
    """What a scope holds: something to close when the command ends."""

    def close_shared(self) -> None: ...


#: each thread's scopes: a command run in one thread never takes another's sessions (a
#: thread the command starts opens stores of its own, as outside a scope), so a scope is
#: only ever read and changed by its own thread
_local = threading.local()


def _scopes() -> list[dict[Any, Session]]:
    scopes = getattr(_local, "scopes", None)
    if scopes is None:
        scopes = _local.scopes = []
    return scopes  # type: ignore[no-any-return]


@contextmanager
def shared() -> Iterator[None]:
    """Share sessions in this thread until the block ends, then close them."""
    held: dict[Any, Session] = {}
    scopes = _scopes()
    scopes.append(held)
    try:
        yield
    finally:
        scopes.remove(held)
        sessions = list(held.values())
        held.clear()
        for session in sessions:
            session.close_shared()


def current() -> dict[Any, Session] | None:
    """This thread's innermost scope's sessions (key -> session), or None outside
    :func:`shared`."""
    scopes = _scopes()
    return scopes[-1] if scopes else None
