"""ledgerctl: inspect and repair Apache Pulsar topic data in BookKeeper ledgers."""

__version__ = "0.1.0"
