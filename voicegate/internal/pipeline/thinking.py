"""Thinking cues: a short filler line ("One moment.") or a soft sound when the answer is slow to start.

Silence after a question is the caller's only sign that something is happening; past a second of it they
wonder whether the line dropped, and start talking over the answer that is about to come. So when the answer's
first audio is not ready `pipeline.thinking_cue_after_ms` after the turn's release (a slow model, a slow tool),
the caller hears a cue, then the answer. A tool registered as slow (`ToolRegistry.register(..., slow=True)`,
`slow_tools` of an MCP server) has the cue play as soon as the model calls it.

Rules (`cue_due`, pure): at most one cue per reply, only before the answer's first audio, never over other
audio. The cue enters an empty playout whole, in one step, so it cannot interleave with the answer: an answer
that arrives while the cue plays waits behind it (the cue is short, about a second), and nothing of the cue is
cut. A barge-in clears it with the rest. It is no part of the conversation: never in the model's history, the
transcript or what the caller is recorded as having heard of the reply (its playout segment is an aside), and
it does not count as the reply's first audio (the `first_audio` timing and the continuation window stay the
answer's). It is a `thinking` event, and a `thinking_cue` timing (release to cue) with `pipeline.debug`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Literal

import numpy as np

from voicegate.internal.config.sections import PipelineConfig
from voicegate.internal.event_envelope import Event, EventSink
from voicegate.internal.pipeline.playout import Playout
from voicegate.internal.tts.base import TextToSpeech

log = logging.getLogger(__name__)

CueMode = Literal["off", "sound", "phrases"]
CueReason = Literal["late", "slow_tool"]
SYNTHESIS_TIMEOUT_S = 2.0  # a cue that takes longer to make than this is no longer worth saying
# The cue is queued this much before it is due: the transport sends a queued frame on its next 20 ms tick, so
# the silence the caller hears ends at `thinking_cue_after_ms`, not a tick later.
CUE_LEAD_MS = 20
# The soft sound: two quiet notes rising a third (C5, E5), struck like a mallet (a 10 ms attack, so the
# silence ends when the cue starts, then a decay), ~0.4 s in all.
SOUND_NOTES_HZ = (523.25, 659.25)
SOUND_NOTE_S = 0.15
SOUND_ATTACK_S = 0.01
SOUND_DECAY_S = 0.06
SOUND_GAP_S = 0.04
SOUND_LEVEL = 0.1  # of full scale at the peak (-20 dBFS): heard, not startling


class ThinkingEvent(Event):
    """A thinking cue played while the answer was prepared: `reason` late (no audio `after_ms` after the
    release) or slow_tool (the model called a tool registered as slow); `text` the phrase ("" for the sound)."""

    type: Literal["thinking"] = "thinking"
    reason: CueReason
    cue: Literal["sound", "phrases"]
    text: str = ""
    after_ms: float


def cue_due(mode: CueMode, after_ms: float, since_release_ms: float, *, answer_audio: bool, slow_tool: bool,
            cued: bool, playout_busy: bool) -> CueReason | None:
    """Should the caller hear a cue now, and why? Never twice in a reply, never once the answer's audio exists
    (however late), never over audio already queued; at once for a slow tool, else once `after_ms` have passed."""
    if mode == "off" or cued or answer_audio or playout_busy:
        return None
    if slow_tool:
        return "slow_tool"
    return "late" if since_release_ms >= after_ms else None


def soft_sound(sample_rate: int) -> bytes:
    """The "sound" cue as PCM16 at `sample_rate`."""
    parts = []
    for index, hz in enumerate(SOUND_NOTES_HZ):
        t = np.arange(int(sample_rate * SOUND_NOTE_S)) / sample_rate
        envelope = np.minimum(t / SOUND_ATTACK_S, 1.0) * np.exp(-t / SOUND_DECAY_S)
        parts.append(np.sin(2 * np.pi * hz * t) * envelope * SOUND_LEVEL)
        if index < len(SOUND_NOTES_HZ) - 1:
            parts.append(np.zeros(int(sample_rate * SOUND_GAP_S)))
    return (np.concatenate(parts) * 32767).astype(np.int16).tobytes()


class ThinkingCues:
    """One call's cues: the phrases in turn, their audio made once, a `ThinkingCue` per reply."""

    def __init__(self, config: PipelineConfig, tts: TextToSpeech, playout: Playout, sink: EventSink,
                 timing: Callable[[str, float], None], clock: Callable[[], float],
                 made: dict[tuple[str, int], bytes] | None = None) -> None:
        self.config = config
        self.tts = tts
        self.playout = playout
        self.sink = sink
        self.timing = timing
        self.clock = clock
        # Cue audio by (text, sample rate): made once, shared by the calls of a server (PipelineServices).
        self._made = made if made is not None else {}
        self._said = 0

    @property
    def mode(self) -> CueMode:
        mode = self.config.thinking_cue
        return "sound" if mode == "phrases" and not self.config.thinking_phrases else mode

    def watch(self, released: asyncio.Event, released_at: Callable[[], float]) -> ThinkingCue:
        """A cue for the reply whose turn is released when `released` is set (at `released_at()`, on the clock
        given here); it runs until `stop`."""
        return ThinkingCue(self, released, released_at)

    def next_text(self) -> str:
        """The cue to say next: the phrases in turn ("" for the sound)."""
        phrases = self.config.thinking_phrases
        return phrases[self._said % len(phrases)] if self.mode == "phrases" else ""

    def used(self, text: str) -> None:
        if text:
            self._said += 1

    async def audio(self, text: str) -> bytes:
        """The cue's PCM ("" text: the soft sound), made once."""
        rate = self.playout.sample_rate
        made = self._made.get((text, rate))
        if made is not None:
            return made
        if not text:
            pcm = soft_sound(rate)
        else:
            async with asyncio.timeout(SYNTHESIS_TIMEOUT_S):
                pcm = b"".join([chunk async for chunk in self.tts.synthesize(text, rate)])
        self._made[(text, rate)] = pcm
        return pcm


