"""Pre-2.8 KoP offsets in their two eras (formats.md §13): decoded and encoded as KoP's
Java ``long`` arithmetic does, and the stored entry an offset names (:func:`seek_legacy`)."""

from __future__ import annotations

from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.positions import format_position

from .heads import HeadReader
from .probe import FlatTopic, Prober, SeekResult

ERAS = ("auto", "ledger-entry", "ledger-entry-batch")
#: KoP before Sep 2019: offset = ledgerId << 28 | entryId
ERA1_ENTRY_BITS = 28
#: KoP Sep 2019 - Jan 2021: offset = ledgerId << 44 | entryId << 12 | batchIndex
ERA2_LEDGER_SHIFT = 44
ERA2_BATCH_BITS = 12
_LONG = 2**64


def _java_long(value: int) -> int:
    """``value`` as a Java ``long`` holds it (two's complement, 64 bits)."""
    value %= _LONG
    return value - _LONG if value >= 2**63 else value


def decode_legacy_offset(offset: int, era: str) -> tuple[int, int, int | None]:
    """A pre-2.8 KoP offset as ``(ledger, entry, batch index)`` in one era (formats.md §13).

    KoP computed offsets in a Java ``long`` (streamnative/kop ``MessageIdUtils``): from ledger
    2^19 on (era two; 2^35 in era one) the offset is negative, and from 2^20 (2^36) the
    ledger id's high bits are shifted out. Decoding is KoP's, with unsigned shifts
    (``offset >>> 44``): the ledger returned is the ledger id modulo 2^20 (2^36), which
    :func:`seek_legacy` matches against the topic's ledgers."""
    if not -(2**63) <= offset < 2**63:
        raise LedgerctlError(f"legacy offset {offset} is not a 64-bit offset")
    u = offset % _LONG  # the bits of the Java long, for >>>
    if era == "ledger-entry":
        return u >> ERA1_ENTRY_BITS, u & ((1 << ERA1_ENTRY_BITS) - 1), None
    if era == "ledger-entry-batch":
        entry = (u & ((1 << ERA2_LEDGER_SHIFT) - 1)) >> ERA2_BATCH_BITS
        return u >> ERA2_LEDGER_SHIFT, entry, u & ((1 << ERA2_BATCH_BITS) - 1)
    raise LedgerctlError(f"unknown era {era!r}: one of {', '.join(ERAS[1:])}")


def encode_legacy_offset(ledger_id: int, entry_id: int, batch: int | None, era: str) -> int:
    """The offset KoP gave a position in ``era``, as its Java ``long`` arithmetic gives it:
    negative from ledger 2^19 (2^35 in era one), the ledger's high bits lost from 2^20."""
    if era == "ledger-entry":
        return _java_long((ledger_id << ERA1_ENTRY_BITS) | entry_id)
    return _java_long(
        ((ledger_id << ERA2_LEDGER_SHIFT) | (entry_id << ERA2_BATCH_BITS)) + (batch or 0)
    )


def _ledger_bits(era: str) -> int:
    """How many bits of the ledger id an offset of ``era`` keeps."""
    return 64 - (ERA1_ENTRY_BITS if era == "ledger-entry" else ERA2_LEDGER_SHIFT)


def seek_legacy(
    flat: FlatTopic, reader: HeadReader, offset: int, era: str = "auto"
) -> tuple[SeekResult, Prober]:
    result = SeekResult(None, "legacy-offset", offset, None)
    prober = Prober(flat, reader)
    eras = [era] if era != "auto" else ["ledger-entry-batch", "ledger-entry"]
    candidates = []
    for name in eras:
        low, entry, batch = decode_legacy_offset(offset, name)
        # the topic's ledgers whose id the offset's bits name (ids past 2^20 wrapped)
        modulus = 1 << _ledger_bits(name)
        ledgers = [lg.ledger_id for lg in flat.ledgers if lg.ledger_id % modulus == low]
        if len(ledgers) > 1:
            result.warnings.append(
                f"{name}: the offset names ledger {low} modulo 2^{_ledger_bits(name)}, which "
                f"fits ledgers {', '.join(map(str, ledgers))}: the first holding the entry"
            )
        found = [(lid, flat.index_of(lid, entry)) for lid in ledgers]
        held = [(lid, i) for lid, i in found if i is not None]
        ledger, i = held[0] if held else ((ledgers[0], None) if ledgers else (low, None))
        candidates.append((name, ledger, entry, batch, i))
    result.extra["decoded"] = [
        {"era": name, "position": format_position(ledger, entry, batch), "exists": i is not None}
        for name, ledger, entry, batch, i in candidates
    ]
    existing = [c for c in candidates if c[4] is not None]
    if not existing:
        shown = ", ".join(f"{c[0]}: {format_position(c[1], c[2], c[3])}" for c in candidates)
        result.findings.append(f"legacy offset {offset} names no stored entry ({shown})")
        return result, prober
    if len(existing) > 1:
        result.warnings.append(
            "the offset names an entry in both eras; showing ledger-entry-batch "
            "(pass --era to choose)"
        )
    name, ledger, entry, batch, i = existing[0]
    result.extra["era"] = name
    result.head = prober.head(i)  # type: ignore[arg-type]
    result.batch_index = batch
    if result.head.error is not None:
        result.findings.append(
            f"entry {result.head.position} could not be read: {result.head.error}"
        )
        result.head = result.batch_index = None  # never a position that was not read
    elif batch is not None and batch >= result.head.num_messages:
        result.findings.append(
            f"batch index {batch} is past the entry's {result.head.num_messages} messages"
        )
    result.entries_read = reader.reads
    return result, prober
