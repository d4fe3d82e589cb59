"""The ``__compaction`` cursor: what makes a compacted ledger the one readers get.

The broker commits a compaction by marking its ``__compaction`` cursor deleted up to the
compaction horizon with one mark-delete property, ``CompactedTopicLedger`` = the compacted
ledger (``AbstractTwoPhaseCompactor.phaseTwoSeekThenLoop`` ends with
``reader.acknowledgeCumulativeAsync(lastReadId, Map.of(COMPACTED_TOPIC_LEDGER_PROPERTY,
ledger.getId()))``, which the broker turns into the cursor's mark-delete; the topic reads
the property back when it loads). :func:`draft_compacted_ledger` is the one
producer of that change, for every writer that points the cursor at a compacted ledger:
``compact`` (the ledger it wrote), ``migrate compacted`` and ``repair compaction --to``.
The cursor's bytes are written by :func:`pulsarctl_py.decoders.managed_ledger.cursor_at`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pulsarctl_py.decoders import managed_ledger as mld

if TYPE_CHECKING:
    from pulsarctl_py.decoders.managed_ledger import DecodedInfo
    from pulsarctl_py.plans import Draft
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

COMPACTED_TOPIC_LEDGER = mld.COMPACTED_TOPIC_LEDGER


def compaction_cursor_path(ml_path: str) -> str:
    """The ``__compaction`` cursor's znode of the topic at ``ml_path``."""
    return f"{ml_path}/{mld.url_encode(mld.COMPACTION_CURSOR)}"


def draft_compacted_ledger(
    draft: Draft,
    path: str,
    cursor: DecodedInfo[mlpb.ManagedCursorInfo] | None,
    horizon: tuple[int, int],
    ledger_id: int,
    why: str,
    *,
    keep: list[tuple[str, int]] | None = None,
) -> None:
    """Draft the change that makes ``ledger_id`` a topic's compacted ledger: its
    ``__compaction`` cursor (the znode ``path``; ``cursor``, its value as read, None when
    there is none yet) marked deleted up to ``horizon`` with ``CompactedTopicLedger`` =
    ``ledger_id``, its state in the znode.

    ``keep`` None: as the broker's compactor commits it, the one mark-delete property,
    ``lastActive`` now and a broker's encoding (``compact``; a cursor created where there
    was none). A list: a repair that re-points the cursor (``repair compaction --to``,
    ``migrate compacted``): those other mark-delete properties kept before it, and the
    cursor otherwise as it was read.
    """
    committed = keep is None
    value = mld.cursor_at(
        cursor,
        horizon,
        [*(keep or []), (COMPACTED_TOPIC_LEDGER, ledger_id)],
        last_active=int(time.time() * 1000) if committed else None,
        broker_encoding=committed,
    )
    draft.set(path, "cursor", value, why)
