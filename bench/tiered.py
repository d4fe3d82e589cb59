"""Offloaded ledgers against bookies: entries/s reading the same entries from each, one run.

On the sandbox (``scripts/sandbox up DIR --offload``: a real Pulsar 4.0.7 broker with the
filesystem and jcloud offloaders, a moto S3 server on loopback), for each offloader (the
filesystem one with Pulsar's shipped BLOCK profile in ``public/default``, the ``S3`` driver
in ``public/offload-s3``): the official client produces ``--entries`` unbatched 1 KiB
messages into a topic of its own; the topic is unloaded (its ledger closed); ledgerctl reads
the ledger from the running bookies (the in-house bookie client, every digest verified);
the broker offloads it (admin API) and deletes the BookKeeper copy; ledgerctl reads the same
entries from tiered storage (the MapFile through its index; the S3 objects by ranged GETs).
Every entry read is decoded as the broker wrote it with its checksums verified (bookies:
the BookKeeper digest and Pulsar's CRC32C; tiered: Pulsar's CRC32C), so both sides do the
same work past the read. ``--runs`` reads of each side; entries/s min/median/max, CPU
seconds of this process. JSON on stdout.

    python bench/tiered.py --sandbox DIR [--entries 20000] [--runs 3]

A sandbox DIR that does not exist is made (``up --offload``) and taken down after; one
that runs is used as it is and left running.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from _machine import machine  # bench/ is on sys.path when a bench script runs
from _sandbox import sandbox as _sandbox

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.fixtures.sandbox: the sandbox's admin calls

from pulsarctl_py.decoders.entry import DecodeOptions, decode_entry  # noqa: E402
from pulsarctl_py.stores.live import ClientOptions, LiveBookieStore  # noqa: E402
from pulsarctl_py.stores.metadata import open_metadata_store  # noqa: E402
from pulsarctl_py.stores.tiered.filesystem import (  # noqa: E402
    MapFileLedger,
    decode_options,
    ledger_directory,
    local_path,
    offload_uuid,
)
from pulsarctl_py.stores.tiered.s3 import open_ledger  # noqa: E402

KINDS = {"filesystem": "public/default", "s3": "public/offload-s3"}
PAYLOAD = 1024


def _produce(box: Any, topic: str, entries: int) -> None:
    rnd = random.Random(entries)
    client = box.client()
    try:
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        for i in range(entries):
            producer.send_async(rnd.randbytes(PAYLOAD), None, properties={"i": str(i)})
        producer.flush()
        producer.close()
    finally:
        client.close()


def _timed(read: Any) -> tuple[int, float, float]:
    cpu = time.process_time()
    start = time.perf_counter()
    count = read()
    return count, time.perf_counter() - start, time.process_time() - cpu


def read_bookies(box: Any, ledger_id: int, last: int) -> int:
    options = DecodeOptions()
    with (
        open_metadata_store(box.bookkeeper_metadata_url) as md,
        LiveBookieStore(md, ClientOptions()) as store,
    ):
        count = 0
        for stored in store.read_entries(ledger_id, 0, last):
            entry = decode_entry(stored.data, options, (ledger_id, stored.entry_id))
            if not entry.ok:
                raise SystemExit(f"bookie entry {ledger_id}:{stored.entry_id}: {entry.problems}")
            count += 1
        return count


def read_tiered(box: Any, topic: str, ledger_id: int) -> int:
    ctx = {li.ledgerId: li.offloadContext for li in box.ml_info(topic).ledgerInfo}[ledger_id]
    options = decode_options()
    count = 0
    if ctx.driverMetadata.name.lower() == "filesystem":
        props = {p.key: p.value for p in ctx.driverMetadata.properties}
        ml = topic.split("://", 1)[1].split("/", 2)
        name = f"{ml[0]}/{ml[1]}/persistent/{ml[2]}"
        uid = offload_uuid(ctx.uidMsb, ctx.uidLsb)
        directory = ledger_directory(local_path(props["storageBasePath"]), name, ledger_id, uid)
        with MapFileLedger(directory, ledger_id) as reader:
            for stored in reader.read_entries(0, None):
                entry = decode_entry(stored.data, options, (ledger_id, stored.entry_id))
                if not entry.ok:
                    raise SystemExit(f"offloaded entry {stored.entry_id}: {entry.problems}")
                count += 1
        return count
    ledger = open_ledger(ledger_id, ctx)
    for item in ledger.read_entries():
        entry = decode_entry(item.data, options, (ledger_id, item.entry_id))
        if not entry.ok:
            raise SystemExit(f"offloaded entry {item.entry_id}: {entry.problems}")
        count += 1
    return count


def _figures(runs: list[tuple[int, float, float]]) -> dict[str, Any]:
    rates = [n / wall for n, wall, _cpu in runs]
    return {
        "entries": runs[0][0],
        "entries_per_s": {
            "min": round(min(rates)),
            "median": round(statistics.median(rates)),
            "max": round(max(rates)),
        },
        "cpu_s_median": round(statistics.median(cpu for _n, _w, cpu in runs), 3),
        "wall_s_median": round(statistics.median(wall for _n, wall, _c in runs), 3),
    }


def _s3_env(box: Any) -> None:
    """The broker's S3 credentials (Pulsar's ACCESS_KEY_ID / ACCESS_KEY_SECRET)."""
    import os

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        os.environ.pop(name, None)
    os.environ.update(
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        AWS_EC2_METADATA_DISABLED="true",
    )
    path = Path(box.offload_info["s3"]["credentials_file"])
    for line in path.read_text().splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            os.environ[key] = value


def run(directory: Path, entries: int, runs: int) -> dict[str, Any]:
    from tests.support.fixtures.sandbox import Sandbox

    made = not (directory / "cluster.json").exists()
    if made:
        _sandbox("up", str(directory), "--offload")
    try:
        box = Sandbox(directory)
        _s3_env(box)
        results: dict[str, Any] = {}
        for kind, namespace in KINDS.items():
            topic = f"persistent://{namespace}/bench-tiered-{kind}-{uuid.uuid4().hex[:6]}"
            _produce(box, topic, entries)
            box.unload(topic)  # its ledgers closed
            # loaded again, the broker records the closed ledgers' counts (and opens an
            # empty one)
            stats = box.internal_stats(topic)
            lasts = {int(li["ledgerId"]): int(li.get("entries", 0)) - 1 for li in stats["ledgers"]}
            ledgers = [lid for lid, last in lasts.items() if last >= 0]

            def from_bookies(ids: list[int] = ledgers, ends: dict[int, int] = lasts) -> int:
                return sum(read_bookies(box, lid, ends[lid]) for lid in ids)

            def from_tiered(t: str = topic, ids: list[int] = ledgers) -> int:
                return sum(read_tiered(box, t, lid) for lid in ids)

            # the BookKeeper copy is read before the offload (which deletes it)
            bookies = [_timed(from_bookies) for _ in range(runs)]
            if bookies[0][0] != entries:
                raise SystemExit(f"{topic}: {bookies[0][0]} entries read from the bookies")
            closed = box.start_offload(topic)
            assert set(ledgers) <= set(closed), (ledgers, closed)
            box.wait_offloaded(topic, closed)
            tiered = [_timed(from_tiered) for _ in range(runs)]
            results[kind] = {
                "topic": topic,
                "ledgers": ledgers,
                "bookies": _figures(bookies),
                "tiered": _figures(tiered),
            }
            results[kind]["tiered_over_bookies"] = round(
                results[kind]["tiered"]["entries_per_s"]["median"]
                / results[kind]["bookies"]["entries_per_s"]["median"],
                2,
            )
            assert results[kind]["bookies"]["entries"] == results[kind]["tiered"]["entries"]
    finally:
        if made:
            _sandbox("down", str(directory))
    return {
        "benchmark": "tiered",
        "entries": entries,
        "payload_bytes": PAYLOAD,
        "runs": runs,
        "results": results,
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", type=Path, required=True)
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.sandbox.resolve(), args.entries, args.runs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
