"""Check that a topic's metadata and its stored ledgers agree: ``ledgerctl verify``.

:func:`verify_topics` walks topics (managed ledgers) through a :class:`LedgerSource` and
yields :class:`Finding` objects as it goes, streaming: each ledger's entries are read once,
in topic order, decoded through every layer (bookie header and digest, broker entry
metadata, the producer's CRC32C, MessageMetadata, and the payload: decompressed and split
into its batch records, each entry on its own), with every digest and checksum verified.
Memory is bounded by the number of ledgers, never by the number of entries.

Every finding has a severity (``error``: reads or offsets are or will be wrong;
``warning``: inconsistent, Pulsar copes or it costs space or accuracy; ``info``: something
could not be checked, or what a healthy cluster does that an operator may want to know),
a stable ``check`` id, and the topic, ledger and entry it is about. A healthy cluster
under ordinary use (transactions, batches, topics unloaded while producers send) has no
error: verify exits 0 (tests/cluster/sandbox/test_verify.py).

The broker's own topics are checked as what they hold: the transaction coordinator's log
(``pulsar/system/__transaction_log_<N>``) and each subscription's pending-ack store
(``<topic>-<subscription>__transaction_pending_ack``) are raw protobuf records, not Pulsar
messages (``decoders/transactions.py``); transaction buffer snapshots and topic policies
(``__transaction_buffer_snapshot*``, ``__change_events``) are Pulsar messages.

Terms. A ledger is *closed* when its BookKeeper metadata says CLOSED. Its *last entry* is
``lastEntryId`` when closed; for an open ledger it is what recovery would close it at:
the larger of the LAC the bookie knows (explicit LAC, or the LAC piggybacked on the last
stored entry) and the highest stored entry id; without metadata, the ML ``entries - 1``.
An ML LedgerInfo is *recorded* unless it is the topic's last ledger with ``entries=0`` and
``size=0``: Pulsar writes only ``ledgerId`` (and timestamp 0) when it creates a ledger and
fills entries/size/timestamp when it closes it (formats.md §8.2), so the open last ledger
is compared with nothing. Ledgers offloaded and deleted from BookKeeper
(``offloadContext.complete`` and ``bookkeeperDeleted``) are not looked for in BookKeeper.
What the storage lacks is judged on every replica (:mod:`pulsarctl_py.stores.absence`):
an entry is *missing* only when every bookie of its write set (round robin over the
segment's ensemble) was read: the running bookies, or the whole directories (every ledger
and journal directory its cookie lists) of a stopped bookie. An absence the bookies read
cannot prove is *not covered* (``storage-not-covered``, info), never missing. A ledger
without BookKeeper metadata is looked for on every bookie the BookKeeper root registers.
Without BookKeeper's metadata root nothing is judged: verify stops with exit 3.
On a running cluster the broker changes a topic while verify reads it, one node after
another: a finding that compares reads made at different times (a listed ledger without
metadata or storage, LedgerInfo counts against BookKeeper's, a cursor against the topic's
ledgers or its cursor ledger, the compacted ledger) is reported only if fresh reads find it
again (:mod:`.confirm`); the summary counts the others as ``unconfirmed``.

The checks, with the rule each applies and where it comes from:

``ml-unreadable`` (error)
    The topic's ManagedLedgerInfo znode does not decode, or lacks required fields (a broker
    cannot load the topic). §8.1, §8.3.
``ledger-list-unordered`` (info)
    The ML ledger ids are stored out of id order. Every command reads them as the broker
    does, sorted by id (``ManagedLedgerImpl`` keeps them in a sorted map): the order a
    ``tryTransformLedgerInfo`` leaves after an offload (it writes the list from a HashMap
    copy), put back by the broker's next write of the list. Nothing to repair. §8.1.
``ledger-list-duplicate`` (error)
    The ML list has a ledger id more than once: a broker loading the topic keeps the last
    LedgerInfo stored for it and drops the others (``ManagedLedgerImpl.initialize``), as
    every command reads it. §8.1.
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
    The ledger's last entry is >= 0 but no bookie of its ensembles holds any of its
    entries, every one of them read (operators.md §3 #4, #5). §10, §11.
``entry-missing`` (error)
    Entries 0..last entry that no bookie of their write set holds, every one of them read
    (ranges listed). §10, §11.
``entry-corrupt`` (error)
    An entry whose bytes cannot be read from storage, whose BookKeeper digest or stored
    ids do not match, whose 0x0e01 CRC32C does not match, or whose layers do not decode
    (operators.md §3 #8-#12). §1, §10.
``entry-undecodable`` (error)
    An entry read and verified (digest, checksum, metadata) whose payload does not decode:
    what the decoder's payload step (``decoders.entry.decode_payload``) rejects, the step
    every reader of messages takes (a batch count outside 0..200000, a record longer than
    the batch, a compressed payload that does not decompress to its ``uncompressed_size``,
    an unknown codec, a marker that does not parse); in a transaction store, a record that
    is not its protobuf or lacks what the broker's replay reads. Consumers fail on it;
    compaction and migration refuse to copy it unless told to. §3-§5.
``entry-past-last`` (info)
    Entries stored past a closed ledger's ``lastEntryId``. No reader gets them
    (BookKeeper's ``LedgerHandle.readEntries`` stops at the LAC, ``lastEntryId`` once the
    ledger is closed); every scan skips them and says so. A ledger closed while adds were
    in flight leaves them (``LedgerHandle.asyncClose`` closes at the LAC and fails the
    pending adds, which their producers send again; the bytes already sent still land on
    the bookies): a topic unloaded, or its broker failing over, under load. Only a ledger
    closed short by hand would have acknowledged entries there. §9.4, §10.
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
    Broker entry metadata (BEM) index not continuous as the broker assigns it: for
    consecutive entries with an index in topic order (ledgers in ML order, across ledgers),
    ``index - num_messages`` of the later one must equal the earlier one's ``index`` (the
    stored index is the last message's; num_messages is ``num_messages_in_batch`` or 1),
    where an entry published in a transaction (``txnid_most_bits`` and
    ``txnid_least_bits`` in its metadata) may also count as one message (``.order``).
    Entries without BEM use no index and are stepped over; continuity restarts after
    entries or ledgers that could not be read, and after offloaded ledgers. A topic
    without BEM is fine. §2.
``index-per-entry`` (info)
    A transactional batch of N > 1 messages whose index is one past the entry before it:
    the Pulsar 4.0.7 broker adds a transactional entry through
    ``ManagedLedger.asyncAddEntry(buffer, callback, ctx)``, which counts one message, so
    ``AppendIndexMetadataInterceptor`` adds 1, not N (``TopicTransactionBuffer``,
    ``ManagedLedgerImpl``). No damage; the offsets Kafka-on-Pulsar derives from the index
    (``index - (N - 1)`` for the first message) overlap the entry before it. §2, §13.
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
    Schema ledgers are not judged (their references live under /schemas, not read here),
    nor a ledger a live ledgerctl run holds in its lease or a plan neither applied nor
    undone names (:mod:`pulsarctl_py.plans.leases`). A ledger a live broker has just created may
    show up until the broker records it (operators.md §3 #22, #23): the finding says its
    age and the basis of it (the ledger's ``ctime``, else its node's creation time in the
    store, else unknown; :mod:`.orphans`). §9.4.
``shadow-source-missing`` (error)
    A shadow topic's ``PULSAR.SHADOW_SOURCE`` names a topic without a managed ledger. §14.
``shadow-ledger-not-in-source`` (error)
    A shadow topic lists a ledger its source does not: the shadow's list must be a subset of
    the source's. §14.
``shadow-ledger-differs`` (warning)
    A ledger recorded in both lists with different entries or size. §14.
``broker-ledger-not-stored`` (error)
    The broker that has the topic loaded lists a ledger the stored list does not: its
    in-memory list is stale (the stored one was rewritten while it had the topic loaded).
``broker-ledger-not-listed`` (error)
    The reverse: storage lists a ledger the broker serving the topic does not.
``broker-ledger-gone`` (error)
    The broker serving the topic lists a ledger, not in the stored list, whose BookKeeper
    metadata is gone: reads of it fail.
``broker-ledger-differs`` (warning)
    A ledger closed on both sides (not the last of either list) with other entries or
    size in the broker's list than in the stored one.
``broker-compaction-stale`` (error)
    The broker serves another compacted ledger than the stored ``CompactedTopicLedger``
    (which it reads when it loads the topic): it has not picked up the stored compaction.
``broker-cursor-differs`` (info)
    A stored cursor's mark-delete ahead of the broker's, or a stored cursor it does not
    have: written behind its back, overwritten when the broker persists its own.

The broker-* checks ask the broker that has a topic loaded, through its admin API and
never loading a topic to look (``--admin-url``, else the brokers registered in the
metadata store). What moves on a live topic is no finding: its current ledger (open,
recorded without counts), ``lastConfirmedEntry``, its cursors ahead of the stored ones; a
difference seen in only one of two comparisons (both sides read again) is a race and not
reported (:mod:`pulsarctl_py.broker_view`). Without a broker to ask, nothing is compared
and a line says so.
``storage-not-checked`` (info)
    No bookie storage was given: only the metadata checks ran.
``storage-not-covered`` (info)
    Entries (or a whole ledger) not in the storage read, while a bookie of their write
    set was not read (its directories not given, or not all of them, or without a
    cookie): their absence proves nothing, and the bookies to read are named.
``storage-index-unusable`` (error)
    A bookie index (DbLedgerStorage ``locations`` or ``ledgers``, or any index for a dir of
    entry logs) is missing or cannot be read. ledgerctl found the entries by scanning the
    entry logs, but a bookie could not serve them.
``storage-damaged`` (error)
    An error met reading the storage's own files: an unreadable RocksDB index block, an
    entry log whose header or ledgers map is damaged, a journal that cannot be read or is
    shorter than its lastMark.

The offload-* checks read each offloaded ledger's tiered copy (:mod:`.tiered`; a ledger
whose ``LedgerInfo.offloadContext`` has a uid), where its offload context says (the
filesystem offloader's directory, the jcloud S3 objects; ``--offload-url`` /
``LEDGERCTL_OFFLOAD_URL`` and ``LEDGERCTL_S3_ENDPOINT`` point at a copy). A ``complete``
ledger is read from tiered storage first by the broker (tiered-storage-first), so what its
copy lacks breaks reads even while the BookKeeper copy exists. A store that cannot be
reached stops the run (exit 3): nothing is judged on a store not read. §18.
``offload-incomplete`` (warning / error)
    An offload context without ``complete``: an interrupted offload (the broker offloads
    the ledger again; what it wrote is left in the store). Error when the context also
    says ``bookkeeperDeleted``: the data is gone.
``offload-missing`` (error)
    A complete offload whose objects (data, index) or MapFile directory are not there,
    the BookKeeper copy still existing.
``offload-unreadable`` (error)
    A complete offload whose objects are not a readable offload (truncated, wrong magic,
    an index pointing outside the data, unreadable embedded metadata).
``offload-format-version`` (error)
    jcloud objects whose ``s3managedledgeroffloaderformatversion`` is not 1
    (``DataBlockUtils.VERSION_CHECK``: the broker refuses them too).
``offload-data-lost`` (error)
    A ledger deleted from BookKeeper (``bookkeeperDeleted``) whose tiered copy is missing
    or cannot be read: its data is gone unless a copy of the offload exists.
``offload-index-mismatch`` (error)
    The jcloud index ends at another entry than the managed ledger's ``entries - 1``.
``offload-metadata-mismatch`` (error / warning)
    The ledger metadata the offloader embedded (``OffloadUtils.buildLedgerMetadataFormat``)
    is not closed, has another ``lastEntryId + 1`` than ``entries``, or names another
    managed ledger (error); its ``length`` differs from the recorded ``size`` (warning).
``offload-data-mismatch`` (error / warning)
    The data holds fewer entries than ``entries``, or entries past it (error); every entry
    read, their bytes differ from the recorded ``size`` (warning).
``offload-entry-corrupt`` (error)
    An offloaded entry that cannot be read (a damaged block, record or SequenceFile block)
    or whose layers do not verify (the 0x0e01 CRC32C, metadata, payload); said lost when
    the BookKeeper copy is gone.
``offload-not-checked`` (info)
    A tiered copy not read here: a driver whose store ledgerctl does not read (``hdfs://``,
    GCS, Azure) or a context naming no location.

A shadow topic's entries are its source's: its ledgers are checked against BookKeeper
metadata and the source's list, never scanned; verify the source to scan them. Ledgers a
shadow shares with a source verified in the same run are checked once, under the source.
Entry-level findings (entry-corrupt, entry-undecodable, index-gap, index-missing,
timestamp-regression) are
listed up to :data:`MAX_LISTED` per topic and check, then summed up in one more finding.

The package: :mod:`.core` (findings, statistics, progress, the limiter, the run),
:mod:`.driver` (the walk over the topics),
one module per check family (:mod:`.ledgers`, :mod:`.order`, :mod:`.cursors`,
:mod:`.compaction`, :mod:`.shadow`, :mod:`.orphans`, :mod:`.broker`, :mod:`.tiered`), and
:mod:`.codes`, the table of every check id with the repair that fixes it (each finding's
``repair``; ``ledgerctl repair --from-verify`` dispatches on it).
"""

from __future__ import annotations

from pulsarctl_py.decoders.managed_ledger import COMPACTED_TOPIC_LEDGER
from pulsarctl_py.verify.codes import CODES, REPAIR_FOR_CHECK, repair_command
from pulsarctl_py.verify.core import (
    ERROR,
    INFO,
    MAX_LISTED,
    PROGRESS_EVERY,
    SEVERITIES,
    WARNING,
    Finding,
    ProgressCallback,
    VerifyProgress,
    VerifyStats,
)
from pulsarctl_py.verify.core import Limiter as _Limiter
from pulsarctl_py.verify.driver import storage_findings, verify_topics

__all__ = [
    "CODES",
    "COMPACTED_TOPIC_LEDGER",
    "ERROR",
    "INFO",
    "MAX_LISTED",
    "PROGRESS_EVERY",
    "REPAIR_FOR_CHECK",
    "SEVERITIES",
    "WARNING",
    "Finding",
    "ProgressCallback",
    "VerifyProgress",
    "VerifyStats",
    "_Limiter",
    "repair_command",
    "storage_findings",
    "verify_topics",
]
