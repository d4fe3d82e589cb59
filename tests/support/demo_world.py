"""Helpers for tests that write into a fresh demo data directory: the demo, its store
flags, and a process holding a bookie's RocksDB lock (as a running bookie does)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from pulsarctl_py.demo import create_demo


def make_demo(tmp_path: Path) -> Path:
    root = tmp_path / "demo"
    create_demo(root)
    return root


def demo_flags(root: Path) -> list[str]:
    return [
        "--metadata-url",
        f"rocksdb://{root / 'metadata'}",
        "--bookie-dir",
        str(root / "bookkeeper"),
    ]


@contextlib.contextmanager
def holding_lock(lock: Path) -> Iterator[None]:
    """Another process holds ``lock`` (a RocksDB LOCK file) until the block ends."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import fcntl, os, sys
                fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)
                fcntl.lockf(fd, fcntl.LOCK_EX)
                print("locked", flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
