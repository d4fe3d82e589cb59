"""Ledgers in tiered storage: what Pulsar's offloaders wrote, read without a broker.

One module per offloader format, each returning entries as the broker wrote them to
BookKeeper (no bookie header or digest; decode them with ``Outer.PULSAR_ENTRY``):

* :mod:`.seqfile`: Hadoop SequenceFile v6 (the filesystem offloader's container);
* :mod:`.filesystem`: the filesystem offloader's MapFile per ledger (data, index, the
  embedded ledger metadata, ``.crc`` side files), read by entry id through the index;
* :mod:`.jcloud`: the jcloud offloader's data and index objects (the S3, GCS and Azure
  drivers), read by entry id through the index with bounded ranged reads;
* :mod:`.s3`: the S3 object store the jcloud reader reads through (boto3).
"""
