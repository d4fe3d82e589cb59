"""bench/decode.py runs and prints the report's keys (a smoke test: no speed is checked)."""

from __future__ import annotations

from tests.support.cli_helpers import run_bench


def test_decode_bench_quick_prints_the_report() -> None:
    report = run_bench("decode.py", "--quick", timeout=300)
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
