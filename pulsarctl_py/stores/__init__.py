"""Where bytes live: metadata stores (ZooKeeper, Pulsar's RocksDB store) and ledger stores."""
