"""Audio bookkeeping of a Realtime call: the two resamplers, how much of an item the caller heard, and
the latency samples voicegate adds between the wire and the model.

The call's rate (8 kHz SIP, 48 kHz WebRTC, anything LocalCall drives) is converted to the model's rates
with one stateful resampler per direction (internal/audio/resample.py), a 20 ms frame at a time: nothing
is gathered before it is sent, so the caller's audio reaches the model one frame after it arrived.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from voicegate.internal.audio.resample import Resampler

FRAME_MS = 20
LATENCY_SAMPLES = 4096  # per direction: minutes of a call's frames, bounded memory


@dataclass
class Latency:
    """What voicegate adds, in ms, sampled on the hot path without logging (bench/realtime reads it):
    `inbound`, from a caller frame given to push_audio to its append on the socket; `outbound`, from a
    model audio delta arriving (while nothing was queued ahead of it) to the frame with its first sample
    leaving through pull_audio."""

    inbound: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))
    outbound: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))


class Converter:
    """One direction's rate conversion of PCM16 mono (the same rate both sides: passed through)."""

    def __init__(self, src_rate: int, dst_rate: int) -> None:
        self._resampler = Resampler(src_rate, dst_rate)

    def process(self, pcm: bytes) -> bytes:
        return self._resampler.process(pcm)


def heard_ms(frames_played: int) -> int:
    """The truncate offset of a model audio item: the ms the caller was played of it. Counted in the call's
    20 ms frames as the transport pulled them (not as they arrived from the model, which sends faster than
    real time), so a barge-in cuts the model's memory of its turn where the caller stopped hearing it."""
    return frames_played * FRAME_MS
