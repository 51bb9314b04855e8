"""The agent's voice as Opus packets, encoded here instead of by aiortc.

aiortc encodes whatever frame a track's `recv()` returns: it resamples to 48 kHz stereo, encodes at
96 kbit/s, works out the frame's audio level in numpy and hands every frame to the default executor, a
thread hop that cost more CPU than the encode itself (docs/performance.md, "WebRTC media path"). It
did all of that for the 50 silent frames a second of an agent that says nothing, which is most of a
call. A track that returns an `av.Packet` instead is only packed into RTP (aiortc's
`RTCRtpSender._next_encoded_frame` -> `Encoder.pack`), so `OpusVoice` encodes the agent's frames
itself:

- mono at the pipeline's own rate (8 or 16 kHz are Opus input rates, so nothing is resampled: the
  pipeline's audio has no more bandwidth than that anyway), CELT only at 48 kbit/s (below);
- on the event loop, one small C call per frame of speech (~50 us), cheaper than aiortc's hand-off;
- and while the agent is quiet, after a few frames of real encoded silence that let the encoder's and
  the far decoder's state settle on silence, the same pre-encoded silence packet every 20 ms, with no
  encoder run at all. Packets keep flowing at the full rate with continuous RTP timestamps, so a
  browser's jitter buffer or an aiortc receiver sees an ordinary stream, never a gap to conceal.
"""

from __future__ import annotations

import fractions
import functools

import av

from voicegate.internal.audio.frame import FRAME_MS

# Opus's RTP clock is 48 kHz whatever the input rate (RFC 7587). Packets are timed on it, so aiortc's
# `pack` finds the time base it wants and does no Fraction arithmetic per packet.
RTP_CLOCK = 48000
RTP_TIME_BASE = fractions.Fraction(1, RTP_CLOCK)
# Sample rates libopus encodes natively; another pipeline rate leaves the encoding to aiortc.
OPUS_INPUT_RATES = frozenset({8000, 12000, 16000, 24000, 48000})
# CELT only (libopus's "restricted low delay" application) rather than "voip"'s SILK: measured on
# espeak sentences at 16 kHz, 48 kbit/s CELT at complexity 5 took ~50 us a frame against ~115 us for
# SILK at 32 kbit/s, and came out closer to the input (log-spectral distance 3.3 dB against 6.4 dB;
# aiortc's 96 kbit/s stereo: 4.6 dB), with 4 ms less codec delay (2.5 ms lookahead against 6.5 ms).
# What SILK would buy, lower bitrates and in-band FEC, the aiortc encoder this replaces used neither.
APPLICATION = "lowdelay"
BITRATE = 48000
# libopus's effort (0-10, ffmpeg's compression_level): 10 cost ~40 % more per frame for 0.4 dB.
COMPLEXITY = 5
# Frames of silence still run through the encoder after speech: its tail (the last 20 ms of
# lookahead) and both ends' predictor state fade to silence before the cached packet takes over, so
# the next reply starts from the state the cached packet left the far decoder in.
SETTLE_FRAMES = 10


def opus_supported(rate: int) -> bool:
    return rate in OPUS_INPUT_RATES


def _encoder(rate: int) -> av.AudioCodecContext:
    codec = av.CodecContext.create("libopus", "w")
    assert isinstance(codec, av.AudioCodecContext)
    codec.bit_rate = BITRATE
    codec.format = "s16"
    codec.layout = "mono"
    codec.sample_rate = rate
    codec.time_base = fractions.Fraction(1, rate)
    codec.options = {"application": APPLICATION, "compression_level": str(COMPLEXITY)}
    return codec


def _pcm_frame(pcm: bytes, rate: int) -> av.AudioFrame:
    frame = av.AudioFrame(format="s16", layout="mono", samples=len(pcm) // 2)
    frame.planes[0].update(pcm)
    frame.sample_rate = rate
    return frame


@functools.cache
def silence_packet(rate: int) -> bytes:
    """The packet a settled encoder makes of 20 ms of digital silence (a few bytes; decodes to zeros)."""
    codec = _encoder(rate)
    quiet = bytes(rate * FRAME_MS // 1000 * 2)
    packet = b""
    for _ in range(SETTLE_FRAMES):
        for out in codec.encode(_pcm_frame(quiet, rate)):
            packet = bytes(out)
    return packet


class OpusVoice:
    """Encodes one call's outbound 20 ms PCM16 frames to Opus packets timed in samples at `rate`."""

    def __init__(self, rate: int) -> None:
        if not opus_supported(rate):
            raise ValueError(f"Opus cannot encode {rate} Hz input")
        self.rate = rate
        self._codec = _encoder(rate)
        self._ticks_per_sample = RTP_CLOCK // rate
        self._silence = silence_packet(rate)
        self._quiet = bytes(rate * FRAME_MS // 1000 * 2)
        self._quiet_frames = SETTLE_FRAMES  # a new call starts settled: nothing was said yet
        self.encoded = 0  # frames that ran the encoder (the rest were the cached silence)

    def packet(self, pcm: bytes | None, pts: int) -> av.Packet:
        """The packet for one frame (`None`: the agent is quiet) at `pts` samples into the call, timed
        on the 48 kHz RTP clock."""
        packet = av.Packet(self._payload(pcm))
        packet.pts = pts * self._ticks_per_sample
        packet.time_base = RTP_TIME_BASE
        return packet

    def _payload(self, pcm: bytes | None) -> bytes:
        if pcm is None:
            if self._quiet_frames >= SETTLE_FRAMES:
                return self._silence
            self._quiet_frames += 1
            pcm = self._quiet
        else:
            self._quiet_frames = 0
        self.encoded += 1
        packets = self._codec.encode(_pcm_frame(pcm, self.rate))
        # libopus makes exactly one packet of each 20 ms frame; should it ever hold one back, the
        # receiver still gets a packet for this timestamp.
        return bytes(packets[0]) if packets else self._silence
