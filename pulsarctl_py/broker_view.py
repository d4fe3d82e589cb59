"""The broker's view of a topic beside the stored one (``topic info``, ``verify``).

A broker that has a topic loaded serves it from memory: its ``ManagedLedgerImpl`` keeps the
ledger list, each cursor's position and (``CompactedTopicImpl``) the compacted ledger it
read when it loaded the topic, and writes them back as the topic moves on. What it serves
is what its admin API's internal stats report (``PersistentTopic.getInternalStats``:
``ledgers``, ``cursors`` with ``markDeletePosition``, ``compactedLedger``,
``lastConfirmedEntry``, ``state``). A metadata write made behind its back (a plan applied
with ``--force-owned``, a shadow topic's ledgers rewritten under it) is not seen by it
until the topic is loaded again; meanwhile it serves the old state and may write it back.

:func:`compare` is a pure function of two documents: the stored side
(:func:`stored_document`, from :class:`pulsarctl_py.topics.TopicInfo`) and the broker's
internal stats (the admin API's JSON). Its rules, so that a healthy live topic is clean:

* **ledger lists**: the broker creates a ledger in BookKeeper, then writes the list with it
  to the metadata store before it adds entries, and trims ledgers by writing the shorter
  list before it forgets them (``ManagedLedgerImpl.updateLedgersListAfterRollover``,
  ``internalTrimLedgers``): a ledger only one side lists is a stale list
  (``broker-ledger-not-stored``: the broker lists it, storage does not;
  ``broker-ledger-not-listed``: the reverse; the broker keeps serving its own list until
  the topic is unloaded), and a ledger the broker lists whose
  BookKeeper metadata is gone is ``broker-ledger-gone`` (reads of it fail). Entries and
  sizes are compared only for ledgers closed on both sides (not the last of either list:
  the broker's current ledger is open, recorded with ``entries=0`` until it rolls);
* **compaction**: the stored ``CompactedTopicLedger`` (the ``__compaction`` cursor's
  property) is what the broker reads at load; a different ``compactedLedger`` in memory is
  a compaction the broker has not picked up (``broker-compaction-stale``);
* **cursors**: the broker persists a cursor's mark-delete lazily (to its cursor ledger, or
  the znode when it closes the cursor), so the broker's position at or ahead of the stored
  one is normal and no finding. A stored position *ahead* of the broker's, or a stored
  cursor the broker does not have, was written behind its back and will be overwritten
  when the broker persists its own (``broker-cursor-differs``, info);
* ``lastConfirmedEntry`` and ``state`` are shown, never compared (they move).

Reads race with the broker: :func:`view_of` compares twice (storage and the broker
read again) and keeps only what both comparisons found. Only a broker that has the topic
loaded is asked for its state (``BrokerAdmin.loaded_topics``, which loads nothing, asked
just before); the internal stats request would load a topic unloaded in that moment, and
the admin API has no way to ask that does not.

Nothing here is required: without an admin URL, or when no broker answers, the view says
it was not asked and why, and commands work from storage alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import MetadataStore
    from pulsarctl_py.topics import TopicInfo

ERROR = "error"
WARNING = "warning"
INFO = "info"

#: the broker's "no compacted ledger" (``CompactedTopicImpl``: ledgerId -1)
NO_LEDGER = -1


@dataclass(slots=True)
class Difference:
    """One way the broker's view differs from the stored one."""

    check: str
    severity: str | None  # None: a difference that is expected on a live topic (no finding)
    message: str
    ledger_id: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.check, self.ledger_id, self.details.get("cursor"))

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity,
            "expected": self.severity is None,
            "ledger_id": self.ledger_id,
            "message": self.message,
            "details": self.details,
        }


