"""What a call leg hears and says while no agent drives it: hold music, a briefing, a bridge to another leg.

A SIP call's media asks its route for `pull_audio()` (the next 20 ms to send, None for comfort
silence) and hands it `push_audio(pcm)` and `push_dtmf(digit)` (internal/sip/voice/handler.py); the pipeline
is one such endpoint. During a warm transfer the caller's leg gets a `HoldPort` instead, the target's
leg a `BriefingPort`, and once the target has been briefed the two get a `Bridge`'s ports: each leg's
frames go to the other, through a short queue (both legs tick every 20 ms on the same scheduler, so a
few frames absorb their phase difference; a queue that grows is trimmed from its oldest end, keeping
the delay bounded).
"""

from __future__ import annotations

import wave
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from voicegate.internal.audio.frame import FRAME_MS, frame_bytes
from voicegate.internal.audio.resample import resample
from voicegate.internal.turn.vad import AdaptiveEnergyClassifier


class MediaEndpoint(Protocol):
    """What a call leg's media is routed to: its pipeline, or one of the ports below."""

    def pull_audio(self) -> bytes | None:
        """The next 20 ms to send, or None for comfort silence."""

    def push_audio(self, pcm: bytes) -> None:
        """20 ms the leg received."""

    def push_dtmf(self, digit: str) -> None:
        """A key the leg's far end pressed."""


BRIDGE_DEPTH_FRAMES = 5  # at most 100 ms of one leg's audio waits for the other
CHIME_PERIOD_S = 4.0
CHIME_NOTES_HZ = (660.0, 880.0)
CHIME_NOTE_MS = 220
CHIME_DBFS = -26.0


def chime(sample_rate: int) -> bytes:
    """The default hold sound: two soft notes, then quiet, CHIME_PERIOD_S long (no music to license)."""
    notes = []
    for hz in CHIME_NOTES_HZ:
        t = np.arange(sample_rate * CHIME_NOTE_MS // 1000) / sample_rate
        envelope = np.sin(np.pi * t / t[-1]) ** 2  # fades in and out: no clicks
        notes.append(32768 * np.sqrt(2) * 10 ** (CHIME_DBFS / 20) * envelope * np.sin(2 * np.pi * hz * t))
    sound = np.concatenate(notes)
    period = np.zeros(int(sample_rate * CHIME_PERIOD_S))
    period[: sound.size] = sound
    return period.astype(np.int16).tobytes()


def load_hold_music(path: str, sample_rate: int) -> bytes:
    """A WAV file (PCM16, any rate, mono or stereo) as mono PCM16 at `sample_rate`."""
    with wave.open(str(Path(path).expanduser())) as clip:
        if clip.getsampwidth() != 2:
            raise ValueError(f"{path}: hold music must be 16-bit PCM WAV")
        pcm = clip.readframes(clip.getnframes())
        channels, rate = clip.getnchannels(), clip.getframerate()
    if channels > 1:
        samples = np.frombuffer(pcm, dtype=np.int16).reshape(-1, channels).mean(axis=1)
        pcm = samples.astype(np.int16).tobytes()
    if not pcm:
        raise ValueError(f"{path}: hold music is empty")
    return resample(pcm, rate, sample_rate)


class HoldPort:
    """The caller on hold: hears `sound` looped; what they say or key goes nowhere."""

    def __init__(self, sound: bytes, sample_rate: int) -> None:
        size = frame_bytes(sample_rate)
        whole = sound + bytes(-len(sound) % size)
        self._frames = [whole[i:i + size] for i in range(0, len(whole), size)] or [bytes(size)]
        self._next = 0

    def pull_audio(self) -> bytes | None:
        frame = self._frames[self._next]
        self._next = (self._next + 1) % len(self._frames)
        return frame

    def push_audio(self, pcm: bytes) -> None:
        return None

    def push_dtmf(self, digit: str) -> None:
        return None


class BriefingPort:
    """The target's leg before the bridge: listens for the end of their "hello", then speaks the briefing."""

    def __init__(self, sample_rate: int, speech_over_floor_db: float = 9.0) -> None:
        self._size = frame_bytes(sample_rate)
        self._queue: deque[bytes] = deque()
        self._energy = AdaptiveEnergyClassifier(speech_over_floor_db)
        self._run = 0
        self.frames_heard = 0
        self.first_speech_ms: int | None = None
        self.last_speech_ms: int | None = None

    def say(self, pcm: bytes) -> None:
        pcm += bytes(-len(pcm) % self._size)
        self._queue.extend(pcm[i:i + self._size] for i in range(0, len(pcm), self._size))

    @property
    def speaking(self) -> bool:
        """Briefing audio is still queued."""
        return bool(self._queue)

    def pull_audio(self) -> bytes | None:
        return self._queue.popleft() if self._queue else None

    def push_audio(self, pcm: bytes) -> None:
        self.frames_heard += 1
        now = self.frames_heard * FRAME_MS
        self._run = self._run + 1 if self._energy.is_speech(pcm) else 0
        if self._run >= 3:  # 60 ms of voice, not a click
            self.first_speech_ms = self.first_speech_ms if self.first_speech_ms is not None else now - 60
            self.last_speech_ms = now

    def push_dtmf(self, digit: str) -> None:
        return None


class BridgePort:
    def __init__(self, forward_dtmf: Callable[[str], None]) -> None:
        self.peer: BridgePort | None = None
        self._queue: deque[bytes] = deque()
        self._forward_dtmf = forward_dtmf

    def pull_audio(self) -> bytes | None:
        return self._queue.popleft() if self._queue else None

    def push_audio(self, pcm: bytes) -> None:
        peer = self.peer
        if peer is not None:
            peer._queue.append(pcm)
            while len(peer._queue) > BRIDGE_DEPTH_FRAMES:
                peer._queue.popleft()

    def push_dtmf(self, digit: str) -> None:
        self._forward_dtmf(digit)


def bridge(a_dtmf: Callable[[str], None], b_dtmf: Callable[[str], None]) -> tuple[BridgePort, BridgePort]:
    """Two joined ports: what leg A pushes, leg B pulls, and the reverse. A key pressed on leg A is
    handed to `a_dtmf` (to be sent on leg B), and the reverse."""
    a, b = BridgePort(a_dtmf), BridgePort(b_dtmf)
    a.peer, b.peer = b, a
    return a, b
