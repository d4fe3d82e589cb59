"""Offloaded ledgers against bookies: entries/s reading the same entries from each, one run.

On the sandbox (``scripts/sandbox up DIR --offload``: a real Pulsar 4.0.7 broker with the
filesystem and jcloud offloaders, a moto S3 server on loopback), for each offloader (the
filesystem one with Pulsar's shipped BLOCK profile in ``public/default``, the ``S3`` driver
in ``public/offload-s3``): the official client produces ``--entries`` unbatched 1 KiB
messages into a topic of its own, in two halves, the topic unloaded after each (two closed
ledgers); ledgerctl reads them from the running bookies (the in-house bookie client, every
digest verified); the broker offloads them (admin API) and deletes the BookKeeper copies;
ledgerctl reads the same entries from tiered storage (the MapFile through its index; the S3
objects by ranged GETs).
Every entry read is decoded as the broker wrote it with its checksums verified (bookies:
the BookKeeper digest and Pulsar's CRC32C; tiered: Pulsar's CRC32C), so both sides do the
same work past the read. ``--runs`` reads of each side; entries/s min/median/max, CPU
seconds of this process.

``seek --time`` on the same topic, the verb itself run in this process (``seek -o json``,
the broker rule with its close-time narrowing), at five times: before the first entry, the
first entry's, the middle one's, the last one's and after the last: once with the ledgers on
the bookies, again once they are offloaded and their BookKeeper copies deleted. Each seek's
entries read (the verb's ``entries_read``: entry heads decoded; a tiered read may pass over
other records of the same block or index interval to reach one), its answer and its wall
time (median of ``--runs``, after one untimed seek that loads the verb's code), and the
ranged GETs of S3 objects it made with their bytes (``s3_gets``, ``s3_bytes``: the
jcloud reader's reads, counted around ``S3Objects.read``; 0 for bookies and files);
``reads_not_more`` is true when no tiered seek read more entries than the same seek on the
bookies, ``same_answers`` when every tiered seek answered the same position. JSON on stdout.

    python bench/tiered.py --sandbox DIR [--entries 20000] [--runs 3]

A sandbox DIR that does not exist is made (``up --offload``) and taken down after; one
that runs is used as it is and left running.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _machine import machine  # bench/ is on sys.path when a bench script runs
from _sandbox import sandbox as _sandbox

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.fixtures.sandbox: the sandbox's admin calls

from pulsarctl_py.decoders.entry import DecodeOptions, Entry, decode_entry  # noqa: E402
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


def _produce(box: Any, topic: str, entries: int, seed: int) -> None:
    rnd = random.Random(seed)
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


def _bookie_entries(box: Any, ledger_id: int, last: int) -> Iterator[Entry]:
    options = DecodeOptions()
    with (
        open_metadata_store(box.bookkeeper_metadata_url) as md,
        LiveBookieStore(md, ClientOptions()) as store,
    ):
        for stored in store.read_entries(ledger_id, 0, last):
            entry = decode_entry(stored.data, options, (ledger_id, stored.entry_id))
            if not entry.ok:
                raise SystemExit(f"bookie entry {ledger_id}:{stored.entry_id}: {entry.problems}")
            yield entry


def read_bookies(box: Any, ledger_id: int, last: int) -> int:
    return sum(1 for _entry in _bookie_entries(box, ledger_id, last))


def seek_targets(box: Any, ledgers: list[int], lasts: dict[int, int]) -> dict[str, int]:
    """Times to seek: before the first entry, the first, middle and last entries' own
    timestamps (what the broker rule compares: the broker's entry timestamp, else the
    publish time) and after the last."""
    times = [
        int(entry.entry_timestamp)
        for lid in ledgers
        for entry in _bookie_entries(box, lid, lasts[lid])
        if entry.entry_timestamp is not None
    ]
    return {
        "before_first": times[0] - 1,
        "start": times[0],
        "middle": times[len(times) // 2],
        "end": times[-1],
        "after_last": times[-1] + 1,
    }


#: ranged GETs of S3 objects and their bytes, counted by :func:`_count_s3_reads`
S3_READS = {"requests": 0, "bytes": 0}


def _count_s3_reads() -> None:
    """Count every ranged GET the jcloud reader makes (S3Objects.read) in S3_READS."""
    from pulsarctl_py.stores.tiered.s3 import S3Objects

    read = S3Objects.read

    def counted(self: S3Objects, key: str, start: int, length: int) -> bytes:
        data = read(self, key, start, length)
        S3_READS["requests"] += 1
        S3_READS["bytes"] += len(data)
        return data

    S3Objects.read = counted  # type: ignore[method-assign]


def seek(topic: str, at: int) -> tuple[dict[str, Any], float, dict[str, int]]:
    """``ledgerctl seek TOPIC --time AT -o json`` in this process: its answer, the wall
    seconds it took and the S3 GETs it made."""
    from pulsarctl_py.cli import main as ledgerctl

    out = io.StringIO()
    S3_READS.update(requests=0, bytes=0)
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = ledgerctl(["seek", topic.split("://", 1)[1], "--time", str(at), "-o", "json"])
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"seek {topic} --time {at}: exit {code}")
    return json.loads(out.getvalue()), wall, dict(S3_READS)


def seeks(topic: str, targets: dict[str, int], runs: int) -> dict[str, dict[str, Any]]:
    """Each target sought ``runs`` times: the answer, entries read and median wall ms."""
    out = {}
    for name, at in targets.items():
        answers = [seek(topic, at) for _ in range(runs)]
        first, _wall, gets = answers[0]
        if first["findings"] or first["warnings"]:
            raise SystemExit(f"seek {topic} --time {at}: {first['findings'] or first['warnings']}")
        out[name] = {
            "time": at,
            "position": first["position"],
            "end": first["end"],
            "entries_read": first["entries_read"],
            "s3_gets": gets["requests"],
            "s3_bytes": gets["bytes"],
            "wall_ms_median": round(1000 * statistics.median(w for _a, w, _g in answers), 1),
        }
    return out


def compare_seeks(
    bookies: dict[str, dict[str, Any]], tiered: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Per target, the entries each side read; whether tiered never read more, and
    whether both sides answered the same."""
    return {
        "targets": {
            name: {
                "time": bookies[name]["time"],
                "position": bookies[name]["position"],
                "bookies": bookies[name],
                "tiered": tiered[name],
            }
            for name in bookies
        },
        "reads_not_more": all(
            tiered[name]["entries_read"] <= bookies[name]["entries_read"] for name in bookies
        ),
        "same_answers": all(
            (tiered[name]["position"], tiered[name]["end"])
            == (bookies[name]["position"], bookies[name]["end"])
            for name in bookies
        ),
    }


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


