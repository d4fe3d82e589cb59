"""One precedence for every setting: flag > environment > ledgerctl.toml > the broker
configuration's value > default (pulsarctl_py.precedence), read through the functions the
commands call; ``ledgerctl config`` shows each value with its source."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py import precedence
from tests.support.cli_helpers import run
from tests.support.demo_env import demo, demo_root  # noqa: F401

ORDER = (precedence.FLAG, precedence.ENV, precedence.CONFIG, precedence.BROKER_CONF)


@dataclass
class World:
    """One directory holding a ledgerctl.toml (cwd), a user config dir, and the files."""

    root: Path
    env: dict[str, str]

    @property
    def cwd(self) -> Path:
        return self.root / "work"

    @property
    def toml(self) -> Path:
        return self.cwd / "ledgerctl.toml"

    @property
    def conf(self) -> Path:
        return self.root / "broker.conf"


@contextlib.contextmanager
def world() -> Iterator[World]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "work").mkdir()
        env = {"XDG_CONFIG_HOME": str(root / "xdg")}
        with contextlib.chdir(root / "work"):
            yield World(root, env)


@dataclass
class Case:
    """A setting, what each source says, and how the commands' code reads it."""

    setting: precedence.Setting
    #: origin -> (the text the source holds, the value the reader must then return)
    sources: dict[str, tuple[Any, Any]]
    default: Any
    #: (world) -> the value the commands' code uses, and its source (None: not reported)
    read: Callable[[World], tuple[Any, str | None]]
    #: more lines of the broker configuration (a broker starts only with ordered quorums)
    conf_extra: str = ""


def _url_read(w: World) -> tuple[Any, str | None]:
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    try:
        url = resolve_metadata_url(env=w.env)
    except Exception:
        return None, None
    return str(url.with_bookkeeper(None)), url.source


def _bk_read(w: World) -> tuple[Any, str | None]:
    from pulsarctl_py.stores.metadata.url import resolve_metadata_url

    bk = resolve_metadata_url("zk:pulsar:1", env=w.env).bookkeeper
    return (None, None) if bk is None else (str(bk), bk.source)


def _write_read(key: str, attr: str, **fixed: Any) -> Callable[[World], tuple[Any, str | None]]:
    def read(w: World) -> tuple[Any, str | None]:
        from pulsarctl_py.writesettings import resolve_write_settings

        s = resolve_write_settings(env=w.env, **fixed)
        value = getattr(s, attr)
        if attr == "digest":
            value = value.name
        if attr == "password":
            value = None if value is None else value.reveal()
        return value, s.source[key]

    return read


def _size_read(w: World) -> tuple[Any, str | None]:
    found = precedence.resolve(precedence.MAX_MESSAGE_SIZE, sources=precedence.Sources.of(w.env))
    return found.value, found.source


def _dirs_read(w: World) -> tuple[Any, str | None]:
    from pulsarctl_py.config import resolve_bookie_dirs

    return [str(d) for d in resolve_bookie_dirs(env=w.env)], None


def _admin_read(w: World) -> tuple[Any, str | None]:
    from pulsarctl_py.stores.broker import admin_urls

    with _env(w):
        return admin_urls(), None


def _client_read(attr: str) -> Callable[[World], tuple[Any, str | None]]:
    def read(w: World) -> tuple[Any, str | None]:
        from pulsarctl_py.stores.live.config import resolve_client_options

        value = getattr(resolve_client_options(env=w.env), attr)
        return (list(value) if isinstance(value, tuple) else value), None

    return read


def _conf_read(w: World) -> tuple[Any, str | None]:
    from pulsarctl_py.stores.metadata.url import resolve_broker_conf

    conf = resolve_broker_conf(env=w.env)
    return (None if conf is None else conf.metadata_url), None


def _compactor_read(attr: str) -> Callable[[World], tuple[Any, str | None]]:
    def read(w: World) -> tuple[Any, str | None]:
        from pulsarctl_py.compaction.settings import compactor_settings

        with _env(w):
            flag = precedence.current_flags().get({"order": "compaction_order"}.get(attr, attr))
            s = compactor_settings(**{attr: flag}, check_filters=False)
        return getattr(s, attr), s.sources[attr]

    return read


