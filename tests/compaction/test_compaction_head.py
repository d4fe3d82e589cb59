"""Compaction's head parse (decoders/compaction_head.py) against the full decoder.

For every stored bookie entry, regular or damaged, ``compaction_head`` either declines
(None: the reader then decodes the entry fully) or gives exactly what ``raw_entry`` of
``decode_entry`` at ``Depth.METADATA`` gives: the same Pulsar entry bytes, MessageMetadata,
payload offset and broker entry metadata, and only for entries the decoder finds no error
in. Entries are the compaction model's (tests/compaction/test_core.py: batches, singles,
markers, chunks, encrypted, every codec, with and without broker entry metadata), framed
with each digest type, then damaged inside the digest's cover (the digest still verifies:
the inner checks decide) or outside it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.compaction.reader import raw_entry
from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader, build
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.compaction_head import compaction_head
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.compaction.test_core import build as build_pulsar
from tests.compaction.test_core import specs

PASSWORD = b"secret"
KINDS = st.sampled_from(list(DigestType))


def _damage(data: bytes, cuts: list[tuple[int, int]], truncate: int | None) -> bytes:
    out = bytearray(data)
    for at, xor in cuts:
        if out:
            out[at % len(out)] ^= xor
    if truncate is not None:
        del out[truncate % (len(out) + 1) :]
    return bytes(out)


DAMAGE = st.tuples(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=2),
    st.one_of(st.none(), st.integers(0, 10_000)),
)


def _stored(
    pulsar: bytes, kind: DigestType, position: tuple[int, int], lac: int | None = None
) -> bytes:
    lac = position[1] - 1 if lac is None else lac
    header = BookieEntryHeader(position[0], position[1], lac, 100 + len(pulsar))
    return build(header, pulsar, kind, PASSWORD)


def _check(stored: bytes, kind: DigestType, password: bytes | None, position: tuple[int, int]):
    """The head parse agrees with the decoder; True when it answered (did not decline)."""
    head = compaction_head(stored, kind, password, position)
    options = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY, digest_type=kind, password=password, depth=Depth.METADATA
    )
    entry = decode_entry(stored, options, position)
    if head is None:
        return False
    errors = [p for p in entry.problems if p.severity == "error"]
    assert not errors, (errors, head)
    start, md, payload_at, bem = head
    want = raw_entry(entry)
    assert want.damage is None
    assert (want.position, want.data, want.payload_at, want.bem, want.message_id) == (
        position,
        stored[start:],
        payload_at,
        bem,
        None,
    )
    assert md == want.metadata
    assert md.SerializeToString() == want.metadata.SerializeToString()
    return True


@settings(max_examples=200, deadline=None)
@given(entries=specs(), kind=KINDS, inner=DAMAGE, outer=DAMAGE, known=st.booleans())
def test_the_head_parse_is_the_decoders_answer_or_declines(entries, kind, inner, outer, known):
    password = PASSWORD if known else None
    for i, spec in enumerate(entries):
        position = (7, i)
        pulsar = _damage(build_pulsar(spec, i), *inner)  # the digest covers the damage
        _check(_damage(_stored(pulsar, kind, position), *outer), kind, password, position)


@settings(max_examples=100, deadline=None)
@given(entries=specs(), kind=st.sampled_from([DigestType.CRC32, DigestType.CRC32C]))
def test_regular_entries_take_the_head_parse(entries, kind):
    """Guard against a head parse that always declines: every regular entry is answered."""
    for i, spec in enumerate(entries):
        position = (7, i)
        assert _check(_stored(build_pulsar(spec, i), kind, position), kind, None, position)


def test_what_the_head_parse_declines():
    md = api.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    bem = api.BrokerEntryMetadata(broker_timestamp=5, index=9)
    regular = build_entry(md, b"value", broker_entry_metadata=bem)
    position = (7, 3)
    stored = _stored(regular, DigestType.CRC32C, position)
    assert _check(stored, DigestType.CRC32C, None, position)
    declined = {
        # read under other ids than the header's
        "ids": (stored, DigestType.CRC32C, None, (7, 4)),
        "digest": (stored[:-1] + bytes([stored[-1] ^ 1]), DigestType.CRC32C, None, position),
        "mac without password": (
            _stored(regular, DigestType.HMAC, position),
            DigestType.HMAC,
            None,
            position,
        ),
        "lac past the entry": (
            _stored(regular, DigestType.CRC32C, position, lac=9),
            DigestType.CRC32C,
            None,
            position,
        ),
        "crc32c": (
            _stored(regular[:-1] + b"X", DigestType.CRC32C, position),
            DigestType.CRC32C,
            None,
            position,
        ),
        "prefix twice": (
            _stored(regular[:10] + regular, DigestType.CRC32C, position),
            DigestType.CRC32C,
            None,
            position,
        ),
        "required field missing": (
            _stored(
                build_entry(api.MessageMetadata(producer_name="p"), b"v"),
                DigestType.CRC32C,
                position,
            ),
            DigestType.CRC32C,
            None,
            position,
        ),
    }
    for why, (data, kind, password, at) in declined.items():
        assert compaction_head(data, kind, password, at) is None, why
        assert _check(data, kind, password, at) is False, why


def test_a_digest_the_store_verified_is_not_checked_again(monkeypatch):
    """``digest_verified``: the store checked the digest (StoredEntry.verified), so the head
    parse does not compute it again; the ids are still checked."""
    from pulsarctl_py.decoders import compaction_head as module

    position = (7, 3)
    stored = _stored(build_entry(api.MessageMetadata(producer_name="p", sequence_id=1,
                                                     publish_time=2), b"v"),
                     DigestType.CRC32C, position)  # fmt: skip
    computed: list[int] = []
    real = module.digest_verifies

    def counting(*args):
        computed.append(1)
        return real(*args)

    monkeypatch.setattr(module, "digest_verifies", counting)
    want = compaction_head(stored, DigestType.CRC32C, None, position)
    assert want is not None and computed == [1]
    assert compaction_head(stored, DigestType.CRC32C, None, position, True) == want
    assert computed == [1]
    assert compaction_head(stored, DigestType.CRC32C, None, (7, 4), True) is None
