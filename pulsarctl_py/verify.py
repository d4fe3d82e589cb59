"""Check that a topic's metadata and its stored ledgers agree: ``ledgerctl verify``.

:func:`verify_topics` walks topics (managed ledgers) through a :class:`LedgerSource` and
yields :class:`Finding` objects as it goes, streaming: each ledger's entries are read once,
in topic order, decoded to ``Depth.METADATA`` (bookie header and digest, broker entry
metadata, the producer's CRC32C and MessageMetadata; payloads are not decompressed), with
every digest and checksum verified. Memory is bounded by the number of ledgers, never by
the number of entries.

Every finding has a severity (``error``: reads or offsets are or will be wrong;
``warning``: inconsistent, Pulsar copes or it costs space or accuracy; ``info``: something
could not be checked), a stable ``check`` id, and the topic, ledger and entry it is about.

Terms. A ledger is *closed* when its BookKeeper metadata says CLOSED. Its *last entry* is
``lastEntryId`` when closed; for an open ledger it is what recovery would close it at:
the larger of the LAC the bookie knows (explicit LAC, or the LAC piggybacked on the last
stored entry) and the highest stored entry id; without metadata, the ML ``entries - 1``.
An ML LedgerInfo is *recorded* unless it is the topic's last ledger with ``entries=0`` and
``size=0``: Pulsar writes only ``ledgerId`` (and timestamp 0) when it creates a ledger and
fills entries/size/timestamp when it closes it (formats.md §8.2), so the open last ledger
is compared with nothing. Ledgers offloaded and deleted from BookKeeper
(``offloadContext.complete`` and ``bookkeeperDeleted``) are not looked for in BookKeeper.
The storage checks assume the bookie directories given hold every entry (a standalone
bookie, or the directories of every bookie of the ensembles).

The checks, with the rule each applies and where it comes from:

``ml-unreadable`` (error)
    The topic's ManagedLedgerInfo znode does not decode, or lacks required fields (a broker
    cannot load the topic). §8.1, §8.3.
``ledger-list-unordered`` (error)
    The ML ledger ids are not strictly ascending (Pulsar keeps them in a sorted map). §8.1.
``ledger-missing-metadata`` (error)
    A ledger of the ML list has no BookKeeper metadata znode (reads fail with "No such
    ledger exists"; operators.md §3 #1, #3). §9.1.
``ledger-metadata-unreadable`` (error)
    The ledger znode exists but does not decode or lacks required fields. §9.4.
``ledger-wrong-owner`` (error)
    The ledger's custom metadata names another managed ledger (``pulsar/managed-ledger``),
    or says it is a cursor, compacted or schema ledger, or another application's. A shadow
    topic's ledgers must name the source. Untagged ledgers pass. §9.4, §14.
``ledger-not-closed`` (warning)
    A ledger other than the topic's last one (or a compacted ledger) is not CLOSED:
    Pulsar closes a ledger before it rolls to the next. §8.2.
``ledger-missing-storage`` (error)
    The ledger's last entry is >= 0 but the bookie storage holds none of its entries
    (operators.md §3 #4, #5). §10, §11.
``entry-missing`` (error)
    Entries 0..last entry that the storage does not hold (ranges listed). §10, §11.
``entry-corrupt`` (error)
    An entry whose bytes cannot be read from storage, whose BookKeeper digest or stored
    ids do not match, whose 0x0e01 CRC32C does not match, or whose layers do not decode
    (operators.md §3 #8-#12). §1, §10.
``digest-unverified`` (warning)
    Entries whose digest could not be verified: a MAC (HMAC) digest without the ledger
    password (neither in the metadata nor given). Counted in the summary; ``--strict``
    makes the run exit 1. §10.
``entries-mismatch`` (error)
    A recorded LedgerInfo ``entries`` differs from ``lastEntryId + 1`` of the closed
    ledger: the broker uses it to know where the ledger ends. §8.1, §8.2, §9.4.
``size-mismatch`` (error / warning)
    For a closed ledger: the sum of the stored payload sizes (each entry's length minus the
    32-byte BookKeeper header and the digest) differs from the metadata ``length`` (error:
    the stored bytes are not what BookKeeper recorded); a recorded LedgerInfo ``size``
    differs from ``length`` (warning: only sizes and retention are off). Without BookKeeper
    metadata the LedgerInfo ``size`` is compared with the stored bytes (warning). Checked
    only when every entry 0..last was read. §8.1, §9.4, §10.
``cursor-unreadable`` (error)
    A cursor znode does not decode or lacks required fields. §8.1.
``cursor-ledger-missing`` (warning)
    A cursor whose state is in a cursor ledger (``cursorsLedgerId != -1``) names a ledger
    that is missing from BookKeeper metadata or storage: the broker falls back to the
    znode snapshot and redelivers what was acknowledged since. §8.2.
``cursor-beyond-lac`` (error)
    The mark-delete position (from the cursor ledger's last PositionInfo when the state is
    there, else the znode) is in a ledger of the topic but after that ledger's last entry
    (operators.md §3 #35). §8.2.
``cursor-unknown-ledger`` (error / warning)
    The mark-delete position is in a ledger the topic does not list. After the topic's last
    ledger it is an error (a position ahead of all data). Before it, a warning: the broker
    moves such a cursor to the next existing ledger when it loads it (deleted empty or
    trimmed ledgers; operators.md §3 #2). §8.2.
``compacted-ledger-missing`` (error)
    The ``__compaction`` cursor's ``CompactedTopicLedger`` property names a ledger without
    BookKeeper metadata (operators.md §3 #21). §6.1.
``compacted-ledger-wrong-topic`` (error / warning)
    That ledger's ``pulsar/compactedTopic`` names another topic, or the ledger is tagged as
    another kind (error); it carries no compaction tags at all (warning). §6.1, §9.4.
``compacted-horizon-mismatch`` (warning)
    The compacted ledger's ``pulsar/compactedTo`` (ledger, entry) differs from the
    ``__compaction`` mark-delete position, the compaction horizon: the compactor acks the
    phase-one "to" with the new ledger's id. §6.1, §6.4.
``index-gap`` (error)
    Broker entry metadata (BEM) index not continuous: for consecutive entries with an index
    in topic order (ledgers in ML order, across ledgers), ``index - num_messages`` of the
    later one must equal the earlier one's ``index`` (the stored index is the last
    message's; num_messages is ``num_messages_in_batch`` or 1). Entries without BEM use no
    index and are stepped over; continuity restarts after entries or ledgers that could not
    be read, and after offloaded ledgers. A topic without BEM is fine. §2.
``index-missing`` (warning)
    Entries without BEM after entries with it (the interceptor was turned off, or
    ``numberOfMessages <= 0``): one finding per run of such entries. Entries without BEM
    before the first entry with it are fine (the interceptor was turned on later). §2.
``index-property-invalid`` (error)
    The ML ``index`` property is not a decimal number. §2, §8.4.
``index-property-behind`` (error)
    The ML ``index`` property (missing counts as -1) is below the last BEM index of a ledger
    before the ML's last ledger. The broker rewrites the property at every ledger roll with
    its generator, so it may lag only inside the last ledger, whose LAC entry the broker
    reads on load; below a closed ledger's index, offsets would be reused if the last
    ledger were lost or empty. Not checked on shadow topics. §2, §8.4.
``timestamp-regression`` (warning)
    Entry timestamps (BEM ``broker_timestamp``, else ``publish_time``; 0 means unknown and
    is skipped) not monotone in topic order. Each non-monotonic region is listed: from the
    first entry below the running maximum to the last one before the timestamps reach it
    again, with how far back they went. Seeks by time binary-search assuming order
    (operators.md §3 #29). §15.
``orphan-ledger`` (warning, ``--all`` only)
    A ledger whose custom metadata says ``application=pulsar`` and that nothing references:
    no ML ledger list, no cursor's ``cursorsLedgerId``, no ``CompactedTopicLedger``.
    Schema ledgers are not judged (their references live under /schemas, not read here).
    A ledger a live broker has just created may show up until the broker records it
    (operators.md §3 #22, #23). §9.4.
``shadow-source-missing`` (error)
    A shadow topic's ``PULSAR.SHADOW_SOURCE`` names a topic without a managed ledger. §14.
``shadow-ledger-not-in-source`` (error)
    A shadow topic lists a ledger its source does not: the shadow's list must be a subset of
    the source's. §14.
``shadow-ledger-differs`` (warning)
    A ledger recorded in both lists with different entries or size. §14.
``storage-not-checked`` (info)
    No bookie storage was given: only the metadata checks ran.
``storage-index-unusable`` (error)
    A bookie index (DbLedgerStorage ``locations`` or ``ledgers``, or any index for a dir of
    entry logs) is missing or cannot be read. ledgerctl found the entries by scanning the
    entry logs, but a bookie could not serve them.
``storage-damaged`` (error)
    An error met reading the storage's own files: an unreadable RocksDB index block, an
    entry log whose header or ledgers map is damaged, a journal that cannot be read or is
    shorter than its lastMark.

A shadow topic's entries are its source's: its ledgers are checked against BookKeeper
metadata and the source's list, never scanned; verify the source to scan them. Ledgers a
shadow shares with a source verified in the same run are checked once, under the source.
Entry-level findings (entry-corrupt, index-gap, index-missing, timestamp-regression) are
listed up to :data:`MAX_LISTED` per topic and check, then summed up in one more finding.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import Depth, Entry
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.bookkeeper import HEADER as BK_HEADER
from pulsarctl_py.decoders.checksums import DIGESTS
from pulsarctl_py.decoders.errors import LedgerctlError, NotFoundError
from pulsarctl_py.ledgers import LedgerSource, LedgerView

if TYPE_CHECKING:
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.stores.metadata import CursorRecord, ManagedLedgerRecord

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)

#: entry-level findings listed per topic and check before they are only counted
MAX_LISTED = 20
#: progress is reported every this many entries
PROGRESS_EVERY = 500

COMPACTED_TOPIC_LEDGER = "CompactedTopicLedger"
_ENTRY_LEVEL = frozenset({"entry-corrupt", "index-gap", "index-missing", "timestamp-regression"})


@dataclass(slots=True)
class Finding:
    """One thing verify found wrong (or could not check)."""

    severity: str  # "error", "warning" or "info"
    check: str  # stable id, e.g. "ledger-missing-metadata"
    topic: str | None
    ledger_id: int | None
    entry_id: int | None
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "check": self.check,
            "topic": self.topic,
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "message": self.message,
            "details": self.details,
        }


@dataclass(slots=True)
class VerifyStats:
    """What a run looked at; filled in while :func:`verify_topics` runs."""

    topics: int = 0
    ledgers: int = 0
    entries: int = 0
    payload_bytes: int = 0
    findings: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SEVERITIES, 0))
    checks: dict[str, int] = field(default_factory=dict)
    #: entries whose digest could not be verified (a MAC digest without the password)
    unverified: int = 0

    def count(self, finding: Finding) -> None:
        self.findings[finding.severity] = self.findings.get(finding.severity, 0) + 1
        self.checks[finding.check] = self.checks.get(finding.check, 0) + 1

    @property
    def ok(self) -> bool:
        return self.findings.get(ERROR, 0) == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "topics": self.topics,
            "ledgers": self.ledgers,
            "entries": self.entries,
            "payload_bytes": self.payload_bytes,
            "errors": self.findings.get(ERROR, 0),
            "warnings": self.findings.get(WARNING, 0),
            "info": self.findings.get(INFO, 0),
            "checks": dict(sorted(self.checks.items())),
            "unverified": self.unverified,
            "ok": self.ok,
        }


@dataclass(frozen=True, slots=True)
class VerifyProgress:
    """Where a run is, for a progress display."""

    stage: str  # "topic", "ledger", "entries", "orphans", "done"
    topics_done: int
    topics_total: int
    topic: str | None = None
    ledger_id: int | None = None
    entries: int = 0  # entries read so far in the whole run


ProgressCallback = Callable[[VerifyProgress], None]


def verify_topics(
    source: LedgerSource,
    topics: list[str] | None = None,
    *,
    progress: ProgressCallback | None = None,
    stats: VerifyStats | None = None,
) -> Iterator[Finding]:
    """Verify the named topics (None: every topic, plus the orphan-ledger check).

    A topic name may be a full or short topic name or a managed-ledger name; a
    partitioned topic's name stands for its partitions. Raise LedgerctlError when there is
    no metadata store or a named topic does not exist. Findings stream as they are found;
    ``stats`` (when given) is filled in on the way.
    """
    if source.metadata is None:
        raise LedgerctlError("verify needs the metadata store (pass --metadata-url)")
    verifier = _Verifier(source, progress, stats if stats is not None else VerifyStats())
    yield from verifier.run(topics)


def storage_findings(source: LedgerSource) -> list[Finding]:
    """What the bookie storage reported about itself while it was read, as findings.

    ``storage-index-unusable``: an index that is missing or cannot be read, so entries
    were located by scanning the entry logs (a bookie could not serve them);
    ``storage-damaged``: an error met reading the storage's own files (an entry log's
    header or ledgers map, a journal, the lastMark).
    """
    bookie = source.bookie
    if bookie is None:
        return []
    out: list[Finding] = []
    seen: set[str] = set()
    for found in bookie.findings:
        if found.kind == "unusable-index" and found.message not in seen:
            seen.add(found.message)
            out.append(
                Finding(ERROR, "storage-index-unusable", None, found.ledger_id, None, found.message)
            )
    for problem in bookie.problems:
        text = str(problem)
        if problem.severity == ERROR and text not in seen:
            seen.add(text)
            out.append(Finding(ERROR, "storage-damaged", None, None, None, text))
    return out


# -- internals -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Ledger:
    """One ledger as verify sees it before reading its entries."""

    ledger_id: int
    view: LedgerView | None
    problem: str | None = None  # why there is no view
    last_entry_error: str | None = None  # the last stored entry could not be read
    last: int | None = None  # last entry id (-1: empty; None: unknown)
    closed: bool = False

    @property
    def stored(self) -> bool:
        return self.view is not None and self.view.last_stored is not None


@dataclass(slots=True)
class _ScanResult:
    #: the payload bytes of entries 0..last, when every one of them was read
    stored_bytes: int | None = None


class _Limiter:
    """Lists the first MAX_LISTED entry-level findings per check, counts the rest."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.severity: dict[str, str] = {}

    def allow(self, finding: Finding) -> bool:
        if finding.check not in _ENTRY_LEVEL:
            return True
        n = self.seen.get(finding.check, 0) + 1
        self.seen[finding.check] = n
        if n > MAX_LISTED:
            worst = self.severity.get(finding.check, INFO)
            if SEVERITIES.index(finding.severity) < SEVERITIES.index(worst):
                self.severity[finding.check] = finding.severity
            else:
                self.severity.setdefault(finding.check, finding.severity)
            return False
        return True

    def summary(self, topic: str | None) -> Iterator[Finding]:
        for check, n in self.seen.items():
            if n > MAX_LISTED:
                more = n - MAX_LISTED
                yield Finding(
                    self.severity.get(check, WARNING),
                    check,
                    topic,
                    None,
                    None,
                    f"{more} more {check} findings in this topic, not listed one by one",
                    {"not_listed": more, "total": n},
                )
        self.seen.clear()
        self.severity.clear()


