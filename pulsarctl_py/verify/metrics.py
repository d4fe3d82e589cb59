"""``verify -o openmetrics``: a verify run as OpenMetrics text, for node exporter's textfile
collector (a scheduled health check writes it to ``*.prom`` atomically; docs/guide.md).

Grammar (OpenMetrics 1.0, https://prometheus.io/docs/specs/om/open_metrics_spec/)::

    exposition = family* "# EOF\\n"
    family     = "# HELP " name " " escaped-text "\\n"
                 "# TYPE " name " gauge\\n"
                 ["# UNIT " name " " unit "\\n"]      (name then ends in "_" unit)
                 sample*
    sample     = name ["{" label ("," label)* "}"] " " value "\\n"
    label      = label-name "=\\"" escaped-value "\\""

In label values ``\\``, ``"`` and a newline are escaped as ``\\\\``, ``\\"`` and ``\\n``; in HELP
text ``\\`` and a newline. Every family is a gauge: the values describe the last run, not a
running total. A family appears once, with all its samples together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pulsarctl_py.verify.core import SEVERITIES, Finding, VerifyStats

PREFIX = "ledgerctl_verify_"


def escape_label(value: str) -> str:
    """A label value as OpenMetrics writes it between double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


@dataclass(slots=True)
class FindingTally:
    """Findings counted by (topic, severity, check) as they stream by."""

    counts: Counter[tuple[str | None, str, str]] = field(default_factory=Counter)

    def take(self, findings: Iterable[Finding]) -> Iterator[Finding]:
        for finding in findings:
            self.counts[(finding.topic, finding.severity, finding.check)] += 1
            yield finding


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _family(
    name: str,
    help_text: str,
    samples: list[tuple[dict[str, str], float]],
    unit: str | None = None,
) -> list[str]:
    full = PREFIX + name
    lines = [f"# HELP {full} {escape_help(help_text)}", f"# TYPE {full} gauge"]
    if unit is not None:
        lines.append(f"# UNIT {full} {unit}")
    for labels, value in samples:
        text = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
        lines.append(f"{full}{{{text}}} {_number(value)}" if text else f"{full} {_number(value)}")
    return lines


def openmetrics(
    stats: VerifyStats,
    tally: FindingTally,
    *,
    success: bool,
    duration_s: float,
    timestamp_s: float,
) -> str:
    """The run as OpenMetrics text, ending in ``# EOF``. ``success``: the run went through
    (False: it stopped on an error; the counts are then those of the part it did)."""
    out: list[str] = []
    out += _family(
        "success",
        "1 when the verify run went through, 0 when it stopped on an error "
        "(a store unreachable, bad input); the other values are then partial.",
        [({}, 1 if success else 0)],
    )
    out += _family(
        "ok",
        "1 when the run went through and found no error, else 0 (verify's exit status 0).",
        [({}, 1 if success and stats.ok else 0)],
    )
    out += _family(
        "timestamp_seconds",
        "When the run ended (Unix time).",
        [({}, round(timestamp_s, 3))],
        "seconds",
    )
    out += _family(
        "run_duration_seconds",
        "How long the run took.",
        [({}, round(duration_s, 3))],
        "seconds",
    )
    out += _family(
        "findings",
        "Findings of the run by severity.",
        [({"severity": s}, stats.findings.get(s, 0)) for s in SEVERITIES],
    )
    out += _family(
        "topic_findings",
        "Findings by topic, severity and check id (no topic label: findings of no one "
        "topic, e.g. orphan ledgers).",
        [
            ({**({"topic": t} if t is not None else {}), "severity": sev, "check": check}, n)
            for (t, sev, check), n in sorted(
                tally.counts.items(), key=lambda kv: (kv[0][0] or "", kv[0][1], kv[0][2])
            )
        ],
    )
    out += _family("topics", "Topics checked.", [({}, stats.topics)])
    out += _family("ledgers", "Ledgers checked.", [({}, stats.ledgers)])
    out += _family("entries", "Entries read and checked.", [({}, stats.entries)])
    out += _family(
        "payload_bytes", "Payload bytes read and checked.", [({}, stats.payload_bytes)], "bytes"
    )
    out += _family(
        "unverified_entries",
        "Entries whose digest could not be verified (a MAC digest without the password).",
        [({}, stats.unverified)],
    )
    topics = sorted(stats.per_topic.items())
    out += _family(
        "topic_ledgers",
        "Ledgers of the topic checked.",
        [({"topic": t}, v[0]) for t, v in topics],
    )
    out += _family(
        "topic_entries",
        "Entries of the topic read and checked (0 without bookie storage).",
        [({"topic": t}, v[1]) for t, v in topics],
    )
    out += _family(
        "topic_payload_bytes",
        "Payload bytes of the topic read and checked.",
        [({"topic": t}, v[2]) for t, v in topics],
        "bytes",
    )
    out.append("# EOF")
    return "\n".join(out) + "\n"
