"""Memory is bounded by the input, not by what it claims: the bombs of issue 7, measured.

Each case runs the installed ``ledgerctl`` as a subprocess and reads its peak RSS from
``wait4``; the bounds are generous (a busy 2-core CI machine) but far below what the
unbounded code used (2.66 GB for one 16 KB ZSTD entry, 3.97 GB for three).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders.codecs import compress
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support.cli_helpers import ledgerctl_script

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="peak RSS from wait4 on Linux")

MiB = 1 << 20
#: the peak RSS of a decode of one small entry is about 60 MiB (Python, protobuf, Rich)
BASELINE = 120 * MiB


def run_measured(*args: str, stdin: bytes | None = None) -> tuple[int, int, str]:
    """Exit code, peak RSS (bytes) and stderr of one ledgerctl run, in a fresh process."""
    code = (
        "import os, resource, subprocess, sys\n"
        "p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,"
        " stderr=subprocess.PIPE)\n"
        "data = sys.stdin.buffer.read()\n"
        "_, err = p.communicate(data if data else None)\n"
        "sys.stderr.buffer.write(err)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, ledgerctl_script(), *args],
        input=stdin or b"",
        capture_output=True,
        timeout=180,
    )
    rc, rss = proc.stdout.split()
    return int(rc), int(rss), proc.stderr.decode()


def zstd_bomb(size: int) -> bytes:
    """A tiny ZSTD entry whose payload inflates to ``size`` bytes (a repeated byte)."""
    payload = compress(api.ZSTD, bytes(size))
    md = api.MessageMetadata(
        producer_name="bomb",
        sequence_id=1,
        publish_time=1_700_000_000_000,
        compression=api.ZSTD,
        uncompressed_size=size,
    )
    return build_entry(md, payload)


def test_zstd_bomb_is_refused_without_allocating(tmp_path: Path) -> None:
    path = tmp_path / "bomb.bin"
    path.write_bytes(zstd_bomb(1 << 30))  # 1 GiB of zeros in a few KiB
    assert path.stat().st_size < 64 * 1024
    code, rss, err = run_measured("decode", "-o", "json", str(path))
    assert code == 1, err
    assert "exceeds the limit" in err
    assert rss < BASELINE, f"peak RSS {rss / MiB:.0f} MiB"


def test_three_bombs_in_one_call_stay_bounded(tmp_path: Path) -> None:
    paths = []
    for i in range(3):
        path = tmp_path / f"bomb{i}.bin"
        path.write_bytes(zstd_bomb(400 * MiB))
        paths.append(str(path))
    code, rss, err = run_measured("decode", "-o", "json", *paths)
    assert code == 1, err
    assert rss < BASELINE, f"peak RSS {rss / MiB:.0f} MiB"


def test_bomb_under_the_limit_decodes_within_a_few_copies(tmp_path: Path) -> None:
    size = 5 * MiB  # just under the default maxMessageSize + padding
    path = tmp_path / "big.bin"
    path.write_bytes(zstd_bomb(size))
    code, rss, err = run_measured("decode", "-o", "json", str(path))
    assert code == 0, err
    # the value, its base64 and the JSON text: a handful of copies, not hundreds
    assert rss < BASELINE + 8 * size, f"peak RSS {rss / MiB:.0f} MiB"
    over = run_measured("decode", "-o", "json", "--max-message-size", str(size - 1), str(path))
    assert over[0] == 1 and "exceeds the limit" in over[2]


def test_many_inputs_are_streamed_not_buffered(tmp_path: Path) -> None:
    size = 4 * MiB
    md = api.MessageMetadata(producer_name="big", sequence_id=1, publish_time=1)
    path = tmp_path / "four-mib.bin"
    path.write_bytes(build_entry(md, os.urandom(size)))
    one = run_measured("decode", "-o", "json", str(path))
    many = run_measured("decode", "-o", "json", *[str(path)] * 12)
    assert one[0] == 0 and many[0] == 0, many[2]
    # twelve 4 MiB entries held at once would add about 12 x 13 MiB; streamed they add ~0
    assert many[1] < one[1] + 6 * size, (one[1] / MiB, many[1] / MiB)


def test_dev_zero_is_refused_quickly() -> None:
    started = time.monotonic()
    code, rss, err = run_measured("decode", "/dev/zero")
    assert code == 2 and "larger than" in err, err
    assert rss < BASELINE + 80 * MiB
    code, rss, err = run_measured(
        "decode", "--password-file", "/dev/zero", "--sample", "nonbatched-plain"
    )
    assert code == 2 and "larger than" in err, err
    code, _, err = run_measured("decode", "--private-key", "/dev/zero", "--sample", "encrypted")
    assert code == 2 and "larger than" in err, err
    assert time.monotonic() - started < 60


def _outcome(fn: object, *args: object) -> tuple[str, object]:
    try:
        return "ok", bytes(fn(*args))  # type: ignore[operator]
    except Exception as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=300, deadline=None)
@given(
    number=st.sampled_from([0, 1, 1, 1, 2, 3, 4, 9]),
    plain=st.binary(max_size=600),
    shape=st.sampled_from(["good", "cut", "flip", "junk"]),
    size_delta=st.sampled_from([0, 0, 0, -1, 1, 10**6]),
    limit=st.sampled_from([64, 512, 5 * 1024 * 1024]),
    data=st.data(),
)
def test_checking_decompress_answers_as_decompress(
    number: int, plain: bytes, shape: str, size_delta: int, limit: int, data: st.DataObject
) -> None:
    """verify's per-payload decompress (LZ4 in one frame) gives the bytes or the error
    decompress gives, for every codec, on good, cut, flipped and random bytes, with sizes
    off by one and past the limit."""
    from pulsarctl_py.decoders.codecs import checking_decompress, decompress

    packed = compress(number, plain) if number in (0, 1, 2, 3, 4) else plain
    if shape == "cut":
        packed = packed[: max(0, len(packed) - 3)]
    elif shape == "flip" and packed:
        at = data.draw(st.integers(0, len(packed) - 1))
        packed = packed[:at] + bytes([packed[at] ^ 0x5A]) + packed[at + 1 :]
    elif shape == "junk":
        packed = data.draw(st.binary(max_size=200))
    size = max(0, len(plain) + size_delta)
    assert _outcome(checking_decompress(), number, packed, size, limit) == _outcome(
        decompress, number, packed, size, limit
    )
