"""G.711 mu-law (PCMU) and A-law (PCMA): PCM16LE mono <-> one byte per sample.

Bit-exact with the ITU-T G.191 reference (`ulaw_compress`/`alaw_compress` and their `expand`s):
negative samples are one's-complemented before quantising, which is where G.191 and the common Sun
`linear2ulaw` disagree by one code for some negative inputs. Interoperability tests against other
stacks compare codes, so "almost G.711" is not good enough.

Every possible input is converted once at import into lookup tables (256 int16 entries to decode,
65536 uint8 entries to encode, indexed by the sample's uint16 view); converting a 20 ms frame is then
a single numpy gather. Where the stdlib's C `audioop` (Python <= 3.12) gives the very same bytes -- checked
at import against these tables over every input, and true of both decoders and the A-law encoder, not of
its Sun-style mu-law encoder -- that is used instead: 0.25 us a frame against 3 us for numpy's call
overhead, and every received packet of every call is decoded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from voicegate.internal.audio.c_audioop import load_audioop

PCMU = 0
PCMA = 8

_Codes = npt.NDArray[np.uint8]
_Samples = npt.NDArray[np.int16]


def _bit_length(values: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """Number of significant bits of each non-negative value (0 for 0), like int.bit_length."""
    thresholds = 1 << np.arange(31, dtype=np.int64)
    return np.searchsorted(thresholds, values, side="right").astype(np.int32)


def _all_samples() -> npt.NDArray[np.int32]:
    """Every int16 sample, ordered by its uint16 bit pattern, so the result's index is that pattern."""
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.int16).astype(np.int32)


def _ulaw_encode_table() -> _Codes:
    x = _all_samples()
    # 14-bit magnitude plus the bias of 33 (0x84 at 16-bit scale) that makes segment edges powers of two;
    # clipping at 0x1FFF is G.191's 8159 << 2 limit.
    magnitude = np.where(x < 0, (~x) >> 2, x >> 2) + 33
    magnitude = np.minimum(magnitude, 0x1FFF)
    segment = _bit_length(magnitude >> 6) + 1
    mantissa = 15 - ((magnitude >> segment) & 0x0F)
    code = ((8 - segment) << 4) | mantissa
    code = np.where(x >= 0, code | 0x80, code)
    return code.astype(np.uint8)


def _ulaw_decode_table() -> _Samples:
    inverted = ~np.arange(256, dtype=np.int32)
    exponent = (inverted >> 4) & 0x07
    mantissa = inverted & 0x0F
    step = 4 << (exponent + 1)
    magnitude = (0x80 << exponent) + step * mantissa + step // 2 - 4 * 33
    return np.where(np.arange(256) < 0x80, -magnitude, magnitude).astype("<i2")


def _alaw_encode_table() -> _Codes:
    x = _all_samples()
    magnitude = np.where(x < 0, (~x) >> 4, x >> 4)  # 12-bit, 0..2047
    exponent = np.maximum(_bit_length(magnitude) - 4, 0)
    # Segments above the first drop their leading one and carry the exponent in bits 4-6.
    shifted = magnitude >> np.maximum(exponent - 1, 0)
    code = np.where(exponent > 0, (shifted - 16) + (exponent << 4), magnitude)
    code = np.where(x >= 0, code | 0x80, code)
    # A-law inverts the even bits so that silence is not a long run of zeros on the line.
    return (code ^ 0x55).astype(np.uint8)


def _alaw_decode_table() -> _Samples:
    codes = np.arange(256, dtype=np.int32)
    toggled = (codes ^ 0x55) & 0x7F
    exponent = toggled >> 4
    mantissa = toggled & 0x0F
    mantissa = np.where(exponent > 0, mantissa + 16, mantissa)
    magnitude = (mantissa << 4) + 8  # left-justify and add half a quantisation step
    magnitude = np.where(exponent > 1, magnitude << np.maximum(exponent - 1, 0), magnitude)
    return np.where(codes > 127, magnitude, -magnitude).astype("<i2")


_ULAW_ENCODE = _ulaw_encode_table()
_ULAW_DECODE = _ulaw_decode_table()
_ALAW_ENCODE = _alaw_encode_table()
_ALAW_DECODE = _alaw_decode_table()


# Prebuilt dtypes and `take` rather than fancy indexing: half the per-call overhead on 160 samples.
_PCM16 = np.dtype("<u2")
_CODE = np.dtype(np.uint8)


def _samples(pcm: bytes) -> npt.NDArray[np.uint16]:
    if len(pcm) % 2:
        raise ValueError(f"PCM16 audio needs an even number of bytes, got {len(pcm)}")
    return np.frombuffer(pcm, _PCM16)


def table_ulaw_encode(pcm: bytes) -> bytes:
    return _ULAW_ENCODE.take(_samples(pcm)).tobytes()


def table_ulaw_decode(data: bytes) -> bytes:
    return _ULAW_DECODE.take(np.frombuffer(data, _CODE)).tobytes()


def table_alaw_encode(pcm: bytes) -> bytes:
    return _ALAW_ENCODE.take(_samples(pcm)).tobytes()


def table_alaw_decode(data: bytes) -> bytes:
    return _ALAW_DECODE.take(np.frombuffer(data, _CODE)).tobytes()



_audioop = load_audioop()
_ALL_CODES = bytes(range(256))
_ALL_PCM = np.arange(65536, dtype=np.uint32).astype("<u2").tobytes()

ulaw_encode = table_ulaw_encode  # audioop's lin2ulaw is Sun's, one code off G.191 for some negatives
ulaw_decode = table_ulaw_decode
alaw_encode = table_alaw_encode
alaw_decode = table_alaw_decode
if _audioop is not None:
    _c = _audioop

    def _c_ulaw_decode(data: bytes) -> bytes:
        return _c.ulaw2lin(data, 2)

    def _c_alaw_decode(data: bytes) -> bytes:
        return _c.alaw2lin(data, 2)

    def _c_alaw_encode(pcm: bytes) -> bytes:
        if len(pcm) % 2:
            raise ValueError(f"PCM16 audio needs an even number of bytes, got {len(pcm)}")
        return _c.lin2alaw(pcm, 2)

    # Only what is bit-exact with the tables over every possible input is swapped in.
    if _c_ulaw_decode(_ALL_CODES) == table_ulaw_decode(_ALL_CODES):
        ulaw_decode = _c_ulaw_decode
    if _c_alaw_decode(_ALL_CODES) == table_alaw_decode(_ALL_CODES):
        alaw_decode = _c_alaw_decode
    if _c_alaw_encode(_ALL_PCM) == table_alaw_encode(_ALL_PCM):
        alaw_encode = _c_alaw_encode


@dataclass(frozen=True, slots=True)
class G711Codec:
    """One of the two static RTP payload types (RFC 3551), as the media path needs it."""

    name: str
    payload_type: int
    encode: Callable[[bytes], bytes]
    decode: Callable[[bytes], bytes]

    def silence(self, samples: int) -> bytes:
        """Encoded digital silence, sent while the agent is quiet to keep NAT bindings and peers alive."""
        return self.encode(bytes(2 * samples))


G711_CODECS: dict[int, G711Codec] = {
    PCMU: G711Codec("PCMU", PCMU, ulaw_encode, ulaw_decode),
    PCMA: G711Codec("PCMA", PCMA, alaw_encode, alaw_decode),
}


def codec_for_payload_type(payload_type: int) -> G711Codec:
    try:
        return G711_CODECS[payload_type]
    except KeyError:
        raise ValueError(f"payload type {payload_type} is not G.711 (use 0 for PCMU or 8 for PCMA)") from None
