"""Leases and written-ledger records: what keeps a ledger that ledgerctl is writing, or
that a plan names, from being judged a leftover or an orphan.

A run that writes new ledgers before a plan swaps them in (``compact --apply/--plan``,
``migrate compacted``, ``migrate index``) holds a **lease** from before its first ledger
until it exits, and leaves a **record** of every ledger it writes, both in Pulsar's
metadata store (the one ``--metadata-url`` names), outside every root plans may change::

    /ledgerctl/leases/<host>-<pid>-<random>   one per run: command, topics, host, pid and
                                              the process's start time, started_ms,
                                              expires_ms (RocksDB), the ledgers it writes
    /ledgerctl/written/<ledger id>            one per ledger a plan wrote: the plan file
                                              (absolute path), host, command, created_ms

* **ZooKeeper**: the lease is an ephemeral znode of a session the run keeps open for its
  whole life; ZooKeeper deletes it when the session ends (the run exits, or a killed
  run's session times out, 10 s).
* **Pulsar's RocksDB store** has no session ledgerctl could hold (a writer holds the
  database's lock, so ledgerctl opens it only around each write): the lease is a plain
  node carrying ``expires_ms``, renewed at every step of a write (:data:`ROCKSDB_TTL_MS`
  ahead), deleted on exit; one past its expiry is stale.
* Either way a lease of this host whose process is gone (no such pid, or a pid that
  started at another time) is stale at once.

The record is written before the ledger's metadata is created. It keeps the ledger while
the plan file it names exists (on this host), lists the ledger among the ledgers it wrote
and was neither applied nor undone (``FILE.backup.json`` says which); ``apply`` and
``undo`` remove the records of their plan's ledgers. A record made on another host
cannot be checked here: its ledger is kept, and the judgment says why.

:class:`Holds` is the one reading of both for every judgment (the leftovers a compaction
plan deletes, ``orphans``, ``verify``'s orphan check). The nodes are not ledgers and lie
outside ``/managed-ledgers`` and BookKeeper's ledgers root, so no listing of topics or
ledgers meets them. ZooKeeper keeps the empty parents ``/ledgerctl``, ``/ledgerctl/leases``
and ``/ledgerctl/written`` once created; the RocksDB store needs no parent nodes.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import MetadataStore

ROOT = "/ledgerctl"
LEASES = ROOT + "/leases"
WRITTEN = ROOT + "/written"
#: the parents ZooKeeper keeps once created (empty: no data)
PARENTS = (ROOT, LEASES, WRITTEN)
#: how far ahead a RocksDB lease's expiry is set, at its start and at every write step
ROCKSDB_TTL_MS = 15 * 60 * 1000

#: what :mod:`.document` and :mod:`.apply` write (a plan, its backup and the backup's
#: statuses once applied or undone); read here without importing them (they import this)
PLAN_FORMAT = "ledgerctl-plan"
BACKUP_FORMAT = PLAN_FORMAT + "-backup"
BACKUP_SUFFIX = ".backup.json"
FINISHED = ("applied", "undone")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def host_name() -> str:
    return socket.gethostname()


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (``/proc/PID/stat`` field 22, clock ticks since boot),
    so that a pid used again by another process is told apart; None when there is no
    such process; "" when it runs but the system does not say since when."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
        return text[text.rindex(")") + 2 :].split()[19]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        pass  # it exists (another user's)
    return ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(slots=True)
class LeaseInfo:
    """One lease as stored."""

    name: str
    host: str
    pid: int
    pid_start: str | None
    command: str
    topics: list[str] = field(default_factory=list)
    ledgers: list[int] = field(default_factory=list)
    started_ms: int = 0
    expires_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "command": self.command,
            "topics": list(self.topics),
            "ledgers": list(self.ledgers),
            "started_ms": self.started_ms,
            "expires_ms": self.expires_ms,
        }

    @classmethod
    def from_json(cls, name: str, data: bytes) -> LeaseInfo:
        """A lease as stored; one that does not decode is kept as a lease of unknown
        holder (it still holds: nothing is judged on a guess)."""
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            return cls(name, "?", -1, None, "?")
        ledgers = obj.get("ledgers")
        topics = obj.get("topics")
        return cls(
            name,
            str(obj.get("host", "?")),
            _int(obj.get("pid")) or -1,
            obj.get("pid_start") if isinstance(obj.get("pid_start"), str) else None,
            str(obj.get("command", "?")),
            [t for t in topics if isinstance(t, str)] if isinstance(topics, list) else [],
            [i for i in ledgers if _int(i) is not None] if isinstance(ledgers, list) else [],
            _int(obj.get("started_ms")) or 0,
            _int(obj.get("expires_ms")),
        )

    def describe(self) -> str:
        from pulsarctl_py.render import iso_ms

        return (
            f"the ledgerctl {self.command} run {self.pid} on {self.host} (lease "
            f"{LEASES}/{self.name}, since {iso_ms(self.started_ms)})"
        )

    def stale(self, now_ms: int, host: str) -> str | None:
        """Why the lease no longer holds anything (None: it holds)."""
        if self.expires_ms is not None and now_ms > self.expires_ms:
            return "expired"
        if self.host == host and self.pid > 0:
            started = process_start(self.pid)
            if started is None:
                return f"its process {self.pid} is gone"
            if self.pid_start and started and started != self.pid_start:
                return f"its process {self.pid} is gone (the pid is another process's now)"
        return None


def live_leases(store: MetadataStore) -> list[LeaseInfo]:
    """The leases that still hold (see :meth:`LeaseInfo.stale`)."""
    now, host = _now_ms(), host_name()
    out = []
    for name in store.children(LEASES):
        node = store.get(f"{LEASES}/{name}")
        if node is None:
            continue
        lease = LeaseInfo.from_json(name, node.data)
        if lease.stale(now, host) is None:
            out.append(lease)
    return out


@dataclass(slots=True)
class WrittenRecord:
    """The record of one ledger a plan wrote."""

    ledger_id: int
    plan: str  # the plan file, absolute
    host: str
    command: str
    created_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "plan": self.plan,
            "host": self.host,
            "command": self.command,
            "created_ms": self.created_ms,
        }


def record_path(ledger_id: int) -> str:
    return f"{WRITTEN}/{ledger_id}"


def read_record(store: MetadataStore, ledger_id: int) -> WrittenRecord | str | None:
    """The record of ``ledger_id``: None when there is none, a reason (text) when one
    exists that does not decode (it still keeps the ledger)."""
    node = store.get(record_path(ledger_id))
    if node is None:
        return None
    try:
        obj = json.loads(node.data)
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or not isinstance(obj.get("plan"), str):
        return f"its record {record_path(ledger_id)} does not decode: remove it if it is stale"
    return WrittenRecord(
        ledger_id,
        obj["plan"],
        str(obj.get("host", "?")),
        str(obj.get("command", "?")),
        _int(obj.get("created_ms")) or 0,
    )


def plan_hold(record: WrittenRecord, host: str) -> str | None:
    """Why the plan file of ``record`` keeps its ledger (None: it does not: the file is
    gone, is another plan now, or was applied or undone)."""
    from pulsarctl_py.documents import load_document

    if record.host != host:
        return (
            f"named by the plan {record.plan} made on {record.host}, which cannot be "
            "checked from here (apply or undo it there)"
        )
    path = Path(record.plan)
    if not os.path.lexists(path):
        return None
    try:
        doc = load_document(path, "plan")
    except LedgerctlError as exc:
        return f"named by the plan {path}, which cannot be read ({exc.one_line()})"
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        return None
    written = doc.get("written")
    ids = (
        {w.get("ledger_id") for w in written if isinstance(w, dict)}
        if isinstance(written, list)
        else set()
    )
    if record.ledger_id not in ids:
        return None
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if os.path.lexists(backup):
        try:
            status = load_document(backup, "plan backup")
        except LedgerctlError:
            status = None
        if (
            isinstance(status, dict)
            and status.get("format") == BACKUP_FORMAT
            and status.get("status") in FINISHED
        ):
            return None
    return (
        f"named by the plan {path}, neither applied nor undone (`ledgerctl apply` or "
        "`ledgerctl undo` it)"
    )


class Holds:
    """The leases and records of ``store``, read once per judgment: :meth:`why` says
    what keeps a ledger (None: nothing does)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.host = host_name()
        self.leases = live_leases(store)

    def lease_of(self, ledger_id: int) -> LeaseInfo | None:
        return next((lease for lease in self.leases if ledger_id in lease.ledgers), None)

    def why(self, ledger_id: int) -> str | None:
        """What keeps ``ledger_id`` from being judged: a live lease naming it, or a
        record whose plan keeps it."""
        lease = self.lease_of(ledger_id)
        if lease is not None:
            return f"being written by {lease.describe()}"
        record = read_record(self.store, ledger_id)
        if record is None:
            return None
        if isinstance(record, str):
            return record
        return plan_hold(record, self.host)