@dataclass(slots=True)
class BrokerView:
    """What the broker answered about one topic (or why it was not asked)."""

    topic: str
    asked: bool
    url: str | None = None
    loaded: bool | None = None
    #: why the broker was not asked, or what went wrong asking it
    reason: str | None = None
    stats: dict[str, Any] | None = None
    compaction: dict[str, Any] | None = None
    differences: list[Difference] = field(default_factory=list)

    @property
    def findings(self) -> list[Difference]:
        return [d for d in self.differences if d.severity is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "asked": self.asked,
            "url": self.url,
            "loaded": self.loaded,
            "reason": self.reason,
            "stats": self.stats,
            "compaction": self.compaction,
            "differences": [d.to_json() for d in self.differences],
        }

    def line(self) -> str:
        """One line for people (stderr)."""
        if not self.asked:
            return f"broker: not asked ({self.reason})"
        if not self.loaded:
            return (
                f"broker: {self.topic} is not loaded on any broker"
                + (f" ({self.reason})" if self.reason else "")
                + ": storage is what it will read"
            )
        found = len(self.findings)
        return (
            f"broker {self.url} has {self.topic} loaded: "
            + (f"{found} difference(s) from storage" if found else "serves what is stored")
            + (f"; compaction {self.compaction.get('status')}" if self.compaction else "")
        )


# -- the documents ---------------------------------------------------------------------------


def _position(text: Any) -> tuple[int, int] | None:
    """``"L:E"`` (the admin API's positions) -> (L, E); None for anything else."""
    if not isinstance(text, str) or ":" not in text:
        return None
    ledger, _, entry = text.partition(":")
    try:
        return int(ledger), int(entry)
    except ValueError:
        return None


def _fmt(pos: tuple[int, int] | None) -> str | None:
    return None if pos is None else f"{pos[0]}:{pos[1]}"


def stored_document(info: TopicInfo) -> dict[str, Any]:
    """The stored side of :func:`compare`: ledgers (as the ML lists them), cursors'
    mark-delete positions, the compacted ledger."""
    return {
        "ledgers": [
            {
                "ledger_id": li.ledger_id,
                # the ML's own counts: an open ledger is recorded with none yet
                "entries": None if li.open else li.entries,
                "size": None if li.open else li.size,
                "open": li.open,
            }
            for li in info.ledgers
        ],
        "cursors": {c.name: _fmt(c.mark_delete) for c in info.cursors},
        "compacted_ledger": info.compacted_ledger,
    }


def follow_source(doc: dict[str, Any], source_ledgers: list[int]) -> dict[str, Any]:
    """A shadow topic's stored document with its source's stored ledger ids: the broker's
    shadow managed ledger (``ShadowManagedLedgerImpl``, PIP-180) follows the source's ledger
    list as the source writes it, before the shadow's own node is resynced, so a ledger the
    source stores is no stale list of the broker's (the shadow's lag behind its source is
    verify's shadow check, not the broker's view)."""
    return {**doc, "source_ledgers": sorted(source_ledgers)}


def stats_summary(stats: dict[str, Any]) -> dict[str, Any]:
    """What of the internal stats the view shows (and JSON carries)."""
    compacted = stats.get("compactedLedger") or {}
    return {
        "state": stats.get("state"),
        "lastConfirmedEntry": stats.get("lastConfirmedEntry"),
        "ledgers": [
            {k: li.get(k) for k in ("ledgerId", "entries", "size", "offloaded")}
            for li in stats.get("ledgers") or []
        ],
        "cursors": {
            name: {
                "markDeletePosition": c.get("markDeletePosition"),
                "readPosition": c.get("readPosition"),
                "cursorLedger": c.get("cursorLedger"),
                "state": c.get("state"),
            }
            for name, c in (stats.get("cursors") or {}).items()
        },
        "compactedLedger": {k: compacted.get(k) for k in ("ledgerId", "entries", "size")}
        if compacted
        else None,
    }


