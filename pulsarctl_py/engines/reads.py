"""Entry reads of ``verify`` and ``seek --exact`` on an engine.

Both commands read every entry of a ledger range in order and fold what they read on the
driver (verify's ordered checks, seek's linear scan): the folding is cheap, the reading
(bookie index look-ups, digests, CRC32C, protobuf decoding) is what costs. An
:class:`EngineReads` cuts a range into splits, has the engine read them where it runs
them (``map_splits``: in this process, or on Spark executors that open the stores
themselves), and yields the results in topic order, as the in-process read would:

* :meth:`EngineReads.entries`: the entries decoded as verify decodes them (every layer,
  payloads included, chunks not joined), unreadable ones included (``keep_going``),
  slimmed for the trip back (:func:`slim_entry`: no bytes, no payload, no messages; every
  layer, check, problem and metadata verify looks at);
* :meth:`EngineReads.heads`: :class:`pulsarctl_py.seek.heads.Head` of every entry.

What a split's storage reported about itself while it was read (an unusable index, a
damaged entry log) comes back after its entries and is added to the driver's bookie
store, so that verify's storage findings are the same on every engine.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .base import DEFAULT_SPLIT_ENTRIES, ScanPlan, Split, build_scan_plan


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """Where executors find the stores: what a split carries, and the ledger password."""

    metadata_url: str | None
    bookie_dirs: tuple[str, ...] = ()
    #: client options of live bookies (without bookie dirs)
    live: Any = None
    #: the password override of the command (from its env variable or file), never shown
    password: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class StorageNotes:
    """What a split's bookie store reported about itself (sent after its entries)."""

    problems: tuple[Any, ...]
    findings: tuple[Any, ...]


def _simple(value: Any) -> bool:
    return value is None or isinstance(value, int | float | str | bytes)


def slim_entry(entry: Any) -> Any:
    """The entry without its bytes (what travels back from an executor).

    Keeps the layers (names, spans, checks, scalar fields), problems, the bookie header,
    the digest type, the message and broker entry metadata, position and unreadable
    reason. The stored bytes stay only when the bookie layer did not give the payload
    size (an entry whose header did not decode), since that size is then computed from
    them.
    """
    from pulsarctl_py.decoders import Entry
    from pulsarctl_py.decoders.nodes import Layer

    layers = [
        Layer(
            layer.name,
            layer.offset,
            layer.length,
            b"",
            {k: v for k, v in layer.fields.items() if _simple(v)},
            layer.check,
            layer.reason,
            layer.space,
        )
        for layer in entry.layers
    ]
    first = entry.layers[0] if entry.layers else None
    sized = first is not None and first.name == "bookie-entry" and "payload_size" in first.fields
    return Entry(
        b"" if sized else bytes(entry.data),
        layers=layers,
        problems=list(entry.problems),
        header=entry.header,
        digest_type=entry.digest_type,
        original_id=entry.original_id,
        broker_entry_metadata=entry.broker_entry_metadata,
        has_checksum=entry.has_checksum,
        metadata=entry.metadata,
        encrypted=entry.encrypted,
        position=entry.position,
        unreadable=entry.unreadable,
    )


def _split_entries(
    password: bytes | None, convert: str, split: Split, max_uncompressed: int | None = None
) -> Iterator[Any]:
    """Read one split where the engine runs it: its entries (or heads), then StorageNotes."""
    from pulsarctl_py.decoders import Depth
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.limits import apply_split
    from pulsarctl_py.topicpolicies import install as install_topic_policies

    apply_split(split)
    install_topic_policies()
    with LedgerSource.open(
        split.metadata_url,
        list(split.bookie_dirs),
        password,
        need_bookie=True,
        live=split.live,
        **split.source_options(),
    ) as source:
        bookie = source.bookie
        view = source.ledger(split.ledger_id)
        if convert == "heads":
            depth, join = Depth.METADATA, True
        else:  # verify's entries: as Run.entries decodes them
            from pulsarctl_py.verify.core import ENTRY_DEPTH

            depth, join = ENTRY_DEPTH, False
        entries = source.entries(
            view,
            split.first_entry,
            split.last_entry,
            depth=depth,
            keep_going=True,
            join_chunks=join,
            max_uncompressed=max_uncompressed,
        )
        if convert == "heads":
            from pulsarctl_py.seek.heads import head_of_entry

            for entry in entries:
                pos = entry.position or (split.ledger_id, -1)
                yield head_of_entry(entry, pos[0], pos[1])
        else:
            for entry in entries:
                yield slim_entry(entry)
        problems = tuple(getattr(bookie, "problems", ()))
        findings = tuple(getattr(bookie, "findings", ()))
        if problems or findings:
            yield StorageNotes(problems, findings)