class _TopicOrder:
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
        yield from self._index(entry, pos)
        yield from self._timestamp(entry, pos)

    def _index(self, entry: Entry, pos: tuple[int, int]) -> Iterator[Finding]:
        index = entry.index
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
        if entry.metadata is None:  # no message count: judge nothing across this entry
            self.break_index()
            return
        count = entry.num_messages
        if self.prev_index is not None and self.prev_pos is not None:
            expected = self.prev_index + count
            if index != expected:
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
                    f"{self.prev_pos[0]}:{self.prev_pos[1]}; expected {expected}",
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

    def _timestamp(self, entry: Entry, pos: tuple[int, int]) -> Iterator[Finding]:
        ts = entry.entry_timestamp
        if not ts:
            return
        if self.ts_max is None or ts >= self.ts_max:
            yield from self._flush_region()
            self.ts_max, self.ts_max_at = ts, pos
            return
        bem = entry.broker_entry_metadata
        source = (
            "broker_timestamp"
            if bem is not None and bem.HasField("broker_timestamp")
            else "publish_time"
        )
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
            f"{last[0]}:{last[1]} go up to {back} ms back from {region['max_before']} at "
            f"{at[0]}:{at[1]}; a seek by time in this range may land wrong",
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


def _recorded(li: mlpb.ManagedLedgerInfo.LedgerInfo, is_last: bool) -> bool:
    """Whether the ML has recorded the ledger's entries and size (it does when closed)."""
    return not (is_last and li.entries == 0 and li.size == 0)