def compare(
    stored: dict[str, Any],
    stats: dict[str, Any],
    ledger_exists: Callable[[int], bool | None] | None = None,
) -> list[Difference]:
    """How the broker's internal stats differ from the stored document (module docstring).

    ``ledger_exists(L)`` says whether BookKeeper still has ledger L's metadata (None:
    unknown); without it, ``broker-ledger-gone`` is not judged.
    """
    out: list[Difference] = []
    s_ledgers = {li["ledger_id"]: li for li in stored.get("ledgers") or []}
    b_list = [li for li in stats.get("ledgers") or [] if isinstance(li.get("ledgerId"), int)]
    b_ledgers = {li["ledgerId"]: li for li in b_list}
    s_last = max(s_ledgers) if s_ledgers else None
    b_last = max(b_ledgers) if b_ledgers else None
    following = set(stored.get("source_ledgers") or ())
    for lid in sorted(set(b_ledgers) - set(s_ledgers) - following):
        gone = ledger_exists(lid) is False if ledger_exists is not None else False
        if gone:
            out.append(
                Difference(
                    "broker-ledger-gone",
                    ERROR,
                    f"the broker lists ledger {lid}, which the stored list does not and "
                    "BookKeeper no longer has: reads of it fail until the topic is unloaded",
                    lid,
                )
            )
        else:
            out.append(
                Difference(
                    "broker-ledger-not-stored",
                    ERROR,
                    f"the broker lists ledger {lid}, which the stored ledger list does not: "
                    "its list is stale (the stored one was rewritten while it had the topic "
                    "loaded); readers get the broker's until the topic is unloaded",
                    lid,
                )
            )
    for lid in sorted(set(s_ledgers) - set(b_ledgers)):
        out.append(
            Difference(
                "broker-ledger-not-listed",
                ERROR,
                f"storage lists ledger {lid}, which the broker serving the topic does not: "
                "its list is stale; readers do not get the ledger until the topic is unloaded",
                lid,
            )
        )
    for lid in sorted(set(s_ledgers) & set(b_ledgers)):
        if lid in (s_last, b_last):
            continue  # the current ledger: open, recorded without counts until it rolls
        s, b = s_ledgers[lid], b_ledgers[lid]
        if s.get("open") or s.get("entries") is None:
            continue
        if (s.get("entries"), s.get("size")) != (b.get("entries"), b.get("size")):
            out.append(
                Difference(
                    "broker-ledger-differs",
                    WARNING,
                    f"ledger {lid}: stored {s.get('entries')} entries, {s.get('size')} bytes; "
                    f"the broker {b.get('entries')} entries, {b.get('size')} bytes",
                    lid,
                    {
                        "stored": {"entries": s.get("entries"), "size": s.get("size")},
                        "broker": {"entries": b.get("entries"), "size": b.get("size")},
                    },
                )
            )
    compacted = stats.get("compactedLedger") or {}
    b_compacted = compacted.get("ledgerId")
    if b_compacted == NO_LEDGER:
        b_compacted = None
    s_compacted = stored.get("compacted_ledger")
    if b_compacted != s_compacted:
        out.append(
            Difference(
                "broker-compaction-stale",
                ERROR,
                f"the stored CompactedTopicLedger is {_or_none(s_compacted)}, the broker "
                f"serves compacted ledger {_or_none(b_compacted)}: it has not picked up the "
                "stored compaction (readCompacted readers get the broker's; unload the topic "
                "so that it reads the stored one)",
                s_compacted,
                {"stored": s_compacted, "broker": b_compacted},
            )
        )
    s_cursors: dict[str, Any] = stored.get("cursors") or {}
    b_cursors: dict[str, Any] = stats.get("cursors") or {}
    for name in sorted(s_cursors):
        s_pos = _position(s_cursors[name])
        if name not in b_cursors:
            out.append(
                Difference(
                    "broker-cursor-differs",
                    INFO,
                    f"cursor {name} is stored but the broker serving the topic does not have "
                    "it (created or deleted behind its back)",
                    None,
                    {"cursor": name, "stored": _fmt(s_pos), "broker": None},
                )
            )
            continue
        b_pos = _position(b_cursors[name].get("markDeletePosition"))
        if s_pos is None or b_pos is None or s_pos == b_pos:
            continue
        ahead = s_pos > b_pos
        out.append(
            Difference(
                "broker-cursor-differs",
                INFO if ahead else None,
                f"cursor {name}: stored mark-delete {_fmt(s_pos)}, the broker's {_fmt(b_pos)}: "
                + (
                    "the stored position is ahead of the broker's (written behind its back); "
                    "the broker overwrites it with its own when it persists the cursor"
                    if ahead
                    else "the broker is ahead, as expected: it persists acknowledgements lazily"
                ),
                None,
                {"cursor": name, "stored": _fmt(s_pos), "broker": _fmt(b_pos)},
            )
        )
    return out


