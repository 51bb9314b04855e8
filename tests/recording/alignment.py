"""How aligned a recording's two channels are, measured against the wire.

"Aligned within 60 ms" means: two sounds, one from the caller and one from the agent, that were t apart
on the wire at voicegate's network interface are t apart in the recording, give or take 60 ms. It is
measured with the call's RTP as a wire tap saw it (bench/common/wire_tap.py keeps every packet of both
directions with the kernel's receive time, one clock for both):

1. Each direction's audio is laid on that clock sample by sample: a packet's place comes from its RTP
   timestamp (exact within a stream), and the stream's place on the clock from the median of
   (arrival time - timestamp): one late packet moves nothing.
2. The recording's left channel is found in the caller's wire audio, and its right channel in the
   agent's, by normalised cross-correlation: each gives the wire moment of the recording's first sample
   as that channel has it.
3. The two moments differ by the channels' misalignment. The caller's channel is what the pipeline
   heard, after the jitter buffer, so it trails the wire by the buffer's depth (one or two packets on a
   clean network); the agent's is what was sent in the same tick.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from voicegate.internal.audio.g711 import alaw_decode, ulaw_decode
from voicegate.internal.audio.rtp import RtpPacket

RATE = 8000
DECODERS = {0: ulaw_decode, 8: alaw_decode}


@dataclass(frozen=True, slots=True)
class WireAudio:
    start: float  # wire time (seconds since the epoch) of `pcm`'s first sample
    pcm: np.ndarray  # float64 samples at RATE


def wire_audio(packets: Iterable[tuple[float, bytes]]) -> WireAudio:
    """One direction's G.711 packets (arrival time, datagram) as audio on the wire's clock."""
    parsed = []
    for at, data in packets:
        packet = RtpPacket.parse(data)
        if packet.payload_type in DECODERS:
            parsed.append((at, packet))
    if not parsed:
        raise ValueError("no audio packets")
    first_ts = parsed[0][1].timestamp
    # Unwrapped timestamps relative to the first packet (a stream never runs for 2**31 samples here).
    offsets = [((packet.timestamp - first_ts + 2**31) % 2**32) - 2**31 for _, packet in parsed]
    anchor = float(np.median([at - offset / RATE for (at, _), offset in zip(parsed, offsets, strict=True)]))
    low = min(offsets)
    samples = np.zeros(max(offsets) - low + RATE // 50 * 2)
    for (_, packet), offset in zip(parsed, offsets, strict=True):
        pcm = np.frombuffer(DECODERS[packet.payload_type](packet.payload), dtype="<i2").astype(np.float64)
        samples[offset - low:offset - low + len(pcm)] = pcm
    return WireAudio(anchor + low / RATE, samples)


def found_at(haystack: np.ndarray, needle: np.ndarray) -> tuple[int, float]:
    """Where `needle` best matches inside `haystack` (its first sample's index there; may be negative
    when the needle starts before the haystack) and how well (normalised correlation, 1.0 = identical)."""
    size = 1 << (len(haystack) + len(needle)).bit_length()
    correlation = np.fft.irfft(np.fft.rfft(haystack, size) * np.conj(np.fft.rfft(needle, size)), size)
    # Lag k (needle[0] at haystack[k]) is at index k for k >= 0 and at size + k for k < 0.
    lags = np.concatenate([np.arange(0, len(haystack)), np.arange(-len(needle) + 1, 0)])
    values = np.concatenate([correlation[:len(haystack)], correlation[size - len(needle) + 1:]])
    energy = np.concatenate([[0.0], np.cumsum(haystack * haystack)])
    starts = np.clip(lags, 0, len(haystack))
    ends = np.clip(lags + len(needle), 0, len(haystack))
    window = np.sqrt(np.maximum(energy[ends] - energy[starts], 1e-9)) * np.linalg.norm(needle)
    # Overlaps shorter than a second are too short to mean anything.
    normalised = np.where(ends - starts >= RATE, values / window, 0.0)
    best = int(np.argmax(normalised))
    return int(lags[best]), float(normalised[best])


@dataclass(frozen=True, slots=True)
class Alignment:
    caller_at: float  # wire time of the recording's first sample, as its left channel places it
    agent_at: float  # the same, as its right channel places it
    caller_match: float
    agent_match: float

    @property
    def misalignment_ms(self) -> float:
        """How much later the caller's channel runs than the agent's (positive: the caller's is behind)."""
        return (self.agent_at - self.caller_at) * 1000.0


def alignment(left: np.ndarray, right: np.ndarray, caller: WireAudio, agent: WireAudio) -> Alignment:
    caller_lag, caller_match = found_at(caller.pcm, left.astype(np.float64))
    agent_lag, agent_match = found_at(agent.pcm, right.astype(np.float64))
    return Alignment(caller.start + caller_lag / RATE, agent.start + agent_lag / RATE, caller_match, agent_match)
