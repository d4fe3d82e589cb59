"""Ledgers in tiered storage: what Pulsar's offloaders wrote, read without a broker.

* :mod:`.seqfile`: Hadoop SequenceFile v6 (the filesystem offloader's container);
* :mod:`.filesystem`: the filesystem offloader's MapFile per ledger (data, index, the
  embedded ledger metadata, ``.crc`` side files), read by entry id through the index.

Entries come out as the broker wrote them to BookKeeper (no bookie header or digest):
decode them with ``Outer.PULSAR_ENTRY`` (:func:`.filesystem.decode_options`).
"""
