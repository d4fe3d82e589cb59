"""Metadata-store URLs, defaults from env and config files, and ZooKeeper credentials."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.stores.metadata import (
    ENV_URL,
    ENV_ZK_AUTH,
    ENV_ZK_AUTH_FILE,
    MetadataUrl,
    parse_metadata_url,
    resolve_metadata_url,
    zk_auth_from_env,
)


@pytest.mark.parametrize(
    "text, scheme, target, chroot, root",
    [
        ("zk:zk1:2181", "zk", "zk1:2181", "", "/ledgers"),
        ("zk:zk1:2181,zk2:2182/pulsar", "zk", "zk1:2181,zk2:2182", "/pulsar", "/ledgers"),
        ("zk://zk1:2181/a/b/", "zk", "zk1:2181", "/a/b", "/ledgers"),
        ("127.0.0.1:2181", "zk", "127.0.0.1:2181", "", "/ledgers"),
        ("h1:2181, h2:2181/", "zk", "h1:2181,h2:2181", "", "/ledgers"),
        ("[::1]:2181", "zk", "[::1]:2181", "", "/ledgers"),
        ("zk+hierarchical://127.0.0.1:2181/ledgers", "zk", "127.0.0.1:2181", "", "/ledgers"),
        ("zk+flat://h1:1;h2:2/c/ledgers", "zk", "h1:1,h2:2", "", "/c/ledgers"),
        ("metadata-store:zk:h:2181/p", "zk", "h:2181", "/p", "/ledgers"),
        ("rocksdb:///var/pulsar/metadata", "rocksdb", "/var/pulsar/metadata", "", "/ledgers"),
        ("rocksdb://data/metadata", "rocksdb", "data/metadata", "", "/ledgers"),
        ("metadata-store:rocksdb://d", "rocksdb", "d", "", "/ledgers"),
    ],
)
def test_parse(text: str, scheme: str, target: str, chroot: str, root: str) -> None:
    url = parse_metadata_url(text)
    assert (url.scheme, url.target, url.chroot, url.ledgers_root) == (scheme, target, chroot, root)
    assert parse_metadata_url(str(url)) == url  # str() is a canonical, re-parsable form


def test_connect_string_keeps_the_chroot() -> None:
    assert parse_metadata_url("zk:a:1,b:2/x").connect_string == "a:1,b:2/x"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty"),
        ("zk:", "no ZooKeeper host"),
        ("zk:host", "host:port"),
        ("zk:host:99999", "host:port"),
        ("zk:h:1,,h:2", "no ZooKeeper host"),
        ("zk:h:1/a//b", "chroot"),
        ("data/metadata", "host:port"),
        ("rocksdb://", "directory"),
        ("etcd:http://h:2379", "unsupported"),
        ("oxia://h:6648", "unsupported"),
        ("memory:local", "unsupported"),
        ("http://h:1", "unsupported"),
    ],
)
def test_parse_errors(text: str, fragment: str) -> None:
    with pytest.raises(LedgerctlError, match=fragment):
        parse_metadata_url(text)


def test_resolution_order(tmp_path: Path) -> None:
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    (home / ".config" / "ledgerctl").mkdir(parents=True)
    cwd.mkdir()
    (home / ".config" / "ledgerctl" / "config.toml").write_text('metadata_url = "zk:home:1"\n')
    env: dict[str, str] = {}
    got = resolve_metadata_url(env=env, cwd=cwd, home=home)
    assert str(got) == "zk:home:1" and got.source.endswith("config.toml")
    (cwd / "ledgerctl.toml").write_text('metadata_url = "rocksdb://local"\n')
    # a relative rocksdb:// path is relative to the file, made absolute
    assert str(resolve_metadata_url(env=env, cwd=cwd, home=home)) == f"rocksdb://{cwd / 'local'}"
    # the nearest ledgerctl.toml up the tree: from a directory below, the same file
    below = cwd / "a" / "b"
    below.mkdir(parents=True)
    got = resolve_metadata_url(env=env, cwd=below, home=home)
    assert str(got) == f"rocksdb://{cwd / 'local'}" and got.source == str(cwd / "ledgerctl.toml")
    env[ENV_URL] = "zk:env:2"
    assert resolve_metadata_url(env=env, cwd=cwd, home=home).source == ENV_URL
    assert str(resolve_metadata_url("zk:arg:3", env=env, cwd=cwd, home=home)) == "zk:arg:3"
    given = MetadataUrl("zk", "x:1")
    assert resolve_metadata_url(given) is given


def test_xdg_config_home(tmp_path: Path) -> None:
    (tmp_path / "xdg" / "ledgerctl").mkdir(parents=True)
    (tmp_path / "xdg" / "ledgerctl" / "config.toml").write_text('metadata_url = "zk:x:1"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert str(resolve_metadata_url(env=env, cwd=tmp_path, home=tmp_path)) == "zk:x:1"


def test_no_url_anywhere_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LedgerctlError, match=ENV_URL):
        resolve_metadata_url(env={}, cwd=tmp_path, home=tmp_path)


def test_broken_config_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "ledgerctl.toml").write_text("metadata_url = \n")
    with pytest.raises(LedgerctlError, match=r"ledgerctl\.toml"):
        resolve_metadata_url(env={}, cwd=tmp_path, home=tmp_path)
    (tmp_path / "ledgerctl.toml").write_text("metadata_url = 3\n")
    with pytest.raises(LedgerctlError, match="must be a string"):
        resolve_metadata_url(env={}, cwd=tmp_path, home=tmp_path)


def test_zk_auth_from_env_and_file(tmp_path: Path) -> None:
    assert zk_auth_from_env({}) is None
    auth = zk_auth_from_env({ENV_ZK_AUTH: "bob:s3cr:et"})
    assert auth is not None and (auth.user, auth.password) == ("bob", "s3cr:et")
    assert auth.credential == "bob:s3cr:et"
    assert "s3cr" not in repr(auth) and "s3cr" not in str(auth)
    secret = tmp_path / "zk-auth"
    secret.write_text("alice:pw\n")
    from_file = zk_auth_from_env({ENV_ZK_AUTH_FILE: str(secret)})
    assert from_file is not None and from_file.credential == "alice:pw"
    both = zk_auth_from_env({ENV_ZK_AUTH: "bob:x", ENV_ZK_AUTH_FILE: str(secret)})
    assert both is not None and both.user == "bob"


@pytest.mark.parametrize("value", ["nocolon", ":pw", "bob:", "a:b\nc"])
def test_malformed_credentials_are_not_echoed(value: str) -> None:
    with pytest.raises(LedgerctlError) as info:
        zk_auth_from_env({ENV_ZK_AUTH: value})
    assert value not in str(info.value) and "user:password" in str(info.value)


def test_missing_credentials_file(tmp_path: Path) -> None:
    with pytest.raises(LedgerctlError, match=ENV_ZK_AUTH_FILE):
        zk_auth_from_env({ENV_ZK_AUTH_FILE: str(tmp_path / "absent")})


def test_heavy_back_ends_are_not_imported_up_front() -> None:
    code = (
        "import sys, pulsarctl_py.stores.metadata as m\n"
        "m.parse_metadata_url('zk:h:1')\n"
        "assert 'kazoo' not in sys.modules and 'rocksdict' not in sys.modules, sys.modules.keys()\n"
        "m.ZooKeeperStore, m.RocksDBMetadataStore\n"
        "assert 'kazoo' not in sys.modules and 'rocksdict' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
