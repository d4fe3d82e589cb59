"""Offloaded ledgers: the objects and files Pulsar's tiered-storage offloaders write.

One module per offloader format (``jcloud`` for the S3/GCS/Azure drivers, with ``s3`` the
S3 object store it reads through), each returning entries as the broker wrote them.
"""
