"""Turn an entry given as text back into bytes: hex dumps, plain hex or base64.

Accepted, detected line by line:

* BookKeeper shell (``readlog``/``readjournal``/``readledger`` with ``-m``):
  ``00000000 AF 87 C6 28 0E 01 ...  ...(...C``: offset, 16 hex bytes, ASCII column
* netty ``ByteBufUtil.prettyHexDump`` as pulsar-admin prints it:
  ``|00000000| 68 65 6c 6c 6f ... |hello           |``
* ``hexdump -C`` (``00000000  0e 01 25 8e ...  |..%..|``) and ``xxd``
  (``00000000: 0e01 258e 1a34 ...  ..%..4``)
* plain hex, with any whitespace, ``:`` separators or ``0x`` prefixes
* base64 (standard or URL-safe alphabet)

Lines that carry no bytes (log prefixes such as ``[FormatUtil] Entry {...}``, netty's
border lines) are skipped in dump formats. Binary input is returned unchanged.
"""

from __future__ import annotations

import base64
import binascii
import re

from .errors import InputFormatError

_PRINTABLE = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}
_NETTY = re.compile(r"^\|([0-9a-fA-F]{8})\|((?: [0-9a-fA-F]{2}){1,16})\s*\|")
_HEXDUMP_C = re.compile(r"^([0-9a-fA-F]{8})  ((?:[0-9a-fA-F]{2} {1,2}){1,16})\s*\|")
_XXD = re.compile(r"^([0-9a-fA-F]{7,8}): ((?:[0-9a-fA-F]{2,4} ?){1,8})(?:  |$)")
_BK = re.compile(r"^([0-9a-fA-F]{8})((?: [0-9a-fA-F]{2}){1,16})(?: |$)")
_PLAIN_STRIP = re.compile(r"0x|[\s:,]", re.IGNORECASE)


def is_binary(raw: bytes) -> bool:
    """Whether ``raw`` has bytes that no text dump contains."""
    return any(b not in _PRINTABLE for b in raw[:4096]) or (
        len(raw) > 4096 and any(b not in _PRINTABLE for b in raw)
    )


def _dump_line(line: str) -> tuple[int, bytes] | None:
    """Offset and bytes of one hex-dump line, or None when the line holds none."""
    for pattern, width in ((_NETTY, 16), (_HEXDUMP_C, 16), (_XXD, 16), (_BK, 16)):
        m = pattern.match(line)
        if m:
            digits = m.group(2).replace(" ", "")
            if len(digits) % 2:
                raise InputFormatError(
                    f"hex dump line {line[:60]!r} has an odd number of hex digits"
                )
            data = bytes.fromhex(digits)
            if len(data) <= width:
                return int(m.group(1), 16), data
    return None


def from_dump(text: str) -> bytes | None:
    """Bytes of a hex dump (offset column, hex, ASCII), or None if ``text`` is not one."""
    chunks: list[bytes] = []
    expected = 0
    found = False
    for line in text.splitlines():
        parsed = _dump_line(line.strip("\r"))
        if parsed is None:
            continue
        offset, data = parsed
        if offset != expected:
            if found and offset == 0:
                break  # a second entry's dump begins: take the first only
            raise InputFormatError(
                f"hex dump line at offset 0x{offset:x} follows 0x{expected:x}: lines missing"
            )
        chunks.append(data)
        expected += len(data)
        found = True
    return b"".join(chunks) if found else None


def from_text(text: str) -> bytes:
    """Bytes from a hex dump, plain hex, or base64 text."""
    dumped = from_dump(text)
    if dumped is not None:
        return dumped
    compact = _PLAIN_STRIP.sub("", text)
    if compact and re.fullmatch(r"(?:[0-9a-fA-F]{2})+", compact):
        return bytes.fromhex(compact)
    b64 = "".join(text.split())
    if b64:
        try:
            alt = b"-_" if ("-" in b64 or "_" in b64) else None
            return base64.b64decode(b64 + "=" * (-len(b64) % 4), altchars=alt, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise InputFormatError("input is neither binary, a hex dump, plain hex nor base64")


def read_entry(raw: bytes, fmt: str = "auto") -> bytes:
    """The entry bytes from file contents in format ``fmt`` (auto, binary, hex, base64)."""
    if fmt == "binary" or (fmt == "auto" and is_binary(raw)):
        return raw
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise InputFormatError(f"{fmt} input must be ASCII text") from None
    if fmt == "hex":
        dumped = from_dump(text)
        if dumped is not None:
            return dumped
        compact = _PLAIN_STRIP.sub("", text)
        try:
            return bytes.fromhex(compact)
        except ValueError:
            raise InputFormatError("input is not hex") from None
    if fmt == "base64":
        try:
            return base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            raise InputFormatError("input is not base64") from None
    return from_text(text)
