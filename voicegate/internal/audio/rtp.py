"""RTP packets (RFC 3550 section 5) and the arithmetic of their wrapping counters.

Parsing and serialising are kept symmetric: `RtpPacket.parse(p.serialize()) == p` for every valid
packet, and `parse` raises only `RtpError`, whatever bytes arrive from the network.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

RTP_VERSION = 2
HEADER_SIZE = 12
MAX_CSRC = 15

_FIXED_HEADER = struct.Struct("!BBHII")
_EXTENSION_HEADER = struct.Struct("!HH")


class RtpError(ValueError):
    """A packet that is not valid RTP; the message says which rule it breaks."""


@dataclass(frozen=True, slots=True)
class RtpHeaderExtension:
    """The one header extension RFC 3550 allows, kept opaque: `data` is a whole number of 32-bit words."""

    profile: int
    data: bytes = b""


@dataclass(slots=True)
class RtpPacket:
    payload_type: int
    sequence: int
    timestamp: int
    ssrc: int
    payload: bytes = b""
    marker: bool = False
    csrc: tuple[int, ...] = ()
    extension: RtpHeaderExtension | None = None
    # Bytes of padding after the payload, including the final count byte; 0 means no padding bit.
    padding: int = 0

    @classmethod
    def parse(cls, data: bytes) -> RtpPacket:
        size = len(data)
        if size < HEADER_SIZE:
            raise RtpError(f"RTP packet of {size} bytes is shorter than the {HEADER_SIZE}-byte fixed header")
        first, second, sequence, timestamp, ssrc = _FIXED_HEADER.unpack_from(data)
        if first >> 6 != RTP_VERSION:
            raise RtpError(f"RTP version is {first >> 6}, expected {RTP_VERSION}")
        offset = HEADER_SIZE
        csrc: tuple[int, ...] = ()
        csrc_count = first & 0x0F
        if csrc_count:
            end = offset + 4 * csrc_count
            if end > size:
                raise RtpError(f"RTP header announces {csrc_count} CSRCs but the packet ends at byte {size}")
            csrc = struct.unpack_from(f"!{csrc_count}I", data, offset)
            offset = end
        extension = None
        if first & 0x10:
            if offset + 4 > size:
                raise RtpError("RTP extension bit is set but the extension header is missing")
            profile, words = _EXTENSION_HEADER.unpack_from(data, offset)
            end = offset + 4 + 4 * words
            if end > size:
                raise RtpError(f"RTP header extension of {words} words runs past the end of the packet")
            extension = RtpHeaderExtension(profile, bytes(data[offset + 4 : end]))
            offset = end
        padding = 0
        end = size
        if first & 0x20:
            padding = data[-1]
            if padding == 0:
                raise RtpError("RTP padding bit is set but the padding count is 0")
            if offset + padding > size:
                raise RtpError(f"RTP padding of {padding} bytes is longer than the payload")
            end = size - padding
        # Positional: this runs for every received packet, and keywords cost a measurable share.
        return cls(
            second & 0x7F, sequence, timestamp, ssrc, bytes(data[offset:end]), second > 0x7F, csrc, extension, padding
        )

    def serialize(self) -> bytes:
        self._check()
        first = RTP_VERSION << 6 | len(self.csrc)
        if self.padding:
            first |= 0x20
        if self.extension is not None:
            first |= 0x10
        second = self.payload_type | (0x80 if self.marker else 0)
        parts = [_FIXED_HEADER.pack(first, second, self.sequence, self.timestamp, self.ssrc)]
        if self.csrc:
            parts.append(struct.pack(f"!{len(self.csrc)}I", *self.csrc))
        if self.extension is not None:
            parts.append(_EXTENSION_HEADER.pack(self.extension.profile, len(self.extension.data) // 4))
            parts.append(self.extension.data)
        parts.append(self.payload)
        if self.padding:
            parts.append(bytes(self.padding - 1) + bytes([self.padding]))
        return b"".join(parts)

    def _check(self) -> None:
        if not 0 <= self.payload_type <= 0x7F:
            raise RtpError(f"payload type {self.payload_type} is outside 0-127")
        if not 0 <= self.sequence <= 0xFFFF:
            raise RtpError(f"sequence number {self.sequence} is outside 0-65535")
        if not 0 <= self.timestamp <= 0xFFFFFFFF or not 0 <= self.ssrc <= 0xFFFFFFFF:
            raise RtpError("timestamp and SSRC must fit in 32 bits")
        if len(self.csrc) > MAX_CSRC:
            raise RtpError(f"{len(self.csrc)} CSRCs, at most {MAX_CSRC} fit in an RTP header")
        if any(not 0 <= c <= 0xFFFFFFFF for c in self.csrc):
            raise RtpError("every CSRC must fit in 32 bits")
        if self.extension is not None and (
            len(self.extension.data) % 4 or len(self.extension.data) > 4 * 0xFFFF
            or not 0 <= self.extension.profile <= 0xFFFF
        ):
            raise RtpError("a header extension needs a 16-bit profile and whole 32-bit words of data")
        if not 0 <= self.padding <= 0xFF:
            raise RtpError(f"padding of {self.padding} bytes is outside 0-255")


def rtp_header(payload_type: int, sequence: int, timestamp: int, ssrc: int, marker: bool = False) -> bytes:
    """The 12-byte header of a plain packet (no CSRC, extension or padding): the send path's fast way."""
    return _FIXED_HEADER.pack(0x80, payload_type | (0x80 if marker else 0), sequence, timestamp, ssrc)


