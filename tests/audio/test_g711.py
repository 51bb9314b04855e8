"""G.711 must be bit-exact with the ITU-T G.191 reference: peers and test tools compare codes."""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicegate.internal.audio.g711 import (
    PCMA,
    PCMU,
    alaw_decode,
    alaw_encode,
    codec_for_payload_type,
    table_alaw_decode,
    table_alaw_encode,
    table_ulaw_decode,
    table_ulaw_encode,
    ulaw_decode,
    ulaw_encode,
)


def _to_short(value: int) -> int:
    """C `short` arithmetic: keep 16 bits, signed."""
    value &= 0xFFFF
    return value - 0x10000 if value & 0x8000 else value


# A straight transcription of G.191 STL g711.c, one sample at a time, as the independent reference.
def reference_ulaw_compress(sample: int) -> int:
    absno = ((~sample) >> 2) + 33 if sample < 0 else (sample >> 2) + 33
    if absno > 0x1FFF:
        absno = 0x1FFF
    i = absno >> 6
    segno = 1
    while i != 0:
        segno += 1
        i >>= 1
    high_nibble = 0x0008 - segno
    low_nibble = 0x000F - ((absno >> segno) & 0x000F)
    code = (high_nibble << 4) | low_nibble
    if sample >= 0:
        code |= 0x0080
    return code


