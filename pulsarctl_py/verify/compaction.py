"""The checks of a topic's compacted ledger (the ``__compaction`` cursor's
``CompactedTopicLedger``): it exists, names the topic, agrees with the compaction
horizon, is closed, and its entries read."""

from __future__ import annotations

from collections.abc import Iterator

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.managed_ledger import COMPACTED_TOPIC_LEDGER
from pulsarctl_py.verify.core import ERROR, WARNING, Finding, Run
from pulsarctl_py.verify.ledgers import metadata_findings, scan


def _same_topic(name: str, expected: str) -> bool:
    from pulsarctl_py.stores.metadata import resolve_topic

    if name == expected:
        return True
    try:
        return resolve_topic(name).full_name == expected
    except LedgerctlError:
        return False


def compacted_findings(
    run: Run, topic: str, ledger_id: int, horizon: tuple[int, int] | None
) -> Iterator[Finding]:
    """compacted-ledger-missing / -wrong-topic / -horizon-mismatch, and its entries."""
    run.referenced.add(ledger_id)
    led = run.ledger(ledger_id)
    view = led.view
    if view is None or view.metadata is None:
        if view is not None and view.metadata_error is not None:
            yield from metadata_findings(topic, led, "compacted ledger", run)
            return
        yield Finding(
            ERROR,
            "compacted-ledger-missing",
            topic,
            ledger_id,
            None,
            f"the __compaction cursor's {COMPACTED_TOPIC_LEDGER} is {ledger_id}, which has "
            "no BookKeeper metadata: compacted reads fail",
            {"compacted_ledger": ledger_id},
        )
        return
    md = view.metadata
    tags = md.pulsar()
    if tags.compacted_topic is None:
        other = tags.kind not in ("compacted", "unknown") or tags.managed_ledger is not None
        yield Finding(
            ERROR if other else WARNING,
            "compacted-ledger-wrong-topic",
            topic,
            ledger_id,
            None,
            f"compacted ledger {ledger_id} "
            + (
                f"is tagged as a {tags.kind} ledger, not a compacted ledger"
                if other
                else "carries no pulsar/compactedTopic tag"
            ),
            {"tags": tags.to_json()},
        )
    elif not _same_topic(tags.compacted_topic, topic):
        yield Finding(
            ERROR,
            "compacted-ledger-wrong-topic",
            topic,
            ledger_id,
            None,
            f"compacted ledger {ledger_id} names topic {tags.compacted_topic}",
            {"compacted_topic": tags.compacted_topic},
        )
    to = tags.compacted_to
    if to is not None and horizon is not None:
        if (to["ledger_id"], to["entry_id"]) != tuple(horizon):
            yield Finding(
                WARNING,
                "compacted-horizon-mismatch",
                topic,
                ledger_id,
                None,
                f"compacted ledger {ledger_id} was compacted up to "
                f"{to['ledger_id']}:{to['entry_id']}, the __compaction cursor is at "
                f"{horizon[0]}:{horizon[1]}",
                {"compacted_to": [to["ledger_id"], to["entry_id"]], "horizon": list(horizon)},
            )
    if not md.is_closed:
        yield Finding(
            WARNING,
            "ledger-not-closed",
            topic,
            ledger_id,
            None,
            f"compacted ledger {ledger_id} is {md.state.name}: the compactor closes it "
            "before it records it",
            {"state": md.state.name},
        )
    # a ledger read like the data ledgers: counted with them (as demo and ledger list do)
    run.stats.ledgers += 1
    yield from scan(run, topic, led, None, "compacted ledger")