def seq_diff(a: int, b: int) -> int:
    """`a - b` in the 16-bit sequence space, as the shortest signed distance (-32768..32767)."""
    return ((a - b + 0x8000) & 0xFFFF) - 0x8000


def seq_newer(a: int, b: int) -> bool:
    """Whether sequence number `a` comes after `b`, across the wrap from 65535 to 0."""
    return seq_diff(a, b) > 0


def ts_diff(a: int, b: int) -> int:
    """`a - b` for 32-bit RTP timestamps, as the shortest signed distance."""
    return ((a - b + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def ts_newer(a: int, b: int) -> bool:
    return ts_diff(a, b) > 0


# A jump ahead of more than this many packets is not loss but a restarted sender, and a packet further
# behind than MAX_MISORDER is not reordering; both values are those of RFC 3550 appendix A.1.
MAX_DROPOUT = 3000
MAX_MISORDER = 100
_HISTORY = 128  # recently seen packets remembered for duplicate detection; covers MAX_MISORDER


class SequenceTracker:
    """Extended (wrap-free) sequence numbers for one source, with loss, duplicate and reorder counts.

    `update` returns the packet's extended sequence number, or None for a duplicate or for a packet
    from a discontinuity that is not yet confirmed (the RFC 3550 A.1 rule: a big jump counts only when
    the next packet follows it, so one stray packet cannot reset the statistics).
    """

    def __init__(self) -> None:
        self.received = 0  # distinct packets since the (re)start
        self.duplicates = 0
        self.reordered = 0
        self.restarts = 0
        self.base = 0
        self.highest = -1  # extended sequence number of the newest packet, -1 before the first
        self._seen = 0  # bit i set: packet `highest - i` has arrived
        self._bad_seq: int | None = None

    @property
    def started(self) -> bool:
        return self.highest >= 0

    @property
    def expected(self) -> int:
        return self.highest - self.base + 1 if self.started else 0

    @property
    def lost(self) -> int:
        return max(self.expected - self.received, 0)

    def update(self, seq: int) -> int | None:
        if not self.started:
            self._restart(seq)
            return self.highest
        delta = seq_diff(seq, self.highest & 0xFFFF)
        if 0 < delta < MAX_DROPOUT:
            self.highest += delta
            self._seen = ((self._seen << delta) | 1) & ((1 << _HISTORY) - 1)
            self.received += 1
            self._bad_seq = None
            return self.highest
        if -MAX_MISORDER < delta <= 0:
            bit = 1 << -delta
            if self._seen & bit:
                self.duplicates += 1
                return None
            self._seen |= bit
            self.received += 1
            self.reordered += 1
            return self.highest + delta
        if seq == self._bad_seq:
            self.restarts += 1
            self._restart(seq)
            return self.highest
        self._bad_seq = (seq + 1) & 0xFFFF
        return None

    def _restart(self, seq: int) -> None:
        # Keep the extended count monotonic across a restart so consumers keyed on it never go back.
        cycles = (self.highest + 1 + 0xFFFF) & ~0xFFFF if self.started else 0
        self.highest = cycles + seq
        self.base = self.highest
        self.received = 1
        self._seen = 1
        self._bad_seq = None
