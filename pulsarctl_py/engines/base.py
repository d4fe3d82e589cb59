"""The engine boundary: splits, scan plans, and the protocol every engine implements.

Nothing here reads entries. A plan is built from metadata only (the managed ledger's
ledger list with entry counts and sizes, and the compacted ledger for an incremental
compaction), so its totals are known before the scan starts: that is what lets a caller
choose an engine by size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")

#: a split covers at most this many entries, so that work spreads over executors
DEFAULT_SPLIT_ENTRIES = 50_000

#: split kinds: entries of a topic data ledger, or of a compacted ledger (RawMessage framing)
KIND_TOPIC = "topic"
KIND_COMPACTED = "compacted"

#: (key, rank, tombstone): a key's candidate; the greatest rank wins
KeyRecord = tuple[bytes, bytes, bool]
#: a key's state: (rank, tombstone) of its winner, or None before the key appeared
KeyState = tuple[bytes, bool] | None
#: an order-dependent reduction: (state, rank, tombstone) -> new state, applied in plan order
Fold = Callable[[KeyState, bytes, bool], KeyState]


def max_rank(state: KeyState, rank: bytes, tombstone: bool) -> KeyState:
    """The default reduction: the greatest rank wins (order-independent)."""
    if state is None or rank > state[0]:
        return (rank, tombstone)
    return state


def _max_message_size() -> int:
    from pulsarctl_py.limits import max_message_size

    return max_message_size()


@dataclass(frozen=True, slots=True)
class Split:
    """One ledger's inclusive entry range, and where its bytes are. Picklable."""

    topic: str
    ledger_id: int
    first_entry: int
    last_entry: int
    bookie_dirs: tuple[str, ...]
    metadata_url: str | None
    ordinal: int
    kind: str = KIND_TOPIC
    #: bytes this range holds according to metadata (pro rata for a partial ledger), or None
    size_hint: int | None = None
    #: with no bookie dirs: how executors reach the bookies named in ledger metadata
    #: (a ``stores.live.ClientOptions``: address overrides, protocol, TLS, timeout)
    live: Any = None
    #: the driver's maximum message size, which executors apply (``limits.apply_split``)
    max_message_size: int = field(default_factory=_max_message_size, compare=False)
    #: how executors read offloaded ledgers (``(offload URL, S3 endpoint, prefer, broker
    #: configuration)`` as the driver resolved them; executors read the offload policies
    #: and each ledger's offloadContext themselves, pulsarctl_py.stores.tiered.where):
    #: None reads BookKeeper only
    tiered: tuple[str | None, str | None, str, str | None] | None = None

    def source_options(self) -> dict[str, Any]:
        """The tiered arguments of ``LedgerSource.open`` for this split."""
        if self.tiered is None:
            return {"tiered": False}
        offload_url, s3_endpoint, prefer, broker_conf = self.tiered
        out: dict[str, Any] = {
            "tiered": True,
            "offload_url": offload_url,
            "s3_endpoint": s3_endpoint,
            "prefer": prefer,
        }
        if broker_conf is not None:
            out["broker_conf"] = broker_conf
        return out

    @property
    def entries(self) -> int:
        return max(0, self.last_entry - self.first_entry + 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "ordinal": self.ordinal,
            "kind": self.kind,
            "ledger_id": self.ledger_id,
            "first_entry": self.first_entry,
            "last_entry": self.last_entry,
            "entries": self.entries,
        }


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """The splits of a scan in plan order, with the totals metadata gives before it runs."""

    topic: str
    splits: tuple[Split, ...]
    entries: int
    bytes: int
    #: False when some ledger's entry count or size had to be estimated or was unknown
    exact: bool = True
    notes: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.splits)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "splits": len(self.splits),
            "entries": self.entries,
            "bytes": self.bytes,
            "exact": self.exact,
        }


def _ranges(first: int, last: int, step: int) -> Iterator[tuple[int, int]]:
    start = first
    while start <= last:
        end = min(last, start + step - 1)
        yield start, end
        start = end + 1


