"""The RTCP side of one call: periodic reports out, the peer's reports in (RFC 3550 section 6).

Kept apart from `RtpSession` because nothing in it is on the 20 ms path: a report every 5 s and the
peer's, both advisory, so every failure here is swallowed rather than allowed to touch the media.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from voicegate.internal.audio.rtcp import (
    ReceiverReport,
    ReceiverStats,
    RtcpError,
    SenderReport,
    SourceDescription,
    ntp_timestamp,
    parse_rtcp,
    serialize_compound,
)
from voicegate.internal.audio.srtp import SrtpContext

Address = tuple[str, int]
_MAX_DATAGRAM = 2048
_DRAIN_LIMIT = 64


@dataclass(frozen=True, slots=True)
class SenderInfo:
    """What an SR says about our own stream."""

    rtp_timestamp: int
    packets: int
    octets: int  # payload octets, as RFC 3550 counts them


class RtcpChannel:
    def __init__(
        self, sock: socket.socket, ssrc: int, cname: str, receiver: ReceiverStats, clock: Callable[[], float]
    ) -> None:
        self.remote: Address | None = None  # where reports go: RTP port + 1, or learned from the peer's
        self.learn_remote = False  # symmetric RTP: answer where the peer's reports come from
        self.accept_host: str | None = None  # once RTP latched: reports from other hosts are ignored
        self.round_trip_s: float | None = None
        self.srtp: SrtpContext | None = None  # set with the RTP side's: SRTCP once the call has keys
        self._sock = sock
        self._ssrc = ssrc
        self._cname = cname
        self._receiver = receiver
        self._clock = clock

    def send_report(self, sender: SenderInfo | None) -> None:
        """An SR when we sent media since the last report (`sender`), else an RR; with our CNAME."""
        if self.remote is None:
            return
        block = self._receiver.report_block(self._clock())
        blocks = (block,) if block is not None else ()
        report: SenderReport | ReceiverReport
        if sender is not None:
            report = SenderReport(
                self._ssrc, ntp_timestamp(time.time()), sender.rtp_timestamp, sender.packets, sender.octets, blocks
            )
        else:
            report = ReceiverReport(self._ssrc, blocks)
        data = serialize_compound([report, SourceDescription(self._ssrc, self._cname)])
        try:
            self._sock.sendto(data if self.srtp is None else self.srtp.protect_rtcp(data), self.remote)
        except OSError:
            pass  # RTCP is advisory; the next report is 5 s away

    def on_readable(self) -> None:
        for _ in range(_DRAIN_LIMIT):
            try:
                data, addr = self._sock.recvfrom(_MAX_DATAGRAM)
            except OSError:  # drained (BlockingIOError), or an ICMP error: nothing more to read now
                return
            if self.srtp is not None:
                clear = self.srtp.unprotect_rtcp(data)
                if clear is None:
                    continue  # failed authentication: counted by the context, never read
                data = clear
            try:
                self._on_report(data, (addr[0], addr[1]))
            except (RtcpError, ValueError):
                pass  # a report we cannot read changes nothing

    def _on_report(self, data: bytes, source: Address) -> None:
        if self.accept_host is not None and source[0] != self.accept_host:
            return
        packets = parse_rtcp(data)
        if self.learn_remote:
            self.remote = source
        now = self._clock()
        for packet in packets:
            if isinstance(packet, SenderReport) and packet.ssrc == self._receiver.ssrc:
                self._receiver.on_sender_report(packet, now)
            if isinstance(packet, SenderReport | ReceiverReport):
                for block in packet.reports:
                    if block.ssrc == self._ssrc:
                        rtt = block.round_trip_s(ntp_timestamp(time.time()))
                        if rtt is not None:
                            self.round_trip_s = rtt
