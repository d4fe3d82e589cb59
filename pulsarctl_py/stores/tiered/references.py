"""What the managed ledgers say about offloads, read whole (:func:`offload_references`):
every offload context's uid and ledger, complete or not, and the locations they name.

``orphans --offloaded`` judges on it (:mod:`pulsarctl_py.repair.offload_orphans`), and
the apply of a plan deleting offload orphans reads it again before it deletes anything
(:mod:`pulsarctl_py.plans.offload`). An offload is referenced when a managed ledger's
``LedgerInfo.offloadContext`` names its uid as ``complete`` for that ledger: the broker
reads it (``ManagedLedgerImpl``; formats.md §18).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.decoders.errors import DataError


@dataclass(slots=True)
class OffloadRefs:
    """What the managed ledgers say about offloads: the whole view."""

    #: (uuid, ledger id) of every complete offload
    complete: set[tuple[str, int]] = field(default_factory=set)
    #: (uuid, ledger id) of an incomplete context -> (managed ledger, bookkeeperDeleted)
    incomplete: dict[tuple[str, int], tuple[str, bool]] = field(default_factory=dict)
    managed_ledgers: set[str] = field(default_factory=set)
    #: filesystem roots and (bucket, endpoint, region, driver) the contexts name
    roots: set[str] = field(default_factory=set)
    buckets: set[tuple[str, str | None, str | None, str]] = field(default_factory=set)


def offload_references(store: Any) -> OffloadRefs:
    """Every offload context of every managed ledger; raises when one does not decode
    (its references are unknown: no offload can be judged)."""
    from pulsarctl_py.stores.metadata import require_topic_metadata
    from pulsarctl_py.stores.metadata.managed_ledgers import decode_ml_info, iter_managed_ledgers
    from pulsarctl_py.stores.tiered.filesystem import offload_uuid

    require_topic_metadata(store)
    refs = OffloadRefs()
    for folder in iter_managed_ledgers(store):
        for ref in folder:
            node = store.get(ref.path)
            if node is None:  # deleted while listed: it references nothing any more
                continue
            info, error = decode_ml_info(node.data)
            if info is None:
                raise DataError(
                    f"managed ledger {ref.name} does not decode ({error}): the offloads it "
                    "references are unknown, so no offload is judged an orphan"
                )
            refs.managed_ledgers.add(ref.name)
            for li in info.message.ledgerInfo:
                if not (li.HasField("offloadContext") and li.offloadContext.HasField("uidMsb")):
                    continue
                ctx = li.offloadContext
                uid = offload_uuid(ctx.uidMsb, ctx.uidLsb)
                if ctx.complete:
                    refs.complete.add((uid, li.ledgerId))
                else:
                    refs.incomplete[(uid, li.ledgerId)] = (ref.name, ctx.bookkeeperDeleted)
                props = {p.key: p.value for p in ctx.driverMetadata.properties}
                driver = ctx.driverMetadata.name
                if driver.lower() == "filesystem":
                    if props.get("storageBasePath"):
                        refs.roots.add(props["storageBasePath"])
                elif props.get("bucket"):
                    refs.buckets.add(
                        (
                            props["bucket"],
                            props.get("serviceEndpoint") or None,
                            props.get("region") or None,
                            driver,
                        )
                    )
    return refs
