"""What ``ledgerctl inspect`` is asked (:class:`InspectRequest`) and what it counts
(:class:`Summary`), with the reads and the time filter that both of its paths share: the
general decode path (:mod:`pulsarctl_py.inspect`) and the entry-heads path
(:mod:`pulsarctl_py.inspect_heads`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.coverage import Gaps
from pulsarctl_py.decoders import ChunkAssembler, Depth, Entry
from pulsarctl_py.decoders.codecs import CODECS
from pulsarctl_py.positions import Position

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource, LedgerView


@dataclass(slots=True)
class InspectRequest:
    """What to read and how deep; None means no limit.

    ``start`` and ``end`` are positions (inclusive) in the order of the topic's ledgers,
    so ``--from 9:1 --to 12:40`` spans ledgers; a batch index in them narrows the first
    and last entry to those messages. ``last_n`` and ``limit`` count entries of the whole
    ledger or topic, not of each ledger.
    """

    ledger_id: int | None = None
    topic: str | None = None
    start: Position | None = None
    end: Position | None = None
    last_n: int | None = None
    limit: int | None = None  # stop after this many entries (after the filters)
    depth: Depth = Depth.MESSAGES
    verify: bool = True
    key: str | None = None
    since: int | None = None  # entry timestamp, ms, inclusive
    until: int | None = None  # entry timestamp, ms, exclusive
    broker_metadata: bool | None = None  # True: only with, False: only without
    producer: str | None = None  # producer name in the message metadata
    sequence_ids: tuple[int, int] | None = None  # message sequence ids, inclusive
    properties: list[tuple[str, str | None]] = field(default_factory=list)  # all must match
    private_key: Any = None
    max_uncompressed: int | None = None  # cap on a decompressed payload (--max-message-size)
    #: the topic's schemas (pulsarctl_py.values.Values) when values are decoded, else None
    values: Any = None
    #: "both" (value and value_decoded), "decoded" (value only where not decoded), "raw"
    value_mode: str = "raw"
    #: filters on decoded values (pulsarctl_py.values.Where), all must match
    where: list[Any] = field(default_factory=list)
    #: (entry, its messages' values.Decoded) of the last entry yielded (see entry_values)
    decoded: tuple[Any, list[Any]] | None = None

    def entry_values(self, entry: Entry) -> list[Any] | None:
        """The decoded values of an entry that :func:`inspect` just yielded, or None."""
        if self.decoded is not None and self.decoded[0] is entry:
            return self.decoded[1]
        return None

    @property
    def message_filters(self) -> bool:
        """True when a filter looks at single messages (an entry may lose some)."""
        return bool(
            self.key is not None
            or self.sequence_ids is not None
            or self.properties
            or self.where
            or (self.start is not None and self.start.batch_index is not None)
            or (self.end is not None and self.end.batch_index is not None)
        )


#: a compression's name in the summary's codec counts, by its value (CODECS or the number)
_CODEC_NAMES: dict[Any, str] = {}


@dataclass(slots=True)
class Summary:
    """What a scan saw."""

    ledgers: list[int] = field(default_factory=list)
    entries: int = 0
    messages: int = 0
    bytes: int = 0
    codecs: Counter[str] = field(default_factory=Counter)
    first_time: int | None = None
    last_time: int | None = None
    first_index: int | None = None
    last_index: int | None = None
    with_broker_metadata: int = 0
    errors: int = 0
    warnings: int = 0
    #: entries with a digest or checksum that could not be verified (MAC without password)
    unverified: int = 0
    #: findings about a ledger or the storage rather than one entry (counted in errors)
    problems: list[dict[str, Any]] = field(default_factory=list)
    #: what the reader should know that is no error (entries skipped as no part of a ledger)
    notes: list[dict[str, Any]] = field(default_factory=list)
    #: what the scan could not read, or skipped (listed in ``problems`` too)
    gaps: Gaps = field(default_factory=Gaps)

    def problem(self, check: str, ledger_id: int | None, message: str) -> None:
        self.problems.append({"check": check, "ledger_id": ledger_id, "message": message})
        self.errors += 1

    def note(self, check: str, ledger_id: int | None, message: str) -> None:
        """Something the reader should know that is no error in the data."""
        self.notes.append({"check": check, "ledger_id": ledger_id, "message": message})

    def add(self, entry: Entry) -> None:
        self.entries += 1
        self.messages += len(entry.messages)
        self.bytes += len(entry.data)
        md = entry.metadata
        if md is not None:
            compression = md.compression
            name = _CODEC_NAMES.get(compression)
            if name is None:
                codec = CODECS.get(compression)
                name = _CODEC_NAMES[compression] = codec.name if codec else str(compression)
            self.codecs[name] += 1
        # entry.entry_timestamp and entry.index, reading the broker entry metadata once
        bem = entry.broker_entry_metadata
        if bem is not None:
            self.with_broker_metadata += 1
            if bem.HasField("broker_timestamp"):
                ts = bem.broker_timestamp
            else:
                ts = md.publish_time if md is not None else None
            index = bem.index if bem.HasField("index") else None
        else:
            ts = md.publish_time if md is not None else None
            index = None
        if ts:
            if self.first_time is None or ts < self.first_time:
                self.first_time = ts
            if self.last_time is None or ts > self.last_time:
                self.last_time = ts
        if index is not None:
            if md is None:
                first = index
            elif md.HasField("num_messages_in_batch"):  # entry.num_messages, inlined
                first = index - md.num_messages_in_batch + 1
            else:
                first = index
            if self.first_index is None or first < self.first_index:
                self.first_index = first
            if self.last_index is None or index > self.last_index:
                self.last_index = index
        for layer in entry.layers:  # not entry.all_verified, inlined (once per entry)
            check = layer.check
            if (check is not None and check.ok is None) or layer.name == "bookie-digest":
                self.unverified += 1
                break
        problems = entry.problems
        if problems:
            for p in problems:
                if p.severity == "error":
                    self.errors += 1
                else:
                    self.warnings += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgers": self.ledgers,
            "entries": self.entries,
            "messages": self.messages,
            "bytes": self.bytes,
            "codecs": dict(self.codecs),
            "first_time": self.first_time,
            "last_time": self.last_time,
            "first_index": self.first_index,
            "last_index": self.last_index,
            "with_broker_entry_metadata": self.with_broker_metadata,
            "errors": self.errors,
            "warnings": self.warnings,
            "problems": self.problems,
            "notes": self.notes,
            "unverified": self.unverified,
            "complete": self.gaps.complete,
            "entries_missing": self.gaps.missing_count,
            "entries_unreadable": self.gaps.unreadable_count,
            "entries_past_last": self.gaps.past_last_count,
        }

    def add_gaps(self) -> None:
        """What :attr:`gaps` holds, as problems (counted in errors)."""
        gaps = self.gaps
        for lid, first, last in gaps.missing:
            what = (
                f"entry {lid}:{first} is" if first == last else f"entries {lid}:{first}..{last} are"
            )
            self.problem("entry-missing", lid, f"{what} not in storage")
        listed = sum(b - a + 1 for _, a, b in gaps.missing)
        if gaps.missing_count > listed:
            self.problem(
                "entry-missing",
                None,
                f"{gaps.missing_count - listed} more entries are not in storage",
            )
        for lid, first, last in gaps.past_last:
            self.note(
                "entry-past-last",
                lid,
                f"entries {lid}:{first}..{last} are stored past the closed ledger's last entry "
                f"{first - 1}: skipped (adds in flight when it was closed; readers never get "
                "them)",
            )


def read_entries(
    source: LedgerSource,
    view: LedgerView,
    first: int,
    last: int,
    request: InspectRequest,
    assembler: ChunkAssembler | None = None,
) -> Iterator[Entry]:
    """The ledger's entries in [first, last], decoded as ``request`` asks, unfiltered."""
    return source.entries(
        view,
        first,
        last,
        depth=request.depth,
        verify=request.verify,
        private_key=request.private_key,
        keep_going=True,
        max_uncompressed=request.max_uncompressed,
        assembler=assembler,
    )


def in_time_range(ts: int | None, request: InspectRequest) -> bool:
    """Whether an entry timestamp passes ``--since`` and ``--until`` (None never does)."""
    if ts is None:
        return False
    if request.since is not None and ts < request.since:
        return False
    return request.until is None or ts < request.until
