"""RTCP sender and receiver reports (RFC 3550 section 6.4) and the receiver statistics behind them.

Only what a two-party G.711 call needs: SR, RR and SDES CNAME (required in every compound packet) are
built and parsed, BYE is parsed; other packet types in a compound packet are skipped, not rejected.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from voicegate.internal.audio.rtp import RtpPacket, SequenceTracker

SR = 200
RR = 201
SDES = 202
BYE = 203
SDES_CNAME = 1

NTP_EPOCH_OFFSET = 2208988800  # seconds from 1900-01-01 (NTP) to 1970-01-01 (Unix)

_HEADER = struct.Struct("!BBH")
_SENDER_INFO = struct.Struct("!IQIII")
_REPORT_BLOCK = struct.Struct("!IIIIII")


class RtcpError(ValueError):
    """A packet that is not valid RTCP; the message says which rule it breaks."""


def ntp_timestamp(unix_time: float) -> int:
    """64-bit NTP timestamp (32.32 fixed point since 1900) for a Unix time."""
    seconds = int(unix_time)
    fraction = int((unix_time - seconds) * (1 << 32)) & 0xFFFFFFFF
    return ((seconds + NTP_EPOCH_OFFSET) & 0xFFFFFFFF) << 32 | fraction


def ntp_middle(ntp: int) -> int:
    """The middle 32 bits of an NTP timestamp: the compact form that LSR and RTT arithmetic use."""
    return (ntp >> 16) & 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class ReportBlock:
    ssrc: int  # the source this block reports on
    fraction_lost: int  # 0-255: lost / expected since the previous report, times 256
    cumulative_lost: int  # 24-bit signed
    highest_sequence: int  # extended: cycles << 16 | highest sequence number
    jitter: int  # interarrival jitter in timestamp units
    lsr: int = 0  # middle 32 bits of the last SR's NTP timestamp, 0 if none yet
    dlsr: int = 0  # delay since that SR in 1/65536 s

    def serialize(self) -> bytes:
        lost = max(min(self.cumulative_lost, 0x7FFFFF), -0x800000) & 0xFFFFFF
        return _REPORT_BLOCK.pack(
            self.ssrc, (self.fraction_lost & 0xFF) << 24 | lost, self.highest_sequence & 0xFFFFFFFF,
            self.jitter & 0xFFFFFFFF, self.lsr, self.dlsr,
        )

    @classmethod
    def parse(cls, data: bytes, offset: int) -> ReportBlock:
        ssrc, lost_word, highest, jitter, lsr, dlsr = _REPORT_BLOCK.unpack_from(data, offset)
        lost = lost_word & 0xFFFFFF
        if lost & 0x800000:
            lost -= 0x1000000
        return cls(ssrc, lost_word >> 24, lost, highest, jitter, lsr, dlsr)

    def round_trip_s(self, arrival_ntp: int) -> float | None:
        """RTT from an RR about our stream that arrived at `arrival_ntp` (RFC 3550 6.4.1 figure 2)."""
        if not self.lsr:
            return None
        rtt = (ntp_middle(arrival_ntp) - self.lsr - self.dlsr) & 0xFFFFFFFF
        return rtt / 65536 if rtt < 0x80000000 else None


@dataclass(frozen=True, slots=True)
class SenderReport:
    ssrc: int
    ntp_timestamp: int
    rtp_timestamp: int
    packet_count: int
    octet_count: int
    reports: tuple[ReportBlock, ...] = ()

    def serialize(self) -> bytes:
        body = _SENDER_INFO.pack(
            self.ssrc, self.ntp_timestamp, self.rtp_timestamp,
            self.packet_count & 0xFFFFFFFF, self.octet_count & 0xFFFFFFFF,
        )
        return _packet(SR, len(self.reports), body + b"".join(r.serialize() for r in self.reports))


@dataclass(frozen=True, slots=True)
class ReceiverReport:
    ssrc: int
    reports: tuple[ReportBlock, ...] = ()

    def serialize(self) -> bytes:
        body = struct.pack("!I", self.ssrc) + b"".join(r.serialize() for r in self.reports)
        return _packet(RR, len(self.reports), body)


@dataclass(frozen=True, slots=True)
class SourceDescription:
    """SDES with one chunk carrying the CNAME, which ties a participant's streams together."""

    ssrc: int
    cname: str

    def serialize(self) -> bytes:
        text = self.cname.encode()[:255]
        chunk = struct.pack("!IBB", self.ssrc, SDES_CNAME, len(text)) + text + b"\x00"
        return _packet(SDES, 1, chunk + bytes(-len(chunk) % 4))


@dataclass(frozen=True, slots=True)
class Goodbye:
    ssrcs: tuple[int, ...]


RtcpPacket = SenderReport | ReceiverReport | SourceDescription | Goodbye


