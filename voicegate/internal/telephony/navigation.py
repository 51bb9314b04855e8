"""Menu navigation on a live outbound call: listen to the menu, press keys or say words, hand over.

From the answer on, the `MenuListener` holds the call's input (internal/pipeline/capture.py): the
recogniser's finals are gathered into prompts (speech up to a pause of `prompt_end_ms`); each prompt's
audio is heard again whole by the menu's own recogniser when there is one (prompt_hearing.py, [menus]
whisper_model), and the prompt goes to the navigator (navigator.py), whose step this module carries out:
a key through the call's keypad (RFC 4733 when the answer took telephone-event, else SIP INFO:
internal/sip/voice/dtmf.py), a word through the agent's voice, nothing at all otherwise (the agent does
not talk to a menu). When a person answers, the listener lets go, the call's greeting is said and the
conversation goes on with the goal in the agent's context (`CALL_GOAL`); at a dead end the reason goes
into the call's events (`MenuEvent`), `session.slots.get(MENU)` (POST /calls, `voicegate call`) and the
log, and the call is hung up.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from voicegate.internal.config.telephony import MenusConfig
from voicegate.internal.conversation.slots import Slot
from voicegate.internal.conversation.state import LiveCall
from voicegate.internal.pipeline.capture import CallControl
from voicegate.internal.pipeline.context import CALL_GOAL
from voicegate.internal.pipeline.events import Event
from voicegate.internal.stt.base import Transcript
from voicegate.internal.telephony.key_policy import KeysRefused
from voicegate.internal.telephony.menu_choice import GoalMatcher, SentenceSimilarity, WordLlamaSimilarity
from voicegate.internal.telephony.menu_model import Completion, ModelGoalMatcher
from voicegate.internal.telephony.navigator import (
    HandOver,
    MenuNavigator,
    NavigationResult,
    NavigationSettings,
    Press,
    Say,
    Step,
    Stop,
    Wait,
)

log = logging.getLogger(__name__)

TICK_S = 0.1
# A frame louder than this is sound on the line (speech, hold music); a phone line's hiss sits far below.
SOUND_DBFS = -45.0
# A final the recogniser owes is given up on after this long (it hung): the prompt goes on without it.
FINAL_WAIT_MS = 15000
# A prompt's audio is kept from this long before its first voiced frame (the VAD's onset), and a prompt
# longer than PROMPT_MAX_S is not heard again (Whisper's window): its parts stand.
PROMPT_PREROLL_S = 0.3
PROMPT_MAX_S = 29.0

Press_ = Callable[[str], Awaitable[str]]  # sends keys on the call; returns the method ("rfc4733", "info")


class PromptEars(Protocol):
    """Hears a whole menu prompt again (prompt_hearing.py); "" when it cannot."""

    async def warm_up(self) -> None: ...

    async def hear(self, pcm: bytes, sample_rate: int) -> str: ...


def menu_plan(config: MenusConfig, goal: str, similarity: SentenceSimilarity | None = None, *,
              model: Completion | None = None) -> MenuPlan:
    """A call's plan from the [menus] section. The embedding is wordllama unless one is given; `model`
    (menu_model.menu_completion) chooses when given, the offline matcher behind it."""
    settings = NavigationSettings(prompt_end_ms=config.prompt_end_ms, person_wait_ms=config.person_wait_ms,
                                  dead_air_ms=config.dead_air_ms, max_steps=config.max_steps)
    return MenuPlan(goal.strip(), settings, config.max_s,
                    similarity=similarity if similarity is not None else shared_similarity(),
                    model=model, model_timeout_s=config.model_timeout_ms / 1000,
                    synonyms=dict(config.synonyms))


@functools.cache
def shared_similarity() -> SentenceSimilarity:
    """One wordllama model per process (16 MB; loading takes a second): read-only, so calls share it."""
    return WordLlamaSimilarity()


class MenuEvent(Event):
    """A step of the walk through a phone menu: a choice made, a person reached, or a dead end."""

    type: Literal["menu"] = "menu"
    step: Literal["press", "say", "hand_over", "stop"]
    key: str = ""
    word: str = ""
    label: str = ""  # the option chosen
    method: str = ""  # how a key went: rfc4733 or info
    result: str = ""  # on hand_over/stop: reached, dead_end, voicemail, hung_up
    reason: str = ""
    heard: str = ""  # the prompt that led to the step


@dataclass(frozen=True, slots=True)
class MenuPlan:
    goal: str
    settings: NavigationSettings
    max_s: float  # the whole walk, hold included
    greeting: str = ""  # said when a person answers
    voicemail_message: str = ""  # left when a machine answers ("" hang up)
    similarity: SentenceSimilarity | None = None
    ears: PromptEars | None = None  # hears each whole prompt again ([menus] whisper_model); None: the parts
    model: Completion | None = None  # chooses the option (menu_model.py); None: the offline matcher alone
    model_timeout_s: float = 4.0
    synonyms: dict[str, list[str]] = field(default_factory=dict)  # [menus] synonyms


def goal_matcher(plan: MenuPlan) -> GoalMatcher:
    """The plan's chooser: the model's, with the offline matcher behind it, or the offline matcher."""
    if plan.model is not None:
        return ModelGoalMatcher(plan.goal, plan.model, plan.model_timeout_s, plan.similarity, synonyms=plan.synonyms)
    return GoalMatcher(plan.goal, plan.similarity, synonyms=plan.synonyms)


@dataclass
class MenuRun:
    """One call's walk as the API sees it."""

    goal: str
    result: NavigationResult | Literal["pending"] = "pending"
    reason: str = ""
    path: list[str] = field(default_factory=list)
    heard: list[str] = field(default_factory=list)  # the prompts, in order
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def describe(self) -> dict[str, object]:
        return {"goal": self.goal, "result": self.result, "reason": self.reason, "path": list(self.path),
                "heard": list(self.heard)}


