"""``verify -o openmetrics``: the run as OpenMetrics text for node exporter's textfile
collector, checked with prometheus_client's OpenMetrics parser (strict: ``# EOF``, one
block per family, escaped labels), against ``verify -o json`` of the same store; exit codes
as for verify; a run that stops on an error still writes its text, with success 0."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.cli_helpers import run
from tests.support.demo_env import demo, demo_root, isolate  # noqa: F401 (fixtures)


def parse(text: str) -> dict[str, Any]:
    """Every family by name (the parser raises on any text that is not OpenMetrics)."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    (found,) = [s.value for s in families[name].samples if s.labels == labels]
    return found


def test_a_run_is_valid_openmetrics_with_verifys_counts(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
) -> None:
    result = run(capsys, "verify", "--all", "-o", "openmetrics")
    assert result.code == 0, result.err
    assert result.out.endswith("# EOF\n")
    families = parse(result.out)
    doc = run(capsys, "verify", "--all", "-o", "json").json()
    summary = doc["summary"]
    assert value(families, "ledgerctl_verify_success") == 1
    assert value(families, "ledgerctl_verify_ok") == 1
    for severity, key in (("error", "errors"), ("warning", "warnings"), ("info", "info")):
        assert value(families, "ledgerctl_verify_findings", severity=severity) == summary[key]
    for name in ("topics", "ledgers", "entries", "payload_bytes"):
        assert value(families, f"ledgerctl_verify_{name}") == summary[name] > 0
    # findings per topic, severity and check: those of the JSON, counted
    counted = Counter((f["topic"], f["severity"], f["check"]) for f in doc["findings"])
    assert counted  # the demo has a warning (seek-times' timestamps go back)
    got = {
        (s.labels.get("topic"), s.labels["severity"], s.labels["check"]): s.value
        for s in families["ledgerctl_verify_topic_findings"].samples
    }
    assert got == dict(counted)
    # per topic: every topic verify checked, and they add up to the run's totals
    for name, total in (("ledgers", "ledgers"), ("entries", "entries")):
        samples = families[f"ledgerctl_verify_topic_{name}"].samples
        assert len(samples) == summary["topics"]
        assert sum(s.value for s in samples) == summary[total]
    assert families["ledgerctl_verify_topic_payload_bytes"].unit == "bytes"
    assert families["ledgerctl_verify_run_duration_seconds"].unit == "seconds"
    assert value(families, "ledgerctl_verify_timestamp_seconds") > 1.7e9


def test_one_topic_and_an_error_exit_1(
    capsys: pytest.CaptureFixture[str],
    demo_root: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.stores.metadata import open_metadata_store

    root = tmp_path / "demo"
    shutil.copytree(demo_root, root)
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(root)
    with open_metadata_store(f"rocksdb://{root / 'metadata'}", read_only=False) as store:
        store.delete(lm.ledger_path(5))  # a ledger of `plain`
    result = run(capsys, "verify", "plain", "-o", "openmetrics")
    assert result.code == 1, result.err
    families = parse(result.out)
    assert value(families, "ledgerctl_verify_success") == 1
    assert value(families, "ledgerctl_verify_ok") == 0
    topic = "persistent://public/default/plain"
    errors = [
        s
        for s in families["ledgerctl_verify_topic_findings"].samples
        if s.labels["severity"] == "error"
    ]
    assert errors and all(s.labels["topic"] == topic for s in errors)
    assert [s.labels for s in families["ledgerctl_verify_topic_ledgers"].samples] == [
        {"topic": topic}
    ]


def test_a_run_that_cannot_start_says_so_in_the_text_too(
    capsys: pytest.CaptureFixture[str],
    demo: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    result = run(
        capsys, "verify", "--all", "-o", "openmetrics", "--metadata-url", f"rocksdb://{tmp_path}/x"
    )
    assert result.code == 3
    assert result.err.startswith("ledgerctl: error:")
    families = parse(result.out)
    assert value(families, "ledgerctl_verify_success") == 0
    assert value(families, "ledgerctl_verify_ok") == 0


@given(st.text(min_size=1, max_size=40), st.sampled_from(["error", "warning", "info"]))
def test_any_topic_name_comes_back_from_the_parser_as_it_was(topic: str, severity: str) -> None:
    from pulsarctl_py.verify.core import Finding, VerifyStats
    from pulsarctl_py.verify.metrics import FindingTally, openmetrics

    stats = VerifyStats()
    stats.per_topic[topic] = [1, 2, 3]
    tally = FindingTally()
    for _ in tally.take([Finding(severity, "some-check", topic, None, None, "m")]):
        pass
    families = parse(openmetrics(stats, tally, success=True, duration_s=0.5, timestamp_s=1.0))
    (sample,) = families["ledgerctl_verify_topic_findings"].samples
    assert sample.labels == {"topic": topic, "severity": severity, "check": "some-check"}
    assert value(families, "ledgerctl_verify_topic_payload_bytes", topic=topic) == 3
