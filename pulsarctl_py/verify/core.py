"""The core of ``verify``: findings, the run's statistics and progress, the limiter for
entry-level findings, and the context the check families share (:class:`Run`). The
driver that walks the topics is :mod:`.driver`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import Depth
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.verify.codes import ENTRY_LEVEL, hint, repair_command

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource, LedgerView

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)

#: entry-level findings listed per topic and check before they are only counted
MAX_LISTED = 20
#: progress is reported every this many entries
PROGRESS_EVERY = 500


#: how deep verify decodes each entry it reads: every layer, payloads included (each entry
#: on its own: chunks are not joined)
ENTRY_DEPTH = Depth.MESSAGES


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

    @property
    def repair(self) -> str | None:
        """The command that repairs what this finding reports, or None (no repair)."""
        return repair_command(self.check, self.topic)

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "check": self.check,
            "topic": self.topic,
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "message": self.message,
            "details": self.details,
            "repair": self.repair,
            "hint": hint(self.check),
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
    #: findings a second read did not confirm: the broker changed what they compared while
    #: verify read it (:mod:`.confirm`)
    unconfirmed: int = 0
    #: per topic checked: [ledgers, entries, payload bytes] that its checks read
    per_topic: dict[str, list[int]] = field(default_factory=dict)

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
            "unconfirmed": self.unconfirmed,
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


# -- what the check families share -----------------------------------------------------------


@dataclass(slots=True)
class LedgerFacts:
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


class Limiter:
    """Lists the first MAX_LISTED entry-level findings per check, counts the rest."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.severity: dict[str, str] = {}

    def allow(self, finding: Finding) -> bool:
        if finding.check not in ENTRY_LEVEL:
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


class Run:
    """One verify run: the stores, what it has counted and referenced so far."""

    def __init__(
        self,
        source: LedgerSource,
        progress: ProgressCallback | None,
        stats: VerifyStats,
        reads: Any = None,
    ) -> None:
        self.source = source
        self.reads = reads
        assert source.metadata is not None
        self.store = source.metadata
        self.progress = progress
        self.stats = stats
        #: ledgers some topic, cursor or compaction references (for the orphan check)
        self.referenced: set[int] = set()
        self.run_names: set[str] = set()
        #: managed ledgers whose ledger list could not be read: their ledgers are no orphans
        self.unreadable: set[str] = set()
        self.topics_done = 0
        self.topics_total = 0
        #: whether entries may go through the fast path (:mod:`.fastscan`)
        self.fast = True
        #: the most a payload may decompress to (None: the decoders' default)
        self.max_uncompressed: int | None = None
        self._finder: Any = None
        #: who to ask for the broker's view (:class:`pulsarctl_py.broker_view.BrokerLookup`;
        #: None: not asked) and the views of the loaded topics compared
        self.brokers: Any = None
        self.broker_views: list[Any] = []

    def copies_of(self, ledger_id: int) -> Any:
        """Every copy of a ledger's entries the bookies hold, looked for without its
        metadata (:class:`pulsarctl_py.stores.copies.Found`); None without bookie storage."""
        if self.source.bookie is None:
            return None
        if self._finder is None:
            from pulsarctl_py.stores.copies import DataFinder

            self._finder = DataFinder.of(self.source)
            if self._finder is None:
                return None
        try:
            return self._finder.find(ledger_id)
        except LedgerctlError:
            return None

    def close(self) -> None:
        if self._finder is not None:
            self._finder.close()
            self._finder = None

    def emit(self, finding: Finding) -> Finding:
        self.stats.count(finding)
        return finding

    def report(self, stage: str, topic: str | None, ledger_id: int | None = None) -> None:
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

    def ledger(self, ledger_id: int, ml_entries: int | None = None) -> LedgerFacts:
        """The ledger's view and its last entry id (see the module docstring's terms)."""
        try:
            view = self.source.ledger(ledger_id)
        except LedgerctlError as exc:
            led = LedgerFacts(ledger_id, None, exc.one_line(), None)
            led.last = None if ml_entries is None else ml_entries - 1
            return led
        led = LedgerFacts(ledger_id, view, None, view.last_entry_error)
        md = view.metadata
        if md is not None and md.is_closed:
            led.last, led.closed = md.last_entry_id, True
        elif md is None and ml_entries is not None:
            led.last = ml_entries - 1
        else:
            last = view.readable_last
            if last is not None:
                led.last = last
            elif self.source.bookie is not None:
                led.last = -1
            elif ml_entries is not None:
                led.last = ml_entries - 1
        return led

    def entries(self, view: LedgerView, first: int, last: int) -> Iterator[Any]:
        """(entry_id, Entry or None, error or None) for the stored entries in [first, last],
        each decoded on its own to ``Depth.MESSAGES`` (:data:`ENTRY_DEPTH`): a payload the
        decoder rejects is a problem on its entry, as for every reader of messages.

        An entry whose bytes cannot be read is reported with its error and skipped. With
        ``reads``, the range is read on its engine (cursor ledgers, decoded as the view
        says, stay in this process).
        """
        if self.reads is not None and view.kind != "cursor":
            found = self.reads.entries(self.source.bookie, view.ledger_id, first, last)
        else:
            found = self.source.entries(
                view,
                first,
                last,
                depth=ENTRY_DEPTH,
                keep_going=True,
                join_chunks=False,
                max_uncompressed=self.max_uncompressed,
            )
        for entry in found:
            entry_id = entry.position[1] if entry.position else first
            if entry.unreadable is not None:
                yield entry_id, None, entry.unreadable
            else:
                yield entry_id, entry, None
