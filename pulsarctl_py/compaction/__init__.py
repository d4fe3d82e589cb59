"""Topic compaction outside the broker: Pulsar's two phases over a scan plan, on an engine.

* :mod:`.core`: phase one and two as pure functions over entries (Pulsar's exact rules);
* :mod:`.reader`: a split's entries from the stores, and the per-split functions engines run;
* :mod:`.run`: :func:`compact` computes and reports (and spools for ``--apply``);
* :mod:`.ledger`: the compacted ledger's settings and custom metadata, and writing one;
* :mod:`.cursor`: the one producer of the ``__compaction`` cursor change;
* :mod:`.planned`: ``compact --apply/--plan`` as a plan (written, then applied through
  :mod:`pulsarctl_py.plans`);
* :mod:`.status`: the existing compaction, its checks, and ``--deep``;
* :mod:`.lastpos`: the compacted last message position per broker generation (§7).
"""

from __future__ import annotations

from .core import FORMATS, ORDERS, CompactionOptions
from .run import CompactionReport, compact

__all__ = ["FORMATS", "ORDERS", "CompactionOptions", "CompactionReport", "compact"]
