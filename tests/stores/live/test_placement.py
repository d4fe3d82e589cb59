"""Bookie isolation for the ledgers ledgerctl writes: the bookies the broker would choose
from, and the placement it records in a data ledger's custom metadata.

The rules are IsolatedBookieEnsemblePlacementPolicy's of Pulsar 4.0.7 (see
pulsarctl_py/stores/live/placement.py); the real broker's own ledgers are compared with
ledgerctl's in tests/cluster/sandbox/test_placement.py. Here: the rules case by case and as
properties, the recorded JSON, the settings read from the metadata store (and refused when
unreadable), and the writer and the offline target choosing accordingly, against a real
ZooKeeper and test bookies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.brokerconf import parse_broker_conf
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.stores.ledger_writer import LedgerConfig
from pulsarctl_py.stores.live.client import ClientOptions
from pulsarctl_py.stores.live.placement import (
    CONFIG_KEY,
    ISOLATED_POLICY,
    BrokerIsolation,
    Placement,
    decode_policy_config,
    encode_policy_config,
    excluded_bookies,
    java_hashmap_order,
    namespace_affinity,
    read_racks,
)
from pulsarctl_py.stores.live.writer import NotEnoughBookies, write_ledger
from pulsarctl_py.stores.metadata import iter_ledger_paths, open_metadata_store, read_ledger
from pulsarctl_py.writesettings import data_settings, resolve_write_settings
from tests.support.verify_world import bookkeeper_root_nodes
from tests.support.write_bookie import WriteBookie

RACKS = {
    "iso": {"b1": {"rack": "/r1"}, "b2": {}},
    "other": {"b3": {}, "b4": {}},
    "spare": {"b5": {}},
}
KNOWN = ["b1", "b2", "b3", "b4", "b5", "b6"]  # b6: writable, in no group


def _allowed(ensemble: int, primary: list[str], secondary: list[str] = (), known=KNOWN):
    out = excluded_bookies(known, RACKS, ensemble, primary, secondary)
    return sorted(set(known) - out)


def test_the_primary_group_when_it_has_enough_bookies() -> None:
    assert _allowed(2, ["iso"]) == ["b1", "b2"]
    assert _allowed(2, ["iso"], ["spare"]) == ["b1", "b2"]  # secondary not needed
    assert _allowed(4, ["iso", "other"]) == ["b1", "b2", "b3", "b4"]


def test_then_the_secondary_then_the_bookies_in_no_group() -> None:
    assert _allowed(3, ["iso"], ["spare"]) == ["b1", "b2", "b5"]
    # iso + spare still short of 4: the bookies in no group at all (b6) come in too,
    # never those of another group
    assert _allowed(4, ["iso"], ["spare"]) == ["b1", "b2", "b5", "b6"]
    assert _allowed(3, ["iso"]) == ["b1", "b2", "b6"]
    # a primary bookie that is not running does not count (b2 not known)
    assert _allowed(2, ["iso"], known=["b1", "b3", "b6"]) == ["b1", "b6"]


def test_what_excludes_nothing() -> None:
    assert excluded_bookies(KNOWN, RACKS, 2, ["*"], ["*"]) == set()  # system topics
    assert excluded_bookies(KNOWN, None, 2, ["iso"], []) == set()  # no /bookies
    assert excluded_bookies(KNOWN, {}, 2, ["iso"], []) == set()
    # a bookie in the primary group and another one stays in
    overlap = {**RACKS, "other": {"b3": {}, "b1": {}}}
    assert "b1" not in excluded_bookies(KNOWN, overlap, 2, ["iso"], [])


def test_a_placement_without_primary_group_keeps_every_bookie() -> None:
    strict = Placement(True, "", "", recorded=True)
    assert strict.candidates(KNOWN, 2, RACKS)[0] == KNOWN
    assert Placement().candidates(KNOWN, 2, RACKS)[0] == KNOWN


groups = st.sampled_from(["iso", "other", "spare", "nowhere"])


@given(
    st.sets(st.sampled_from(KNOWN)),
    st.integers(1, 6),
    st.lists(groups, min_size=1, max_size=3),
    st.lists(groups, max_size=2),
)
def test_the_allowed_bookies_follow_the_groups(known, ensemble, primary, secondary) -> None:
    allowed = set(known) - excluded_bookies(known, RACKS, ensemble, primary, secondary)
    in_group = {g: set(RACKS.get(g, {})) for g in ("iso", "other", "spare", "nowhere")}
    primary_bookies = set().union(*(in_group[g] for g in primary)) & set(known)
    ungrouped = set(known) - set().union(*in_group.values())
    others = set().union(*(b for g, b in in_group.items() if g not in primary))
    others -= set().union(*(in_group[g] for g in secondary)) | primary_bookies
    assert primary_bookies <= allowed  # the primary group's running bookies, always
    assert not allowed & others  # another group's, never
    if len(primary_bookies) >= ensemble:
        assert allowed == primary_bookies  # nothing else while the primary group suffices
    if ungrouped & allowed:
        assert len(allowed - ungrouped) < ensemble  # the ungrouped only as the last resort


# -- what the broker records -----------------------------------------------------------------

#: a data ledger's custom metadata as the sandbox's Pulsar 4.0.7 broker stored it for a
#: namespace with the affinity group "iso,x", secondary "other"
BROKER_VALUE = (
    b'{\n  "policyClass" : "org.apache.pulsar.bookie.rackawareness.IsolatedBookieEnsemble'
    b'PlacementPolicy",\n  "properties" : {\n    "isolationBookieGroups" : "iso,x",\n    '
    b'"secondaryIsolationBookieGroups" : "other"\n  }\n}'
)


def test_the_recorded_policy_is_the_brokers_json() -> None:
    assert encode_policy_config("iso,x", "other") == BROKER_VALUE
    assert b"secondary" not in encode_policy_config("iso", None)  # a null is left out
    assert encode_policy_config(None, None).endswith(b'"properties" : { }\n}')


@given(st.one_of(st.none(), st.text()), st.one_of(st.none(), st.text()))
def test_the_recorded_policy_decodes_to_what_was_encoded(primary, secondary) -> None:
    decoded = decode_policy_config(encode_policy_config(primary, secondary))
    assert decoded["policy_class"] == ISOLATED_POLICY
    expected = {"isolationBookieGroups": primary, "secondaryIsolationBookieGroups": secondary}
    assert decoded["properties"] == {k: v for k, v in expected.items() if v is not None}


def test_the_data_ledger_metadata_in_the_brokers_order() -> None:
    """By HashMap bucket (8 buckets), insertion order within one: the placement entry
    first, then the two keys of one bucket in the order given, then ``application``."""
    for pair in (["pulsar/managed-ledger", "component"], ["component", "pulsar/managed-ledger"]):
        keys = [*pair, "application", CONFIG_KEY]
        assert java_hashmap_order(keys) == [CONFIG_KEY, *pair, "application"]


# -- the settings, from the metadata store and the broker configuration ---------------------


@pytest.fixture
def zk_store(scratch_zk: str) -> Iterator:
    store = open_metadata_store(scratch_zk, read_only=False)
    try:
        yield store
    finally:
        store.close()


def _affinity(store, ns: str, primary: str | None, secondary: str | None = None) -> None:
    group = {"bookkeeperAffinityGroupPrimary": primary}
    if secondary is not None:
        group["bookkeeperAffinityGroupSecondary"] = secondary
    value = {"bundles": {"numBundles": 1}, "bookieAffinityGroup": group, "migrated": False}
    store.put(f"/admin/local-policies/{ns}", json.dumps(value).encode(), -1)


def test_data_ledgers_follow_the_namespace_compacted_ones_the_broker(zk_store) -> None:
    _affinity(zk_store, "t/iso", "iso")
    conf = parse_broker_conf("bookkeeperClientIsolationGroups=shared\n", "/etc/broker.conf")
    settings = resolve_write_settings(broker_conf=conf, env={})
    custom = {"component": b"managed-ledger", "pulsar/managed-ledger": b"x", "application": b"p"}
    data = data_settings(settings, zk_store, "t/iso", "topic").data_config(custom)
    assert (data.placement.primary, data.placement.recorded) == ("iso", True)
    assert next(iter(data.custom_metadata)) == CONFIG_KEY
    assert decode_policy_config(data.custom_metadata[CONFIG_KEY])["properties"] == {
        "isolationBookieGroups": "iso"
    }
    assert "isolation group(s) iso" in data.describe()
    # a namespace without affinity group: the broker's default client, recorded nowhere
    plain = data_settings(settings, zk_store, "t/plain", "topic").data_config(custom)
    assert plain.placement.primary == "shared" and CONFIG_KEY not in plain.custom_metadata
    compacted = settings.compacted_config({})
    assert compacted.placement.primary == "shared" and compacted.custom_metadata == {}
    # strictBookieAffinityEnabled: every topic recorded, a system topic on any bookie
    strict = resolve_write_settings(
        broker_conf=parse_broker_conf("strictBookieAffinityEnabled=true\n", "b.conf"), env={}
    )
    sys_topic = data_settings(strict, zk_store, "t/plain", "__change_events").data_config({})
    assert decode_policy_config(sys_topic.custom_metadata[CONFIG_KEY])["properties"] == {
        "isolationBookieGroups": "*",
        "secondaryIsolationBookieGroups": "*",
    }
    assert data_settings(strict, zk_store, "t/plain", "x").data_config({}).placement.primary == ""


def test_unreadable_isolation_settings_are_refused(zk_store) -> None:
    zk_store.put("/admin/local-policies/t/bad", b"{not json", -1)
    with pytest.raises(LedgerctlError, match="affinity group cannot be told"):
        namespace_affinity(zk_store, "t/bad")
    zk_store.put("/bookies", b'{"iso": ["b1"]}', -1)
    with pytest.raises(LedgerctlError, match="not a map of groups"):
        read_racks(zk_store)
    with pytest.raises(LedgerctlError, match="strictBookieAffinityEnabled"):
        BrokerIsolation.from_conf({"strictBookieAffinityEnabled": "yes"}, "broker.conf")


# -- the writer and the offline target --------------------------------------------------------


def _register(store, bookies: list[WriteBookie]) -> None:
    for b in bookies:
        store.put(f"/ledgers/available/{b.address}", b"", -1)


def test_the_writer_chooses_only_the_groups_bookies(zk_store) -> None:
    bookies = [WriteBookie() for _ in range(4)]
    try:
        _register(zk_store, bookies)
        ids = [b.address for b in bookies]
        racks = {"iso": {ids[0]: {}, ids[1]: {}}, "rest": {ids[2]: {}, ids[3]: {}}}
        zk_store.put("/bookies", json.dumps(racks).encode(), -1)
        placement = Placement(True, "iso", None, recorded=True, source="test")
        config = LedgerConfig(2, 2, 2, DigestType.CRC32C, b"", {}, placement)
        for _ in range(5):  # at random among 4 bookies, 5 times in the group: 1 in 7776
            written = write_ledger(zk_store.bookkeeper(), config, [b"e"] * 3, ClientOptions())
            assert sorted(written.ensemble) == sorted(ids[:2])
        assert not bookies[2].entries and not bookies[3].entries

        before = list(iter_ledger_paths(zk_store, "/ledgers"))
        three = LedgerConfig(3, 2, 2, DigestType.CRC32C, b"", {}, placement)
        with pytest.raises(NotEnoughBookies, match=r"isolation group.s. iso.*2 writable"):
            write_ledger(zk_store.bookkeeper(), three, [b"e"], ClientOptions())
        zk_store.put("/bookies", b"[]", 0)  # unreadable: no ledger placed elsewhere
        with pytest.raises(LedgerctlError, match="cannot be told"):
            write_ledger(zk_store.bookkeeper(), config, [b"e"], ClientOptions())
        assert list(iter_ledger_paths(zk_store, "/ledgers")) == before
        # a ledger without isolation only loses the racks
        free = LedgerConfig(2, 2, 2, DigestType.CRC32C, b"", {})
        assert write_ledger(zk_store.bookkeeper(), free, [b"e"], ClientOptions()).entries == 1
    finally:
        for b in bookies:
            b.close()


def _stopped_bookie(root: Path, bookie_id: str) -> Path:
    """An Interleaved-storage bookie's ledger directory (a cookie and one .idx file)."""
    current = root / "current"
    (current / "0" / "0").mkdir(parents=True)
    (current / "0" / "0" / "1.idx").write_bytes(b"")
    (current / "VERSION").write_text(
        f'5\nbookieHost: "{bookie_id}"\njournalDir: "/j"\nledgerDirs: "1\\t{root}"\n'
    )
    return root


