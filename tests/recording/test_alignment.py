"""The alignment measure itself (tests/recording/alignment.py): a known shift between the channels is
found to the millisecond, however the packets' arrival times jitter."""

from __future__ import annotations

import numpy as np
import pytest

from tests.recording.alignment import RATE, alignment, wire_audio
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.audio.rtp import rtp_header

FRAME = RATE // 50


def speechlike(seconds: float, seed: int) -> np.ndarray:
    """Noise bursts separated by silence: something correlation can only match in one place."""
    rng = np.random.default_rng(seed)
    out = np.zeros(int(seconds * RATE), dtype=np.int16)
    position = RATE // 2
    while position < len(out) - RATE:
        length = int(rng.integers(RATE // 5, RATE))
        out[position:position + length] = (rng.standard_normal(length) * 3000).astype(np.int16)
        position += length + int(rng.integers(RATE // 5, RATE))
    return out


def packets(audio: np.ndarray, start: float, ts0: int, rng: np.random.Generator) -> list[tuple[float, bytes]]:
    out = []
    for index in range(len(audio) // FRAME):
        pcm = audio[index * FRAME:(index + 1) * FRAME].astype("<i2").tobytes()
        at = start + index * 0.02 + abs(float(rng.normal(0, 0.003)))  # late by a few ms, never early
        out.append((at, rtp_header(0, index & 0xFFFF, (ts0 + index * FRAME) & 0xFFFFFFFF, 1234, False)
                    + ulaw_encode(pcm)))
    return out


@pytest.mark.parametrize("caller_delay_ms", [0, 20, 45, 90])
def test_a_known_delay_of_the_caller_channel_is_measured_to_the_millisecond(caller_delay_ms: int) -> None:
    rng = np.random.default_rng(caller_delay_ms)
    caller, agent = speechlike(20, 1), speechlike(20, 2)
    t0 = 1_700_000_000.0
    wire_caller = wire_audio(packets(caller, t0, 4_000_000_000, rng))  # its timestamps wrap past 2**32
    wire_agent = wire_audio(packets(agent, t0 + 0.5, 77, rng))
    # The recording starts 3 s into the call (a consent given then): its right channel is the agent's audio
    # from that moment; its left the caller's audio from `caller_delay_ms` earlier (the jitter buffer).
    start = int(3 * RATE)
    delay = caller_delay_ms * RATE // 1000
    decoded = lambda pcm: np.frombuffer(ulaw_decode(ulaw_encode(pcm.astype("<i2").tobytes())), dtype="<i2")  # noqa: E731
    right = decoded(agent[start - RATE // 2:start - RATE // 2 + 10 * RATE])
    left = decoded(caller[start - delay:start - delay + 10 * RATE])
    measured = alignment(left, right, wire_caller, wire_agent)
    assert measured.caller_match > 0.95 and measured.agent_match > 0.95
    assert measured.misalignment_ms == pytest.approx(caller_delay_ms, abs=1.0)