def build_scan_plan(
    topic: str,
    ledgers: Sequence[tuple[int, int | None, int | None]],
    *,
    bookie_dirs: Sequence[str] = (),
    metadata_url: str | None = None,
    after: tuple[int, int] | None = None,
    upto: tuple[int, int] | None = None,
    compacted: tuple[int, int, int | None] | None = None,
    split_entries: int = DEFAULT_SPLIT_ENTRIES,
    live: Any = None,
    tiered: bool = True,
) -> ScanPlan:
    """A plan over ``ledgers`` (``(ledger id, entries, bytes)`` in topic order).

    ``after`` skips everything up to and including that position (the compaction horizon
    of an incremental run); ``upto`` stops at that position inclusive (the topic's last
    entry, taken once). ``compacted`` = ``(ledger id, entries, bytes)`` of an existing
    compacted ledger, read first. Ledgers with an unknown entry count are left out and
    make the plan inexact (with a note). Without ``bookie_dirs`` the splits carry ``live``
    (else the client options of the flags' environment), so that executors read the
    running bookies the way the driver would. ``tiered``: the splits read offloaded
    ledgers from tiered storage, with the driver's offload settings.
    """
    if split_entries < 1:
        raise ValueError("split_entries must be positive")
    # executors open the stores from another working directory (a Spark worker's): a
    # relative path (a ledgerctl.toml's rocksdb://metadata) must name the driver's place
    dirs = tuple(os.path.abspath(str(d)) for d in bookie_dirs)
    if metadata_url is not None:
        from pulsarctl_py.stores.metadata.url import parse_metadata_url

        metadata_url = str(parse_metadata_url(str(metadata_url)).absolute())
    if dirs:
        live = None
    elif live is None and metadata_url is not None:
        from pulsarctl_py.stores.live.config import resolve_client_options

        live = resolve_client_options()
    tiered_settings = None
    if tiered:
        from pulsarctl_py.ledgers import resolve_tiered
        from pulsarctl_py.precedence import resolve

        found = resolve_tiered()
        # the driver's --broker-conf (a flag executors do not see), for the offload settings
        conf = resolve("broker_conf").value
        tiered_settings = (
            found["offload_url"],
            found["s3_endpoint"],
            found["prefer"],
            os.path.abspath(conf) if conf else None,
        )
    splits: list[Split] = []
    notes: list[str] = []
    total_entries = total_bytes = 0
    exact = True

    def add(kind: str, ledger_id: int, first: int, last: int, entries: int, size: int | None):
        nonlocal total_entries, total_bytes, exact
        if size is None:
            exact = False
        for lo, hi in _ranges(first, last, split_entries):
            count = hi - lo + 1
            hint = None if size is None or entries <= 0 else size * count // entries
            split = Split(
                topic, ledger_id, lo, hi, dirs, metadata_url, len(splits), kind, hint, live
            )
            splits.append(replace(split, tiered=tiered_settings))
            total_entries += count
            total_bytes += hint or 0

    if compacted is not None:
        cid, centries, csize = compacted
        if centries > 0:
            add(KIND_COMPACTED, cid, 0, centries - 1, centries, csize)
    for ledger_id, entries, size in ledgers:
        if entries is None:
            exact = False
            notes.append(f"ledger {ledger_id}: entry count unknown, left out of the plan")
            continue
        first, last = 0, entries - 1
        if after is not None:
            if ledger_id < after[0]:
                continue
            if ledger_id == after[0]:
                first = max(first, after[1] + 1)
        if upto is not None:
            if ledger_id > upto[0]:
                continue
            if ledger_id == upto[0]:
                last = min(last, upto[1])
        if first > last:
            continue
        add(KIND_TOPIC, ledger_id, first, last, entries, size)
    return ScanPlan(topic, tuple(splits), total_entries, total_bytes, exact, tuple(notes))


@runtime_checkable
class WinnerView(Protocol):
    """What phase two asks of phase one's result: does this record win its key?"""

    def keeps(self, key: bytes, rank: bytes) -> bool:
        """Whether ``rank`` is the key's winner and the winner is not a tombstone."""
        ...

    def get(self, key: bytes) -> tuple[bytes, bool] | None:
        """``(rank, tombstone)`` of the key's winner, or None when the key never appeared."""
        ...


@runtime_checkable
class KeyTable(WinnerView, Protocol):
    """The winning record per key after ``latest_per_key``; tombstones included."""

    def __len__(self) -> int:
        """Keys seen (tombstoned ones included)."""
        ...

    @property
    def live(self) -> int:
        """Keys whose winner is not a tombstone."""
        ...

    @property
    def spilled(self) -> bool:
        """Whether the table went to disk."""
        ...

    def items(self) -> Iterator[tuple[bytes, bytes, bool]]:
        """Every ``(key, rank, tombstone)``, in key byte order."""
        ...

    def close(self) -> None: ...


class Engine(Protocol):
    """Runs the work of a scan plan. See the package docstring for the contract."""

    name: str

    def map_splits(
        self,
        plan: ScanPlan,
        fn: Callable[..., Iterable[T]],
        winners: KeyTable | None = None,
    ) -> Iterator[T]:
        """``fn(split)`` (or ``fn(split, view)``) for every split; results in plan order."""
        ...

    def latest_per_key(
        self,
        plan: ScanPlan,
        fn: Callable[[Split], Iterable[KeyRecord]],
        *,
        memory: int | None = None,
        progress: Callable[[Split], None] | None = None,
        fold: Fold | None = None,
    ) -> KeyTable:
        """Reduce ``fn``'s records over all splits to one state per key.

        Without ``fold`` the greatest rank wins, in any order. With ``fold`` (a picklable
        module-level function), a key's records are folded **in plan order** (split
        ordinal, then the order ``fn`` yields them), starting from None: that is how
        order-dependent rules such as the event-time compactor's are expressed.
        """
        ...

    def close(self) -> None: ...
