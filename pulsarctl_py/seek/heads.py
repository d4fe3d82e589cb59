"""Entry heads: what a seek reads of one entry (its times, its index, its message count),
and the readers that read them from a :class:`~pulsarctl_py.ledgers.LedgerSource`, one
stored entry per head, counting their reads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pulsarctl_py.errors import LedgerctlError, StoreUnavailable
from pulsarctl_py.positions import format_position

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource, LedgerView


@dataclass(slots=True)
class Head:
    """What a seek needs of one entry: its times, its index, its message count."""

    ledger_id: int
    entry_id: int
    publish_time: int | None = None
    broker_timestamp: int | None = None
    index: int | None = None
    num_messages: int = 1
    error: str | None = None
    original: tuple[int, int] | None = None  # compacted ledger: the topic position
    #: the entry is a batch (its metadata has num_messages_in_batch, even of 1): its
    #: messages are L:E:B, as the client's BatchMessageIdImpl names them; else L:E
    batched: bool = False
    #: broker entry metadata present (with or without an index): KoP tells the two apart
    has_bem: bool = False
    #: not an entry read but entries not read from here on (a ledger or a range of entries
    #: the storage does not hold): ``error`` says which
    gap: bool = False

    @property
    def timestamp(self) -> int | None:
        """The broker's entry timestamp: broker_timestamp if present, else publish_time."""
        return self.broker_timestamp if self.broker_timestamp is not None else self.publish_time

    @property
    def timestamp_source(self) -> str | None:
        if self.broker_timestamp is not None:
            return "broker_entry_metadata"
        return "publish_time" if self.publish_time is not None else None

    @property
    def base_index(self) -> int | None:
        return None if self.index is None else self.index - self.num_messages + 1

    @property
    def position(self) -> str:
        return format_position(self.ledger_id, self.entry_id)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "position": self.position,
            "publish_time": self.publish_time,
            "broker_timestamp": self.broker_timestamp,
            "entry_timestamp": self.timestamp,
            "timestamp_source": self.timestamp_source,
            "index": self.index,
            "base_index": self.base_index,
            "num_messages": self.num_messages,
            "batched": self.batched,
        }
        if self.original is not None:
            out["original_position"] = format_position(*self.original)
        if self.error is not None:
            out["error"] = self.error
        return out


class HeadReader(Protocol):
    """Reads one entry head; ``reads`` counts the entries read from storage."""

    reads: int

    def head(self, ledger_id: int, entry_id: int) -> Head: ...


class CachedReader:
    """A reader that reads each entry once (OpFindNewest may probe one entry twice)."""

    def __init__(self, inner: HeadReader) -> None:
        self.inner = inner
        self._cache: dict[tuple[int, int], Head] = {}

    @property
    def reads(self) -> int:
        return self.inner.reads

    def head(self, ledger_id: int, entry_id: int) -> Head:
        key = (ledger_id, entry_id)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self.inner.head(ledger_id, entry_id)
        return found


def head_of_entry(entry: Any, ledger_id: int, entry_id: int) -> Head:
    """A :class:`Head` from an entry decoded at ``Depth.METADATA`` or deeper."""
    if entry.unreadable or entry.metadata is None:
        errors = [p.message for p in entry.problems if p.severity == "error"]
        reason = entry.unreadable or (errors[0] if errors else "no message metadata")
        return Head(ledger_id, entry_id, error=reason)
    bem = entry.broker_entry_metadata
    original = entry.message_position if entry.original_id is not None else None
    head = Head(
        ledger_id,
        entry_id,
        publish_time=entry.publish_time,
        broker_timestamp=bem.broker_timestamp
        if bem is not None and bem.HasField("broker_timestamp")
        else None,
        index=entry.index,
        num_messages=entry.num_messages,
        original=original,
        batched=entry.batched,
        has_bem=bem is not None,
    )
    bad = [p for p in entry.problems if p.severity == "error"]
    if bad:
        head.error = f"{bad[0].layer}: {bad[0].message}"
    return head


class StoreReader:
    """Entry heads from a :class:`LedgerSource`: one stored entry read per head."""

    def __init__(self, source: LedgerSource) -> None:
        self.source = source
        self.reads = 0
        self._views: dict[int, LedgerView] = {}

    def view(self, ledger_id: int) -> LedgerView:
        view = self._views.get(ledger_id)
        if view is None:
            view = self._views[ledger_id] = self.source.ledger(ledger_id)
        return view

    def head(self, ledger_id: int, entry_id: int) -> Head:
        if self.source.bookie is None:
            raise LedgerctlError(
                "seek reads entries: pass --bookie-dir, or set LEDGERCTL_BOOKIE_DIRS / "
                "bookie_dirs in ledgerctl.toml"
            )
        # a store that cannot be reached is no answer about the data: it goes up (exit 3)
        try:
            view = self.view(ledger_id)
        except StoreUnavailable:
            raise
        except LedgerctlError as exc:
            return Head(ledger_id, entry_id, error=exc.one_line())
        self.reads += 1
        try:
            # a bookie entry by id, or an offloaded one through the offload's index
            entry = self.source.entry_metadata(view, entry_id, keep_going=True)
        except StoreUnavailable:
            raise
        except LedgerctlError as exc:
            return Head(ledger_id, entry_id, error=exc.one_line())
        if entry is None:
            return Head(ledger_id, entry_id, error=f"entry {entry_id} is not offloaded")
        if entry.unreadable is not None:
            return Head(ledger_id, entry_id, error=entry.unreadable)
        return head_of_entry(entry, ledger_id, entry_id)

    def stream(self, ledger_id: int, first: int, last: int) -> Iterator[Head]:
        """Every head of ``[first, last]`` in order, read sequentially (for --exact)."""
        from pulsarctl_py.decoders import Depth

        view = self.view(ledger_id)
        for entry in self.source.entries(view, first, last, depth=Depth.METADATA, keep_going=True):
            self.reads += 1
            pos = entry.position or (ledger_id, -1)
            yield head_of_entry(entry, pos[0], pos[1])
