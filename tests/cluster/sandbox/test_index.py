"""The continuous index a Pulsar 4.0.7 broker stamps on transaction markers.

``TopicTransactionBuffer`` appends commit and abort markers with
``ManagedLedger.asyncAddEntry(ByteBuf, callback, ctx)``, which passes one message
(``ManagedLedgerImpl.asyncAddEntry``: ``asyncAddEntry(buffer, 1, ...)``): the index
interceptor gives every marker broker entry metadata and an index of its own, one past the
entry before. (``migrate index`` counts an entry without ``num_messages_in_batch``, a marker
included, as one message: the same indexes.)
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.sandbox_oracle import namespace, produce, short, topic_name, txn_spec

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]


def test_transaction_markers_get_an_index_of_their_own(sandbox):
    namespace(sandbox)
    name = "index-of-markers"
    client = sandbox.client()
    try:
        produce(client, topic_name(name), [("p", b"plain")])
    finally:
        client.close()
    sandbox.java(
        "txn-produce",
        txn_spec(topic_name(name), [("commit", [("a", b"1")]), ("abort", [("b", b"2")])]),
    )
    sandbox.unload(topic_name(name))
    done = subprocess.run(
        [*LEDGERCTL, "inspect", "--topic", short(name), "--depth", "metadata", "-o", "jsonl"],
        capture_output=True,
        text=True,
        timeout=300,
        env=sandbox.env(),
    )
    assert done.returncode == 0, done.stderr
    rows = []
    for line in done.stdout.splitlines():
        entry = json.loads(line)
        if "position" not in entry:
            continue
        layers = {la["layer"]: la.get("fields", {}) for la in entry["layers"]}
        marker = layers.get("message-metadata", {}).get("marker_type")
        rows.append((marker, layers["broker-entry-metadata"].get("index")))
    # plain, txn message, commit marker (21), txn message, abort marker (22)
    assert [m for m, _ in rows] == [None, None, 21, None, 22]
    assert [i for _, i in rows] == [0, 1, 2, 3, 4]
