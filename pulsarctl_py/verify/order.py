"""The checks that follow a topic's entries in order: broker entry metadata index
continuity, the managed ledger's ``index`` property, and monotone timestamps.

The index is checked as the broker assigns it. ``AppendIndexMetadataInterceptor`` adds
the number of messages the managed ledger is told an entry holds
(``interceptWithNumberOfMessages``): a published entry's batch size, but one for every
entry added with ``ManagedLedger.asyncAddEntry(buffer, callback, ctx)``, which passes 1
(``ManagedLedgerImpl``). ``TopicTransactionBuffer.appendBufferToTxn`` adds a
transactional entry that way (and the commit and abort markers), so in Pulsar 4.0.7 a
transactional batch of N messages moves the index by 1, not N. That is the broker's rule
(``index-per-entry``, information), not a gap; but it breaks the continuous offsets that
Kafka-on-Pulsar derives from the index (one offset per message). A transactional entry
whose index moved by its message count (``ledgerctl migrate index`` counts messages) is
continuous too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import Entry
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.render import human_duration
from pulsarctl_py.timeparse import format_time_ms
from pulsarctl_py.verify.core import ERROR, INFO, WARNING, Finding

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import ManagedLedgerRecord


class TopicOrder:
    """The checks that follow a topic's entries in order: BEM index and timestamps."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        # index continuity
        self.prev_index: int | None = None
        self.prev_pos: tuple[int, int] | None = None
        self.bem_seen = False
        self.missing_run: list[Any] | None = None  # [first (l, e), last (l, e), count]
        #: the largest BEM index in ledgers before the ML's last one
        self.max_index_before_last: int | None = None
        self.max_index_at: tuple[int, int] | None = None
        self.in_last_ledger = False
        # timestamps
        self.ts_max: int | None = None
        self.ts_max_at: tuple[int, int] | None = None
        self.region: dict[str, Any] | None = None

    def start_ledger(self, is_last: bool) -> None:
        self.in_last_ledger = is_last

    def break_index(self) -> None:
        """Entries could not be read here: do not judge continuity across the hole."""
        self.prev_index = None
        self.prev_pos = None

    def add(self, entry: Entry, pos: tuple[int, int]) -> Iterator[Finding]:
        bem = entry.broker_entry_metadata
        md = entry.metadata
        yield from self.add_values(
            pos,
            entry.index,
            entry.num_messages if md is not None else None,
            entry.entry_timestamp,
            bem is not None and bem.HasField("broker_timestamp"),
            md is not None and transactional(md),
        )

    def add_values(
        self,
        pos: tuple[int, int],
        index: int | None,
        count: int | None,
        timestamp: int | None,
        broker_timestamp: bool,
        in_transaction: bool = False,
    ) -> Iterator[Finding]:
        """The ordered checks of one entry, from what they read of it: its BEM index, its
        message count (None: its MessageMetadata did not decode), its timestamp, whether
        that is the BEM ``broker_timestamp`` (else ``publish_time``), and whether it was
        published in a transaction (the broker counts it as one message)."""
        yield from self._index(index, count, pos, in_transaction)
        yield from self._timestamp(timestamp, broker_timestamp, pos)

    @property
    def quiet(self) -> bool:
        """No index-missing run or timestamp region is open (see ``verify_heads``)."""
        return self.missing_run is None and self.region is None

    def _index(
        self, index: int | None, count: int | None, pos: tuple[int, int], in_transaction: bool
    ) -> Iterator[Finding]:
        if index is None:
            if self.bem_seen:
                if self.missing_run is None:
                    self.missing_run = [pos, pos, 0]
                self.missing_run[1] = pos
                self.missing_run[2] += 1
            return
        yield from self._flush_missing()
        self.bem_seen = True
        if not self.in_last_ledger and (
            self.max_index_before_last is None or index > self.max_index_before_last
        ):
            self.max_index_before_last = index
            self.max_index_at = pos
        if count is None:  # no message count: judge nothing across this entry
            self.break_index()
            return
        if self.prev_index is not None and self.prev_pos is not None:
            expected = self.prev_index + count
            if index != expected and in_transaction and index == self.prev_index + 1:
                yield self._per_entry(index, count, pos)
            elif index != expected:
                gap = index - expected
                what = f"skips {gap}" if gap > 0 else f"reuses {-gap}"
                yield Finding(
                    ERROR,
                    "index-gap",
                    self.topic,
                    pos[0],
                    pos[1],
                    f"broker entry metadata index {index} at {pos[0]}:{pos[1]} ({count} "
                    f"message{'s' if count != 1 else ''}) {what} "
                    f"index{'es' if abs(gap) != 1 else ''} after {self.prev_index} at "
                    f"{self.prev_pos[0]}:{self.prev_pos[1]}; expected {expected}"
                    + (
                        f" (or {self.prev_index + 1}: the broker counts a transactional "
                        "entry as one message)"
                        if in_transaction and count != 1
                        else ""
                    ),
                    {
                        "index": index,
                        "num_messages": count,
                        "expected": expected,
                        "gap": gap,
                        "previous": {"position": list(self.prev_pos), "index": self.prev_index},
                    },
                )
        self.prev_index = index
        self.prev_pos = pos

    def _per_entry(self, index: int, count: int, pos: tuple[int, int]) -> Finding:
        """index-per-entry: a transactional batch the broker counted as one message."""
        assert self.prev_pos is not None and self.prev_index is not None
        return Finding(
            INFO,
            "index-per-entry",
            self.topic,
            pos[0],
            pos[1],
            f"transactional batch {pos[0]}:{pos[1]} of {count} messages has broker entry "
            f"metadata index {index}, one past {self.prev_index} at "
            f"{self.prev_pos[0]}:{self.prev_pos[1]}: the broker counts a transactional "
            f"entry as one message; offsets derived from the index (Kafka-on-Pulsar) are "
            f"not continuous over its {count} messages",
            {
                "index": index,
                "num_messages": count,
                "continuous": self.prev_index + count,
                "previous": {"position": list(self.prev_pos), "index": self.prev_index},
            },
        )

    def _flush_missing(self) -> Iterator[Finding]:
        run = self.missing_run
        if run is None:
            return
        self.missing_run = None
        first, last, count = run
        yield Finding(
            WARNING,
            "index-missing",
            self.topic,
            first[0],
            first[1],
            f"{count} entr{'y' if count == 1 else 'ies'} from {first[0]}:{first[1]} to "
            f"{last[0]}:{last[1]} carry no broker entry metadata index after entries that do",
            {"first": list(first), "last": list(last), "entries": count},
        )

    def _timestamp(
        self, ts: int | None, broker_timestamp: bool, pos: tuple[int, int]
    ) -> Iterator[Finding]:
        if not ts:
            return
        if self.ts_max is None or ts >= self.ts_max:
            yield from self._flush_region()
            self.ts_max, self.ts_max_at = ts, pos
            return
        source = "broker_timestamp" if broker_timestamp else "publish_time"
        region = self.region
        if region is None:
            self.region = {
                "first": pos,
                "last": pos,
                "entries": 1,
                "min": ts,
                "max_before": self.ts_max,
                "max_before_at": self.ts_max_at,
                "sources": {source},
            }
            return
        region["last"] = pos
        region["entries"] += 1
        region["min"] = min(region["min"], ts)
        region["sources"].add(source)

    def _flush_region(self) -> Iterator[Finding]:
        region, self.region = self.region, None
        if region is None:
            return
        first, last = region["first"], region["last"]
        back = region["max_before"] - region["min"]
        at = region["max_before_at"]
        yield Finding(
            WARNING,
            "timestamp-regression",
            self.topic,
            first[0],
            first[1],
            f"timestamps not monotone: {region['entries']} entr"
            f"{'y' if region['entries'] == 1 else 'ies'} from {first[0]}:{first[1]} to "
            f"{last[0]}:{last[1]} go up to {human_duration(back)} back from "
            f"{format_time_ms(region['max_before'])} at {at[0]}:{at[1]}; a seek by time in "
            "this range may land wrong",
            {
                "first": list(first),
                "last": list(last),
                "entries": region["entries"],
                "max_before": region["max_before"],
                "max_before_at": list(at),
                "min": region["min"],
                "back_ms": back,
                "timestamp": sorted(region["sources"]),
            },
        )

    def finish(self) -> Iterator[Finding]:
        yield from self._flush_missing()
        yield from self._flush_region()


