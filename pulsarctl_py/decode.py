"""Decode entries given as files, standard input or shipped samples (`ledgerctl decode`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pulsarctl_py.decoders import DecodeOptions, Entry, decode_entries
from pulsarctl_py.decoders.textdump import read_entry

from .errors import LedgerctlError

#: the largest input file read whole (an entry is at most a few MiB; chunks are entries)
MAX_INPUT = 1 << 30


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


def read_source(path: str, fmt: str = "auto") -> Source:
    """Read one input: a file path, or '-' for standard input."""
    if path == "-":
        if sys.stdin.isatty():
            raise LedgerctlError("reading an entry from standard input, but it is a terminal")
        raw = sys.stdin.buffer.read(MAX_INPUT + 1)
        label = "<stdin>"
    else:
        p = Path(path)
        try:
            if p.stat().st_size > MAX_INPUT:
                raise LedgerctlError(f"{path}: larger than {MAX_INPUT} bytes, not one entry")
            raw = p.read_bytes()
        except OSError as exc:
            raise LedgerctlError(f"cannot read {path}: {exc.strerror or exc}") from None
        label = path
    if len(raw) > MAX_INPUT:
        raise LedgerctlError(f"{label}: larger than {MAX_INPUT} bytes, not one entry")
    if not raw:
        raise LedgerctlError(f"{label}: empty input, no entry to decode")
    try:
        return Source(label, read_entry(raw, fmt))
    except LedgerctlError as exc:
        raise LedgerctlError(f"{label}: {exc}") from None


def decode_sources(sources: list[Source], options: DecodeOptions) -> list[tuple[str, Entry]]:
    """Decode inputs in the order given, joining chunked messages across them."""
    entries = decode_entries(((s.data, None) for s in sources), options)
    return [(s.label, e) for s, e in zip(sources, entries, strict=True)]
