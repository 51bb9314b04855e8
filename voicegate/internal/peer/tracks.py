"""Audio between aiortc and the pipeline: decoded frames in, paced 20 ms frames out.

Inbound, aiortc's Opus decoder hands us 48 kHz (usually stereo) frames of whatever length the
sender packetised; the pipeline wants exactly 20 ms of mono PCM16 at its own rate. `InboundAudio`
downmixes, resamples with one Resampler for the whole connection (its filter state keeps chunk
boundaries inaudible) and re-cuts the stream into 20 ms frames, carrying remainders over.

Outbound, aiortc's RTP sender calls `recv()` in a loop as fast as it returns. `AgentAudioTrack` paces
those calls on the monotonic clock, one frame per 20 ms, which is also the pipeline's playout tick.
When the call sends Opus (`use_opus()`, from the negotiated answer), the track hands aiortc packets it
encoded itself (opus.py: mono at the pipeline's rate, one cached packet for silence, no executor hop);
otherwise (PCMU/PCMA) frames, mono at the pipeline's rate with `pts` counted in samples, which aiortc's
encoder resamples itself.
"""

from __future__ import annotations

import asyncio
import fractions
import logging
import time
from collections.abc import Callable

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from voicegate.internal.audio.frame import FRAME_MS, frame_bytes
from voicegate.internal.peer.opus import OpusVoice, opus_supported

log = logging.getLogger(__name__)

FRAME_S = FRAME_MS / 1000.0
# If the event loop stalls for longer than this, the outbound clock restarts from now instead of
# firing a burst of catch-up frames the far end would only have to discard.
MAX_LAG_S = 0.2


class InboundAudio:
    """Turns decoded frames into exact 20 ms PCM16 frames at `rate`, handed to `push`.

    One libswresample context per track downmixes, converts the sample format and resamples in a
    single C call (48 kHz stereo Opus to 16 kHz mono); doing those steps in numpy cost about a fifth of
    the event loop per WebRTC call. A frame whose format, layout or rate changes gets a new context.
    """

    def __init__(self, rate: int, push: Callable[[bytes], None]) -> None:
        self.rate = rate
        self.push = push
        self.frame_size = frame_bytes(rate)
        self._resampler: av.AudioResampler | None = None
        self._source: tuple[str, str, int] | None = None
        self._pending = bytearray()

    def feed(self, frame: av.AudioFrame) -> None:
        source = (frame.format.name, frame.layout.name, frame.sample_rate)
        if self._resampler is None or source != self._source:
            self._resampler = av.AudioResampler(format="s16", layout="mono", rate=self.rate)
            self._source = source
            # The resampler holds back its filter's delay, so without this each 20 ms packet would only
            # complete its frame when the next one arrives (20 ms late). The delay's worth of silence in
            # front (about a millisecond) lets every packet complete its own frame.
            self._pending += bytes(2 * resampler_delay(source, self.rate))
        frame.pts = None  # the resampler keeps its own time; decoder timestamps may jump
        for out in self._resampler.resample(frame):
            self._pending += out.to_ndarray().tobytes()
        size = self.frame_size
        while len(self._pending) >= size:
            chunk = bytes(self._pending[:size])
            del self._pending[:size]
            self.push(chunk)


_DELAYS: dict[tuple[tuple[str, str, int], int], int] = {}


def resampler_delay(source: tuple[str, str, int], rate: int) -> int:
    """Output samples a fresh resampler from `source` (format, layout, rate) to mono s16 at `rate` holds
    back from 20 ms of input: measured once per pair on a throwaway resampler (PyAV does not expose it)."""
    key = (source, rate)
    if key not in _DELAYS:
        name, layout, source_rate = source
        samples = source_rate // 50
        probe = av.AudioFrame(format=name, layout=layout, samples=samples)
        for plane in probe.planes:
            plane.update(bytes(plane.buffer_size))
        probe.sample_rate = source_rate
        out = sum(chunk.samples for chunk in av.AudioResampler(format="s16", layout="mono", rate=rate).resample(probe))
        _DELAYS[key] = max(0, rate // 50 - out)
    return _DELAYS[key]


async def consume_track(track: MediaStreamTrack, inbound: InboundAudio) -> None:
    """Feed every frame of `track` to `inbound` until the track ends."""
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if isinstance(frame, av.AudioFrame):
            inbound.feed(frame)


class AgentAudioTrack(MediaStreamTrack):
    """The agent's voice: one frame from `source` (None = quiet) every 20 ms, on the monotonic clock."""

    kind = "audio"

    def __init__(self, rate: int, source: Callable[[], bytes | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.rate = rate
        self.source = source
        self._clock = clock
        self._samples = rate * FRAME_MS // 1000
        self._silence = bytes(self._samples * 2)
        self._time_base = fractions.Fraction(1, rate)
        self._next_at: float | None = None
        self._pts = 0
        self.frames_sent = 0
        self.opus: OpusVoice | None = None

    def use_opus(self) -> bool:
        """Hand aiortc Opus packets from now on (the call negotiated Opus); False if the rate cannot be."""
        if self.opus is None and opus_supported(self.rate):
            self.opus = OpusVoice(self.rate)
        return self.opus is not None

    async def recv(self) -> av.AudioFrame | av.Packet:
        if self.readyState != "live":
            raise MediaStreamError
        await self._wait_for_tick()
        if self.opus is not None:
            packet = self.opus.packet(self._pulled_pcm(), self._pts)
            self._pts += self._samples
            self.frames_sent += 1
            return packet
        pcm = self._next_pcm()
        frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm, dtype=np.int16).reshape(1, -1),
                                           format="s16", layout="mono")
        frame.sample_rate = self.rate
        frame.pts = self._pts
        frame.time_base = self._time_base
        self._pts += self._samples
        self.frames_sent += 1
        return frame

    async def _wait_for_tick(self) -> None:
        now = self._clock()
        if self._next_at is None:
            self._next_at = now
            return
        self._next_at += FRAME_S
        if now - self._next_at > MAX_LAG_S:
            self._next_at = now
        delay = self._next_at - now
        if delay > 0:
            await asyncio.sleep(delay)

    def _pulled_pcm(self) -> bytes | None:
        """The source's next 20 ms, or None while the agent is quiet."""
        source = self.source
        pcm = source() if source is not None else None
        if not pcm:
            return None
        if len(pcm) != len(self._silence):  # the pipeline promises 20 ms; never let a slip reach the encoder
            pcm = (pcm + self._silence)[: len(self._silence)]
        return pcm

    def _next_pcm(self) -> bytes:
        pcm = self._pulled_pcm()
        return self._silence if pcm is None else pcm