def _or_none(value: Any) -> str:
    return "none" if value is None else str(value)


# -- asking the broker -----------------------------------------------------------------------


def not_asked(topic: str, reason: str) -> BrokerView:
    return BrokerView(topic, asked=False, reason=reason)


def view_of(
    admin: Any,
    topic: str,
    stored: Callable[[], dict[str, Any]],
    ledger_exists: Callable[[int], bool | None] | None = None,
) -> BrokerView:
    """The view of the broker ``admin`` (a :class:`pulsarctl_py.stores.broker.BrokerAdmin`
    that has ``topic`` loaded): internal stats and compaction status, compared with
    ``stored()`` twice (both sides read again), keeping what both comparisons found."""
    from pulsarctl_py.errors import LedgerctlError

    view = BrokerView(topic, asked=True, url=admin.url, loaded=True)
    try:
        stats = admin.internal_stats(topic)
        first = compare(stored(), stats, ledger_exists)
        if any(d.severity is not None for d in first):
            stats = admin.internal_stats(topic)
            again = {d.key for d in compare(stored(), stats, ledger_exists)}
            first = [d for d in first if d.key in again]
        view.stats = stats_summary(stats)
        view.differences = first
    except LedgerctlError as exc:
        view.reason = f"internal stats: {exc.one_line()}"
        return view
    try:
        answer = admin.compaction_status(topic)
        view.compaction = {"status": answer.get("status"), "lastError": answer.get("lastError")}
    except LedgerctlError as exc:
        view.compaction = {"status": None, "lastError": None, "error": exc.one_line()}
    return view


