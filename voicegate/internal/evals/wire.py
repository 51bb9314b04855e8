"""The caller's side of the wire: what it sends (the mouth) and what it hears (the ear), 20 ms at a time.

Both keep every frame with the monotonic time it left or arrived, so voice-to-voice waits are read
where a caller lives: from the caller's last sound sent to the first sound of the reply received
(bench/turns/voice_to_voice.py measures the same on a tap). A frame louder than -45 dBFS is speech: the
agent's comfort silence is digital zero, a phone line's hiss far below that.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from voicegate.internal.audio.resample import resample
from voicegate.internal.evals.voice import Sound

SPEECH_DBFS = -45.0
FRAME_S = 0.020
# A key press on the wire (internal/audio/dtmf.py): four 20 ms event updates, the end packet three times,
# then 60 ms before the next key: ten packets.
KEY_S = 0.20
# Agent speech closer together than this is one stretch of talk (a sentence boundary is shorter).
SAME_RUN_S = 0.8


def dbfs(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    power = float(np.mean(samples**2)) / 32768**2 if samples.size else 0.0
    return 10 * math.log10(power) if power > 0 else -120.0


@dataclass(frozen=True)
class Frame:
    at: float  # monotonic seconds
    pcm: bytes
    level: float  # dBFS

    @property
    def loud(self) -> bool:
        return self.level > SPEECH_DBFS


class Track:
    """Frames of one direction of a call, in time order."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.frames: list[Frame] = []

    def add(self, pcm: bytes, at: float | None = None) -> Frame:
        frame = Frame(time.monotonic() if at is None else at, pcm, dbfs(pcm))
        self.frames.append(frame)
        return frame

    def between(self, start: float, end: float) -> bytes:
        """PCM from `start` to `end`, each frame placed at its time (silence where none was)."""
        total = max(0, round((end - start) * self.rate))
        out = np.zeros(total, dtype=np.int16)
        for frame in self.frames:
            if frame.at < start or frame.at >= end:
                continue
            samples = np.frombuffer(frame.pcm, dtype=np.int16)
            offset = round((frame.at - start) * self.rate)
            room = min(samples.size, total - offset)
            if room > 0:
                out[offset:offset + room] = samples[:room]
        return out.tobytes()

    def last_loud(self) -> float | None:
        for frame in reversed(self.frames):
            if frame.loud:
                return frame.at
        return None


@dataclass(frozen=True)
class Run:
    """A stretch of the agent's speech as the caller heard it."""

    start: float
    end: float  # the last loud frame's time


def speech_runs(frames: list[Frame], same_run_s: float = SAME_RUN_S) -> list[Run]:
    runs: list[Run] = []
    for frame in frames:
        if not frame.loud:
            continue
        if runs and frame.at - runs[-1].end <= same_run_s:
            runs[-1] = Run(runs[-1].start, frame.at)
        else:
            runs.append(Run(frame.at, frame.at))
    return runs


