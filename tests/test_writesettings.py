"""The settings new ledgers are written with: flags, variables, ledgerctl.toml, then
broker.conf, then Pulsar's defaults; the compactor's digest and password for compacted
ledgers; the password never from a flag's value and never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarctl_py.brokerconf import parse_broker_conf
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata, LedgerState
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.writesettings import (
    ENV_PASSWORD,
    PULSAR_DEFAULT,
    check_against_ledger,
    resolve_write_settings,
)

CONF = parse_broker_conf(
    "managedLedgerDefaultEnsembleSize=3\n"
    "managedLedgerDefaultWriteQuorum=2\n"
    "managedLedgerDefaultAckQuorum=2\n"
    "managedLedgerDigestType=CRC32C\n"
    "managedLedgerPassword=conf-secret\n",
    "/etc/pulsar/broker.conf",
)


def test_pulsars_defaults_without_anything() -> None:
    s = resolve_write_settings(broker_conf=None, env={})
    assert (s.ensemble, s.write_quorum, s.ack_quorum, s.digest) == (2, 2, 2, DigestType.CRC32C)
    assert s.password_bytes == b""
    assert set(s.source.values()) == {PULSAR_DEFAULT}


def test_broker_conf_then_flags() -> None:
    s = resolve_write_settings(broker_conf=CONF, env={})
    assert (s.ensemble, s.write_quorum, s.ack_quorum) == (3, 2, 2)
    assert s.password_bytes == b"conf-secret"
    assert s.source["ensemble"] == (
        "broker configuration /etc/pulsar/broker.conf (managedLedgerDefaultEnsembleSize)"
    )
    s = resolve_write_settings(broker_conf=CONF, env={}, write_quorum=3, ack_quorum=1)
    assert (s.ensemble, s.write_quorum, s.ack_quorum) == (3, 3, 1)
    assert s.source["write_quorum"] == "--write-quorum"


def test_the_password_comes_from_a_file_or_the_environment_and_never_shows(tmp_path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("file-secret\n")
    s = resolve_write_settings(broker_conf=CONF, env={ENV_PASSWORD: "env-secret"})
    assert s.password_bytes == b"env-secret" and s.source["password"] == ENV_PASSWORD
    s = resolve_write_settings(broker_conf=CONF, env={ENV_PASSWORD: "x"}, password_file=secret)
    assert s.password_bytes == b"file-secret"
    for text in (repr(s), str(s.sources()), s.data_config({}).describe(), repr(s.data_config({}))):
        assert "file-secret" not in text


def test_compacted_ledgers_use_the_compactors_digest_and_password() -> None:
    s = resolve_write_settings(broker_conf=CONF, env={})
    c = s.compacted_config({"component": b"compacted-ledger"})
    assert (c.ensemble, c.write_quorum, c.ack_quorum) == (3, 2, 2)
    assert c.digest is DigestType.CRC32 and c.password == b""
    d = s.data_config({})
    assert d.digest is DigestType.CRC32C and d.password == b"conf-secret"


def test_bad_quorums_name_where_they_came_from() -> None:
    with pytest.raises(LedgerctlError, match="--write-quorum"):
        resolve_write_settings(broker_conf=CONF, env={}, write_quorum=4)
    with pytest.raises(LedgerctlError, match="at least 1"):
        resolve_write_settings(broker_conf=None, env={}, ensemble=0)
    with pytest.raises(LedgerctlError, match="needs a managed-ledger password"):
        resolve_write_settings(broker_conf=None, env={}, digest="mac")


def test_namespace_persistence_policies_win_over_the_broker_but_not_a_flag(
    scratch_zk: str,
) -> None:
    import json

    from pulsarctl_py.stores.metadata import open_metadata_store
    from pulsarctl_py.writesettings import data_settings

    store = open_metadata_store(scratch_zk, read_only=False)
    try:
        policies = {"persistence": {"bookkeeperEnsemble": 5, "bookkeeperWriteQuorum": 3}}
        policies["persistence"]["bookkeeperAckQuorum"] = 2
        store.put("/admin/policies/t/ns", json.dumps(policies).encode(), -1)
        s = data_settings(resolve_write_settings(broker_conf=CONF, env={}), store, "t/ns")
        assert (s.ensemble, s.write_quorum, s.ack_quorum) == (5, 3, 2)
        assert s.source["ensemble"] == "the persistence policies of namespace t/ns"
        flagged = resolve_write_settings(broker_conf=CONF, env={}, ensemble=6)
        s = data_settings(flagged, store, "t/ns")
        assert (s.ensemble, s.write_quorum) == (6, 3)
        assert data_settings(flagged, store, "t/other") is flagged
    finally:
        store.close()


def _md(password: bytes | None, digest: DigestType = DigestType.CRC32C) -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, LedgerState.CLOSED, {0: ["b:1"]}, 0, 10, digest, password)


def test_a_topic_written_with_another_password_is_refused() -> None:
    s = resolve_write_settings(broker_conf=CONF, env={})
    assert check_against_ledger(s, _md(b"conf-secret"), 7) == []
    with pytest.raises(LedgerctlError, match="ledger 7 of the topic was written with another"):
        check_against_ledger(s, _md(b"older-secret"), 7)
    notes = check_against_ledger(s, _md(b"conf-secret", DigestType.CRC32), 7)
    assert notes and "CRC32 digest" in notes[0]


def test_the_cli_flags_reach_the_settings(tmp_path: Path) -> None:
    from pulsarctl_py.commands.options import WriteFlags

    pw = tmp_path / "pw"
    pw.write_bytes(b"flag-file")
    s = WriteFlags(5, 3, 1, "crc32", pw).settings()
    assert (s.ensemble, s.write_quorum, s.ack_quorum, s.digest) == (5, 3, 1, DigestType.CRC32)
    assert s.password_bytes == b"flag-file"