class ThinkingCue:
    """One reply's cue: armed at the release, dropped by the answer's first audio, hurried by a slow tool."""

    def __init__(self, cues: ThinkingCues, released: asyncio.Event, released_at: Callable[[], float]) -> None:
        self._cues = cues
        self._released = released
        self._released_at = released_at
        self._wake = asyncio.Event()
        self.answer_audio = False
        self.slow_tool = False
        self.cued = False
        self._task: asyncio.Task[None] | None = None
        if cues.mode != "off":
            self._task = asyncio.create_task(self._run(), name="thinking-cue")

    def answered(self) -> None:
        """The answer's first audio is ready: no cue from now on."""
        self.answer_audio = True
        self._wake.set()

    def tool_called(self, slow: bool) -> None:
        if slow:
            self.slow_tool = True
            self._wake.set()

    def stop(self) -> None:
        """The reply is over (answered, cancelled, thrown away): a cue not yet queued never will be."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def _due(self, since_release_ms: float) -> CueReason | None:
        cues = self._cues
        return cue_due(cues.mode, cues.config.thinking_cue_after_ms, since_release_ms, answer_audio=self.answer_audio,
                       slow_tool=self.slow_tool, cued=self.cued, playout_busy=cues.playout.active)

    async def _run(self) -> None:
        cues = self._cues
        await self._released.wait()
        released_at = min(self._released_at() or cues.clock(), cues.clock())
        text = cues.next_text()
        # Made while the answer may still come in time (once: the audio is kept), so a due cue starts at once.
        making = asyncio.ensure_future(cues.audio(text))
        making.add_done_callback(_retrieved)  # it may outlive this reply (it fills the cache): never unheard of
        with contextlib.suppress(TimeoutError):
            waited_ms = (cues.clock() - released_at) * 1000.0
            async with asyncio.timeout(max(0.0, cues.config.thinking_cue_after_ms - CUE_LEAD_MS - waited_ms) / 1000.0):
                await self._wake.wait()

        def due() -> CueReason | None:
            return self._due((cues.clock() - released_at) * 1000.0 + CUE_LEAD_MS)

        if due() is None:
            return
        try:
            pcm = await asyncio.shield(making)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a cue is a courtesy: without it the caller just waits
            log.warning("thinking cue could not be made: %s", type(exc).__name__)
            return
        reason = due()
        if reason is None or not pcm:
            return  # the answer (or other audio) arrived while the cue was made: it goes first, alone
        self.cued = True
        cues.used(text)
        cues.playout.aside(pcm)
        after_ms = round((cues.clock() - released_at) * 1000.0, 1)
        cues.timing("thinking_cue", after_ms)
        cues.sink.emit(ThinkingEvent(reason=reason, cue="phrases" if text else "sound", text=text, after_ms=after_ms))


def _retrieved(made: asyncio.Future[bytes]) -> None:
    if not made.cancelled() and made.exception() is not None:
        log.debug("thinking cue audio failed", exc_info=made.exception())