def _packet(packet_type: int, count: int, body: bytes) -> bytes:
    return _HEADER.pack(0x80 | count, packet_type, len(body) // 4) + body


def serialize_compound(packets: list[RtcpPacket]) -> bytes:
    return b"".join(p.serialize() for p in packets if not isinstance(p, Goodbye))


def parse_rtcp(data: bytes) -> list[RtcpPacket]:
    """Every SR, RR, SDES CNAME and BYE in a compound packet; unknown types are skipped."""
    packets: list[RtcpPacket] = []
    offset = 0
    if len(data) < _HEADER.size:
        raise RtcpError(f"RTCP packet of {len(data)} bytes is shorter than its 4-byte header")
    while offset < len(data):
        if offset + _HEADER.size > len(data):
            raise RtcpError(f"{len(data) - offset} stray bytes after the last RTCP packet")
        first, packet_type, words = _HEADER.unpack_from(data, offset)
        if first >> 6 != 2:
            raise RtcpError(f"RTCP version is {first >> 6}, expected 2")
        end = offset + 4 + 4 * words
        if end > len(data):
            raise RtcpError(f"RTCP packet type {packet_type} claims {4 * words} bytes but the datagram ends first")
        body_end = end
        if first & 0x20:
            padding = data[end - 1] if end > offset + 4 else 0
            if not 0 < padding <= end - offset - 4:
                raise RtcpError("RTCP padding count does not fit the packet")
            body_end -= padding
        packets += _parse_one(packet_type, first & 0x1F, data[offset + 4 : body_end])
        offset = end
    return packets


def _parse_one(packet_type: int, count: int, body: bytes) -> list[RtcpPacket]:
    if packet_type in (SR, RR):
        fixed = _SENDER_INFO.size if packet_type == SR else 4
        if len(body) < fixed + count * _REPORT_BLOCK.size:
            raise RtcpError(f"RTCP {'SR' if packet_type == SR else 'RR'} is too short for {count} report blocks")
        blocks = tuple(ReportBlock.parse(body, fixed + i * _REPORT_BLOCK.size) for i in range(count))
        if packet_type == RR:
            return [ReceiverReport(struct.unpack_from("!I", body)[0], blocks)]
        ssrc, ntp, rtp_ts, packets, octets = _SENDER_INFO.unpack_from(body)
        return [SenderReport(ssrc, ntp, rtp_ts, packets, octets, blocks)]
    if packet_type == SDES:
        return _parse_sdes(count, body)
    if packet_type == BYE:
        if len(body) < 4 * count:
            raise RtcpError(f"RTCP BYE is too short for {count} SSRCs")
        return [Goodbye(struct.unpack_from(f"!{count}I", body))]
    return []


def _parse_sdes(count: int, body: bytes) -> list[RtcpPacket]:
    found: list[RtcpPacket] = []
    offset = 0
    for _ in range(count):
        if offset + 4 > len(body):
            raise RtcpError("RTCP SDES chunk is truncated")
        (ssrc,) = struct.unpack_from("!I", body, offset)
        offset += 4
        while offset < len(body) and body[offset] != 0:
            if offset + 2 > len(body) or offset + 2 + body[offset + 1] > len(body):
                raise RtcpError("RTCP SDES item runs past the end of the packet")
            item, length = body[offset], body[offset + 1]
            if item == SDES_CNAME:
                found.append(SourceDescription(ssrc, body[offset + 2 : offset + 2 + length].decode("utf-8", "replace")))
            offset += 2 + length
        offset = (offset + 4) & ~3  # the null terminator, then padding to a 32-bit boundary
    return found


class ReceiverStats:
    """What an RR says about one incoming source (RFC 3550 appendix A.3 and A.8)."""

    def __init__(self, clock_rate: int = 8000) -> None:
        self.clock_rate = clock_rate
        self.ssrc: int | None = None
        self.sequence = SequenceTracker()
        self.jitter = 0.0  # timestamp units
        self._last_arrival = 0.0
        self._last_timestamp: int | None = None
        self._expected_prior = 0
        self._received_prior = 0
        self._lsr = 0
        self._sr_arrival = 0.0

    def on_rtp(self, packet: RtpPacket, arrival_s: float, *, timed: bool = True) -> int | None:
        """Count a packet; returns its extended sequence number, None for a duplicate or stray.

        A new SSRC starts the statistics over. `timed=False` leaves the jitter estimate alone, for
        packets whose timestamp is not their sampling instant (telephone events repeat their start).
        """
        if packet.ssrc != self.ssrc:
            self._restart(packet.ssrc)
        ext = self.sequence.update(packet.sequence)
        if ext is not None and timed:
            timestamp = packet.timestamp
            if self._last_timestamp is not None:
                # ts_diff inlined: this runs for every received packet of every call.
                sent = ((timestamp - self._last_timestamp + 0x80000000) & 0xFFFFFFFF) - 0x80000000
                transit_step = (arrival_s - self._last_arrival) * self.clock_rate - sent
                self.jitter += (abs(transit_step) - self.jitter) / 16
            self._last_arrival = arrival_s
            self._last_timestamp = timestamp
        return ext

    def on_sender_report(self, report: SenderReport, arrival_s: float) -> None:
        self._lsr = ntp_middle(report.ntp_timestamp)
        self._sr_arrival = arrival_s

    def report_block(self, now_s: float) -> ReportBlock | None:
        """The block for our next RR/SR, or None before the first packet; moves the fraction-lost window."""
        if self.ssrc is None or not self.sequence.started:
            return None
        expected = self.sequence.expected
        received = self.sequence.received
        expected_interval = expected - self._expected_prior
        lost_interval = expected_interval - (received - self._received_prior)
        self._expected_prior, self._received_prior = expected, received
        fraction = (lost_interval << 8) // expected_interval if expected_interval > 0 and lost_interval > 0 else 0
        dlsr = int((now_s - self._sr_arrival) * 65536) & 0xFFFFFFFF if self._lsr else 0
        return ReportBlock(
            ssrc=self.ssrc, fraction_lost=min(fraction, 255), cumulative_lost=expected - received,
            highest_sequence=self.sequence.highest, jitter=int(self.jitter), lsr=self._lsr, dlsr=dlsr,
        )

    def _restart(self, ssrc: int) -> None:
        self.ssrc = ssrc
        self.sequence = SequenceTracker()
        self.jitter = 0.0
        self._last_timestamp = None
        self._expected_prior = self._received_prior = 0
        self._lsr = 0