class BrokerLookup:
    """Which broker has which topic loaded, asked once per run (``verify --all``), or per
    topic; never loading a topic to find out."""

    def __init__(self, store: MetadataStore, admin_url: str | list[str] | None) -> None:
        self.store = store
        self.admin_url = admin_url
        self.reason: str | None = None
        self._admins: list[Any] | None = None
        self._loaded: dict[str, Any] | None = None
        #: the views of loaded topics compared so far (``verify``)
        self.views: list[BrokerView] = []

    def admins(self) -> list[Any]:
        if self._admins is None:
            from pulsarctl_py.errors import StoreUnavailable
            from pulsarctl_py.stores.broker import brokers

            # a malformed URL or TLS setting is bad input (exit 2); an unreachable
            # metadata answer leaves the brokers unasked
            try:
                self._admins = brokers(self.store, self.admin_url)
            except StoreUnavailable as exc:
                self.reason = exc.one_line()
                self._admins = []
            if not self._admins and self.reason is None:
                self.reason = (
                    "no admin URL (--admin-url, LEDGERCTL_ADMIN_URL or admin_url in "
                    "ledgerctl.toml) and no broker registered in the metadata store"
                )
        return self._admins

    def loaded(self) -> dict[str, Any]:
        """Topic -> the broker that has it loaded, over every broker that answers."""
        if self._loaded is None:
            from pulsarctl_py.errors import LedgerctlError

            self._loaded = {}
            answered = 0
            problems = []
            for admin in self.admins():
                try:
                    topics = admin.loaded_topics()
                except LedgerctlError as exc:
                    problems.append(exc.one_line())
                    continue
                answered += 1
                for name in topics:
                    self._loaded.setdefault(name, admin)
            if self.admins() and not answered:
                self.reason = "; ".join(problems)
                self._admins = []
            elif problems:
                self.reason = "; ".join(problems)
        return self._loaded

    def to_json(self) -> dict[str, Any]:
        """What ``verify -o json`` carries as ``broker``: whether the brokers were asked,
        and the views of the loaded topics compared."""
        admins = self.admins()
        return {
            "asked": bool(admins),
            "urls": [a.url for a in admins],
            "reason": self.reason,
            "loaded": [dict(v.to_json(), topic=v.topic) for v in self.views],
        }

    def line(self) -> str:
        """One line for people (stderr)."""
        if not self.admins():
            return f"broker: not asked ({self.reason or 'no broker'})"
        found = sum(len(v.findings) for v in self.views)
        return (
            f"broker: {len(self.views)} loaded topic(s) compared with what "
            f"{', '.join(a.url for a in self.admins())} serve(s): {found} difference(s)"
            + (f" ({self.reason})" if self.reason else "")
        )

    def view(
        self,
        topic: str,
        stored: Callable[[], dict[str, Any]],
        ledger_exists: Callable[[int], bool | None] | None = None,
    ) -> BrokerView:
        """The broker's view of ``topic`` (not asked / not loaded / compared)."""
        loaded = self.loaded()
        if not self.admins():
            return not_asked(topic, self.reason or "no broker")
        admin = loaded.get(topic)
        if admin is None:
            view = BrokerView(topic, asked=True, loaded=False, reason=self.reason)
            urls = [a.url for a in self.admins()]
            view.url = urls[0] if len(urls) == 1 else ", ".join(urls)
            return view
        return view_of(admin, topic, stored, ledger_exists)


def ledger_exists_in(store: MetadataStore) -> Callable[[int], bool | None]:
    """Whether BookKeeper still has a ledger's metadata (None: cannot tell)."""

    def exists(ledger_id: int) -> bool | None:
        from pulsarctl_py.errors import LedgerctlError
        from pulsarctl_py.stores.metadata import read_ledger

        try:
            return read_ledger(store, ledger_id) is not None
        except LedgerctlError:
            return None

    return exists


def topic_view(source: Any, info: TopicInfo, lookup: BrokerLookup) -> BrokerView:
    """The broker's view of the topic ``info`` describes (read from ``source``), compared
    with ``info`` and, to rule out a race, with the topic read again."""
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.topics import topic_info

    reads = [info]

    def stored() -> dict[str, Any]:
        current = reads.pop() if reads else topic_info(source, info.topic)
        doc = stored_document(current)
        if current.shadow_source:
            try:
                src = topic_info(source, current.shadow_source)
            except LedgerctlError:
                return doc  # no source to follow: the shadow's own list is all there is
            doc = follow_source(doc, [li.ledger_id for li in src.ledgers])
        return doc

    return lookup.view(info.topic, stored, ledger_exists_in(source.metadata))


# -- compact --status ------------------------------------------------------------------------


def _lookup_path(topic: str) -> str:
    """The lookup API's path of a topic (``/lookup/v2/topic/persistent/t/ns/x``)."""
    from pulsarctl_py.stores.broker import topic_path
    from pulsarctl_py.stores.metadata import resolve_topic

    path = topic_path(resolve_topic(topic))
    rest = path.split("/admin/v2/", 1)[1] if "/admin/v2/" in path else path.split("/admin/", 1)[1]
    return "/lookup/v2/topic/" + rest


