"""bench/decode.py runs and prints the report's keys (a smoke test: no speed is checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "decode.py"


def test_decode_bench_quick_prints_the_report() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["benchmark"] == "decode"
    assert report["quick"] is True
    assert {"cpus", "cpu_model", "python"} <= report["machine"].keys()
    for name in ("small_messages", "large_values"):
        section = report[name]
        assert {"entries", "messages", "stored_bytes", "codec_mix"} <= section["inputs"].keys()
        assert set(section["inputs"]["codec_mix"]) == {"NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"}
        assert section["inputs"]["messages"] > 0
        assert {"messages_per_s", "mb_per_s"} <= section["full_decode"].keys()
        assert "mb_per_s" in section["raw_libraries"]
        assert "messages_per_s" in section["bare_parse"]
        assert section["reused_message_parse"]["messages_per_s"] > 0
        assert {
            "mb_per_s_vs_raw_libraries",
            "messages_per_s_vs_bare_parse",
            "messages_per_s_vs_reused_message_parse",
        } <= section["ratios"].keys()
    assert report["reported"]["small_messages_vs_reused_message_parse"]["measured"] > 0
    assert report["large_values"]["inputs"]["value_size"][0] >= 16 * 1024
    targets = report["targets"]
    for name in ("small_messages_vs_bare_parse", "large_values_vs_raw_libraries"):
        assert {"target", "measured", "pass"} <= targets[name].keys()
        assert isinstance(targets[name]["pass"], bool)
