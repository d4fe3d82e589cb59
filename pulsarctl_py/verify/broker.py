"""The broker's view of a loaded topic beside the stored one, as findings
(:mod:`pulsarctl_py.broker_view`: the rules; the codes are in :mod:`.codes`, family
``broker``). Only topics a broker has loaded are compared; a topic is never loaded by
looking."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.verify.core import Finding, Run

if TYPE_CHECKING:
    from pulsarctl_py.broker_view import BrokerView


def broker_findings(run: Run, topic: str) -> Iterator[Finding]:
    """The differences the broker serving ``topic`` shows from storage (none when no
    broker has it loaded or none was asked)."""
    from pulsarctl_py.broker_view import topic_view
    from pulsarctl_py.topics import topic_info

    lookup = run.brokers
    if lookup is None or not lookup.admins() or topic not in lookup.loaded():
        return
    try:
        info = topic_info(run.source, topic)
    except LedgerctlError:
        return  # deleted while we ran, or unreadable: the other checks said so
    view: BrokerView = topic_view(run.source, info, lookup)
    run.broker_views.append(view)
    for d in view.findings:
        assert d.severity is not None
        yield Finding(d.severity, d.check, topic, d.ledger_id, None, d.message, d.details)
