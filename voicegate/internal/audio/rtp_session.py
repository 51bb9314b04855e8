"""The media endpoint of one SIP call: G.711 over RTP both ways, DTMF, RTCP, timeouts.

Built for hundreds of calls in one process: raw non-blocking sockets read with `loop.add_reader` and
drained on every readiness event (asyncio's datagram transport reads one datagram per event and, after
a short stall, falls seconds behind), and one shared `PacedScheduler` tick per call every 20 ms instead
of a task per call. Measured on 2-core machines like ours, that design holds about twice the calls
of a sleep loop per call with the datagram transport (~1200 against ~600 for a bare media loop).

Nothing here raises into the event loop: malformed packets are counted and dropped, and a failing
callback (source, sink, on_dtmf, on_timeout) is logged and the call's media keeps running.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from voicegate.internal.audio.dtmf import DtmfError, DtmfReceiver, DtmfSender, digit_event
from voicegate.internal.audio.frame import FRAME_MS, frame_bytes
from voicegate.internal.audio.g711 import codec_for_payload_type
from voicegate.internal.audio.jitterbuffer import JitterBuffer
from voicegate.internal.audio.rtcp import ReceiverStats
from voicegate.internal.audio.rtcp_channel import RtcpChannel, SenderInfo
from voicegate.internal.audio.rtp import RtpError, RtpPacket, rtp_header
from voicegate.internal.audio.rtp_ports import RtpPortAllocator, RtpPortsExhausted, RtpSocketPair
from voicegate.internal.audio.scheduler import PacedScheduler, PacedStream
from voicegate.internal.audio.srtp import SrtpContext

__all__ = ["MediaDirection", "RtpPortAllocator", "RtpPortsExhausted", "RtpSession", "RtpStats"]

log = logging.getLogger(__name__)

MediaDirection = Literal["sendrecv", "sendonly", "recvonly", "inactive"]
CLOCK_RATE = 8000
FRAME_SAMPLES = CLOCK_RATE * FRAME_MS // 1000
PCM_FRAME = frame_bytes(CLOCK_RATE)
SILENT_PCM = bytes(PCM_FRAME)
SEND_JITTER_WINDOW = 500  # send intervals kept for the p99: the last 10 s
MAX_DATAGRAM = 2048
# Packets read per readiness event: far more than a call's backlog after any plausible stall, and a
# bound so one flooded socket cannot starve every other call (the selector reports it again).
DRAIN_LIMIT = 256
# A backlog is cut to what the jitter buffer can hold plus this many packets (see `_shed`).
BACKLOG_SLACK = 2
# RTCP multiplexed onto the RTP port (RFC 5761) shows up as payload types 72-76; we did not offer it.
_RTCP_TYPES_ON_RTP_PORT = (72, 76)

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RtpStats:
    packets_sent: int
    bytes_sent: int
    packets_received: int
    bytes_received: int
    lost: int
    duplicates: int
    late: int  # arrived after their playout slot
    malformed: int
    ignored: int  # unknown payload type, or from another address than the locked remote
    shed: int  # stale audio skipped unprocessed after the loop stalled (also counted in `lost`)
    jitter_ms: float  # interarrival jitter of the incoming stream (RFC 3550)
    send_jitter_p99_ms: float  # p99 of |send interval - 20 ms| over the last 10 s
    round_trip_ms: float | None  # from the peer's RTCP receiver reports, when it sends them
    srtp_rejected: int = 0  # SRTP/SRTCP packets that failed authentication or the replay check
    rejected_sources: int = 0  # packets from a host the call never named (symmetric RTP's latch refused them)


class RtpSession:
    """One call's media. Ports are bound at construction (so `local_port` can go into the SDP answer);
    `start` begins the 20 ms ticks. Each tick hands `sink` one 320-byte frame of 8 kHz PCM16 once
    audio has started arriving (silence where a frame is missing), and asks `source` for the next
    frame to send (None: the agent is quiet, comfort silence is sent)."""

    def __init__(
        self,
        *,
        local_host: str,
        allocator: RtpPortAllocator,
        scheduler: PacedScheduler,
        payload_type: int,
        dtmf_payload_type: int | None,
        symmetric: bool,
        timeout_s: float,
        jitter_ms: int,
        source: Callable[[], bytes | None],
        sink: Callable[[bytes], None],
        on_dtmf: Callable[[str], None],
        on_timeout: Callable[[], None],
        rtcp_interval_s: float = 5.0,  # RFC 3550 minimum for a two-party session; tests shorten it
        signalling_host: str | None = None,  # where the call's SIP came from: media may come from there
    ) -> None:
        self._rtcp_interval_ticks = max(round(rtcp_interval_s * 1000 / FRAME_MS), 1)
        self._codec = codec_for_payload_type(payload_type)
        self._dtmf_pt = dtmf_payload_type
        self._symmetric = symmetric
        self._timeout_s = timeout_s
        self._scheduler = scheduler
        self._allocator = allocator
        self._source, self._sink, self._on_dtmf, self._on_timeout = source, sink, on_dtmf, on_timeout
        self._pair: RtpSocketPair = allocator.allocate(local_host)
        self.local_port = self._pair.port
        self._rtp_sock, self._rtcp_sock = self._pair.rtp, self._pair.rtcp

        self._jitter = JitterBuffer(jitter_ms=jitter_ms, clock_rate=CLOCK_RATE, clock=scheduler.time)
        self._clock: Callable[[], float] = scheduler.time
        self._rx = ReceiverStats(CLOCK_RATE)
        self._dtmf_rx = DtmfReceiver()
        self._dtmf_tx = DtmfSender()
        self._silence = self._codec.silence(FRAME_SAMPLES)

        # Outgoing stream identity: random SSRC and initial sequence/timestamp (RFC 3550 5.1).
        self._ssrc = secrets.randbits(32)
        self._seq = secrets.randbits(16)
        self._timestamp = secrets.randbits(32)
        self._dtmf_timestamp = 0
        self._rtcp = RtcpChannel(self._rtcp_sock, self._ssrc, f"voicegate-{secrets.token_hex(6)}", self._rx,
                                 scheduler.time)
        self._rtcp.learn_remote = symmetric

        self._signalled: Address | None = None  # the address the SDP gave
        self._remote: Address | None = None  # where we send RTP: the SDP's, or the latched source
        self._locked: Address | None = None  # the only source accepted once symmetric RTP latched
        self._signalling_host = signalling_host
        self._rejected_sources = 0  # packets from a host neither the SDP nor the signalling named
        self._send_audio = True
        self._expect_rtp = True
        self._receiving = False
        self._gap = True  # no packet sent since the start or a hold: the next one carries the marker
        self._quiet = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stream: PacedStream | None = None
        self._closed = False
        self._timed_out = False
        self._last_rx = 0.0
        self._ticks = 0

        self._packets_sent = self._bytes_sent = self._payload_bytes_sent = 0
        self._packets_received = self._bytes_received = 0
        self._malformed = self._ignored = self._callback_errors = self._shed_packets = 0
        self._earlier_lost = self._earlier_duplicates = 0  # from sources (SSRCs) the peer replaced
        self._last_send = 0.0
        self._send_deviation_ms: deque[float] = deque(maxlen=SEND_JITTER_WINDOW)
        self._sent_since_report = False
        self._srtp: SrtpContext | None = None

    # -- control ---------------------------------------------------------------------------------

    def start(self, remote: Address | None) -> None:
        """Begin receiving and sending; `remote` may be None until symmetric RTP learns it."""
        if self._closed or self._stream is not None:
            return
        self._set_remote(remote)
        self._loop = asyncio.get_running_loop()
        self._clock = self._scheduler.clock
        self._loop.add_reader(self._rtp_sock.fileno(), self._on_rtp_readable)
        self._loop.add_reader(self._rtcp_sock.fileno(), self._rtcp.on_readable)
        self._last_rx = self._clock()
        self._stream = self._scheduler.add(self._tick)

    def update(
        self,
        remote: Address | None,
        payload_type: int,
        dtmf_payload_type: int | None,
        direction: MediaDirection = "sendrecv",
    ) -> None:
        """Apply a re-INVITE. `direction` is OUR side's direction, as in our SDP answer (what
        internal/sip/sdp.py's `Negotiated.direction` holds): "recvonly" or "inactive" is a hold, so we
        stop sending audio and keep receiving; "sendonly" or "inactive" means the peer sends nothing,
        so its silence is then no reason to end the call."""
        codec = codec_for_payload_type(payload_type)
        if codec is not self._codec:
            self._codec = codec
            self._silence = codec.silence(FRAME_SAMPLES)
        self._dtmf_pt = dtmf_payload_type
        if remote != self._signalled:
            self._set_remote(remote)
        send = direction in ("sendrecv", "sendonly")
        if send and not self._send_audio:
            self._gap = True
        self._send_audio = send
        expect = direction in ("sendrecv", "recvonly")
        if expect and not self._expect_rtp:
            self._last_rx = self._scheduler.time()  # the timeout starts over when media is due again
        self._expect_rtp = expect

    def secure(self, context: SrtpContext | None) -> None:
        """Encrypt and authenticate from now on (SDES keys from the SDP), or stop (None)."""
        self._srtp = self._rtcp.srtp = context

    def send_dtmf(self, digit: str) -> None:
        """Queue RFC 4733 events for one or more keys; sent instead of audio, 20 ms per packet."""
        for key in digit:
            digit_event(key)
        if self._dtmf_pt is None:
            raise ValueError("the peer did not negotiate telephone-event, so DTMF cannot be sent in-band")
        self._dtmf_tx.queue(digit)

    @property
    def sending_dtmf(self) -> bool:
        """Telephone events queued by `send_dtmf` are still going out."""
        return self._dtmf_tx.busy

    @property
    def dtmf_negotiated(self) -> bool:
        return self._dtmf_pt is not None

    def stats(self) -> RtpStats:
        deviations = np.fromiter(self._send_deviation_ms, dtype=np.float64)
        sequence = self._rx.sequence
        return RtpStats(
            packets_sent=self._packets_sent,
            bytes_sent=self._bytes_sent,
            packets_received=self._packets_received,
            bytes_received=self._bytes_received,
            lost=self._earlier_lost + sequence.lost,
            duplicates=self._earlier_duplicates + sequence.duplicates,
            late=self._jitter.stats.late,
            malformed=self._malformed,
            ignored=self._ignored,
            shed=self._shed_packets,
            jitter_ms=self._rx.jitter * 1000 / CLOCK_RATE,
            send_jitter_p99_ms=float(np.percentile(deviations, 99)) if deviations.size else 0.0,
            round_trip_ms=None if self._rtcp.round_trip_s is None else self._rtcp.round_trip_s * 1000,
            srtp_rejected=self._srtp.rejected if self._srtp is not None else 0,
            rejected_sources=self._rejected_sources,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._stream is not None:
            self._scheduler.remove(self._stream)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._rtp_sock.fileno())
            self._loop.remove_reader(self._rtcp_sock.fileno())
        self._allocator.release(self._pair)

    # -- every 20 ms -------------------------------------------------------------------------------

    def _tick(self) -> None:
        now = self._clock()
        self._ticks += 1
        if self._receiving:
            frame = self._jitter.pop()
            try:
                # Silence for a missing frame: the consumer's clock (VAD, recognition) stays steady.
                self._sink(SILENT_PCM if frame is None else frame)
            except Exception:
                self._callback_failed("sink")
        if self._expect_rtp and not self._timed_out and now - self._last_rx >= self._timeout_s:
            self._timed_out = True
            log.info("no RTP for %.1f s on port %d", self._timeout_s, self.local_port)
            self._call(self._on_timeout)
            if self._closed:
                return  # the usual reaction to a timeout is hanging up, which closed us
        if self._dtmf_rx.pending:
            for digit in self._dtmf_rx.expire(now):
                self._call(self._on_dtmf, digit)
        self._send_next()
        if self._ticks % self._rtcp_interval_ticks == 0:
            sent = self._sent_since_report
            self._sent_since_report = False
            self._rtcp.send_report(
                SenderInfo(self._timestamp, self._packets_sent, self._payload_bytes_sent) if sent else None
            )

    def _send_next(self) -> None:
        pcm = self._pull()
        timestamp = self._timestamp
        self._timestamp = (timestamp + FRAME_SAMPLES) & 0xFFFFFFFF  # media time runs on during a hold
        if not self._send_audio or self._remote is None or self._closed:
            self._gap = True
            return
        dtmf = self._dtmf_tx.next_tick() if self._dtmf_tx.busy else None
        if dtmf is not None and self._dtmf_pt is not None:
            if dtmf.start:
                self._dtmf_timestamp = timestamp  # every packet of one event carries its start time
            header = rtp_header(self._dtmf_pt, self._seq, self._dtmf_timestamp, self._ssrc, dtmf.start)
            payload = dtmf.payload
        else:
            if pcm is None:
                payload, marker = self._silence, self._gap
                self._quiet = True
            else:
                payload, marker = self._codec.encode(pcm), self._gap or self._quiet
                self._quiet = False
            header = rtp_header(self._codec.payload_type, self._seq, timestamp, self._ssrc, marker)
        self._seq = (self._seq + 1) & 0xFFFF
        sent_at = time.monotonic()
        try:
            packet = header + payload if self._srtp is None else self._srtp.protect(header + payload)
            self._rtp_sock.sendto(packet, self._remote)
        except OSError:
            return  # a full socket buffer or an unreachable peer: this frame is lost, the next may go
        if not self._gap:
            self._send_deviation_ms.append(abs((sent_at - self._last_send) * 1000 - FRAME_MS))
        self._gap = False
        self._last_send = sent_at
        self._packets_sent += 1
        self._bytes_sent += len(header) + len(payload)
        self._payload_bytes_sent += len(payload)
        self._sent_since_report = True

    def _pull(self) -> bytes | None:
        try:
            pcm = self._source()
        except Exception:
            self._callback_failed("source")
            return None
        if pcm is not None and len(pcm) != PCM_FRAME:
            pcm = pcm[:PCM_FRAME].ljust(PCM_FRAME, b"\x00")  # the contract is 20 ms; keep the clock
        return pcm

    # -- receiving ---------------------------------------------------------------------------------

    def _on_rtp_readable(self) -> None:
        sock = self._rtp_sock
        batch: list[tuple[bytes, Any]] = []
        for _ in range(DRAIN_LIMIT):
            try:
                batch.append(sock.recvfrom(MAX_DATAGRAM))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._malformed += 1  # e.g. an ICMP error surfacing here; nothing to read now
                break
        keep = self._jitter.max_depth + BACKLOG_SLACK
        if len(batch) > keep:
            batch = self._shed(batch, keep)
        for data, addr in batch:
            if self._closed:
                return  # a callback (on_dtmf hanging up) closed the session mid-batch
            try:
                self._on_rtp(data, addr if len(addr) == 2 else (addr[0], addr[1]))  # IPv6 gives 4 items
            except Exception:
                self._malformed += 1
                log.debug("dropped an RTP packet that could not be handled", exc_info=True)

    def _shed(self, batch: list[tuple[bytes, Any]], keep: int) -> list[tuple[bytes, Any]]:
        """Skip the audio of a backlog older than the jitter buffer could ever hold.

        Such a backlog means the loop was stalled (an overloaded core); the jitter buffer would trim
        those packets at once anyway, so not parsing and decoding them changes nothing audible and
        keeps an overloaded server's delay bounded instead of growing to the socket buffer's seconds.
        Telephone events are kept: a key press must not vanish with the stale audio.
        """
        old, recent = batch[:-keep], batch[-keep:]
        dtmf = self._dtmf_pt
        kept = [item for item in old if len(item[0]) > 1 and item[0][1] & 0x7F == dtmf]
        self._shed_packets += len(old) - len(kept)
        return kept + recent

    def _may_latch(self, source: Address) -> bool:
        """Symmetric RTP answers where the caller's packets really come from (a NAT's port), but only on
        a host the call named: the SDP's address or the SIP peer's. Anyone else who sprays packets at
        a fresh port ("RTP bleed") would otherwise be sent the agent's audio, greeting first."""
        allowed = {host for host in (self._signalled[0] if self._signalled else None, self._signalling_host) if host}
        return not allowed or source[0] in allowed

    def _on_rtp(self, data: bytes, source: Address) -> None:
        # The very address the SDP gave wins back a latch a NAT port had (once its packet authenticates).
        relatch = self._symmetric and self._locked is not None and source != self._locked \
            and source == self._signalled
        if self._locked is not None and source != self._locked and not relatch:
            self._ignored += 1
            return
        if self._symmetric and self._locked is None and not self._may_latch(source):
            self._rejected_sources += 1
            return
        if self._srtp is not None:
            # Before anything trusts the packet (the symmetric-RTP latch included): forged ones count only here.
            clear = self._srtp.unprotect(data)
            if clear is None:
                return
            data = clear
        try:
            packet = RtpPacket.parse(data)
        except RtpError:
            self._malformed += 1
            return
        payload_type = packet.payload_type
        audio = payload_type == self._codec.payload_type
        if not audio and payload_type != self._dtmf_pt:
            self._ignored += 1
            if not _RTCP_TYPES_ON_RTP_PORT[0] <= payload_type <= _RTCP_TYPES_ON_RTP_PORT[1]:
                # Comfort noise and the like are not for us, but they do prove the peer is there:
                # a phone that sends only CN while its user is silent must not be hung up on.
                self._last_rx = self._clock()
            return
        if self._symmetric and (self._locked is None or relatch):
            self._locked = self._remote = source  # latch: answer where the peer really is (NAT)
            self._rtcp.accept_host = source[0]
            if self._rtcp.remote is None or self._rtcp.remote[0] != source[0]:
                self._rtcp.remote = (source[0], source[1] + 1)
        now = self._clock()
        self._last_rx = now
        self._packets_received += 1
        self._bytes_received += len(data)
        if packet.ssrc != self._rx.ssrc and self._rx.ssrc is not None:
            self._earlier_lost += self._rx.sequence.lost
            self._earlier_duplicates += self._rx.sequence.duplicates
        self._rx.on_rtp(packet, now, timed=audio)  # telephone events repeat their start timestamp
        if audio:
            packet.payload = self._codec.decode(packet.payload)
            self._jitter.push(packet, now)
            self._receiving = True
            return
        try:
            digits = self._dtmf_rx.feed(packet, now)
        except DtmfError:
            self._malformed += 1
            return
        for digit in digits:
            self._call(self._on_dtmf, digit)

    # -- helpers -----------------------------------------------------------------------------------

    def _set_remote(self, remote: Address | None) -> None:
        self._signalled = remote
        if remote is not None and remote[0] in ("0.0.0.0", "::"):
            remote = None  # the old "c=0.0.0.0" hold: sending there would reach this very host
        self._remote = remote
        self._locked = None  # a new address from signalling: latch again on the first packet
        self._rtcp.accept_host = None
        self._rtcp.remote = None if remote is None else (remote[0], remote[1] + 1)

    def _call(self, callback: Callable[..., None], *args: object) -> None:
        try:
            callback(*args)
        except Exception:
            self._callback_failed(getattr(callback, "__name__", "callback"))

    def _callback_failed(self, what: str) -> None:
        self._callback_errors += 1
        # Logged at the 1st, 2nd, 4th, 8th... failure: a broken consumer must not flood the log.
        if self._callback_errors & (self._callback_errors - 1) == 0:
            log.exception("RTP session on port %d: %s failed (%d failures)", self.local_port, what,
                          self._callback_errors)