def reference_ulaw_expand(code: int) -> int:
    sign = -1 if code < 0x0080 else 1
    mantissa = _to_short(~code)
    exponent = (mantissa >> 4) & 0x0007
    segment = exponent + 1
    mantissa &= 0x000F
    step = 4 << segment
    return sign * ((0x0080 << exponent) + step * mantissa + step // 2 - 4 * 33)


def reference_alaw_compress(sample: int) -> int:
    ix = (~sample) >> 4 if sample < 0 else sample >> 4
    if ix > 15:
        iexp = 1
        while ix > 16 + 15:
            ix >>= 1
            iexp += 1
        ix -= 16
        ix += iexp << 4
    if sample >= 0:
        ix |= 0x0080
    return ix ^ 0x0055


def reference_alaw_expand(code: int) -> int:
    ix = (code ^ 0x0055) & 0x007F
    iexp = ix >> 4
    mant = ix & 0x000F
    if iexp > 0:
        mant += 16
    mant = (mant << 4) + 0x0008
    if iexp > 1:
        mant <<= iexp - 1
    return mant if code > 127 else -mant


ALL_SAMPLES = list(range(-32768, 32768))
ALL_PCM = struct.pack(f"<{len(ALL_SAMPLES)}h", *ALL_SAMPLES)
ALL_CODES = bytes(range(256))


def _pcm_values(pcm: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(pcm) // 2}h", pcm))


# Each check runs on what the codecs use (stdlib audioop where it is exact) and on the numpy tables
# (what runs where audioop is missing, as from Python 3.13).
@pytest.mark.parametrize("encode", [ulaw_encode, table_ulaw_encode])
def test_ulaw_encode_matches_g191_for_every_16_bit_sample(encode: Callable[[bytes], bytes]) -> None:
    assert list(encode(ALL_PCM)) == [reference_ulaw_compress(s) for s in ALL_SAMPLES]


@pytest.mark.parametrize("encode", [alaw_encode, table_alaw_encode])
def test_alaw_encode_matches_g191_for_every_16_bit_sample(encode: Callable[[bytes], bytes]) -> None:
    assert list(encode(ALL_PCM)) == [reference_alaw_compress(s) for s in ALL_SAMPLES]


@pytest.mark.parametrize("decode", [ulaw_decode, table_ulaw_decode])
def test_ulaw_decode_matches_g191_for_every_code(decode: Callable[[bytes], bytes]) -> None:
    assert _pcm_values(decode(ALL_CODES)) == [reference_ulaw_expand(c) for c in range(256)]


@pytest.mark.parametrize("decode", [alaw_decode, table_alaw_decode])
def test_alaw_decode_matches_g191_for_every_code(decode: Callable[[bytes], bytes]) -> None:
    assert _pcm_values(decode(ALL_CODES)) == [reference_alaw_expand(c) for c in range(256)]


def test_known_values() -> None:
    # Both mu-law zero codes decode to 0; full scale is +-32124 (mu-law) and +-32256 (A-law).
    assert _pcm_values(ulaw_decode(bytes([0xFF, 0x7F, 0x80, 0x00]))) == [0, 0, 32124, -32124]
    assert _pcm_values(alaw_decode(bytes([0xD5, 0x55, 0xAA, 0x2A]))) == [8, -8, 32256, -32256]
    silence = struct.pack("<2h", 0, -1)
    assert ulaw_encode(silence) == bytes([0xFF, 0x7F])
    assert alaw_encode(silence) == bytes([0xD5, 0x55])
    assert ulaw_encode(struct.pack("<2h", 32767, -32768)) == bytes([0x80, 0x00])
    assert alaw_encode(struct.pack("<2h", 32767, -32768)) == bytes([0xAA, 0x2A])


def test_g191_differs_from_sun_linear2ulaw_on_negative_samples() -> None:
    # -1 is one's-complemented to 0 by G.191 (code 0x7F); Sun's two's-complement path gives 0x7E.
    assert ulaw_encode(struct.pack("<h", -1)) == b"\x7f"


@pytest.mark.parametrize(
    ("encode", "decode", "full_scale"), [(ulaw_encode, ulaw_decode, 32124), (alaw_encode, alaw_decode, 32256)]
)
def test_round_trip_error_is_bounded_by_the_quantisation_step(
    encode: Callable[[bytes], bytes], decode: Callable[[bytes], bytes], full_scale: int
) -> None:
    original = np.array(ALL_SAMPLES, dtype=np.int32)
    restored = np.frombuffer(decode(encode(ALL_PCM)), dtype="<i2").astype(np.int32)
    inside = np.abs(original) <= full_scale
    error = np.abs(restored - original)[inside]
    # Logarithmic quantisation: the step grows with the magnitude, about 1/16 of it at worst,
    # with a floor set by the smallest step (8 for mu-law, 16 for A-law).
    bound = np.maximum(np.abs(original[inside]) // 16, 16)
    assert (error <= bound).all()
    # Beyond full scale the codec clips to its largest value.
    assert (np.abs(restored[~inside]) == full_scale).all()


def test_encoding_decoded_audio_gives_back_the_same_codes() -> None:
    # Decoded values sit inside their own interval, so re-encoding is lossless; the one exception is
    # mu-law's "negative zero" 0x7F, which decodes to 0 and comes back as the positive zero 0xFF.
    assert alaw_encode(alaw_decode(ALL_CODES)) == ALL_CODES
    expected = bytearray(ALL_CODES)
    expected[0x7F] = 0xFF
    assert ulaw_encode(ulaw_decode(ALL_CODES)) == bytes(expected)


@given(st.binary(max_size=400).filter(lambda b: len(b) % 2 == 0))
def test_encode_gives_one_code_per_sample_and_decode_restores_the_length(pcm: bytes) -> None:
    for encode, decode in ((ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)):
        codes = encode(pcm)
        assert len(codes) == len(pcm) // 2
        assert len(decode(codes)) == len(pcm)


@pytest.mark.parametrize("encode", [ulaw_encode, alaw_encode, table_ulaw_encode, table_alaw_encode])
def test_odd_length_pcm_is_rejected_with_a_clear_message(encode: Callable[[bytes], bytes]) -> None:
    with pytest.raises(ValueError, match="even number of bytes"):
        encode(b"\x00\x01\x02")


def test_codec_lookup_by_payload_type() -> None:
    assert codec_for_payload_type(PCMU).decode(codec_for_payload_type(PCMU).silence(160)) == bytes(320)
    assert codec_for_payload_type(PCMA).silence(2) == b"\xd5\xd5"
    with pytest.raises(ValueError, match=r"not G\.711"):
        codec_for_payload_type(18)
