"""Find entries by time, continuous index or offset, with the broker's and KoP's own rules.

Everything works on a *flat* view of a topic: its ledgers in managed-ledger order, the
empty ones left out, entry ``i`` of the topic being the ``i``-th entry as the broker
counts them (a ledger the storage at hand does not hold keeps its place; its entries are
not read). A search answers only from entries it read: when a probe or the answer entry
could not be read, there is no answer, only where it lies and what was not read; the
linear ``--exact`` scan says the same of everything it could not read. Entries are read
one at a time through a :class:`~.heads.HeadReader` (entry heads only: broker entry metadata and
message metadata, no payload decoding), which counts its reads; :func:`seek` decides which
entries to read.

The rules, with where they come from (formats.md §13, §15; upstream sources named there):

* ``broker`` (a subscription reset by time, ``PersistentSubscription.resetCursor(long)``):
  ``PersistentMessageFinder`` narrows the search range by ledger close timestamps
  (``getFindPositionRange``: start = last entry of the latest ledger closed at or before
  ``T - skew``, end = last entry of the first ledger closed after ``T + skew``, an open
  ledger (close timestamp 0) clears the end and stops; a negative skew turns it off).
  ``ManagedCursorImpl.asyncFindNewestMatching`` counts the range's entries ``M`` (both
  ends included; no start: the first position of the managed ledger; no end: the last
  entry), then ``OpFindNewest`` looks for the newest entry whose timestamp is
  **strictly** before ``T``. Its probes, as offsets from the range's first entry: 0 (no
  match: no position), then ``M`` (one past the range, clamped to the last entry of the
  topic; a match: that one), then, from ``min = 0, max = M``, ``mid = min + max((max -
  min) / 2, 1)`` (a match: ``min = mid``, else ``max = mid - 1``) until ``max <= min``; the
  answer is the last matching probe. The entry timestamp is the broker entry metadata's
  ``broker_timestamp`` when present, else ``publish_time``. The cursor then reads from
  the entry after the one found. When none is found the broker resets to
  ``ManagedCursorImpl.getFirstPosition()``: entry 0 of the first ledger the managed
  ledger lists (moved on to the next valid position when that ledger holds no entry); a
  managed ledger without ledgers fails the reset. The skew defaults to the broker's
  ``managedLedgerCursorResetLedgerCloseTimestampMaxClockSkewMillis`` = 60000
  (apache/pulsar ``ServiceConfiguration.java``).
* ``kop`` (Kafka LIST_OFFSETS by timestamp, streamnative/kop ``OffsetFinder`` and
  ``KafkaRequestHandler.fetchOffsetByTimestamp``): KoP's copy of the same search,
  ``OpFindNewestEntry``, over every entry (``max = entries - 1``, so the check-last is the
  last entry; no close-time narrowing) for the newest entry with ``publish_time <= T``
  (publish time only, never broker_timestamp); none: the first entry (its check-first miss
  returns the start position). The Kafka offset is that entry's stored ``index`` (its
  *last* offset) when its publish time is ``>= T``, else ``index + 1``; when KoP's current
  index (the managed ledger's ``index`` property, then the last entry's) is below 0, 0.
* ``compacted``: the compacted ledger's first entry with ``publish_time >= T``.
* ``--index N``: the entry holding continuous index N (``index - num_messages + 1 <= N <=
  index``); entries without broker entry metadata count as older than everything with
  ``skip_without_index`` (KoP's ``skipMessagesWithoutIndex``), else they stop the search.
* ``--legacy-offset``: pre-2.8 KoP offsets in their two eras (formats.md §13).

When timestamps go backwards the binary search gives an answer that is not the first
entry at or after ``T`` (apache/pulsar#23910). Probes that contradict each other are
reported as warnings; :func:`.exact.exact_scan` reads every entry head (streamed) and gives the
true first entry at or after ``T`` and the regions where time goes backwards.

Reads. The ``broker``, ``kop`` and ``--index`` searches read exactly the entries the
broker (or KoP) probes, each once, plus the answer entry when no probe read it; that is
what makes their answers exact on timestamps that go backwards, and no procedure can do
it with fewer reads: flipping the outcome of any one probe changes the answer (a match
moves every later probe above it, a miss every later probe below it), so an entry left
unread leaves two inputs with different answers undistinguished. Those probes take up to
``ceil(log2 N) + 3`` reads (N: entries of the range searched), one more than a plain
binary search, because ``max`` starts one past the range and ``mid`` leans low. Smallest
cases: the broker rule on 8 entries (T between the third and the fourth: entries 0, 7,
4, 1, 2, 3, six reads against ``ceil(log2 8) + 2 = 5``), KoP's and the index search on
13; counting the read that shows the answer entry, a narrowed broker range of one entry
can take three. ``compacted`` (a plain lower bound) reads at most ``ceil(log2 N) + 1``.
:data:`.probe.READ_SLACK` holds these bounds; docs/performance.md has the measurements.

The package, one idea per module: :mod:`.heads` (entry heads and their readers),
:mod:`.probe` (the flat topic, probes, ``OpFindNewest``, results and read bounds),
:mod:`.rules` (the broker's and KoP's time rules), :mod:`.index` (by continuous index, in
the compacted ledger, at a position), :mod:`.legacy` (pre-2.8 KoP offsets),
:mod:`.exact` (the linear scan) and :mod:`.driver` (:func:`seek` on stores).
"""

from .driver import SeekRequest, TopicSeek, seek, seek_topic
from .probe import SeekResult

__all__ = ["SeekRequest", "SeekResult", "TopicSeek", "seek", "seek_topic"]