def forget(store: MetadataStore, ledger_ids: list[int], plan_path: str | Path) -> None:
    """Remove the records of ``ledger_ids`` that name the plan at ``plan_path`` (its apply
    or undo finished: the plan no longer keeps them)."""
    plan = os.path.abspath(plan_path)
    for ledger_id in ledger_ids:
        node = store.get(record_path(ledger_id))
        if node is None:
            continue
        try:
            named = json.loads(node.data).get("plan")
        except (ValueError, AttributeError):
            continue
        if named == plan:
            try:
                store.delete(record_path(ledger_id), node.stat.version)
            except LedgerctlError:
                pass  # changed meanwhile: someone else's now


def forget_ledger(store: MetadataStore, ledger_id: int) -> None:
    """Remove the record of ``ledger_id`` whatever plan it names (the ledger is being
    deleted, or left to its new owner, by the plan that wrote it)."""
    node = store.get(record_path(ledger_id))
    if node is not None:
        try:
            store.delete(record_path(ledger_id), node.stat.version)
        except LedgerctlError:
            pass  # changed meanwhile


class Lease:
    """The lease of one run (see the module docstring): :meth:`take` it before the work,
    :meth:`hold` each ledger before its metadata is created, :meth:`release` it on exit
    (a ``with`` block does both ends)."""

    def __init__(self, metadata_url: str, command: str, topics: list[str]) -> None:
        from pulsarctl_py.stores.metadata.url import parse_metadata_url

        self.url = metadata_url
        self.rocksdb = parse_metadata_url(metadata_url).scheme == "rocksdb"
        self.info = LeaseInfo(
            f"{host_name()}-{os.getpid()}-{secrets.token_hex(4)}",
            host_name(),
            os.getpid(),
            process_start(os.getpid()) or None,
            command,
            list(topics),
            [],
            _now_ms(),
        )
        self.path = f"{LEASES}/{self.info.name}"
        self._store: MetadataStore | None = None  # ZooKeeper: the session holding it
        self.taken = False

    # -- the store the lease is written with -------------------------------------------------

    def _write(self, store: MetadataStore | None, action: Any) -> None:
        """Run ``action(store)`` on a writable handle of the lease's store: ZooKeeper the
        lease's own session; RocksDB the handle the caller holds open (the database
        admits one writer), else one opened for the action."""
        from pulsarctl_py.stores.metadata import open_metadata_store

        if not self.rocksdb:
            assert self._store is not None
            action(self._store)
            return
        if store is not None and not store.read_only:
            action(store)
            return
        with open_metadata_store(self.url, read_only=False) as opened:
            action(opened)

    def _value(self) -> bytes:
        if self.rocksdb:
            self.info.expires_ms = _now_ms() + ROCKSDB_TTL_MS
        return json.dumps(self.info.to_json(), sort_keys=True).encode()

    # -- the run's side ----------------------------------------------------------------------

    def take(self) -> Lease:
        """Create the lease (after checking the store holds Pulsar's topics: a lease is
        never the first thing written into a wrong place)."""
        from pulsarctl_py.stores.metadata import open_metadata_store, require_topic_metadata

        if not self.rocksdb:
            self._store = open_metadata_store(self.url, read_only=False)
        try:

            def create(store: MetadataStore) -> None:
                require_topic_metadata(store)
                store.put(self.path, self._value(), -1, ephemeral=not self.rocksdb)

            self._write(None, create)
        except BaseException:
            self._close()
            raise
        self.taken = True
        return self

    def hold(self, ledger_id: int, plan_path: str | Path, store: MetadataStore | None) -> None:
        """``ledger_id`` is about to be created for the plan at ``plan_path``: named in
        the lease (renewed) and recorded (``store``: the writable handle the writer holds,
        which a RocksDB store needs)."""
        if ledger_id not in self.info.ledgers:
            self.info.ledgers.append(ledger_id)
        record = WrittenRecord(
            ledger_id,
            os.path.abspath(plan_path),
            self.info.host,
            self.info.command,
            _now_ms(),
        )

        def write(target: MetadataStore) -> None:
            target.put(self.path, self._value(), None)
            target.put(record_path(ledger_id), json.dumps(record.to_json()).encode(), None)

        self._write(store, write)

    def drop(self, ledger_id: int, store: MetadataStore | None) -> None:
        """``ledger_id`` turned out to be someone else's (its id was taken): not held."""
        if ledger_id in self.info.ledgers:
            self.info.ledgers.remove(ledger_id)

        def write(target: MetadataStore) -> None:
            target.put(self.path, self._value(), None)
            node = target.get(record_path(ledger_id))
            if node is not None:
                target.delete(record_path(ledger_id), node.stat.version)

        self._write(store, write)

    def release(self) -> str | None:
        """Delete the lease; a reason when it could not be (it then expires by itself)."""
        if not self.taken:
            self._close()
            return None
        self.taken = False

        def delete(store: MetadataStore) -> None:
            node = store.get(self.path)
            if node is not None:
                store.delete(self.path, node.stat.version)

        try:
            self._write(None, delete)
        except LedgerctlError as exc:
            return f"the lease {self.path} was not removed ({exc.one_line()}); it " + (
                "expires by itself" if self.rocksdb else "goes with the session"
            )
        finally:
            self._close()
        return None

    def _close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.close()

    def __enter__(self) -> Lease:
        return self.take()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        note = self.release()
        if note is not None:
            from pulsarctl_py.render import stderr_console

            stderr_console().print(f"warning: {note}", markup=False, highlight=False)
