"""The broker as the oracle: helpers for the tests that compare ledgerctl with the real
broker of ``scripts/sandbox`` (compaction, last message id, reset by time, repairs).

Topics of these tests live in the namespace ``public/oracle`` (infinite retention, so that
the broker never trims a ledger a comparison reads), each test with topics of its own.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fixtures.sandbox import Sandbox, SandboxFailed, sandbox_script

NAMESPACE = "public/oracle"
#: a suffix for this run's topic names: a sandbox reused across runs gets new topics
RUN = uuid.uuid4().hex[:6]


def namespace(box: Sandbox) -> str:
    """Create the oracle namespace once (retention unlimited: no ledger is trimmed)."""
    box.admin("PUT", f"/namespaces/{NAMESPACE}", ok=(204, 409))
    box.admin(
        "POST",
        f"/namespaces/{NAMESPACE}/retention",
        {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    return NAMESPACE


def topic_name(name: str) -> str:
    """This run's topic ``name`` in the oracle namespace (persistent://...)."""
    return f"persistent://{NAMESPACE}/{name}-{RUN}"


def short(name: str) -> str:
    """This run's topic ``name`` as ledgerctl takes it (tenant/namespace/topic)."""
    return f"{NAMESPACE}/{name}-{RUN}"


@contextmanager
def ledgerctl_env(box: Sandbox) -> Iterator[None]:
    """In-process library calls (compact, seek, ...) pointed at the sandbox."""
    keys = ("LEDGERCTL_METADATA_URL", "LEDGERCTL_BOOKKEEPER_METADATA_URL")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["LEDGERCTL_METADATA_URL"] = box.metadata_url
    os.environ["LEDGERCTL_BOOKKEEPER_METADATA_URL"] = box.bookkeeper_metadata_url
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: ledgerctl as a subprocess, from this interpreter's installation
LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]