MENU: Slot[MenuRun] = Slot("menu")  # the call's MenuRun


class MenuListener:
    """The CallerInput while the menu is walked: gathers prompts, notices sound and silence."""

    private = False  # the menu's words are shown in the call's events

    def __init__(self, settings: NavigationSettings, clock: Callable[[], float] = time.monotonic,
                 sample_rate: int = 8000) -> None:
        self._settings = settings
        self._clock = clock
        self._frames: list[bytes] = []  # the audio since the last prompt or step, from its first voice on
        self._frame_s = 0.02
        self._preroll = max(1, round(PROMPT_PREROLL_S / self._frame_s))
        self._voice_at: int | None = None  # where its first voiced frame is in _frames
        self._too_long = False
        self.sample_rate = sample_rate
        self.prompt_audio = b""  # the last prompt's audio (prompt_ended), "" when it ran past PROMPT_MAX_S
        self.speaking = False
        self.owed = 0  # finals the recogniser still owes
        self.stale = 0  # finals of speech from before our last step, to drop
        self.words: list[str] = []
        self.last_speech_end = clock()
        self.last_sound = clock()
        self.since = clock()  # the last prompt's end, our last step, or the answer
        self.changed = asyncio.Event()

    def now(self) -> float:
        return self._clock()

    def audio(self, pcm: bytes, voiced: bool) -> None:
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
        if samples.size and 20 * np.log10(np.sqrt(np.mean(samples * samples)) / 32768 + 1e-9) > SOUND_DBFS:
            self.last_sound = self._clock()
        self._keep(pcm, voiced)

    def _keep(self, pcm: bytes, voiced: bool) -> None:
        """The prompt's audio: before its first voice only the preroll, then all of it up to PROMPT_MAX_S."""
        self._frame_s = len(pcm) / 2 / self.sample_rate or self._frame_s
        if self._too_long:
            return
        self._frames.append(pcm)
        if self._voice_at is None:
            if voiced:
                self._voice_at = len(self._frames) - 1
            elif len(self._frames) > self._preroll:
                del self._frames[0]
        elif len(self._frames) * self._frame_s > PROMPT_MAX_S:
            self._too_long, self._frames = True, []

    def _forget_audio(self) -> None:
        self._frames, self._voice_at, self._too_long = [], None, False

    def tick(self) -> None:
        self.changed.set()

    def speech_started(self, preroll_frames: int) -> bool:
        self.speaking = True
        return True

    def speech_ended(self, final_owed: bool) -> None:
        self.speaking = False
        self.last_speech_end = self._clock()
        if final_owed:
            self.owed += 1
        self.changed.set()

    def transcript(self, transcript: Transcript) -> None:
        if not transcript.final or transcript.superseded:
            return
        self.owed = max(0, self.owed - 1)
        if self.stale:
            self.stale -= 1
        elif transcript.text.strip():
            self.words.append(transcript.text.strip())
        self.changed.set()

    def finals_lost(self, count: int) -> None:
        self.owed = max(0, self.owed - max(count, 1))
        self.changed.set()

    def digit(self, digit: str) -> None:
        return None

    def prompt_ended(self) -> str | None:
        """The prompt heard up to a pause, once its words are all in (None: not yet)."""
        now = self._clock()
        if self.speaking or not (self.words or self.owed):
            return None
        quiet_ms = (now - self.last_speech_end) * 1000
        if quiet_ms < self._settings.prompt_end_ms or (self.owed and quiet_ms < FINAL_WAIT_MS):
            return None
        text, self.words, self.owed = " ".join(self.words), [], 0
        self.prompt_audio = b"" if self._too_long else b"".join(self._frames)
        self._forget_audio()
        self.since = now
        return text

    def silent_ms(self) -> int:
        return int((self._clock() - max(self.since, self.last_sound)) * 1000)

    def stepped(self) -> None:
        """We pressed or said something: what the menu was saying before it is no longer the prompt."""
        self.stale = self.owed + (1 if self.speaking else 0)
        self.words = []
        self._forget_audio()
        self.since = self._clock()