def _environment(box: Any) -> None:
    """The sandbox's stores for the seek verb, nothing overriding where offloaded ledgers
    are, and the broker's S3 credentials (Pulsar's ACCESS_KEY_ID / ACCESS_KEY_SECRET)."""
    from tests.support.offload_world import OVERRIDES, s3_environment

    env: dict[str, str | None] = dict.fromkeys(OVERRIDES)
    env.update(s3_environment(box))
    env["LEDGERCTL_METADATA_URL"] = box.metadata_url
    env["LEDGERCTL_BOOKKEEPER_METADATA_URL"] = box.bookkeeper_metadata_url
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def run(directory: Path, entries: int, runs: int) -> dict[str, Any]:
    from tests.support.fixtures.sandbox import Sandbox

    made = not (directory / "cluster.json").exists()
    if made:
        _sandbox("up", str(directory), "--offload")
    try:
        box = Sandbox(directory)
        _environment(box)
        _count_s3_reads()
        results: dict[str, Any] = {}
        for kind, namespace in KINDS.items():
            topic = f"persistent://{namespace}/bench-tiered-{kind}-{uuid.uuid4().hex[:6]}"
            # two ledgers (the topic unloaded after each half), so that seeks cross one
            for part, count in enumerate((entries // 2, entries - entries // 2)):
                _produce(box, topic, count, seed=entries + part)
                box.unload(topic)  # its ledger closed
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
            targets = seek_targets(box, ledgers, lasts)
            seek(topic, targets["start"])  # untimed: the verb's imports loaded before timing
            sought_on_bookies = seeks(topic, targets, runs)
            closed = box.start_offload(topic)
            assert set(ledgers) <= set(closed), (ledgers, closed)
            box.wait_offloaded(topic, closed)
            tiered = [_timed(from_tiered) for _ in range(runs)]
            results[kind] = {
                "topic": topic,
                "ledgers": ledgers,
                "bookies": _figures(bookies),
                "tiered": _figures(tiered),
                "seek": compare_seeks(sought_on_bookies, seeks(topic, targets, runs)),
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
