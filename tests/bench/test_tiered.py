"""bench/tiered.py runs on the session sandbox and prints its report (a smoke test: no
speed is checked; both sides read every entry of the same ledgers, and ``seek --time`` on
the offloaded ledgers answers as on the bookies from no more entries read)."""

from __future__ import annotations

from typing import Any

from tests.support.cli_helpers import run_bench

TARGETS = {"before_first", "start", "middle", "end", "after_last"}


def test_tiered_bench_prints_the_report(offload_sandbox: Any) -> None:
    report = run_bench(
        "tiered.py",
        "--sandbox",
        str(offload_sandbox.dir),
        "--entries",
        "50",
        "--runs",
        "1",
        timeout=300,
    )
    assert report["benchmark"] == "tiered" and report["entries"] == 50
    assert set(report["results"]) == {"filesystem", "s3"}
    for kind, result in report["results"].items():
        assert result["bookies"]["entries"] == result["tiered"]["entries"] == 50, kind
        assert len(result["ledgers"]) == 2, kind
        assert result["tiered"]["entries_per_s"]["median"] > 0
        assert result["tiered_over_bookies"] > 0
        seek = result["seek"]
        assert set(seek["targets"]) == TARGETS, kind
        for name, target in seek["targets"].items():
            for side in ("bookies", "tiered"):
                assert target[side]["entries_read"] > 0, (kind, name, side)
            # the S3 objects' GETs are counted: on S3 only, after the offload
            assert target["bookies"]["s3_gets"] == 0, (kind, name)
            assert (target["tiered"]["s3_gets"] > 0) == (kind == "s3"), (kind, name, target)
            assert target["tiered"]["entries_read"] <= target["bookies"]["entries_read"], (
                kind,
                name,
                target,
            )
        # the first entry and past the last: the seek answered, on both ledgers' ends
        assert seek["targets"]["start"]["position"] == f"{result['ledgers'][0]}:0", kind
        assert seek["targets"]["after_last"]["position"] is None, kind
        assert seek["reads_not_more"] is True and seek["same_answers"] is True, (kind, seek)
