"""Playout: the agent's audio waiting to be sent, 20 ms at a time, and what the caller heard.

The transport pulls one frame per tick. Barge-in clears the queue at once, so playback stops within
one frame, and the frames already pulled tell which words of each sentence the caller heard. A held
playout keeps its audio but plays none of it: a reply prepared before the caller's turn was over waits
there until the turn is released, and a reply the caller talks over right after it began waits there
until we know whether they were going on with their sentence.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from voicegate.internal.audio.frame import frame_bytes


@dataclass(slots=True)
class Segment:
    """One synthesised sentence: its text and how many of its frames exist / were played."""

    text: str
    frames: int = 0
    played: int = 0
    complete: bool = False  # synthesis finished (frames is final)
    cancelled: bool = False  # cleared by a barge-in: late synthesis for it is dropped
    aside: bool = False  # not the agent's words (a thinking cue): never in the heard text

    def heard_text(self) -> str:
        if self.frames == 0 or self.played == 0:
            return ""
        if self.complete and self.played >= self.frames:
            return self.text
        words = self.text.split()
        fraction = self.played / max(self.frames, 1)
        return " ".join(words[: int(len(words) * fraction)])


@dataclass(slots=True)
class _Frame:
    pcm: bytes
    segment: Segment


@dataclass
class Playout:
    sample_rate: int
    duck_gain: float = 0.25
    ducked: bool = False
    held: bool = False
    _queue: deque[_Frame] = field(default_factory=deque)
    _segments: list[Segment] = field(default_factory=list)
    _partial: bytes = b""
    _sentence: list[_Frame] = field(default_factory=list)  # the frames played of the sentence playing now
    frames_out: int = 0
    last_aside: bool = False  # the frame pulled last was an aside's (a thinking cue), not the agent's words

    def begin_segment(self, text: str) -> Segment:
        segment = Segment(text)
        self._segments.append(segment)
        self._partial = b""
        return segment

    def append(self, segment: Segment, pcm: bytes) -> None:
        """Queue synthesised PCM (any length); whole 20 ms frames become playable at once."""
        if segment.cancelled:
            return
        size = frame_bytes(self.sample_rate)
        data = self._partial + pcm
        whole = len(data) - len(data) % size
        for start in range(0, whole, size):
            self._queue.append(_Frame(data[start : start + size], segment))
            segment.frames += 1
        self._partial = data[whole:]

    def aside(self, pcm: bytes) -> None:
        """Queue a whole sound that is not the agent's words (a thinking cue), in one step: it plays in turn
        with the rest, is never part of the heard text, and leaves a sentence being synthesised untouched."""
        size = frame_bytes(self.sample_rate)
        segment = Segment("", aside=True, complete=True)
        padded = pcm + bytes(-len(pcm) % size)
        for start in range(0, len(padded), size):
            self._queue.append(_Frame(padded[start : start + size], segment))
            segment.frames += 1
        self._segments.append(segment)

    def end_segment(self, segment: Segment) -> None:
        if self._partial and not segment.cancelled:
            size = frame_bytes(self.sample_rate)
            self._queue.append(_Frame(self._partial + bytes(size - len(self._partial)), segment))
            segment.frames += 1
            self._partial = b""
        segment.complete = True

    @property
    def queued_frames(self) -> int:
        return len(self._queue)

    @property
    def active(self) -> bool:
        """Audio is queued or a sentence is still being synthesised."""
        return bool(self._queue) or any(not s.complete for s in self._segments)

    def pull(self) -> bytes | None:
        """The next 20 ms of agent audio, or None when the agent is quiet."""
        if self.held or not self._queue:
            return None
        frame = self._queue.popleft()
        if self._sentence and self._sentence[-1].segment is not frame.segment:
            self._sentence = []
        self._sentence.append(frame)
        frame.segment.played += 1
        self.last_aside = frame.segment.aside
        self.frames_out += 1
        if self.ducked and self.duck_gain < 1.0:
            samples = np.frombuffer(frame.pcm, dtype=np.int16).astype(np.float32) * self.duck_gain
            return samples.astype(np.int16).tobytes()
        return frame.pcm

    def clear(self) -> str:
        """Stop now: drop everything queued and return the text the caller actually heard."""
        heard = self.heard_text()
        self._queue.clear()
        self._sentence = []
        self._partial = b""
        for segment in self._segments:
            segment.frames = segment.played
            segment.complete = True
            segment.cancelled = True
        self._segments = []
        return heard

    def rewind_sentence(self) -> str:
        """Play the sentence cut off by a pause again from its start; its text ("" when the pause fell
        between sentences). What was played of it is no longer counted as heard until it plays again."""
        played, self._sentence = self._sentence, []
        if not played:
            return ""
        segment = played[0].segment
        if segment.cancelled or (segment.complete and segment.played >= segment.frames):
            return ""
        self._queue.extendleft(reversed(played))
        segment.played -= len(played)
        return segment.text

    def heard_text(self) -> str:
        return " ".join(t for t in (s.heard_text() for s in self._segments) if t)

    def finish_turn(self) -> None:
        """Forget the segments of a reply that played to the end."""
        self._segments = [s for s in self._segments if not s.complete or s.played < s.frames]
