"""Worlds for the live-bookie tests: metadata stores naming test bookies, and TLS files.

* :func:`corpus_metadata`: a RocksDB metadata store holding the real bookie's ZooKeeper
  tree (tests/data/bookkeeper/live-dbledgerstorage/zookeeper), so ledgers 0-8 name the
  bookie ``127.0.0.1:3181`` exactly as BookKeeper wrote them; tests map that id to a test
  bookie with an address override.
* :func:`replicated_metadata`: the same ledgers re-described with an ensemble of three
  bookies and the quorums asked for, every bookie serving the same directory.
* :func:`self_signed`: a CA-less self-signed certificate and key for loopback TLS.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import ssl
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.stores.metadata import create_metadata_store, read_ledger
from tests.support.bookie_data import LIVE, LIVE_DATA

REAL_BOOKIE = "127.0.0.1:3181"
WIRE = LIVE / "wire"
ZK_RUNNING = LIVE / "zookeeper" / "zk-dump-bookie-running.json"

__all__ = ["LIVE_DATA", "REAL_BOOKIE", "WIRE"]


def corpus_metadata(path: Path) -> str:
    """A RocksDB metadata store with every /ledgers znode of the real bookie's cluster."""
    dump = json.loads(ZK_RUNNING.read_text())
    with create_metadata_store(path) as store:
        for node in dump["nodes"]:
            if node["path"].startswith("/ledgers/"):
                store.put(node["path"], base64.b64decode(node["data_b64"]))
    return f"rocksdb://{path}"


def replicated_metadata(path: Path, bookies: list[str], write_quorum: int, ack_quorum: int) -> str:
    """The corpus ledgers, each on ``bookies`` (one ensemble) with the quorums given."""
    src = path.parent / (path.name + "-src")
    corpus_metadata(src)
    from pulsarctl_py.stores.metadata import open_metadata_store

    with (
        open_metadata_store(f"rocksdb://{src}") as old,
        create_metadata_store(path) as store,
    ):
        for ledger_id in range(9):
            record = read_ledger(old, ledger_id)
            assert record is not None and record.metadata is not None
            md = dataclasses.replace(
                record.metadata,
                ensemble_size=len(bookies),
                write_quorum_size=write_quorum,
                ack_quorum_size=ack_quorum,
                ensembles={0: list(bookies)},
            )
            store.put(record.path, lm.build(md))
    return f"rocksdb://{path}"


def self_signed(folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for ``host`` (also its own CA) and its key, as PEM files."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ledgerctl test bookie")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file = folder / "bookie.pem"
    key_file = folder / "bookie.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


def demo_root(factory: Any, name: str) -> Path:
    """A fresh demo data directory (``ledgerctl demo``) for a module's live tests."""
    from pulsarctl_py.demo import create_demo

    root = factory.mktemp(name) / "demo"
    create_demo(root)
    return root


def away_from_bookie_dirs(tmp_path: Path, monkeypatch: Any) -> None:
    """No bookie directory from a ledgerctl.toml, a user's config or the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for name in ("LEDGERCTL_BOOKIE_DIRS", "LEDGERCTL_BOOKIE_ADDRESSES"):
        monkeypatch.delenv(name, raising=False)
