"""Decode entries given as files, standard input or shipped samples (`ledgerctl decode`).

Inputs are read one at a time, as they are decoded, and every read is capped: memory is
bounded by the largest input (plus the chunks of a message still being joined), never by
their number or by what their bytes claim.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pulsarctl_py.decoders import DecodeOptions, Entry, decode_entries
from pulsarctl_py.decoders.textdump import read_entry

from .errors import LedgerctlError


def max_input() -> int:
    """The most bytes one input may hold: an entry is at most a bookie frame (the maximum
    message size plus its padding), and its text hex dump about 4.5 times that."""
    from pulsarctl_py.decoders.limits import max_input

    return max_input()


@dataclass(slots=True)
class Source:
    """One entry to decode: where it came from and its bytes."""

    label: str
    data: bytes


def samples() -> list[str]:
    """Names of the sample entries shipped with ledgerctl."""
    folder = resources.files("pulsarctl_py") / "samples"
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".bin"))


def read_sample(name: str) -> Source:
    names = samples()
    if name not in names:
        raise LedgerctlError(f"no sample named {name!r}; samples: {', '.join(names)}")
    data = (resources.files("pulsarctl_py") / "samples" / f"{name}.bin").read_bytes()
    return Source(f"sample:{name}", data)


def read_capped(path: str | Path, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of a file (a device such as /dev/zero, a FIFO or a pipe
    included), or an error (pulsarctl_py.infile)."""
    from pulsarctl_py.infile import read_small

    return read_small(path, limit, what)


def check_readable(path: str) -> None:
    """Fail early (before any output) on an input that cannot be opened."""
    if path == "-":
        if sys.stdin.isatty():
            raise LedgerctlError("reading an entry from standard input, but it is a terminal")
        return
    from pulsarctl_py.infile import check_openable

    check_openable(path, "input")


def read_source(path: str, fmt: str = "auto") -> Source:
    """Read one input: a file path, or '-' for standard input."""
    if path == "-":
        if sys.stdin.isatty():
            raise LedgerctlError("reading an entry from standard input, but it is a terminal")
        limit = max_input()
        raw = sys.stdin.buffer.read(limit + 1)
        label = "<stdin>"
        if len(raw) > limit:
            raise LedgerctlError(f"{label}: larger than {limit} bytes, not one entry")
    else:
        label = path
        try:
            raw = read_capped(path, max_input(), "input")
        except LedgerctlError as exc:
            more = ", not one entry" if "larger" in str(exc) else ""
            raise type(exc)(f"{exc}{more}") from None
    if not raw:
        raise LedgerctlError(f"{label}: empty input, no entry to decode")
    try:
        return Source(label, read_entry(raw, fmt))
    except LedgerctlError as exc:
        raise LedgerctlError(f"{label}: {exc}") from None


def iter_sources(paths: Iterable[str], fmt: str = "auto") -> Iterator[Source]:
    """The inputs, each read only when the one before it was decoded."""
    for path in paths:
        yield read_source(path, fmt)


def decode_sources(
    sources: Iterable[Source], options: DecodeOptions
) -> Iterator[tuple[str, Entry]]:
    """Decode inputs in the order given, joining chunked messages across them.

    A generator: each input is read, decoded and handed out before the next is read.
    """
    labels: list[str] = []

    def data() -> Iterator[tuple[bytes, None]]:
        for s in sources:
            labels.append(s.label)
            yield s.data, None

    for entry in decode_entries(data(), options):
        yield labels.pop(0), entry
