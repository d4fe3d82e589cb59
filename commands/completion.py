"""Shell completion of topic names (``ledgerctl --install-completion``): the topics of the
metadata store the command line (or the environment, or the nearest ledgerctl.toml) names."""

from __future__ import annotations

from typing import Any

#: at most this many candidates (a shell lists them all)
MAX_CANDIDATES = 1000
#: a completion must not hang the shell: an unreachable ZooKeeper gives no candidates
TIMEOUT_S = 3.0


def topic_names(store: Any) -> list[str]:
    """Every topic of ``store`` in the spellings commands take: the full name, the
    tenant/namespace/topic form, the bare name in public/default, and the base name of a
    partitioned topic."""
    from pulsarctl_py.stores.metadata import list_managed_ledgers

    names: set[str] = set()
    for ref in list_managed_ledgers(store):
        topics = [ref.topic]
        if ref.topic.partition_index >= 0 and ref.topic.partitioned_topic is not None:
            topics.append(ref.topic.partitioned_topic)
        for t in topics:
            full = t.full_name
            names.add(full)
            short = full.split("://", 1)[-1]
            names.add(short)
            if full.startswith("persistent://public/default/"):
                names.add(full[len("persistent://public/default/") :])
    return sorted(names)


def complete_topic(ctx: Any, incomplete: str) -> list[str]:
    """The topic names starting with ``incomplete``; nothing (never an error) when no
    store can be read."""
    try:
        from pulsarctl_py.stores.metadata import open_metadata_store
        from pulsarctl_py.stores.metadata.url import resolve_metadata_url

        url = resolve_metadata_url((ctx.params or {}).get("metadata_url") or None)
        store = open_metadata_store(url, timeout=TIMEOUT_S)
        try:
            names = topic_names(store)
        finally:
            store.close()
    except Exception:  # completion is a convenience: no store, no candidates
        return []
    return [n for n in names if n.startswith(incomplete)][:MAX_CANDIDATES]
