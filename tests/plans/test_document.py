"""The plan file format: round trips, and any JSON a plan file may hold is either a plan or
one LedgerctlError (never another exception), so `apply` and `undo` fail in one line."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.plans import (
    PLAN_FORMAT,
    PLAN_VERSION,
    Change,
    Plan,
    Unreachable,
    document_digest,
)
from pulsarctl_py.plans.binding import Binding
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = [
    "key",
    "kind",
    "old_base64",
    "new_base64",
    "old_sha256",
    "new_sha256",
    "version",
    "creation",
    "why",
]
URL = "zk:127.0.0.1:2181"
BINDING = Binding(
    URL, {"anchor": "/managed-ledgers czxid 2", "bookkeeper_instance_id": "test-instance"}
)


def signed(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the digest a plan saved with its content would carry."""
    return {**doc, "digest": document_digest(doc)}


def _cursor(ledger: int, entry: int) -> bytes:
    return mld.build_info(
        mlpb.ManagedCursorInfo(
            cursorsLedgerId=-1, markDeleteLedgerId=ledger, markDeleteEntryId=entry
        )
    )


@given(
    positions=st.lists(
        st.tuples(st.integers(0, 2**40), st.integers(-1, 2**20)), min_size=1, max_size=5
    ),
    version=st.integers(0, 2**31 - 1),
    delete=st.booleans(),
)
def test_plan_round_trip(positions: list[tuple[int, int]], version: int, delete: bool) -> None:
    changes = [
        Change(
            f"/managed-ledgers/t/n/persistent/x/c{i}",
            "cursor",
            _cursor(*p),
            None,
            version,
            creation=f"czxid {i}",
        )
        if delete
        else Change(
            f"/managed-ledgers/t/n/persistent/x/c{i}",
            "cursor",
            _cursor(*p),
            _cursor(1, 1),
            version,
            ["why"],
            f"czxid {i}",
        )
        for i, p in enumerate(positions)
    ]
    plan = Plan(URL, changes, unreachable=Unreachable(ledgers=[1, 2], entries=3), binding=BINDING)
    again = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert [(c.key, c.old, c.new, c.version, c.creation, c.action) for c in again.changes] == [
        (c.key, c.old, c.new, c.version, c.creation, c.action) for c in changes
    ]
    for change in plan.to_json()["changes"]:  # decoded, not bytes
        assert change["old"]["fields"]["mark_delete_ledger_id"] >= 0
        assert any(line.startswith("-markDelete") for line in change["diff"])


@settings(max_examples=300)
@given(doc=JSON)
def test_any_json_is_a_plan_or_one_error(doc: Any) -> None:
    try:
        Plan.from_json(doc)
    except LedgerctlError:
        pass


@settings(max_examples=300)
@given(change=st.dictionaries(st.sampled_from(KEYS), JSON, max_size=8), n=st.integers(1, 3))
def test_any_change_is_accepted_only_when_it_holds_together(change: dict[str, Any], n: int) -> None:
    doc = {
        "format": PLAN_FORMAT,
        "version": PLAN_VERSION,
        "metadata_url": URL,
        "store": BINDING.to_json(),
        "changes": [change] * n,
    }
    try:
        plan = Plan.from_json(signed(doc))
    except LedgerctlError:
        return
    # accepted: then its bytes match their hashes and one key appears once
    assert n == 1 and len(plan.changes) == 1