def test_the_offline_target_refuses_a_bookie_outside_the_group(zk_store, tmp_path) -> None:
    from pulsarctl_py.plans.writing import LedgerTarget

    racks = {"iso": {"10.0.0.1:3181": {}}, "rest": {"10.0.0.9:3181": {}}}
    zk_store.put("/bookies", json.dumps(racks).encode(), -1)
    for key, value in bookkeeper_root_nodes().items():  # a formatted cluster's root
        zk_store.put(key, value, -1)
    placement = Placement(True, "iso", None, recorded=True, source="namespace t/iso")
    config = LedgerConfig(3, 2, 2, DigestType.CRC32C, b"", {}, placement)
    outside = _stopped_bookie(tmp_path / "b9", "10.0.0.9:3181")
    target = LedgerTarget(zk_store, bookie_dirs=[str(outside)])
    with pytest.raises(LedgerctlError, match=r"10\.0\.0\.9:3181 is not among the bookies"):
        target.write(config, [b"e"])
    assert list(iter_ledger_paths(zk_store, "/ledgers")) == []
    inside = LedgerTarget(
        zk_store, bookie_dirs=[str(_stopped_bookie(tmp_path / "b1", "10.0.0.1:3181"))]
    )
    done = inside.write(config, [b"e"])
    assert done.ensemble == ["10.0.0.1:3181"]
    assert read_ledger(zk_store, done.ledger_id).metadata.ensembles == {0: ["10.0.0.1:3181"]}
