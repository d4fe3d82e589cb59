"""Every finding code of ``verify``: its family, severities, meaning, and the repair that
fixes it (or none).

This table is the one place that says which repair answers which finding:
``verify`` puts the repair command in each finding (``repair`` in its JSON), and
``ledgerctl repair --from-verify`` dispatches on :data:`REPAIR_FOR_CHECK`, taken from it.
The rule behind each check is in the docstring of :mod:`pulsarctl_py.verify`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Code:
    """One finding code."""

    check: str
    family: str  # the module of pulsarctl_py.verify that reports it
    severities: tuple[str, ...]
    summary: str
    #: the repair ``repair --from-verify`` runs for it (None: no repair does)
    repair: str | None = None
    #: what an operator can do about it when no repair command does (each finding's "hint")
    hint: str | None = None


#: repair name -> the command an operator runs for it (``{topic}``: the finding's topic)
REPAIR_COMMANDS = {
    "missing-ledgers": "ledgerctl repair missing-ledgers {topic}",
    "clamp-cursors": "ledgerctl repair clamp-cursors {topic}",
    "cursor-snapshot": "ledgerctl repair --from-verify REPORT",
    "compaction": "ledgerctl repair compaction {topic} --clear",
    "shadow": "ledgerctl repair shadow {topic}",
    "orphans": "ledgerctl orphans --delete",
}

_E, _W, _I = ("error",), ("warning",), ("info",)
_EW = ("error", "warning")

CODES: dict[str, Code] = {
    c.check: c
    for c in (
        Code("ml-unreadable", "core", _E, "the managed-ledger znode does not decode"),
        Code(
            "ledger-list-unordered",
            "core",
            _I,
            "the topic's ledger ids are stored out of id order (the broker sorts them)",
        ),
        Code(
            "ledger-list-duplicate",
            "core",
            _E,
            "the topic lists a ledger id more than once (the broker keeps the last)",
            hint="check that the LedgerInfo the broker keeps (the last one listed) is the "
            "right one: the next write of the list (a rollover, or any repair plan of the "
            "topic) keeps only it",
        ),
        Code(
            "ledger-missing-metadata",
            "ledgers",
            _E,
            "a ledger the topic lists has no BookKeeper metadata",
            "missing-ledgers",
        ),
        Code("ledger-metadata-unreadable", "ledgers", _E, "a ledger's metadata does not decode"),
        Code("ledger-wrong-owner", "ledgers", _E, "a ledger's custom metadata names another owner"),
        Code("ledger-not-closed", "ledgers", _W, "a ledger before the last one is not closed"),
        Code(
            "ledger-missing-storage",
            "ledgers",
            _E,
            "no entry of a ledger is in bookie storage",
            "missing-ledgers",
        ),
        Code(
            "entry-missing",
            "ledgers",
            _E,
            "entries of a ledger are not in storage",
            hint="look for them on the other bookies of the ensemble (ledgerctl ledger "
            "replicas L); exports and scans of the topic are incomplete until then",
        ),
        Code(
            "entry-corrupt",
            "ledgers",
            _E,
            "an entry cannot be read or does not verify",
            hint="read another replica (ledgerctl ledger replicas L); compact and migrate "
            "refuse to copy it unless --accept-damage",
        ),
        Code(
            "entry-undecodable",
            "ledgers",
            _E,
            "an entry's payload does not decode (compression, batch): consumers fail on it",
            hint="ledgerctl inspect L:E shows the layer that fails; compact and migrate "
            "refuse to copy it unless --accept-damage (then it is copied as the broker "
            "copies it, and listed)",
        ),
        Code(
            "entry-past-last",
            "ledgers",
            _I,
            "entries are stored past a closed ledger's last entry: readers never get them",
            hint="normal after a ledger was closed while adds were in flight (a topic "
            "unloaded or its broker failing over under load): they were never acknowledged "
            "and are not part of the ledger, and every command skips them; only a ledger "
            "closed short by hand would lose acknowledged entries there (compare "
            "lastEntryId in ledgerctl ledger meta L with what producers were told)",
        ),
        Code("digest-unverified", "ledgers", _W, "digests could not be verified (no password)"),
        Code("entries-mismatch", "ledgers", _E, "LedgerInfo entries differ from the closed ledger"),
        Code("size-mismatch", "ledgers", _EW, "stored, BookKeeper and LedgerInfo sizes differ"),
        Code("cursor-unreadable", "cursors", _E, "a cursor znode does not decode"),
        Code(
            "cursor-ledger-missing",
            "cursors",
            _W,
            "a cursor ledger is gone: the broker rolls back to the znode's position, "
            "without properties or individual acknowledgements",
            "cursor-snapshot",
        ),
        Code(
            "cursor-beyond-lac",
            "cursors",
            _E,
            "a mark-delete position is after its ledger's last entry",
            "clamp-cursors",
        ),
        Code(
            "cursor-unknown-ledger",
            "cursors",
            _EW,
            "a mark-delete position is in a ledger the topic does not list",
            "clamp-cursors",
        ),
        Code(
            "compacted-ledger-missing",
            "compaction",
            _E,
            "CompactedTopicLedger names a ledger without metadata",
            "compaction",
        ),
        Code(
            "compacted-ledger-wrong-topic",
            "compaction",
            _EW,
            "the compacted ledger names another topic, or none",
        ),
        Code(
            "compacted-horizon-mismatch",
            "compaction",
            _W,
            "pulsar/compactedTo differs from the __compaction mark-delete position",
        ),
        Code("index-gap", "order", _E, "the broker entry metadata index is not continuous"),
        Code(
            "index-per-entry",
            "order",
            _I,
            "a transactional batch moved the index by one, as the broker counts it: "
            "offsets from the index (Kafka-on-Pulsar) are not continuous over its messages",
            hint="the broker's rule for entries published in a transaction: no damage, "
            "nothing to repair; Kafka-on-Pulsar takes an entry's base offset as index - "
            "(messages - 1), so the offsets of such a batch overlap those before it",
        ),
        Code("index-missing", "order", _W, "entries without an index after entries with one"),
        Code("index-property-invalid", "order", _E, "the ML index property is not a number"),
        Code("index-property-behind", "order", _E, "the ML index property is behind the data"),
        Code("timestamp-regression", "order", _W, "entry timestamps go back"),
        Code(
            "orphan-ledger",
            "orphans",
            _W,
            "a Pulsar ledger nothing references",
            "orphans",
        ),
        Code(
            "shadow-source-missing", "shadow", _E, "a shadow topic's source has no managed ledger"
        ),
        Code(
            "shadow-ledger-not-in-source",
            "shadow",
            _E,
            "a shadow topic lists a ledger its source does not",
            "shadow",
        ),
        Code(
            "shadow-ledger-differs",
            "shadow",
            _W,
            "a ledger recorded differently in the shadow and its source",
            "shadow",
        ),
        Code(
            "broker-ledger-not-stored",
            "broker",
            _E,
            "the broker serving the topic lists a ledger the stored list does not: its "
            "ledger list is stale",
            hint="the stored list was rewritten while a broker had the topic loaded (a "
            "write with --force-owned): unload the topic (pulsar-admin topics unload T) so "
            "that the broker reads the stored list; then verify again",
        ),
        Code(
            "broker-ledger-not-listed",
            "broker",
            _E,
            "storage lists a ledger the broker serving the topic does not: its ledger list "
            "is stale",
            hint="unload the topic (pulsar-admin topics unload T) so that the broker reads "
            "the stored list; until then readers do not get the ledger",
        ),
        Code(
            "broker-ledger-gone",
            "broker",
            _E,
            "the broker serving the topic lists a ledger BookKeeper no longer has: reads "
            "of it fail",
            hint="unload the topic (pulsar-admin topics unload T) so that the broker reads "
            "the stored list",
        ),
        Code(
            "broker-ledger-differs",
            "broker",
            _W,
            "a closed ledger's entries or size differ between the broker and storage",
            hint="unload the topic so that the broker reads the stored counts",
        ),
        Code(
            "broker-compaction-stale",
            "broker",
            _E,
            "the broker serves another compacted ledger than CompactedTopicLedger names: "
            "it has not picked up the stored compaction",
            hint="unload the topic (pulsar-admin topics unload T): the broker reads "
            "CompactedTopicLedger when it loads the topic",
        ),
        Code(
            "broker-cursor-differs",
            "broker",
            _I,
            "a stored cursor is ahead of the broker's, or unknown to it: written behind its "
            "back, and overwritten when the broker persists its own",
            hint="the broker's position ahead of the stored one is normal (it persists "
            "acknowledgements lazily) and no finding; a stored one ahead was written while "
            "the topic was loaded: unload the topic before writing a cursor",
        ),
        Code(
            "offload-incomplete",
            "tiered",
            _EW,
            "an interrupted offload: an offloadContext without complete",
            hint="the broker offloads the ledger again; `ledgerctl orphans --offloaded` "
            "lists what the interrupted offload left in the store",
        ),
        Code(
            "offload-missing",
            "tiered",
            _E,
            "a complete offload's objects or directory are not in tiered storage",
            hint="the broker reads tiered storage first: restore the objects from a copy, "
            "or (while the BookKeeper copy exists) read with the offload policies removed",
        ),
        Code(
            "offload-unreadable",
            "tiered",
            _E,
            "a complete offload's objects are not a readable offload",
            hint="restore the objects from a copy; while the BookKeeper copy exists the "
            "ledger can be read from it (--prefer bookkeeper)",
        ),
        Code(
            "offload-format-version",
            "tiered",
            _E,
            "an offload's objects carry a format version other than 1",
        ),
        Code(
            "offload-data-lost",
            "tiered",
            _E,
            "a ledger deleted from BookKeeper whose tiered copy cannot be read: its data is gone",
            hint="look for a copy of the offloaded objects (a bucket replica, a backup of "
            "the offload directory) and read it with --offload-url; without one the "
            "ledger's messages are lost",
        ),
        Code(
            "offload-index-mismatch",
            "tiered",
            _E,
            "an offload index ends at another entry than the managed ledger records",
        ),
        Code(
            "offload-metadata-mismatch",
            "tiered",
            _EW,
            "the ledger metadata embedded in an offload differs from the managed ledger's",
        ),
        Code(
            "offload-data-mismatch",
            "tiered",
            _EW,
            "an offload's data holds other entries or bytes than the managed ledger records",
        ),
        Code(
            "offload-entry-corrupt",
            "tiered",
            _E,
            "an offloaded entry cannot be read or does not verify",
        ),
        Code(
            "offload-not-checked",
            "tiered",
            _I,
            "an offloaded ledger's tiered copy was not checked (a driver not read here)",
        ),
        Code("storage-not-checked", "core", _I, "no bookie storage given: metadata checks only"),
        Code(
            "storage-not-covered",
            "ledgers",
            _I,
            "entries not in the storage read, whose absence proves nothing: a bookie that "
            "should hold them was not read",
            hint="give the directories of every bookie named (ledger and journal "
            "directories, each with its cookie current/VERSION), or read the running "
            "bookies (--metadata-url without --bookie-dir)",
        ),
        Code("storage-index-unusable", "core", _E, "a bookie index is missing or unreadable"),
        Code("storage-damaged", "core", _E, "the storage's own files are damaged"),
    )
}

#: verify check id -> the repair (``repair --from-verify``) that fixes it
REPAIR_FOR_CHECK: dict[str, str] = {c.check: c.repair for c in CODES.values() if c.repair}

#: findings about single entries: listed up to a limit per topic and check, then counted
ENTRY_LEVEL = frozenset(
    {
        "entry-corrupt",
        "entry-undecodable",
        "offload-entry-corrupt",
        "index-gap",
        "index-missing",
        "index-per-entry",
        "timestamp-regression",
    }
)


def repair_command(check: str, topic: str | None) -> str | None:
    """The command that repairs a finding of ``check`` about ``topic``; None: no repair."""
    code = CODES.get(check)
    if code is None or code.repair is None:
        return None
    command = REPAIR_COMMANDS[code.repair]
    if "{topic}" in command:
        if topic is None:
            return None
        command = command.replace("{topic}", topic)
    return command


def hint(check: str) -> str | None:
    """What an operator can do about a finding of ``check`` (None: nothing to add)."""
    code = CODES.get(check)
    return None if code is None else code.hint