def _offloaded(li: mlpb.ManagedLedgerInfo.LedgerInfo) -> bool:
    if not li.HasField("offloadContext"):
        return False
    ctx = li.offloadContext
    return ctx.complete and ctx.bookkeeperDeleted


def _same_ml(name: str | None, expected: str) -> bool:
    if name is None:
        return True
    if name == expected:
        return True
    try:
        return mld.TopicName.from_persistence_name(name).persistence_name == expected
    except LedgerctlError:
        return False


def _same_topic(name: str, expected: str) -> bool:
    from pulsarctl_py.stores.metadata import resolve_topic

    if name == expected:
        return True
    try:
        return resolve_topic(name).full_name == expected
    except LedgerctlError:
        return False


def _long_properties(props: Any) -> dict[str, int]:
    return {p.name: p.value for p in props}


class _Verifier:
    def __init__(
        self, source: LedgerSource, progress: ProgressCallback | None, stats: VerifyStats
    ) -> None:
        self.source = source
        assert source.metadata is not None
        self.store = source.metadata
        self.progress = progress
        self.stats = stats
        self.referenced: set[int] = set()
        self.run_names: set[str] = set()
        #: managed ledgers whose ledger list could not be read: their ledgers are no orphans
        self.unreadable: set[str] = set()
        self.topics_done = 0
        self.topics_total = 0

    # -- driving ---------------------------------------------------------------------------

    def run(self, topics: list[str] | None) -> Iterator[Finding]:
        from pulsarctl_py.stores.metadata import list_managed_ledgers

        if topics is None:
            from pulsarctl_py.topics import require_pulsar_data

            require_pulsar_data(self.store)  # an empty answer from the wrong place is no "ok"
        refs = list_managed_ledgers(self.store) if topics is None else self._resolve(topics)
        self.run_names = {ref.name for ref in refs}
        self.topics_total = len(refs)
        if self.source.bookie is None:
            yield self._emit(
                Finding(
                    INFO,
                    "storage-not-checked",
                    None,
                    None,
                    None,
                    "no bookie storage given: entries, sizes and digests were not checked",
                )
            )
        for ref in refs:
            self._report("topic", ref.topic.full_name)
            for finding in self._topic(ref.topic):
                yield self._emit(finding)
            self.topics_done += 1
            self.stats.topics += 1
        if topics is None:
            self._report("orphans", None)
            for finding in self._orphans():
                yield self._emit(finding)
        for finding in storage_findings(self.source):
            yield self._emit(finding)
        self._report("done", None)

    def _emit(self, finding: Finding) -> Finding:
        self.stats.count(finding)
        return finding

    def _report(self, stage: str, topic: str | None, ledger_id: int | None = None) -> None:
        if self.progress is not None:
            self.progress(
                VerifyProgress(
                    stage,
                    self.topics_done,
                    self.topics_total,
                    topic,
                    ledger_id,
                    self.stats.entries,
                )
            )

    def _resolve(self, names: list[str]) -> list[Any]:
        from pulsarctl_py.stores.metadata import ManagedLedgerRef, resolve_topic

        out: list[ManagedLedgerRef] = []
        seen: set[str] = set()
        for name in names:
            topic = resolve_topic(name)
            found: list[mld.TopicName] = []
            if self.store.exists(topic.ml_path) is not None:
                found.append(topic)
            elif topic.partition_index < 0:
                parent = topic.ml_path.rsplit("/", 1)[0]
                prefix = mld.url_encode(topic.local_name + mld.PARTITION_SUFFIX)
                for child in self.store.children(parent):
                    if child.startswith(prefix) and child[len(prefix) :].isdigit():
                        found.append(topic.partition(int(child[len(prefix) :])))
                found.sort(key=lambda t: t.partition_index)
            if not found:
                raise NotFoundError(f"no managed ledger for topic {topic.full_name}")
            for t in found:
                if t.persistence_name not in seen:
                    seen.add(t.persistence_name)
                    out.append(ManagedLedgerRef(t.persistence_name, t.ml_path, t))
        return out

    # -- ledgers ---------------------------------------------------------------------------

    def _view(self, ledger_id: int) -> tuple[LedgerView | None, str | None, str | None]:
        """The ledger's view, why there is none, and why its last entry was unreadable."""
        try:
            view = self.source.ledger(ledger_id)
        except LedgerctlError as exc:
            return None, exc.one_line(), None
        return view, None, view.last_entry_error

    def _ledger(self, ledger_id: int, ml_entries: int | None = None) -> _Ledger:
        view, problem, last_error = self._view(ledger_id)
        led = _Ledger(ledger_id, view, problem, last_error)
        if view is None:
            led.last = None if ml_entries is None else ml_entries - 1
            return led
        md = view.metadata
        if md is not None and md.is_closed:
            led.last, led.closed = md.last_entry_id, True
        elif md is None and ml_entries is not None:
            led.last = ml_entries - 1
        else:
            known = [v for v in (view.lac, view.last_stored) if v is not None]
            if known:
                led.last = max(known)
            elif self.source.bookie is not None:
                led.last = -1
            elif ml_entries is not None:
                led.last = ml_entries - 1
        return led

    def _metadata_findings(self, topic: str, led: _Ledger, what: str) -> Iterator[Finding]:
        """ledger-missing-metadata / ledger-metadata-unreadable for one ledger."""
        view = led.view
        lid = led.ledger_id
        if view is None or (view.metadata is None and view.metadata_error is None):
            where = (
                " (nor in bookie storage)"
                if self.source.bookie is not None and not led.stored
                else ""
            )
            yield Finding(
                ERROR,
                "ledger-missing-metadata",
                topic,
                lid,
                None,
                f"{what} {lid} has no BookKeeper metadata{where}: reads of it fail with "
                "'No such ledger exists'",
                {"problem": led.problem} if led.problem else {},
            )
        elif view.metadata_error is not None:
            yield Finding(
                ERROR,
                "ledger-metadata-unreadable",
                topic,
                lid,
                None,
                f"{what} {lid}: BookKeeper metadata does not decode: {view.metadata_error}",
                {"error": view.metadata_error},
            )

    def _owner_findings(self, topic: str, led: _Ledger, owner_ml: str) -> Iterator[Finding]:
        view = led.view
        if view is None or view.metadata is None:
            return
        tags = view.metadata.pulsar()
        lid = led.ledger_id
        wrong = None
        if tags.application is not None and tags.application != "pulsar":
            wrong = f"application={tags.application}"
        elif tags.kind in ("cursor", "compacted", "schema"):
            wrong = f"a {tags.kind} ledger"
        elif not _same_ml(tags.managed_ledger, owner_ml):
            wrong = f"managed ledger {tags.managed_ledger}"
        if wrong is not None:
            yield Finding(
                ERROR,
                "ledger-wrong-owner",
                topic,
                lid,
                None,
                f"ledger {lid} is in the list of {owner_ml} but its custom metadata says {wrong}",
                {"expected_managed_ledger": owner_ml, "tags": tags.to_json()},
            )

    def _storage_missing(self, topic: str, led: _Ledger, what: str) -> Finding:
        return Finding(
            ERROR,
            "ledger-missing-storage",
            topic,
            led.ledger_id,
            None,
            f"{what} {led.ledger_id} should hold entries 0..{led.last} but the bookie storage "
            "holds none of them",
            {"last_entry_id": led.last},
        )

    def _entries(self, view: LedgerView, first: int, last: int) -> Iterator[Any]:
        """(entry_id, Entry or None, error or None) for the stored entries in [first, last].

        An entry whose bytes cannot be read is reported with its error and skipped.
        """
        for entry in self.source.entries(
            view, first, last, depth=Depth.METADATA, keep_going=True
        ):
            entry_id = entry.position[1] if entry.position else first
            if entry.unreadable is not None:
                yield entry_id, None, entry.unreadable
            else:
                yield entry_id, entry, None

    def _scan(
        self,
        topic: str,
        led: _Ledger,
        order: _TopicOrder | None,
        what: str,
        result: _ScanResult | None = None,
    ) -> Iterator[Finding]:
        """Read entries 0..last: missing and corrupt entries, sizes, and the ordered checks."""
        view = led.view
        last = led.last
        if self.source.bookie is None or (last is not None and last < 0):
            return  # nothing to read, or nothing stored to read it from
        if view is None or last is None:
            if order is not None:
                order.break_index()  # its entries are unknown: no continuity across it
            return
        lid = led.ledger_id
        if not led.stored:
            if order is not None:
                order.break_index()
            yield self._storage_missing(topic, led, what)
            return
        kind = view.digest_type
        digest_size = DIGESTS[kind].size if kind is not None else None
        expected = 0
        missing: list[list[int]] = []
        missing_count = 0
        unreadable = 0
        stored_bytes = 0
        unverified: list[int] = []
        for entry_id, entry, error in self._entries(view, 0, last):
            if entry_id > expected:
                missing.append([expected, entry_id - 1])
                missing_count += entry_id - expected
                if order is not None:
                    order.break_index()
            expected = entry_id + 1
            pos = (lid, entry_id)
            if entry is None:
                unreadable += 1
                if order is not None:
                    order.break_index()
                yield Finding(
                    ERROR,
                    "entry-corrupt",
                    topic,
                    lid,
                    entry_id,
                    f"entry {lid}:{entry_id} cannot be read from storage: {error}",
                    {"problems": [error]},
                )
                continue
            self.stats.entries += 1
            if self.stats.entries % PROGRESS_EVERY == 0:
                self._report("entries", topic, lid)
            size = self._payload_size(entry, digest_size)
            stored_bytes += size
            self.stats.payload_bytes += size
            errors = [p for p in entry.problems if p.severity == ERROR]
            if errors:
                if order is not None:
                    order.break_index()
                yield Finding(
                    ERROR,
                    "entry-corrupt",
                    topic,
                    lid,
                    entry_id,
                    f"entry {lid}:{entry_id}: " + "; ".join(str(p) for p in errors),
                    {"problems": [p.to_json() for p in errors]},
                )
                continue
            if entry.unverified:
                unverified.append(entry_id)
            if order is not None:
                yield from order.add(entry, pos)
        if unverified:
            self.stats.unverified += len(unverified)
            yield Finding(
                WARNING,
                "digest-unverified",
                topic,
                lid,
                unverified[0],
                f"{what} {lid}: the digests of {len(unverified)} entries could not be verified "
                f"({', '.join(sorted(set(entry.unverified)))}: no password?); --strict fails",
                {"count": len(unverified), "entries": unverified[:100]},
            )
        if expected <= last:
            missing.append([expected, last])
            missing_count += last - expected + 1
            if order is not None:
                order.break_index()
        if missing:
            shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in missing[:10])
            more = f" and {len(missing) - 10} more ranges" if len(missing) > 10 else ""
            yield Finding(
                ERROR,
                "entry-missing",
                topic,
                lid,
                missing[0][0],
                f"{what} {lid}: {missing_count} of its entries 0..{last} "
                f"{'is' if missing_count == 1 else 'are'} not in storage: {shown}{more}",
                {"missing": missing[:100], "count": missing_count, "last_entry_id": last},
            )
        md = view.metadata
        complete = not missing and not unreadable
        if complete and md is not None and led.closed and stored_bytes != md.length:
            yield Finding(
                ERROR,
                "size-mismatch",
                topic,
                lid,
                None,
                f"{what} {lid}: its stored entries hold {stored_bytes} payload bytes, "
                f"its BookKeeper metadata says length {md.length}",
                {"stored_bytes": stored_bytes, "bk_length": md.length},
            )
        if result is not None and complete:
            result.stored_bytes = stored_bytes

    @staticmethod
    def _payload_size(entry: Entry, digest_size: int | None) -> int:
        bk = entry.layers[0] if entry.layers else None
        if bk is not None and bk.name == "bookie-entry" and "payload_size" in bk.fields:
            return int(bk.fields["payload_size"])
        if digest_size is None and entry.digest_type is not None:
            digest_size = DIGESTS[entry.digest_type].size
        return max(len(entry.data) - BK_HEADER.size - (digest_size or 0), 0)

    # -- a topic ---------------------------------------------------------------------------

    def _topic(self, name: mld.TopicName) -> Iterator[Finding]:
        from pulsarctl_py.stores.metadata import read_managed_ledger

        record = read_managed_ledger(self.store, name)
        topic = name.full_name
        if record is None:  # deleted while we ran
            return
        if record.info is None or record.info.missing:
            yield Finding(
                ERROR,
                "ml-unreadable",
                topic,
                None,
                None,
                f"the managed-ledger znode {record.ref.path} does not decode: {record.error}",
                {"path": record.ref.path, "error": record.error},
            )
            if record.info is None:
                self.unreadable.add(record.ref.name)
                return
        infos = list(record.info.message.ledgerInfo)
        ids = [li.ledgerId for li in infos]
        self.referenced.update(ids)
        if any(b <= a for a, b in itertools.pairwise(ids)):
            yield Finding(
                ERROR,
                "ledger-list-unordered",
                topic,
                None,
                None,
                f"the ledger ids of {record.ref.name} are not strictly ascending: {ids[:50]}",
                {"ledger_ids": ids[:1000]},
            )
        properties = record.properties
        source_name = properties.get(mld.PROPERTY_SHADOW_SOURCE)
        limiter = _Limiter()
        facts: dict[int, _Ledger] = {}
        if source_name is not None:
            gen = self._shadow(record, source_name, facts)
        else:
            gen = self._data_ledgers(record, infos, facts)
        for finding in gen:
            if limiter.allow(finding):
                yield finding
        yield from limiter.summary(topic)
        for cursor in record.cursors:
            yield from self._cursor(record, cursor, ids, facts)

    def _data_ledgers(
        self,
        record: ManagedLedgerRecord,
        infos: list[mlpb.ManagedLedgerInfo.LedgerInfo],
        facts: dict[int, _Ledger],
    ) -> Iterator[Finding]:
        topic = record.ref.topic.full_name
        order = _TopicOrder(topic)
        for i, li in enumerate(infos):
            is_last = i == len(infos) - 1
            lid = li.ledgerId
            self.stats.ledgers += 1
            self._report("ledger", topic, lid)
            order.start_ledger(is_last)
            if _offloaded(li):
                order.break_index()
                continue
            recorded = _recorded(li, is_last)
            led = self._ledger(lid, li.entries if recorded else None)
            facts[lid] = led
            yield from self._metadata_findings(topic, led, "ledger")
            yield from self._owner_findings(topic, led, record.ref.name)
            md = led.view.metadata if led.view is not None else None
            if md is not None and not md.is_closed and not is_last:
                yield Finding(
                    WARNING,
                    "ledger-not-closed",
                    topic,
                    lid,
                    None,
                    f"ledger {lid} is {md.state.name} in BookKeeper but is not the topic's last "
                    "ledger (Pulsar closes a ledger before rolling to the next)",
                    {"state": md.state.name},
                )
            if recorded and md is not None and led.closed:
                if li.entries != md.last_entry_id + 1:
                    yield Finding(
                        ERROR,
                        "entries-mismatch",
                        topic,
                        lid,
                        None,
                        f"ledger {lid}: the managed ledger records {li.entries} entries, "
                        f"BookKeeper closed it at entry {md.last_entry_id} "
                        f"({md.last_entry_id + 1} entries)",
                        {"ml_entries": li.entries, "bk_last_entry_id": md.last_entry_id},
                    )
                if li.size != md.length:
                    yield Finding(
                        WARNING,
                        "size-mismatch",
                        topic,
                        lid,
                        None,
                        f"ledger {lid}: the managed ledger records size {li.size}, "
                        f"BookKeeper metadata says length {md.length}",
                        {"ml_size": li.size, "bk_length": md.length},
                    )
            if led.last_entry_error is not None:
                order.break_index()
            scanned = _ScanResult()
            yield from self._scan(topic, led, order, "ledger", scanned)
            if recorded and md is None and scanned.stored_bytes is not None:
                if li.size != scanned.stored_bytes:
                    yield Finding(
                        WARNING,
                        "size-mismatch",
                        topic,
                        lid,
                        None,
                        f"ledger {lid}: the managed ledger records size {li.size}, its stored "
                        f"entries hold {scanned.stored_bytes} payload bytes",
                        {"ml_size": li.size, "stored_bytes": scanned.stored_bytes},
                    )
        yield from order.finish()
        if record.properties.get(mld.PROPERTY_SHADOW_SOURCE) is None:
            yield from self._index_property(record, order)

    def _index_property(self, record: ManagedLedgerRecord, order: _TopicOrder) -> Iterator[Finding]:
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

    # -- shadow topics ---------------------------------------------------------------------

    def _shadow(
        self, record: ManagedLedgerRecord, source_name: str, facts: dict[int, _Ledger]
    ) -> Iterator[Finding]:
        from pulsarctl_py.stores.metadata import read_managed_ledger

        topic = record.ref.topic.full_name
        infos = list(record.info.message.ledgerInfo) if record.info is not None else []
        try:
            source = read_managed_ledger(self.store, source_name, with_cursors=False)
        except LedgerctlError:
            source = None
        if source is None or source.info is None:
            yield Finding(
                ERROR,
                "shadow-source-missing",
                topic,
                None,
                None,
                f"shadow topic of {source_name}, which has no managed ledger",
                {"source": source_name},
            )
        source_infos = (
            {li.ledgerId: li for li in source.info.message.ledgerInfo}
            if source is not None and source.info is not None
            else None
        )
        source_ids = list(source_infos or {})
        source_in_run = source is not None and source.ref.name in self.run_names
        for i, li in enumerate(infos):
            lid = li.ledgerId
            is_last = i == len(infos) - 1
            in_source = source_infos is not None and lid in source_infos
            if source_infos is not None and not in_source:
                yield Finding(
                    ERROR,
                    "shadow-ledger-not-in-source",
                    topic,
                    lid,
                    None,
                    f"ledger {lid} is in the shadow topic's list but not in its source "
                    f"{source_name}'s",
                    {"source": source_name, "source_ledger_ids": source_ids[:1000]},
                )
            elif in_source and source_infos is not None:
                sli = source_infos[lid]
                src_last = source_ids[-1] == lid
                if (
                    _recorded(li, is_last)
                    and _recorded(sli, src_last)
                    and (li.entries, li.size) != (sli.entries, sli.size)
                ):
                    yield Finding(
                        WARNING,
                        "shadow-ledger-differs",
                        topic,
                        lid,
                        None,
                        f"ledger {lid}: the shadow records {li.entries} entries / {li.size} "
                        f"bytes, its source {sli.entries} / {sli.size}",
                        {
                            "shadow": {"entries": li.entries, "size": li.size},
                            "source": {"entries": sli.entries, "size": sli.size},
                        },
                    )
            if _offloaded(li) or (in_source and source_in_run):
                continue  # checked under the source
            self.stats.ledgers += 1
            recorded = _recorded(li, is_last)
            led = self._ledger(lid, li.entries if recorded else None)
            facts[lid] = led
            yield from self._metadata_findings(topic, led, "ledger")
            if source is not None:
                yield from self._owner_findings(topic, led, source.ref.name)
            if (
                self.source.bookie is not None
                and led.view is not None
                and led.last is not None
                and led.last >= 0
                and not led.stored
            ):
                yield self._storage_missing(topic, led, "ledger")

    # -- cursors ---------------------------------------------------------------------------

    def _cursor(
        self,
        record: ManagedLedgerRecord,
        cursor: CursorRecord,
        ids: list[int],
        facts: dict[int, _Ledger],
    ) -> Iterator[Finding]:
        topic = record.ref.topic.full_name
        name = cursor.name
        if cursor.info is None or cursor.info.missing:
            yield Finding(
                ERROR,
                "cursor-unreadable",
                topic,
                None,
                None,
                f"cursor {name!r}: the znode {cursor.path} does not decode: {cursor.error}",
                {"cursor": name, "path": cursor.path, "error": cursor.error},
            )
            if cursor.info is None:
                return
        position = cursor.mark_delete
        properties = _long_properties(cursor.info.message.properties)
        origin = "znode"
        if cursor.state_in == "ledger":
            cl = cursor.cursors_ledger_id
            assert cl is not None
            self.referenced.add(cl)
            found = yield from self._cursor_ledger(topic, name, cl)
            if found is not None:
                position, properties = found
                origin = f"cursor ledger {cl}"
        if position is not None:
            yield from self._position(topic, name, position, origin, ids, facts)
        if name == mld.COMPACTION_CURSOR:
            compacted = properties.get(COMPACTED_TOPIC_LEDGER)
            if compacted is not None:
                yield from self._compacted(topic, compacted, position)

    def _cursor_ledger(self, topic: str, name: str, ledger_id: int) -> Any:
        """Findings about a cursor ledger; returns its last PositionInfo's position and
        properties, or None to fall back to the znode snapshot."""
        led = self._ledger(ledger_id)
        view = led.view
        missing = None
        if view is None or view.metadata is None:
            missing = "has no BookKeeper metadata"
        elif (
            self.source.bookie is not None
            and led.last is not None
            and led.last >= 0
            and not led.stored
        ):
            missing = "holds no entries in bookie storage"
        if missing is not None:
            yield Finding(
                WARNING,
                "cursor-ledger-missing",
                topic,
                ledger_id,
                None,
                f"cursor {name!r}: its cursor ledger {ledger_id} {missing}; the broker falls "
                "back to the znode snapshot and redelivers what was acknowledged since",
                {"cursor": name},
            )
            return None
        if view is None or self.source.bookie is None or led.last is None or led.last < 0:
            return None
        view.kind = "cursor"  # whatever its tags say: decode its entries as PositionInfo
        entry = None
        error = led.last_entry_error
        if error is None:
            for _, got, err in self._entries(view, led.last, led.last):
                entry, error = got, err
        if entry is not None:
            errors = [p for p in entry.problems if p.severity == ERROR]
            if errors:
                error = "; ".join(str(p) for p in errors)
        if entry is None and error is None:
            error = "the entry is not in storage"
        if error is not None:
            yield Finding(
                ERROR,
                "entry-corrupt",
                topic,
                ledger_id,
                led.last,
                f"cursor {name!r}: the last entry {ledger_id}:{led.last} of its cursor ledger "
                f"is unreadable ({error}); the broker falls back to the znode snapshot",
                {"cursor": name, "problems": [error]},
            )
            return None
        assert entry is not None
        layer = entry.layers[-1] if entry.layers else None
        if layer is None or layer.name != "position-info":
            return None
        info, _ = mld.parse_position_info(layer.raw)
        return (info.ledgerId, info.entryId), _long_properties(info.properties)

    def _position(
        self,
        topic: str,
        name: str,
        position: tuple[int, int],
        origin: str,
        ids: list[int],
        facts: dict[int, _Ledger],
    ) -> Iterator[Finding]:
        lid, eid = position
        details = {"cursor": name, "mark_delete": [lid, eid], "from": origin}
        if lid not in ids:
            if not ids or lid > ids[-1]:
                yield Finding(
                    ERROR,
                    "cursor-unknown-ledger",
                    topic,
                    lid,
                    eid,
                    f"cursor {name!r}: mark-delete position {lid}:{eid} ({origin}) is in a "
                    "ledger after the topic's last ledger, ahead of all its data",
                    {**details, "ledger_ids": ids[-5:]},
                )
            else:
                nxt = next(i for i in ids if i > lid)
                yield Finding(
                    WARNING,
                    "cursor-unknown-ledger",
                    topic,
                    lid,
                    eid,
                    f"cursor {name!r}: mark-delete position {lid}:{eid} ({origin}) is in a "
                    f"ledger the topic no longer lists; on load the broker moves it to {nxt}:-1",
                    {**details, "next_ledger": nxt},
                )
            return
        led = facts.get(lid)
        if led is None:  # a shadow's ledger checked under its source, or offloaded
            led = self._ledger(lid)
        last = led.last
        if last is not None and eid > last:
            yield Finding(
                ERROR,
                "cursor-beyond-lac",
                topic,
                lid,
                eid,
                f"cursor {name!r}: mark-delete position {lid}:{eid} ({origin}) is after the "
                f"last entry {lid}:{last} of its ledger",
                {**details, "last_entry_id": last},
            )

    # -- compaction ------------------------------------------------------------------------

    def _compacted(
        self, topic: str, ledger_id: int, horizon: tuple[int, int] | None
    ) -> Iterator[Finding]:
        self.referenced.add(ledger_id)
        led = self._ledger(ledger_id)
        view = led.view
        if view is None or view.metadata is None:
            if view is not None and view.metadata_error is not None:
                yield from self._metadata_findings(topic, led, "compacted ledger")
                return
            yield Finding(
                ERROR,
                "compacted-ledger-missing",
                topic,
                ledger_id,
                None,
                f"the __compaction cursor's {COMPACTED_TOPIC_LEDGER} is {ledger_id}, which has "
                "no BookKeeper metadata: compacted reads fail",
                {"compacted_ledger": ledger_id},
            )
            return
        md = view.metadata
        tags = md.pulsar()
        if tags.compacted_topic is None:
            other = tags.kind not in ("compacted", "unknown") or tags.managed_ledger is not None
            yield Finding(
                ERROR if other else WARNING,
                "compacted-ledger-wrong-topic",
                topic,
                ledger_id,
                None,
                f"compacted ledger {ledger_id} "
                + (
                    f"is tagged as a {tags.kind} ledger, not a compacted ledger"
                    if other
                    else "carries no pulsar/compactedTopic tag"
                ),
                {"tags": tags.to_json()},
            )
        elif not _same_topic(tags.compacted_topic, topic):
            yield Finding(
                ERROR,
                "compacted-ledger-wrong-topic",
                topic,
                ledger_id,
                None,
                f"compacted ledger {ledger_id} names topic {tags.compacted_topic}",
                {"compacted_topic": tags.compacted_topic},
            )
        to = tags.compacted_to
        if to is not None and horizon is not None:
            if (to["ledger_id"], to["entry_id"]) != tuple(horizon):
                yield Finding(
                    WARNING,
                    "compacted-horizon-mismatch",
                    topic,
                    ledger_id,
                    None,
                    f"compacted ledger {ledger_id} was compacted up to "
                    f"{to['ledger_id']}:{to['entry_id']}, the __compaction cursor is at "
                    f"{horizon[0]}:{horizon[1]}",
                    {"compacted_to": [to["ledger_id"], to["entry_id"]], "horizon": list(horizon)},
                )
        if not md.is_closed:
            yield Finding(
                WARNING,
                "ledger-not-closed",
                topic,
                ledger_id,
                None,
                f"compacted ledger {ledger_id} is {md.state.name}: the compactor closes it "
                "before it records it",
                {"state": md.state.name},
            )
        yield from self._scan(topic, led, None, "compacted ledger")

    # -- orphans ---------------------------------------------------------------------------

    def _orphans(self) -> Iterator[Finding]:
        from pulsarctl_py.decoders import ledger_metadata as lm
        from pulsarctl_py.stores.metadata import iter_ledger_paths, resolve_topic

        for ledger_id, path in iter_ledger_paths(self.store):
            if ledger_id in self.referenced:
                continue
            node = self.store.get(path)
            if node is None:
                continue
            try:
                md = lm.parse(node.data, ledger_id)
            except LedgerctlError:
                continue
            tags = md.pulsar()
            if tags.application != "pulsar" or tags.kind == "schema":
                continue
            owner = tags.managed_ledger or tags.compacted_topic
            exists = None
            if owner is not None:
                try:
                    owner_topic = resolve_topic(owner)
                except LedgerctlError:
                    owner_topic = None
                if owner_topic is not None:
                    if owner_topic.persistence_name in self.unreadable:
                        continue  # its topic's list could not be read: no judgement
                    exists = self.store.exists(owner_topic.ml_path) is not None
            whose = (
                ""
                if owner is None
                else f" of {owner}"
                + (" (a topic that no longer exists)" if exists is False else "")
            )
            yield Finding(
                WARNING,
                "orphan-ledger",
                None,
                ledger_id,
                None,
                f"{tags.kind} ledger {ledger_id}{whose} is referenced by no topic, cursor or "
                f"compaction ({md.state.name}, {md.length} bytes)",
                {
                    "kind": tags.kind,
                    "state": md.state.name,
                    "length": md.length,
                    "ctime": md.ctime,
                    "owner": owner,
                    "owner_exists": exists,
                    "tags": tags.to_json(),
                },
            )


__all__ = [
    "ERROR",
    "INFO",
    "MAX_LISTED",
    "SEVERITIES",
    "WARNING",
    "Finding",
    "ProgressCallback",
    "VerifyProgress",
    "VerifyStats",
    "verify_topics",
]