def cli(box: Sandbox, *args: Any, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    """``ledgerctl ARGS`` as a subprocess pointed at the sandbox; its exit code one of ``ok``."""
    done = subprocess.run(
        [*LEDGERCTL, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=box.env(),
    )
    assert done.returncode in ok, f"ledgerctl {' '.join(map(str, args))}: {done.stderr}"
    return done


def run_ledgerctl(
    box: Sandbox, cwd: Path | None, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``ledgerctl ARGS`` as a subprocess pointed at the sandbox and its broker.conf
    (``LEDGERCTL_BROKER_CONF``), no stdin, in ``cwd`` (None: a new directory of its own,
    where the plans ``--apply`` saves by default land); whatever its exit code."""
    environment = box.env(LEDGERCTL_BROKER_CONF=box.state["broker"]["conf"])
    environment["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return subprocess.run(
        [*LEDGERCTL, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        stdin=subprocess.DEVNULL,
        cwd=cwd if cwd is not None else tempfile.mkdtemp(prefix="ledgerctl-sandbox-"),
    )


def plan_and_apply(box: Sandbox, tmp_path: Path, *args: Any) -> dict[str, Any]:
    """``ledgerctl ARGS --plan FILE`` then ``apply FILE``: the plan applied."""
    plan = tmp_path / f"plan-{time.monotonic_ns()}.json"
    cli(box, *args, "--plan", plan)
    # the topic is unloaded, as the runbooks say, but its namespace bundle stays owned (and
    # this broker's transaction and topic-policy readers take an unloaded bundle back at
    # once): apply refuses any owned bundle unless told the topic is off the broker
    cli(box, "apply", plan, "--force-owned")
    return json.loads(plan.read_text())


def oracle_client(box: Sandbox) -> Iterator[Any]:
    """The official client, the oracle namespace made (a module fixture's body:
    ``yield from oracle_client(sandbox)``)."""
    namespace(box)
    client = box.client()
    yield client
    client.close()


def receive_all(consumer: Any, first_ms: int = 5000, then_ms: int = 1000) -> list[bytes]:
    """Every value the consumer receives (each acknowledged) until nothing more comes for
    ``then_ms`` (``first_ms`` for the first)."""
    import pulsar

    out = []
    while True:
        try:
            msg = consumer.receive(then_ms if out else first_ms)
        except pulsar.Timeout:
            return out
        out.append(msg.data())
        consumer.acknowledge(msg)


def broker_compact(box: Sandbox, topic: str, timeout: float = 120) -> dict[str, Any]:
    """Trigger the broker's compaction (admin REST) and wait until it is done: the script's
    own wait (scripts/sandbox ``broker_compaction``, which asks again when the broker lost
    the compaction for a reason of its own); anything but SUCCESS fails."""
    script = sandbox_script()
    try:
        status = script.broker_compaction(
            lambda method, path: box.admin(method, path) or {},
            box.topic_path(topic) + "/compaction",
            timeout,
        )
    except script.SandboxError as exc:
        raise SandboxFailed(f"{topic}: {exc}") from None
    if status["status"] != "SUCCESS":
        raise SandboxFailed(f"the broker's compaction of {topic} failed: {status}")
    return status


@dataclass
class StoredCompaction:
    """A compacted ledger as the broker wrote it: metadata and each entry's framed bytes."""

    ledger_id: int
    metadata: Any
    entries: list[bytes]  # RawMessage framing: MessageIdData + headersAndPayload
    horizon: str  # the __compaction cursor's mark-delete position, as internalStats says


def stored_compaction(box: Sandbox, topic: str) -> StoredCompaction:
    """Read the broker's compacted ledger of ``topic`` back through ledgerctl's live reads."""
    from pulsarctl_py.decoders import bookkeeper
    from pulsarctl_py.ledgers import LedgerSource

    stats = box.internal_stats(topic)
    ledger_id = stats["compactedLedger"]["ledgerId"]
    horizon = stats["cursors"]["__compaction"]["markDeletePosition"]
    with ledgerctl_env(box), LedgerSource.open() as source:
        view = source.ledger(ledger_id)
        rows = []
        lac = view.lac
        if lac is not None and lac >= 0:
            for stored in source.raw_entries(view, 0, lac):
                data = bytes(stored.data)
                _layer, _header, at = bookkeeper.parse(
                    data, 0, len(data), view.digest_type, view.password
                )
                rows.append(data[at:])
    return StoredCompaction(ledger_id, view.metadata, rows, horizon)


def produce(
    client: Any, topic: str, messages: list[tuple[str | None, bytes]], **producer: Any
) -> list[tuple[int, int, int, int]]:
    """Send ``(key, value)`` messages (async, then flush); their message ids in order."""
    from tests.support.sandbox_world import _produce

    sent = _produce(client, topic, [(k, v, {}) for k, v in messages], **producer)
    return [s.message_id for s in sent]


def txn_spec(topic: str, transactions: list[tuple[str, list[tuple[str, bytes | None]]]]) -> dict:
    """A SandboxClient txn-produce spec: ``(end, [(key, value or None), ...])`` per
    transaction, ``end`` one of commit, abort, open."""
    return {
        "topic": topic,
        "timeout_ms": 3_600_000,
        "transactions": [
            {
                "end": end,
                "messages": [
                    {"key": k, "value": None if v is None else base64.b64encode(v).decode()}
                    for k, v in msgs
                ],
            }
            for end, msgs in transactions
        ],
    }


def framed_view(framed: list[bytes]) -> list[tuple]:
    """What a readCompacted reader gets from compacted entries: (ledger, entry, batch index,
    key, value, placeholder) rows, every layer decoded."""
    from pulsarctl_py.decoders import DecodeOptions, Outer, decode_entry

    rows = []
    for data in framed:
        entry = decode_entry(data, DecodeOptions(outer=Outer.COMPACTED))
        ledger, entry_id = entry.message_position
        if not entry.messages:
            rows.append((ledger, entry_id, -1, None, bytes(entry.payload or b""), False))
        for m in entry.messages:
            rows.append((ledger, entry_id, m.batch_index, m.key, bytes(m.value or b""), False))
        for index in entry.placeholders:
            rows.append((ledger, entry_id, index, None, b"", True))
    return sorted(rows, key=lambda r: r[:3])


def decompressed(framed: list[bytes]) -> list[tuple[bytes, bytes, bytes, bytes]]:
    """Compacted entries with their payload decompressed: (MessageIdData, the 0x0e02
    prefix, MessageMetadata, the uncompressed payload) as stored, each one byte for byte.
    Two entries equal here differ at most in how the same payload was compressed (the
    broker's LZ4 and ZSTD encoders are aircompressor's, whose output differs from liblz4's
    and libzstd's) and so in the checksum over it."""
    from pulsarctl_py.decoders import compacted
    from pulsarctl_py.decoders.codecs import decompress
    from pulsarctl_py.decoders.pulsar import MetadataLayer, parse_prefixes

    rows = []
    for data in framed:
        mv = memoryview(data)
        problems: list = []
        _layer, _msg_id, pos, end = compacted.parse(mv, 0, len(mv), problems)
        id_bytes = bytes(mv[4 : 4 + int.from_bytes(data[:4], "big")])
        start = pos
        layers, _prefix, pos = parse_prefixes(mv, pos, end, problems, False)
        bem = b"".join(bytes(la.raw) for la in layers if la.name == "broker-entry-metadata")
        md_start = pos
        _layer, md, pos = MetadataLayer.parse(mv, pos, end, problems)
        metadata = bytes(mv[md_start:pos])
        payload = bytes(mv[pos:end])
        if md.compression:
            payload = decompress(md.compression, payload, md.uncompressed_size)
        assert start <= md_start
        rows.append((id_bytes, bem, metadata, payload))
    return rows


def tool_compact(box: Sandbox, topic: str, broker_conf: Any, timeout: float = 300) -> None:
    """Compact ``topic`` with Pulsar's own ``CompactorTool`` (``pulsar compact-topic``): the
    broker's ``PublishingOrderCompactor`` in a JVM of its own, built from the
    ServiceConfiguration of ``broker_conf``, reading through the running broker's
    ``__compaction`` subscription and committing there as the broker's compaction does.
    What a broker started with that configuration computes, without restarting the
    sandbox's broker (about a minute)."""
    import subprocess

    from tests.support.fixtures.sandbox import java_binary, sandbox_classpath

    done = subprocess.run(
        [
            java_binary(),
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # a short-lived JVM: C1 only starts faster
            "-cp",
            sandbox_classpath(),
            f"-Dlog4j2.configurationFile={box.dir / 'conf' / 'log4j2.xml'}",
            "org.apache.pulsar.compaction.CompactorTool",
            "--broker-conf",
            str(broker_conf),
            "--topic",
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0 or "complete. Compacted to ledger" not in done.stdout:
        raise SandboxFailed(
            f"CompactorTool of {topic} failed ({done.returncode}): "
            f"{(done.stdout + done.stderr)[-3000:]}"
        )