def transactional(metadata: Any) -> bool:
    """Whether a MessageMetadata is of an entry published in a transaction (as
    ``TopicTransactionBuffer``'s recovery tells: both halves of the transaction id)."""
    return metadata.HasField("txnid_most_bits") and metadata.HasField("txnid_least_bits")


def index_property(record: ManagedLedgerRecord, order: TopicOrder) -> Iterator[Finding]:
    """index-property-invalid / index-property-behind: the ML ``index`` property."""
    topic = record.ref.topic.full_name
    raw = record.properties.get(mld.PROPERTY_INDEX)
    value = -1
    if raw is not None:
        try:
            value = int(raw)
        except ValueError:
            yield Finding(
                ERROR,
                "index-property-invalid",
                topic,
                None,
                None,
                f"the managed-ledger property index={raw!r} is not a decimal number",
                {"index_property": raw},
            )
            return
    best = order.max_index_before_last
    if best is not None and value < best:
        at = order.max_index_at or (None, None)
        shown = "missing" if raw is None else str(value)
        yield Finding(
            ERROR,
            "index-property-behind",
            topic,
            at[0],
            at[1],
            f"the managed-ledger property index is {shown}, behind the broker entry "
            f"metadata index {best} at {at[0]}:{at[1]} in a ledger before the last one: "
            "offsets would be reused if the broker recovered from it",
            {"index_property": None if raw is None else value, "last_index": best},
        )