def _threshold_read(w: World) -> tuple[Any, str | None]:
    from pulsarctl_py.engines.select import spark_threshold

    with _env(w):
        return spark_threshold(), None


@contextlib.contextmanager
def _env(w: World) -> Iterator[None]:
    """The world's variables as the process's (for code that reads os.environ)."""
    import os

    saved = dict(os.environ)
    for setting in precedence.SETTINGS:
        if setting.env is not None:
            os.environ.pop(setting.env, None)
    os.environ.update(w.env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _bk(host: str) -> str:
    return f"zk+hierarchical://{host}:1/bk/ledgers"


CASES = [
    Case(
        precedence.METADATA_URL,
        {
            "flag": ("zk:flag:1", "zk:flag:1"),
            "env": ("zk:env:1", "zk:env:1"),
            "config": ("zk:toml:1", "zk:toml:1"),
            "broker_conf": ("zk:conf:1", "zk:conf:1"),
        },
        None,
        _url_read,
    ),
    Case(
        precedence.BOOKKEEPER_METADATA_URL,
        {o: (_bk(o), _bk(o)) for o in ("flag", "env", "config", "broker_conf")},
        None,
        _bk_read,
    ),
    Case(
        precedence.MAX_MESSAGE_SIZE,
        {
            "flag": ("1MiB", 1 << 20),
            "env": ("2MiB", 2 << 20),
            "config": ("3MiB", 3 << 20),
            "broker_conf": (str(4 << 20), 4 << 20),
        },
        5 << 20,
        _size_read,
    ),
    Case(
        precedence.ENSEMBLE_SIZE,
        {"flag": (5, 5), "env": ("6", 6), "config": (7, 7), "broker_conf": ("8", 8)},
        2,
        _write_read("ensemble", "ensemble"),
    ),
    Case(
        precedence.WRITE_QUORUM,
        {"flag": (5, 5), "env": ("6", 6), "config": (7, 7), "broker_conf": ("8", 8)},
        2,
        _write_read("write_quorum", "write_quorum", ensemble=9),
        "managedLedgerDefaultEnsembleSize=9\n",
    ),
    Case(
        precedence.ACK_QUORUM,
        {"flag": (5, 5), "env": ("6", 6), "config": (7, 7), "broker_conf": ("8", 8)},
        2,
        _write_read("ack_quorum", "ack_quorum", ensemble=9, write_quorum=9),
        "managedLedgerDefaultEnsembleSize=9\nmanagedLedgerDefaultWriteQuorum=9\n",
    ),
    Case(
        precedence.DIGEST_TYPE,
        {
            "flag": ("crc32", "CRC32"),
            "env": ("dummy", "DUMMY"),
            "config": ("crc32", "CRC32"),
            "broker_conf": ("DUMMY", "DUMMY"),
        },
        "CRC32C",
        _write_read("digest_type", "digest"),
    ),
    Case(
        precedence.MANAGED_LEDGER_PASSWORD,
        {
            "flag": ("FILE:flag-pw", b"flag-pw"),
            "env": ("env-pw", b"env-pw"),
            "config": ("FILE:toml-pw", b"toml-pw"),
            "broker_conf": ("conf-pw", b"conf-pw"),
        },
        None,
        _write_read("password", "password"),
    ),
    Case(
        precedence.BOOKIE_DIRS,
        {"flag": (["/f"], ["/f"]), "env": ("/e", ["/e"]), "config": (["t"], ["TOML/t"])},
        [],
        _dirs_read,
    ),
    Case(
        precedence.ADMIN_URL,
        {
            "flag": (["http://f:1"], ["http://f:1"]),
            "env": ("http://e:1,http://e:2", ["http://e:1", "http://e:2"]),
            "config": (["http://t:1"], ["http://t:1"]),
        },
        [],
        _admin_read,
    ),
    Case(
        precedence.BOOKIE_TIMEOUT,
        {"flag": (1.5, 1.5), "env": ("2.5", 2.5), "config": (3.5, 3.5)},
        5.0,
        _client_read("timeout"),
    ),
    Case(
        precedence.BOOKIE_ADDRESSES,
        {
            "flag": (["a:1=f:1"], [("a:1", "f:1")]),
            "env": ("a:1=e:1", [("a:1", "e:1")]),
            "config": (["a:1=t:1"], [("a:1", "t:1")]),
        },
        [],
        _client_read("addresses"),
    ),
    Case(
        precedence.KEEP_ENTRY_METADATA,
        {
            "flag": (True, True),
            "env": ("0", False),
            "config": (True, True),
            "broker_conf": ("false", False),
        },
        False,
        _compactor_read("keep_entry_metadata"),
    ),
    Case(
        precedence.RETAIN_NULL_KEY,
        {
            "flag": (True, True),
            "env": ("0", False),
            "config": (True, True),
            "broker_conf": ("false", False),
        },
        False,
        _compactor_read("retain_null_key"),
    ),
    Case(
        precedence.COMPACTION_ORDER,
        {
            "flag": ("event-time", "event-time"),
            "env": ("publishing", "publishing"),
            "config": ("event-time", "event-time"),
            "broker_conf": (
                "org.apache.pulsar.compaction.EventTimeCompactionServiceFactory",
                "event-time",
            ),
        },
        "publishing",
        _compactor_read("order"),
    ),
    Case(
        precedence.SPARK_THRESHOLD,
        {"flag": (10, 10), "env": ("20", 20), "config": (30, 30)},
        200_000,
        _threshold_read,
    ),
    Case(
        precedence.BROKER_CONF_FILE,
        {
            "flag": ("CONF:flag.conf", "zk:flag:1"),
            "env": ("CONF:env.conf", "zk:env:1"),
            "config": ("CONF:toml.conf", "zk:config:1"),
        },
        None,
        _conf_read,
    ),
]


def _toml(value: Any) -> str:
    return json.dumps(value)  # TOML's strings, integers, floats and arrays read as JSON's


def _place(w: World, case: Case, origin: str) -> tuple[str, Any]:
    """Put the case's value into ``origin``; the source string the reader must report."""
    setting = case.setting
    text, _ = case.sources[origin]
    if isinstance(text, str) and text.startswith("FILE:"):
        path = w.root / f"{origin}-secret"
        path.write_text(text[5:] + "\n")
        text = str(path) if origin != "config" else f"../{path.name}"
    if isinstance(text, str) and text.startswith("CONF:"):
        path = w.root / text[5:]
        path.write_text(f"metadataStoreUrl=zk:{origin}:1\n")
        text = str(path) if origin != "config" else f"../{path.name}"
    if origin == precedence.FLAG:
        return "flag", text
    if origin == precedence.ENV:
        w.env[str(setting.env)] = str(text)
        return str(setting.env), None
    if origin == precedence.CONFIG:
        with w.toml.open("a") as fh:
            fh.write(f"{setting.key} = {_toml(text)}\n")
        return str(w.toml), None
    key = setting.conf[0]
    with w.conf.open("a") as fh:
        fh.write(f"{key}={text}\n{case.conf_extra}")
    w.env["LEDGERCTL_BROKER_CONF"] = str(w.conf)
    return f"broker configuration {w.conf} ({key})", None


#: every combination of the four sources' presence
PRESENCE = [{o for i, o in enumerate(ORDER) if mask >> i & 1} for mask in range(1 << len(ORDER))]


@pytest.mark.parametrize("case", CASES, ids=[c.setting.name for c in CASES])
def test_the_first_source_present_wins_for_every_setting(case: Case) -> None:
    """For each setting, each of the 16 combinations of sources present: the value the
    commands' code uses is the highest-ranked source's, and every source is seen."""
    for present in PRESENCE:
        _check(case, {o for o in present if o in case.sources})


def _check(case: Case, present: set[str]) -> None:
    with world() as w:
        flag = None
        expected_source = None
        for origin in ORDER:
            if origin not in present:
                continue
            source, value = _place(w, case, origin)
            if origin == precedence.FLAG:
                flag = value
                source = case.setting.flag
            if expected_source is None:
                expected_source = source
        winner = next((o for o in ORDER if o in present), None)
        expected = case.default if winner is None else case.sources[winner][1]
        if expected == ["TOML/t"]:
            expected = [str(w.cwd / "t")]
        with precedence.flags(**{case.setting.name: flag}):
            value, source = case.read(w)
            layers = [
                layer.origin
                for layer in precedence.layers(case.setting, sources=precedence.Sources.of(w.env))
            ]
        assert value == expected, (winner, value)
        if winner is not None and source is not None:
            assert source.startswith(str(expected_source)), (winner, source)
        # every source present is seen, in rank order, above the default
        assert layers == [o for o in ORDER if o in present] + [precedence.DEFAULT]


def test_the_defaults_are_those_of_the_modules_that_use_them() -> None:
    from pulsarctl_py import brokerconf, limits

    assert precedence.ENSEMBLE_SIZE.default == brokerconf.DEFAULT_ENSEMBLE
    assert precedence.WRITE_QUORUM.default == brokerconf.DEFAULT_WRITE_QUORUM
    assert precedence.ACK_QUORUM.default == brokerconf.DEFAULT_ACK_QUORUM
    assert precedence.DIGEST_TYPE.default == brokerconf.DEFAULT_DIGEST
    assert precedence.MAX_MESSAGE_SIZE.default == limits.DEFAULT_MAX_MESSAGE_SIZE
    from pulsarctl_py import documents
    from pulsarctl_py.engines.select import DEFAULT_SPARK_THRESHOLD

    assert precedence.MAX_PLAN_SIZE.default == documents.MAX_DOCUMENT_SIZE
    assert precedence.SPARK_THRESHOLD.default == DEFAULT_SPARK_THRESHOLD


def test_a_secret_is_never_a_flags_value_nor_in_a_config_file(tmp_path: Path) -> None:
    (tmp_path / "ledgerctl.toml").write_text('managed_ledger_password_file = "pw"\n')
    (tmp_path / "pw").write_text("from-a-file\n")
    found = precedence.resolve(
        precedence.MANAGED_LEDGER_PASSWORD,
        sources=precedence.Sources.of({"XDG_CONFIG_HOME": str(tmp_path / "x")}, tmp_path),
    )
    assert found.value.reveal() == b"from-a-file" and found.shown() == "set"
    assert "from-a-file" not in repr(found)


def test_a_bad_value_names_its_source(tmp_path: Path) -> None:
    from pulsarctl_py.errors import LedgerctlError

    (tmp_path / "ledgerctl.toml").write_text('ensemble_size = "three"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "x")}
    with pytest.raises(LedgerctlError, match=r"ledgerctl\.toml: ensemble_size must be an integer"):
        precedence.resolve(precedence.ENSEMBLE_SIZE, sources=precedence.Sources.of(env, tmp_path))
    env["LEDGERCTL_BOOKIE_TIMEOUT"] = "soon"
    with pytest.raises(LedgerctlError, match="LEDGERCTL_BOOKIE_TIMEOUT='soon' is not a number"):
        precedence.resolve(precedence.BOOKIE_TIMEOUT, sources=precedence.Sources.of(env, tmp_path))


# -- the colleague's two cases, through the CLI ---------------------------------------------


def _broker_conf_here(folder: Path, metadata: str) -> None:
    (folder / "broker.conf").write_text(
        f"metadataStoreUrl={metadata}\nmaxMessageSize=1048576\nmanagedLedgerDefaultEnsembleSize=3\n"
    )


def test_metadata_url_in_the_toml_wins_over_its_broker_conf(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """broker_conf in ledgerctl.toml used to override metadata_url of the same file: the
    command read the broker configuration's (here unreachable) store."""
    here = demo / "with-broker-conf"
    here.mkdir(exist_ok=True)
    _broker_conf_here(here, "zk:127.0.0.1:9/elsewhere")
    (here / "ledgerctl.toml").write_text(
        'metadata_url = "rocksdb://../metadata"\nbookie_dirs = ["../bookkeeper"]\n'
        'broker_conf = "broker.conf"\n'
    )
    monkeypatch.chdir(here)
    r = run(capsys, "topic", "list", "-o", "json")
    assert r.code == 0, r.err
    assert "persistent://public/default/batched" in {t["topic"] for t in r.json()}
    r = run(capsys, "config", "-o", "json")
    assert r.code == 0, r.err
    rows = {row["setting"]: row for row in r.json()}
    toml = str(here / "ledgerctl.toml")
    conf = str(here / "broker.conf")
    assert rows["metadata_url"]["value"] == f"rocksdb://{demo.resolve() / 'metadata'}"
    assert (rows["metadata_url"]["source"], rows["metadata_url"]["origin"]) == (toml, "config")
    assert rows["metadata_url"]["overrides"] == [
        {
            "value": "zk:127.0.0.1:9/elsewhere",
            "source": f"broker configuration {conf} (metadataStoreUrl)",
            "origin": "broker_conf",
        }
    ]
    assert rows["broker_conf"] == {
        "setting": "broker_conf",
        "value": conf,
        "source": toml,
        "origin": "config",
        "overrides": [],
    }
    # what nothing above sets still comes from the broker configuration
    assert rows["max_message_size"]["value"] == 1048576
    assert rows["max_message_size"]["origin"] == "broker_conf"
    assert rows["ensemble_size"]["value"] == 3


def test_config_takes_the_commands_flags_and_names_every_source(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _broker_conf_here(tmp_path, "zk:conf:2181")
    monkeypatch.setenv("LEDGERCTL_BOOKKEEPER_METADATA_URL", "zk+hierarchical://env:2181/bk/ledgers")
    monkeypatch.setenv("LEDGERCTL_BOOKIE_TIMEOUT", "9")
    r = run(
        capsys,
        "config",
        "--metadata-url",
        "zk:flag:2181/pulsar",
        "--broker-conf",
        str(tmp_path / "broker.conf"),
        "--ensemble-size",
        "4",
        "-o",
        "json",
    )
    assert r.code == 0, r.err
    rows = {row["setting"]: row for row in r.json()}
    assert {k: rows["metadata_url"][k] for k in ("value", "source", "origin")} == {
        "value": "zk:flag:2181/pulsar",
        "source": "--metadata-url",
        "origin": "flag",
    }
    # below the flag: the demo's ledgerctl.toml, then the broker configuration
    assert [o["origin"] for o in rows["metadata_url"]["overrides"]] == ["config", "broker_conf"]
    assert rows["bookkeeper_metadata_url"]["value"] == "zk+hierarchical://env:2181/bk/ledgers"
    assert rows["bookkeeper_metadata_url"]["origin"] == "env"
    assert rows["broker_conf"]["origin"] == "flag"
    # --broker-conf as a flag: its values still rank below a flag and a variable
    assert (rows["ensemble_size"]["value"], rows["ensemble_size"]["origin"]) == (4, "flag")
    assert rows["ensemble_size"]["overrides"][0]["origin"] == "broker_conf"
    assert (rows["bookie_timeout"]["value"], rows["bookie_timeout"]["source"]) == (
        9.0,
        "LEDGERCTL_BOOKIE_TIMEOUT",
    )
    assert rows["max_message_size"]["origin"] == "broker_conf"
    r = run(capsys, "--max-message-size", "2MiB", "config", "-o", "json")
    rows = {row["setting"]: row for row in r.json()}
    assert (rows["max_message_size"]["value"], rows["max_message_size"]["origin"]) == (
        2 << 20,
        "flag",
    )


def test_the_max_message_size_of_the_toml_applies(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """max_message_size in ledgerctl.toml bounds what a command accepts, below the flag."""
    here = demo / "small-limit"
    here.mkdir(exist_ok=True)
    (here / "ledgerctl.toml").write_text(
        'metadata_url = "rocksdb://../metadata"\nbookie_dirs = ["../bookkeeper"]\n'
        'max_message_size = "1KiB"\n'
    )
    monkeypatch.chdir(here)
    r = run(capsys, "inspect", "--topic", "chunked", "-o", "json")
    # a chunked message joined may hold four limits
    assert r.code == 1 and "over the limit of 4096 bytes" in r.out, (r.code, r.err[-500:])
    r = run(capsys, "inspect", "--topic", "chunked", "-o", "json", "--max-message-size", "5MiB")
    assert r.code == 0 and "over the limit" not in r.out, r.err
