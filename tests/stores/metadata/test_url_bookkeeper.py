"""Where BookKeeper's metadata lives: --bookkeeper-metadata-url, the environment, the
config files, a broker.conf, and the broker's own default (/ledgers of its store)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py import precedence
from pulsarctl_py.brokerconf import load_broker_conf, parse_broker_conf
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.stores.metadata.url import (
    ENV_BOOKKEEPER_URL,
    ENV_BROKER_CONF,
    ENV_URL,
    parse_metadata_url,
    resolve_metadata_url,
)

BK = "zk+hierarchical://127.0.0.1:2181/bookkeeper/ledgers"


def _resolve(tmp_path: Path, env: dict[str, str], explicit: str | None = None):
    return resolve_metadata_url(explicit, env=env, cwd=tmp_path, home=tmp_path)


def test_default_is_ledgers_of_pulsars_store(tmp_path: Path) -> None:
    url = _resolve(tmp_path, {}, "zk:127.0.0.1:2181/pulsar")
    assert url.bookkeeper is None
    place = url.bookkeeper_location
    assert (place.target, place.chroot, place.ledgers_root) == (
        "127.0.0.1:2181",
        "/pulsar",
        "/ledgers",
    )


def test_environment_names_bookkeepers_root(tmp_path: Path) -> None:
    url = _resolve(tmp_path, {ENV_BOOKKEEPER_URL: BK}, "zk:127.0.0.1:2181")
    assert url.bookkeeper is not None
    assert url.bookkeeper.ledgers_root == "/bookkeeper/ledgers"
    assert url.bookkeeper.source == ENV_BOOKKEEPER_URL


def test_a_plain_zk_url_names_the_root_not_a_chroot(tmp_path: Path) -> None:
    url = _resolve(tmp_path, {ENV_BOOKKEEPER_URL: "zk:h:1/bookkeeper/ledgers"}, "zk:h:1")
    assert url.bookkeeper is not None
    assert (url.bookkeeper.chroot, url.bookkeeper.ledgers_root) == ("", "/bookkeeper/ledgers")


def test_the_same_place_as_the_default_is_no_separate_place(tmp_path: Path) -> None:
    url = _resolve(tmp_path, {ENV_BOOKKEEPER_URL: "zk+hierarchical://h:1/ledgers"}, "zk:h:1")
    assert url.bookkeeper is None


def test_order_flag_env_config_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "metadataStoreUrl=zk:conf:1\nbookkeeperMetadataServiceUri=zk+hierarchical://conf:1/bk/ledgers\n"
    )
    env: dict[str, str] = {ENV_BROKER_CONF: str(conf)}
    # the broker configuration alone names both places
    url = _resolve(tmp_path, env)
    assert str(url) == "zk:conf:1 bookkeeper=zk+hierarchical://conf:1/bk/ledgers"
    assert url.source == f"broker configuration {conf} (metadataStoreUrl)"
    # a config file ranks above it, even with the broker configuration named by a variable
    (tmp_path / "ledgerctl.toml").write_text(
        'metadata_url = "zk:toml:1"\nbookkeeper_metadata_url = "zk+flat://toml:1/t/ledgers"\n'
    )
    url = _resolve(tmp_path, env)
    assert str(url) == "zk:toml:1 bookkeeper=zk+flat://toml:1/t/ledgers"
    # the environment above the config file
    env[ENV_BOOKKEEPER_URL] = "zk+hierarchical://env:1/e/ledgers"
    env[ENV_URL] = "zk:env:1"
    assert str(_resolve(tmp_path, env)) == "zk:env:1 bookkeeper=zk+hierarchical://env:1/e/ledgers"
    # and the flags above everything, --broker-conf's values included
    with precedence.flags(
        bookkeeper_metadata_url="zk+hierarchical://flag:1/f/l", broker_conf=str(conf)
    ):
        got = _resolve(tmp_path, env, "zk:arg:1")
    assert str(got) == "zk:arg:1 bookkeeper=zk+hierarchical://flag:1/f/l"
    # outside the block the flag is gone again
    assert str(_resolve(tmp_path, env, "zk:arg:1")).endswith("env:1/e/ledgers")


def test_a_broker_conf_without_the_setting_keeps_ledgers_in_its_store(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a broker\nmetadataStoreUrl = zk:conf:1/chroot\nbookkeeperMetadataServiceUri=\n"
    )
    with precedence.flags(broker_conf=str(conf)):
        url = _resolve(tmp_path, {})
    assert str(url) == "zk:conf:1/chroot" and url.bookkeeper is None


@given(
    st.sampled_from(["zk:a:1", "zk:a:1/c", "rocksdb:///data/m", "zk+flat://a:1;b:2/x/ledgers"]),
    st.sampled_from([None, "zk+hierarchical://b:2/bk/ledgers", "zk+null://a:1/y", "rocksdb:///z"]),
)
def test_text_form_round_trips(pulsar: str, bookkeeper: str | None) -> None:
    url = parse_metadata_url(pulsar)
    url = url.with_bookkeeper(None if bookkeeper is None else parse_metadata_url(bookkeeper))
    assert parse_metadata_url(str(url)) == url
    assert parse_metadata_url(str(url.absolute())) == url.absolute()


def test_broker_conf_reads_java_properties(tmp_path: Path) -> None:
    conf = parse_broker_conf(
        "! comment\n"
        "metadataStoreUrl: zk:h:2181\n"
        "bookkeeperMetadataServiceUri zk+hierarchical://h:2181/\\\n   bk/ledgers\n"
        "managedLedgerDefaultEnsembleSize=3\nmanagedLedgerDefaultWriteQuorum=2\n"
        "managedLedgerDefaultAckQuorum=2\nmanagedLedgerDigestType=crc32\n"
        "managedLedgerPassword=s\\u0065cret\nmaxMessageSize=1048576\n"
    )
    assert conf.metadata_url == "zk:h:2181"
    assert conf.bookkeeper_metadata_url == "zk+hierarchical://h:2181/bk/ledgers"
    assert (conf.ensemble, conf.write_quorum, conf.ack_quorum) == (3, 2, 2)
    assert conf.digest_type == "CRC32"
    assert conf.password is not None and conf.password.reveal() == b"secret"
    assert "secret" not in repr(conf) and conf.to_json()["password"] == "set"
    assert conf.max_message_size == 1048576


def test_broker_conf_defaults_are_the_brokers() -> None:
    conf = parse_broker_conf("")
    assert (conf.ensemble, conf.write_quorum, conf.ack_quorum) == (2, 2, 2)
    assert conf.digest_type == "CRC32C" and conf.password is None
    assert conf.max_message_size == 5 * 1024 * 1024


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("managedLedgerDefaultEnsembleSize=two", "not an integer"),
        ("managedLedgerDefaultEnsembleSize=1\nmanagedLedgerDefaultWriteQuorum=2", "ensemble >="),
        ("managedLedgerDigestType=SHA1", "not one of"),
        ("maxMessageSize=-1", "out of range"),
    ],
)
def test_broker_conf_errors(text: str, fragment: str) -> None:
    with pytest.raises(LedgerctlError, match=fragment):
        parse_broker_conf(text)


def test_broker_conf_file_errors(tmp_path: Path) -> None:
    with pytest.raises(LedgerctlError, match="does not exist"):
        load_broker_conf(tmp_path / "missing.conf")
    with pytest.raises(LedgerctlError, match=r"directory|regular"):
        load_broker_conf(tmp_path)
    fifo = tmp_path / "fifo"
    import os

    os.mkfifo(fifo)
    with pytest.raises(LedgerctlError, match="regular file"):
        load_broker_conf(fifo)