async def run_navigation(pipeline: CallControl, session: LiveCall, plan: MenuPlan, press: Press_,
                         on_done: Callable[[MenuRun], None] = lambda run: None) -> MenuRun:
    """Walk the menu until a person answers, a dead end, or the call ends; returns the run."""
    run = session.slots.setdefault(MENU, MenuRun(plan.goal))
    session.slots.set(CALL_GOAL, plan.goal)
    matcher = goal_matcher(plan)
    navigator = MenuNavigator(matcher, plan.settings)
    listener = MenuListener(plan.settings, sample_rate=pipeline.sample_rate)
    previous = pipeline.take_input(listener)
    ticker = asyncio.get_running_loop().create_task(_ticks(listener), name="menu-ticks")
    warming = (asyncio.get_running_loop().create_task(plan.ears.warm_up(), name="menu-ears")
               if plan.ears is not None else None)
    deadline = listener.now() + plan.max_s
    final: HandOver | Stop | None = None
    try:
        while final is None:
            listener.changed.clear()
            await listener.changed.wait()
            if session.ended:
                after = f" (after we chose {run.path[-1]})" if run.path else ""
                final = Stop("hung_up", f"the other side hung up during the menu{after}")
                break
            step: Step | None
            text = listener.prompt_ended()
            if text is not None:
                text = await heard_whole(plan.ears, listener, text)
                run.heard.append(text)
                if isinstance(matcher, ModelGoalMatcher):  # the model's answer first, for choose() to read
                    await matcher.consider(text, navigator.path(), navigator.options_for(text)[1])
                step = navigator.heard(text)
                log.info("menu prompt", extra={"prompt": text, "step": step.kind})
            elif not listener.speaking and not listener.words and not listener.owed:
                step = navigator.quiet(listener.silent_ms())
            else:
                step = None
            if (step is None or isinstance(step, Wait)) and listener.now() >= deadline:
                step = Stop("dead_end", f"still in the menu after {plan.max_s:.0f} s")
            if isinstance(step, Press | Say):
                try:
                    await _take(pipeline, step, press, text or "", run)
                except KeysRefused as exc:  # the far end steers toward a feature code: go no further
                    final = Stop("dead_end", f"the menu's {step.label!r} option: {exc}")
                    break
                run.path = navigator.path()
                listener.stepped()
            elif isinstance(step, HandOver | Stop):
                final = step
    finally:
        ticker.cancel()
        if warming is not None:
            warming.cancel()
        pipeline.hand_back_input(listener, previous)
    await _finish(pipeline, session, plan, run, final)
    on_done(run)
    return run


