"""The native module built with AddressSanitizer and UBSan and fuzzed against the Python
path: a short run of ``scripts/fuzz_long.py --native --sanitize`` (the long run and its
figures: docs/hostile-inputs.md, "Native fuzzing").

The run builds the module's C units (and _speedups_mac.c, the MAC digest by OpenSSL) with
``-fsanitize=address,undefined`` (gcc; libasan8 and libubsan1 come with Debian's gcc), once
per state of the C sources, into a cache outside the repository
(``~/.cache/ledgerctl/ledgerctl-asan-<hash of the sources>``), loads that build in a
subprocess with libasan preloaded, and calls every native function on generated and
mutated input (tests/support/fuzz_native.py) until each has had 2,000 calls on generated data (a
few seconds; the long runs are docs/hostile-inputs.md's): no sanitizer report (any stops
the run with a non-zero exit), no answer that differs from the Python path's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pulsarctl_py.decoders.speedups import native

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = [
    "bind",
    "compact_keep",
    "compact_offer",
    "compact_rebuild",
    "crc32c",
    "entry_doc",
    "entry_lines",
    "item_slots",
    "key_table",
    "log_slots",
    "mac_available",
    "payload_items",
    "payload_records",
    "payload_slots",
    "record_heads",
    "scan_heads",
    "scan_slots",
    "split_batch",
    "v3_read_replies",
    "verify_heads",
    "verify_records",
    "verify_slots",
]


@pytest.mark.slow
@pytest.mark.skipif(native is None, reason="native module not built")
def test_native_module_under_asan_and_ubsan_answers_as_python() -> None:
    command = [sys.executable, str(ROOT / "scripts" / "fuzz_long.py"), "--native", "--sanitize"]
    # every function to 2,000 calls (the bound below), 120 s at most on a loaded machine
    command += ["--seconds", "120", "--calls", "2000", "--seed", "11"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    report_text = done.stderr[-6000:]
    assert done.returncode == 0, report_text
    assert "runtime error" not in done.stderr and "Sanitizer" not in done.stderr, report_text
    report = json.loads(done.stdout)
    assert "ledgerctl-asan-" in report["module"]  # the sanitized build, not the installed one
    functions = FUNCTIONS
    if native.mac_available():  # the MAC module built: sanitized too, and fuzzed
        assert "ledgerctl-asan-" in report["mac_module"]
    assert report["sanitizers"] == ["libasan", "libubsan"]
    assert report["differences"] == []
    assert sorted(f for f in report["calls"] if "(" not in f) == functions
    assert min(report["calls"][f] for f in functions) >= 2000, report["calls"]
