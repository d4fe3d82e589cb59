"""The distribution installs one import name, pulsarctl_py, and generated code is fresh."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_has_only_pulsarctl_py_at_top_level(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("pulsarctl_py", "commands", "decoders", "proto"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = out.glob("ledgerctl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"pulsarctl_py"}
    # every Python module of the source tree is in the wheel (a package left out of
    # pyproject's list installs, then fails at its first import)
    folders = {
        "pulsarctl_py": "",
        "commands": "commands/",
        "decoders": "decoders/",
        "proto": "proto/",
    }
    for folder, prefix in folders.items():
        for module in sorted((src / folder).rglob("*.py")):
            rel = module.relative_to(src / folder).as_posix()
            assert f"pulsarctl_py/{prefix}{rel}" in names, f"{folder}/{rel} is not in the wheel"
    assert "pulsarctl_py/proto/pulsar_api_pb2.py" in names
    # every file the demo is built from (entries, schema storage, provenance) is installed
    entries = src / "pulsarctl_py" / "demo" / "entries"
    for data in sorted(p for p in entries.rglob("*") if p.is_file()):
        rel = data.relative_to(entries).as_posix()
        assert f"pulsarctl_py/demo/entries/{rel}" in names, (
            f"demo entries/{rel} is not in the wheel"
        )
    assert not any(n.startswith(("tests/", "bench/", "docs/", "scripts/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "ledgerctl = pulsarctl_py.cli:run" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_generated_protobuf_modules_are_fresh() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "protogen.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_missing_required_field_is_reported_not_raised() -> None:
    from pulsarctl_py.decoders import decode_entry
    from pulsarctl_py.decoders.pulsar import build_entry
    from pulsarctl_py.proto import pulsar_api_pb2 as api

    md = api.MessageMetadata(producer_name="p")  # sequence_id and publish_time missing
    entry = decode_entry(build_entry(md, b"value"))
    assert entry.messages[0].value == b"value"
    (problem,) = entry.problems
    assert problem.layer == "message-metadata"
    assert "sequence_id" in problem.message and "publish_time" in problem.message