def compaction_view(source: Any, status: Any, admin_url: str | list[str] | None) -> dict[str, Any]:
    """``compact --status``'s ``broker``: the broker that has the topic loaded, asked for its
    compaction status and ``lastError``, the compacted ledger it serves, and the
    GetLastMessageId a reader that reads compacted gets from it (over the binary protocol,
    error answers retried: :mod:`pulsarctl_py.stores.broker_protocol`), beside the stored
    compaction and the predicted answer. Findings go into ``status``'s checks. A topic no
    broker has loaded is not asked about (that would load it)."""
    from pulsarctl_py.errors import StoreUnavailable
    from pulsarctl_py.stores.broker_protocol import last_message_id

    topic = status.topic
    lookup = BrokerLookup(source.metadata, admin_url)
    if not lookup.admins():
        return {"asked": False, "reason": lookup.reason}
    admin = lookup.loaded().get(topic)
    if admin is None:
        return {
            "asked": True,
            "loaded": False,
            "url": ", ".join(a.url for a in lookup.admins()),
            "reason": lookup.reason
            or "no broker has the topic loaded (asking it would load the topic)",
        }
    out: dict[str, Any] = {"asked": True, "loaded": True, "url": admin.url}
    try:
        answer = admin.compaction_status(topic)
        out["compaction"] = {"status": answer.get("status"), "lastError": answer.get("lastError")}
        stats = admin.internal_stats(topic)
    except StoreUnavailable as exc:
        out["reason"] = exc.one_line()
        return out
    served = (stats.get("compactedLedger") or {}).get("ledgerId")
    served = None if served == NO_LEDGER else served
    cursor = (stats.get("cursors") or {}).get("__compaction") or {}
    out["compacted_ledger"] = served
    out["horizon"] = cursor.get("markDeletePosition")
    if out["compaction"]["status"] == "ERROR":
        status.add(
            "warning",
            "broker-compaction-error",
            f"the broker's last compaction of {topic} failed: {out['compaction']['lastError']}",
        )
    if served != status.compacted_ledger:
        status.add(
            "error",
            "broker-compaction-stale",
            f"the stored CompactedTopicLedger is {_or_none(status.compacted_ledger)}, the broker "
            f"serves compacted ledger {_or_none(served)}: it has not picked up the stored "
            "compaction (unload the topic so that it reads the stored one)",
            stored=status.compacted_ledger,
            broker=served,
        )
    predicted = (status.last_message_id or {}).get("read_compacted")
    try:
        found = admin.get_json(_lookup_path(topic)) or {}
        tls = admin.auth.wants_tls and found.get("brokerUrlTls")
        service = found.get("brokerUrlTls") if tls else found.get("brokerUrl")
        if not service:
            raise StoreUnavailable(f"broker {admin.url} named no service URL for {topic}")
        got = last_message_id(str(service), topic, read_compacted=True, auth=admin.auth)
    except StoreUnavailable as exc:
        out["get_last_message_id"] = {"predicted": predicted, "error": exc.one_line()}
        return out
    # no prediction (no compacted ledger, or its entries not read): shown, not compared
    agrees = None
    if predicted is not None:
        agrees = got.answer == predicted or (
            got.answer is None and isinstance(predicted, str) and predicted.startswith("error")
        )
    out["get_last_message_id"] = {
        "service_url": service,
        "read_compacted": got.to_json(),
        "predicted": predicted,
        "agrees": agrees,
    }
    if got.errors and got.answer is not None:
        status.add(
            "info",
            "broker-last-message-id-retried",
            f"the broker answered GetLastMessageId with {len(got.errors)} error(s) before "
            f"{got.answer} (retried, as the Java client retries): {got.errors[0]}",
            errors=got.errors,
        )
    if agrees is False and got.answer is None:
        status.add(
            "warning",
            "broker-last-message-id-differs",
            f"the broker answered a compacted reader's GetLastMessageId with an error "
            f"{got.attempts} time(s), predicted {predicted}: {got.errors[-1]}",
            broker=None,
            predicted=predicted,
            errors=got.errors,
        )
    elif agrees is False:
        status.add(
            "warning",
            "broker-last-message-id-differs",
            f"the broker answers a compacted reader's GetLastMessageId with {got.answer}, "
            f"predicted {predicted} (the topic may have moved on since it was read)",
            broker=got.answer,
            predicted=predicted,
        )
    return out