class EngineReads:
    """Reads ledger ranges on an engine; results in topic order (see the module docstring)."""

    def __init__(
        self,
        engine: Any,
        location: StoreLocation,
        *,
        split_entries: int = DEFAULT_SPLIT_ENTRIES,
    ) -> None:
        self.engine = engine
        self.location = location
        self.split_entries = split_entries
        #: the most a payload of verify's entries may decompress to (None: the default)
        self.max_uncompressed: int | None = None

    @property
    def name(self) -> str:
        return str(self.engine.name)

    def plan(self, ranges: Sequence[tuple[int, int, int]]) -> ScanPlan:
        """The plan of ``(ledger id, first entry, last entry)`` ranges, in that order."""
        splits: list[Split] = []
        entries = 0
        for ledger_id, first, last in ranges:
            if last < first:
                continue
            part = build_scan_plan(
                "",
                [(ledger_id, last + 1, None)],
                bookie_dirs=self.location.bookie_dirs,
                metadata_url=self.location.metadata_url,
                after=(ledger_id, first - 1) if first > 0 else None,
                split_entries=self.split_entries,
                live=self.location.live,
            )
            for split in part.splits:
                splits.append(_renumber(split, len(splits)))
            entries += part.entries
        return ScanPlan("", tuple(splits), entries, 0, False)

    def _run(
        self, ranges: Sequence[tuple[int, int, int]], convert: str, bookie: Any
    ) -> Iterator[Any]:
        plan = self.plan(ranges)
        fn = functools.partial(
            _split_entries,
            self.location.password,
            convert,
            max_uncompressed=self.max_uncompressed,
        )
        for item in self.engine.map_splits(plan, fn):
            if isinstance(item, StorageNotes):
                _merge_notes(bookie, item)
            else:
                yield item

    def entries(self, bookie: Any, ledger_id: int, first: int, last: int) -> Iterator[Any]:
        """The entries of ``[first, last]`` of a ledger as verify decodes them, slimmed.

        ``bookie`` is the driver's bookie store: what the splits' stores reported about
        themselves is added to its ``problems`` and ``findings``.
        """
        return self._run([(ledger_id, first, last)], "entries", bookie)

    def heads(self, bookie: Any, ranges: Sequence[tuple[int, int, int]]) -> Iterator[Any]:
        """The seek heads of every entry of the ranges, in order."""
        return self._run(ranges, "heads", bookie)


def _renumber(split: Split, ordinal: int) -> Split:
    from dataclasses import replace

    return replace(split, ordinal=ordinal)


def _merge_notes(bookie: Any, notes: StorageNotes) -> None:
    if bookie is None:
        return
    for problem in notes.problems:
        if problem not in bookie.problems:
            bookie.problems.append(problem)
    findings = getattr(bookie, "findings", None)
    if findings is not None:
        for found in notes.findings:
            if found not in findings:
                findings.append(found)


def location_of(
    metadata_url: str | None,
    bookie_dirs: Iterable[Any],
    password: bytes | None,
    source: Any,
) -> StoreLocation:
    """The location executors use: absolute paths, and the source's live client options."""
    import os

    from pulsarctl_py.export import absolute_url

    dirs = tuple(os.path.abspath(str(d)) for d in bookie_dirs)
    url = None if metadata_url is None else absolute_url(metadata_url)
    return StoreLocation(url, dirs, None if dirs else source.live_options, password)
