"""DTMF as RFC 4733 telephone events: the 4-byte payload, a receiver and a sender.

An event is a run of packets sharing one RTP timestamp (the event's start): a first packet (marker
set), updates with a growing duration, and a final packet with the end bit, sent three times because
any of them may be lost. The receiver reports each event exactly once, as soon as it can be sure of
it, and copes with the loss of any of those packets.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

from voicegate.internal.audio.frame import FRAME_MS
from voicegate.internal.audio.rtp import RtpPacket, ts_diff

EVENT_DIGITS = "0123456789*#ABCD"  # event codes 0-15 (RFC 4733 section 3.2)
END_REPEATS = 3
# A started event whose end packets were all lost and that no later event follows is reported after
# this long without packets; senders update at least every 50 ms, so this is several lost updates.
EVENT_IDLE_S = 0.5
# Events longer than 65535 timestamp units continue under a new timestamp (RFC 4733 2.5.1.3); a new
# timestamp right after a segment this long is that continuation, not a second press of the digit.
_SEGMENT_NEARLY_FULL = 0xFFFF - 8000

_PAYLOAD = struct.Struct("!BBH")


class DtmfError(ValueError):
    """A telephone-event payload that cannot be decoded, or a digit that cannot be sent."""


@dataclass(frozen=True, slots=True)
class TelephoneEvent:
    event: int
    end: bool = False
    volume: int = 10  # power level in -dBm0, 0-63
    duration: int = 0  # timestamp units since the event started

    @classmethod
    def parse(cls, data: bytes) -> TelephoneEvent:
        if len(data) < _PAYLOAD.size:
            raise DtmfError(f"telephone-event payload of {len(data)} bytes is shorter than 4")
        event, flags, duration = _PAYLOAD.unpack_from(data)
        return cls(event=event, end=bool(flags & 0x80), volume=flags & 0x3F, duration=duration)

    def serialize(self) -> bytes:
        if not 0 <= self.event <= 0xFF or not 0 <= self.volume <= 0x3F or not 0 <= self.duration <= 0xFFFF:
            raise DtmfError("telephone event fields out of range (event 0-255, volume 0-63, duration 0-65535)")
        return _PAYLOAD.pack(self.event, (0x80 if self.end else 0) | self.volume, self.duration)

    @property
    def digit(self) -> str | None:
        """The DTMF key this event stands for, or None for other events (flash, fax tones...)."""
        return EVENT_DIGITS[self.event] if self.event < len(EVENT_DIGITS) else None


def digit_event(digit: str) -> int:
    index = EVENT_DIGITS.find(digit.upper()) if len(digit) == 1 else -1
    if index < 0:
        raise DtmfError(f"{digit!r} is not a DTMF key (use 0-9, *, #, A-D)")
    return index


class DtmfReceiver:
    """Turns a stream of telephone-event packets into one digit per key press."""

    def __init__(self) -> None:
        self.pending = False  # an event has started and is not reported yet: `expire` has work to do
        self._ssrc: int | None = None
        self._timestamp: int | None = None
        self._event: TelephoneEvent | None = None
        self._reported = True
        self._last_packet_at = 0.0

    def feed(self, packet: RtpPacket, now: float = 0.0) -> list[str]:
        """Digits completed by this packet: usually none, one on an event's end, rarely two."""
        event = TelephoneEvent.parse(packet.payload)
        digits: list[str] = []
        same_source = packet.ssrc == self._ssrc and self._timestamp is not None
        self._ssrc = packet.ssrc
        if same_source and packet.timestamp == self._timestamp:
            self._last_packet_at = now
            self._event = event
            if event.end:
                digits += self._report()
            return digits
        if same_source and ts_diff(packet.timestamp, self._timestamp or 0) < 0:
            return digits  # a straggler from an event already reported
        previous = self._event
        continuation = (
            previous is not None and not self._reported and previous.event == event.event
            and previous.duration >= _SEGMENT_NEARLY_FULL
        )
        if not continuation:
            # A new timestamp means the previous event is over, even if none of its end packets came.
            digits += self._report()
            self._reported = False
            self.pending = True
        self._timestamp = packet.timestamp
        self._event = event
        self._last_packet_at = now
        if event.end:
            digits += self._report()
        return digits

    def expire(self, now: float) -> list[str]:
        """The current event's digit if its packets stopped without an end; call this now and then."""
        if not self._reported and now - self._last_packet_at >= EVENT_IDLE_S:
            return self._report()
        return []

    def _report(self) -> list[str]:
        if self._reported or self._event is None:
            return []
        self._reported = True
        self.pending = False
        digit = self._event.digit
        return [digit] if digit is not None else []


@dataclass(frozen=True, slots=True)
class DtmfTick:
    """What to send in one 20 ms tick while a digit is being sent."""

    payload: bytes
    start: bool  # first packet of an event: takes a new RTP timestamp and the marker bit
    end: bool


class DtmfSender:
    """Queues digits and hands out one telephone-event payload per tick (None: send audio instead)."""

    def __init__(
        self,
        *,
        duration_ms: int = 100,
        gap_ms: int = 60,
        volume: int = 10,
        clock_rate: int = 8000,
        frame_ms: int = FRAME_MS,
    ) -> None:
        if duration_ms < frame_ms:
            raise DtmfError(f"a DTMF event must last at least one frame ({frame_ms} ms)")
        self.duration_ms = duration_ms
        self.volume = volume
        self._frame_samples = clock_rate * frame_ms // 1000
        self._frames = duration_ms // frame_ms
        # Audio between events: gateways that regenerate tones need a pause to see two presses.
        self._gap_ticks = max(gap_ms // frame_ms, 0)
        self._ticks: deque[DtmfTick | None] = deque()

    def events(self, digit: str) -> list[TelephoneEvent]:
        """The payload sequence for one digit: updates with growing duration, then the end three times."""
        code = digit_event(digit)
        sequence = [
            TelephoneEvent(code, end=False, volume=self.volume, duration=n * self._frame_samples)
            for n in range(1, self._frames)
        ]
        final = TelephoneEvent(code, end=True, volume=self.volume, duration=self._frames * self._frame_samples)
        return sequence + [final] * END_REPEATS

    def queue(self, digits: str) -> None:
        planned = [self.events(digit) for digit in digits]  # validate every digit before queueing any
        for events in planned:
            for index, event in enumerate(events):
                self._ticks.append(DtmfTick(event.serialize(), start=index == 0, end=event.end))
            self._ticks.extend([None] * self._gap_ticks)

    @property
    def busy(self) -> bool:
        return bool(self._ticks)

    def next_tick(self) -> DtmfTick | None:
        return self._ticks.popleft() if self._ticks else None