@dataclass
class Utterance:
    """One turn's sounds on their way out; its times fill in as the frames leave."""

    sounds: list[Sound]
    started_at: float | None = None  # first frame
    first_loud_at: float | None = None
    last_loud_at: float | None = None  # the caller's last sound: voice to voice is measured from here
    finished_at: float | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Mouth:
    """The caller's outgoing audio: `say` queues a turn; the transport takes one frame per 20 ms with
    `frame()` (None: nothing to say, the transport sends its silence)."""

    def __init__(self, rate: int, press: Callable[[str], None] | None = None,
                 idle: Callable[[], bytes | None] | None = None) -> None:
        self.rate = rate
        self.frame_bytes = rate // 50 * 2
        self.sent = Track(rate)
        self.press = press  # sends keypad keys (a phone's RFC 4733 events); None: this phone has no keypad
        self.problems: list[str] = []  # what could not be sent, for the report
        self._idle = idle or (lambda: None)
        self._queue: list[Utterance] = []
        self._buffer = b""
        self._key_frames = 0
        self._sound_index = 0

    def say(self, sounds: list[Sound]) -> Utterance:
        utterance = Utterance(sounds)
        self._queue.append(utterance)
        return utterance

    @property
    def busy(self) -> bool:
        return bool(self._queue)

    def frame(self) -> bytes | None:
        now = time.monotonic()
        if not self._queue:
            pcm = self._idle()
            self.sent.add(pcm if pcm is not None else bytes(self.frame_bytes), now)
            return pcm
        utterance = self._queue[0]
        if utterance.started_at is None:
            utterance.started_at = now
        pcm, loud = self._next(utterance)
        frame = self.sent.add(pcm, now)
        if loud or frame.loud:
            utterance.first_loud_at = utterance.first_loud_at or now
            utterance.last_loud_at = now
        if self._finished(utterance):
            utterance.finished_at = now
            self._queue.pop(0)
            self._sound_index = 0
            utterance.done.set()
        return pcm

    def _next(self, utterance: Utterance) -> tuple[bytes, bool]:
        """The next frame of the current sound; a key press counts as sound for its whole duration."""
        if self._key_frames:
            self._key_frames -= 1
            return bytes(self.frame_bytes), True
        while not self._buffer and self._sound_index < len(utterance.sounds):
            sound = utterance.sounds[self._sound_index]
            self._sound_index += 1
            if sound.keys:
                self._send_keys(sound.keys)
                self._key_frames = round(len(sound.keys) * KEY_S / FRAME_S) - 1
                return bytes(self.frame_bytes), True
            self._buffer = sound.pcm
        chunk, self._buffer = self._buffer[:self.frame_bytes], self._buffer[self.frame_bytes:]
        return chunk.ljust(self.frame_bytes, b"\x00"), False

    def _send_keys(self, keys: str) -> None:
        try:
            if self.press is None:
                raise ValueError("this phone has no keypad")
            self.press(keys)
        except ValueError as exc:  # e.g. the server's SDP offered no telephone-event
            self.problems.append(f"keys {keys} not sent: {exc}")

    def _finished(self, utterance: Utterance) -> bool:
        return not self._buffer and not self._key_frames and self._sound_index >= len(utterance.sounds)

    def cancel(self) -> None:
        """The call ended: whatever was still to be said never will be."""
        for utterance in self._queue:
            utterance.done.set()
        self._queue.clear()
        self._buffer = b""


class Ear:
    """What the caller hears: every frame of the agent's audio, with its arrival time."""

    def __init__(self, rate: int) -> None:
        self.heard = Track(rate)

    def hear(self, pcm: bytes) -> None:
        self.heard.add(pcm)

    def loud_after(self, moment: float) -> Frame | None:
        """The first loud frame that arrived after `moment` (read from the end: `moment` is recent)."""
        found = None
        for frame in reversed(self.heard.frames):
            if frame.at <= moment:
                break
            if frame.loud:
                found = frame
        return found

    def quiet_for(self, seconds: float, now: float | None = None) -> bool:
        last = self.heard.last_loud()
        return last is None or (now or time.monotonic()) - last >= seconds

    def runs(self) -> list[Run]:
        return speech_runs(self.heard.frames)


def stereo_clip(sent: Track, heard: Track, start: float, end: float) -> bytes:
    """Both sides of a stretch of the call as one stereo PCM16 clip at the ear's rate: the caller on the
    left, the agent on the right, each where it happened in time."""
    caller = np.frombuffer(resample(sent.between(start, end), sent.rate, heard.rate), dtype=np.int16)
    agent = np.frombuffer(heard.between(start, end), dtype=np.int16)
    length = max(caller.size, agent.size)
    both = np.zeros((length, 2), dtype=np.int16)
    both[:caller.size, 0] = caller
    both[:agent.size, 1] = agent
    return both.tobytes()
