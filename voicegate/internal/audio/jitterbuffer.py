"""An adaptive jitter buffer for one incoming audio stream, played out in 20 ms frames.

Packets go in as they arrive (`push`, payload already decoded to PCM16), frames come out once per
20 ms tick (`pop`): always exactly one frame of audio, or None for "nothing to play this tick", which
the caller conceals. Packets are kept by extended sequence number, one slot each; most peers send
20 ms per packet, but sipp's captures and some gateways send 30 ms (or 10 ms), so slots are cut into
frames on the way out and every duration below is converted with the packet length actually seen.

Policy, with the reasons:
- Playing starts (and restarts after an underrun) once the buffered span reaches the target depth,
  so the first packets are not played the moment they arrive and then starved.
- A missing slot with newer packets behind it is a loss: skip it (its duration is concealed with
  silence). A missing slot with nothing behind it is an underrun (the sender paused, is slow, or the
  network stalled): wait, do not skip, so a sender resuming after silence suppression continues where
  it stopped instead of arriving "late".
- The target depth follows the RFC 3550 interarrival-jitter estimate, between one packet and
  `4 x jitter_ms`. A larger target takes effect at the next underrun (that is when it is needed);
  a smaller one by dropping a packet once a whole window of pops had more buffered than the target.
  The same window rule absorbs a sender whose clock runs faster than ours.
- The span never exceeds the maximum: a burst after a stall, or a sequence jump, is trimmed to the
  target at once, dropping the oldest packets, so delay cannot accumulate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Literal

from voicegate.internal.audio.frame import FRAME_MS
from voicegate.internal.audio.rtp import MAX_MISORDER, RtpPacket, seq_diff, ts_diff

# Target depth in multiples of the jitter estimate: about three deviations covers nearly all arrivals.
JITTER_FACTOR = 3.0
# Slot pops in a row that must all have had a spare packet before one is dropped to cut the delay.
SHRINK_WINDOW = 50
# One wild timestamp (a sender bug, a restart) must not pin the target at the maximum for seconds.
MAX_TRANSIT_STEP_MS = 1000.0
_NO_POPS_YET = 1 << 30


class _Slot(Enum):
    LOST = "lost"  # what a skipped slot yields inside the buffer; callers get silence or None


class PushResult(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    LATE = "late"  # its slot was already played or skipped
    RESET = "reset"  # a new SSRC or a restarted sequence: the buffer started over with this packet


@dataclass(slots=True)
class JitterBufferStats:
    pushed: int = 0
    duplicates: int = 0
    late: int = 0
    played: int = 0  # packets played
    missing: int = 0  # slots skipped because their packet never came (or came too late)
    dropped: int = 0  # received packets thrown away to keep the delay bounded
    underruns: int = 0
    resets: int = 0


class JitterBuffer:
    def __init__(
        self,
        *,
        jitter_ms: int,
        frame_ms: int = FRAME_MS,
        clock_rate: int = 8000,
        sample_bytes: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.frame_ms = frame_ms
        self.stats = JitterBufferStats()
        self._clock = clock
        self._ticks_per_ms = clock_rate / 1000
        self._bytes_per_ms = clock_rate * sample_bytes / 1000
        self._frame_bytes = int(frame_ms * self._bytes_per_ms)
        self._max_ms = max(frame_ms, 4 * jitter_ms)
        self._packet_ms = float(frame_ms)  # learned from the payloads
        self._packet_bytes = self._frame_bytes
        self.min_depth = 1
        self.max_depth = self._packets(self._max_ms)
        # Start the estimate where the configured depth would put it, so the first packets do not
        # move the target before there is evidence.
        self._jitter_ms = jitter_ms / JITTER_FACTOR
        self._slots: dict[int, bytes] = {}
        self._ssrc: int | None = None
        self._next: int | None = None  # extended sequence number of the next slot to play
        self._highest = -1
        self._playing = False
        self._played_any = False
        self._bad_seq: int | None = None
        self._last_arrival = 0.0
        self._last_timestamp: int | None = None
        self._window_min = _NO_POPS_YET
        self._window_pops = 0
        self._pending = b""  # audio of a played slot that did not fit in the last frame
        self._pending_real = False  # whether that audio was received (not concealment)

    @property
    def jitter_ms(self) -> float:
        """Interarrival jitter estimate (RFC 3550 6.4.1), in milliseconds."""
        return self._jitter_ms

    @property
    def target_depth(self) -> int:
        """Packets to buffer before playing; computed when needed, which is rarely, not per packet."""
        return min(self._packets(JITTER_FACTOR * self._jitter_ms), self.max_depth)

    @property
    def depth(self) -> int:
        """Packets (slots) of delay currently buffered, holes included."""
        return 0 if self._next is None else max(self._highest - self._next + 1, 0)

    @property
    def playing(self) -> bool:
        return self._playing

    def push(self, packet: RtpPacket, now: float | None = None) -> PushResult:
        """Add an arrived packet; `now` is its arrival time if the caller already read the clock."""
        arrival = self._clock() if now is None else now
        result = PushResult.ACCEPTED
        if packet.ssrc != self._ssrc:
            if self._ssrc is not None:
                result = PushResult.RESET
            self._reset(packet.ssrc)
        if self._next is None:
            self._start(packet.sequence)
            return self._store(self._highest, packet, result, arrival)
        delta = seq_diff(packet.sequence, self._highest & 0xFFFF)
        if delta < -MAX_MISORDER:
            # Far behind: a very late packet, or a sender that restarted its sequence. Two in a row
            # that follow each other mean a restart (the same rule as RFC 3550 A.1).
            if packet.sequence == self._bad_seq:
                self._reset(packet.ssrc)
                self._start(packet.sequence)
                return self._store(self._highest, packet, PushResult.RESET, arrival)
            self._bad_seq = (packet.sequence + 1) & 0xFFFF
            self.stats.late += 1
            return PushResult.LATE
        self._bad_seq = None
        ext = self._highest + delta
        if ext < self._next:
            if self._played_any or self._next - ext >= self.max_depth:
                self.stats.late += 1
                return PushResult.LATE
            self._next = ext  # reordered ahead of the very first packet: nothing was played yet
        if ext in self._slots:
            self.stats.duplicates += 1
            return PushResult.DUPLICATE
        return self._store(ext, packet, result, arrival)

    def pop(self) -> bytes | None:
        """The next frame of audio, or None when this tick has none (not started, underrun, loss)."""
        need = self._frame_bytes
        out, real, last_real = self._pending, self._pending_real, self._pending_real
        while len(out) < need:
            slot = self._pop_slot()
            if slot is None:  # not playing: pad what we have, if anything real
                self._pending, self._pending_real = b"", False
                return out + bytes(need - len(out)) if real else None
            if slot is _Slot.LOST:
                out += bytes(self._packet_bytes)
                last_real = False
            else:
                out += slot
                real = last_real = True
        # What did not fit is the tail of the last slot taken, so it is real if that slot was.
        self._pending = out[need:]
        self._pending_real = last_real and bool(self._pending)
        return out[:need] if real else None

    def _pop_slot(self) -> bytes | Literal[_Slot.LOST] | None:
        if self._next is None:
            return None
        span = self._highest - self._next + 1
        if not self._playing:
            if span < self.target_depth:
                return None
            self._playing = True
            self._window_min, self._window_pops = _NO_POPS_YET, 0
        payload = self._slots.pop(self._next, None)
        if payload is None and span <= 0:
            self._playing = False
            self.stats.underruns += 1
            return None
        self._next += 1
        self._played_any = True
        if payload is None:
            self.stats.missing += 1
        else:
            self.stats.played += 1
        self._shrink_if_always_ahead(span)
        return _Slot.LOST if payload is None else payload

    def _store(self, ext: int, packet: RtpPacket, result: PushResult, arrival: float) -> PushResult:
        assert self._next is not None
        self.stats.pushed += 1
        size = len(packet.payload)
        if size != self._packet_bytes and size:
            self._learn_packet_size(size)
        self._slots[ext] = packet.payload
        self._update_jitter(packet.timestamp, arrival)
        if ext > self._highest:
            self._highest = ext
        if self._highest - self._next + 1 > self.max_depth:
            self._trim_to(self._highest - self.target_depth + 1)
        return result

    def _update_jitter(self, timestamp: int, now: float) -> None:
        if self._last_timestamp is not None:
            sent_ms = ts_diff(timestamp, self._last_timestamp) / self._ticks_per_ms
            transit_step = (now - self._last_arrival) * 1000 - sent_ms
            step = min(abs(transit_step), MAX_TRANSIT_STEP_MS)
            self._jitter_ms += (step - self._jitter_ms) / 16
        self._last_arrival = now
        self._last_timestamp = timestamp

    def _learn_packet_size(self, size: int) -> None:
        self._packet_bytes = size
        self._packet_ms = size / self._bytes_per_ms
        self.max_depth = self._packets(self._max_ms)

    def _packets(self, ms: float) -> int:
        """Packets needed to hold `ms` of audio, at least one (the small slack absorbs float noise)."""
        return max(self.min_depth, math.ceil(ms / self._packet_ms - 1e-9))

    def _shrink_if_always_ahead(self, span: int) -> None:
        self._window_min = min(self._window_min, span)
        self._window_pops += 1
        if self._window_pops < SHRINK_WINDOW:
            return
        if self._window_min > self.target_depth and self._next is not None:
            self._trim_to(self._next + 1)
        self._window_min, self._window_pops = _NO_POPS_YET, 0

    def _trim_to(self, first_kept: int) -> None:
        assert self._next is not None
        if first_kept <= self._next:
            return
        stale = [e for e in self._slots if e < first_kept]
        for ext in stale:
            del self._slots[ext]
        self.stats.dropped += len(stale)
        self.stats.missing += first_kept - self._next - len(stale)
        self._next = first_kept

    def _start(self, sequence: int) -> None:
        self._highest = sequence
        self._next = sequence

    def _reset(self, ssrc: int) -> None:
        if self._ssrc is not None:
            self.stats.resets += 1
        self._ssrc = ssrc
        self._slots.clear()
        self._next = None
        self._highest = -1
        self._playing = False
        self._played_any = False
        self._bad_seq = None
        self._last_timestamp = None
        self._pending, self._pending_real = b"", False
