"""The pipeline's side of idle callers: the prompt, the goodbye and the hang-up, on the call's own clock.

The policy is internal/turn/idle.py's; this module ticks it once per outbound 20 ms frame (a transport that
stops pulling, as a warm transfer's hold does, stops the clock with it) and says what it asks for. Neither
line is part of the conversation: not in the model's history, not in the transcript memory learns from,
and not a turn of the caller's; each is an `idle` event instead. The goodbye ends the call as `end_call`
does (the session's `hangup`: a BYE on SIP, the session ended on WebRTC); a caller who speaks over it
cuts it short, and the call goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from voicegate.internal.config.sections import PipelineConfig
from voicegate.internal.conversation.state import CallContext
from voicegate.internal.event_envelope import Event, EventSink
from voicegate.internal.pipeline.responder import Responder
from voicegate.internal.turn.idle import IdleSettings, IdleWatch

log = logging.getLogger(__name__)

FRAME_MS = 20


class IdleEvent(Event):
    """The caller said and keyed nothing for a while: the agent asked whether they are there (`prompt`), or
    said goodbye and is hanging up (`goodbye`). `quiet_ms`: the silence that led to it."""

    type: Literal["idle"] = "idle"
    step: Literal["prompt", "goodbye"]
    quiet_ms: int


def idle_settings(config: PipelineConfig) -> IdleSettings:
    return IdleSettings(config.idle_prompt_s * 1000.0, config.idle_hangup_s * 1000.0)


class IdleCaller:
    """One call's idle prompts. `quiet()`: nothing is in flight and nothing excuses the silence (the pipeline
    knows: a digit form, a hold or transfer, the recording question)."""

    def __init__(self, config: PipelineConfig, responder: Responder, session: CallContext, sink: EventSink,
                 quiet: Callable[[], bool]) -> None:
        self.config = config
        self.watch = IdleWatch(idle_settings(config))
        self._responder = responder
        self._session = session
        self._sink = sink
        self._quiet = quiet

    def tick(self) -> None:
        """One outbound frame went by (hot path: a comparison when the feature is off)."""
        if not self.watch.settings.enabled:
            return
        before = self.watch.quiet_ms + FRAME_MS
        step = self.watch.tick(FRAME_MS, self._quiet())
        if step == "none":
            return
        log.info("caller idle: %s", step, extra={"session_id": self._session.id, "quiet_ms": int(before)})
        self._sink.emit(IdleEvent(step=step, quiet_ms=int(before)))
        responder = self._responder
        if step == "prompt":
            text = self.config.idle_prompt
            if text:
                responder.aside(lambda: responder.announce(text, record=False))
        else:
            responder.aside(self._goodbye)

    def caller_active(self) -> None:
        """The caller began to speak (the VAD's onset), pressed a key or typed a turn."""
        self.watch.caller_active()

    async def _goodbye(self) -> None:
        if self.config.idle_goodbye:
            await self._responder.announce(self.config.idle_goodbye, record=False)  # cut short: no hang-up
        hangup = self._session.hangup
        if hangup is not None:
            await hangup()