async def heard_whole(ears: PromptEars | None, listener: MenuListener, parts: str) -> str:
    """The prompt as the menu's recogniser hears it whole, or as the call heard it in parts (no ears, a
    prompt too long for one window, or nothing heard)."""
    if ears is None or not listener.prompt_audio:
        return parts
    whole = await ears.hear(listener.prompt_audio, listener.sample_rate)
    if whole:
        log.debug("menu prompt heard whole", extra={"parts": parts, "whole": whole})
    return whole or parts


async def _take(pipeline: CallControl, step: Press | Say, press: Press_, heard: str, run: MenuRun) -> None:
    if isinstance(step, Press):
        method = await press(step.key)
        pipeline.sink.emit(MenuEvent(step="press", key=step.key, label=step.label, method=method, heard=heard))
        log.info("menu key pressed", extra={"digits": step.key, "label": step.label, "method": method})
    else:
        pipeline.sink.emit(MenuEvent(step="say", word=step.word, label=step.label, heard=heard))
        await pipeline.say(step.word)


async def _finish(pipeline: CallControl, session: LiveCall, plan: MenuPlan, run: MenuRun,
                  final: HandOver | Stop) -> None:
    if isinstance(final, HandOver):
        run.result, run.reason = "reached", f"{final.reason}: '{final.heard}'" if final.heard else final.reason
    else:
        run.result, run.reason = final.result, final.reason
    pipeline.sink.emit(MenuEvent(step="hand_over" if isinstance(final, HandOver) else "stop", result=run.result,
                                 reason=run.reason, heard=run.heard[-1] if run.heard else ""))
    log.info("menu navigation ended", extra={"menu_result": run.result, "reason": run.reason})
    run.done.set()
    if session.ended:
        return
    if isinstance(final, HandOver):
        if plan.greeting:
            pipeline.announce(plan.greeting)
        return
    if final.result == "voicemail" and plan.voicemail_message:
        await pipeline.say(plan.voicemail_message)
    if session.hangup is not None and not session.ended:
        await session.hangup()


async def _ticks(listener: MenuListener) -> None:
    while True:
        await asyncio.sleep(TICK_S)
        listener.tick()


def walk_in_background(pipeline: CallControl, session: LiveCall, plan: MenuPlan, press: Press_,
                      spawn: Callable[[Awaitable[None]], object],
                      on_done: Callable[[MenuRun], None] = lambda run: None) -> MenuRun:
    """Start the walk on the call; returns its MenuRun at once (await `run.done` for the outcome)."""
    run = session.slots.setdefault(MENU, MenuRun(plan.goal))
    spawn(_guarded(run_navigation(pipeline, session, plan, press, on_done), run))
    return run


async def _guarded(navigation: Awaitable[MenuRun], run: MenuRun) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        try:
            await navigation
        except Exception as exc:
            log.exception("menu navigation failed")
            if not run.done.is_set():
                run.result, run.reason = "dead_end", f"navigation failed: {type(exc).__name__}"
                run.done.set()
