"""Idle callers: after a silence, ask whether they are still there; after a second one, say goodbye and hang up.

A caller who put the phone down without hanging up, or whose line went dead one way, otherwise holds a
call (and a slot of the server) until the RTP timeout, which a line that still sends silence never reaches.
The clock only runs while nobody has anything in flight: the agent has finished speaking, no turn is being
gathered or decided, and the call is not in a flow where silence is the caller's right (a digit form, a
hold, a transfer, the recording-consent question: the pipeline decides that and calls the tick not
quiet). Anything the caller does (the VAD hears speech begin, a key) starts it all over, prompt included.

Pure: `idle_step` is the policy, `IdleWatch` the few values one call keeps; the pipeline feeds it a tick
per 20 ms outbound frame (internal/pipeline/idle.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# What the watch asks the call to do now.
IdleStep = Literal["none", "prompt", "goodbye"]
# waiting: no prompt said since the caller last did anything; prompted: "are you still there?" was said;
# ended: the goodbye was said (the call is ending: nothing more to do).
IdleStage = Literal["waiting", "prompted", "ended"]


@dataclass(frozen=True, slots=True)
class IdleSettings:
    """`pipeline.idle_prompt_s` and `pipeline.idle_hangup_s`, in ms (docs/agent-runtime.md, "Idle callers")."""

    prompt_after_ms: float  # quiet before the prompt; 0: the whole feature is off
    hangup_after_ms: float  # quiet after the prompt before the goodbye; 0: prompt only, never hang up

    @property
    def enabled(self) -> bool:
        return self.prompt_after_ms > 0


def idle_step(settings: IdleSettings, stage: IdleStage, quiet_ms: float) -> IdleStep:
    """What is due after `quiet_ms` of quiet (counted from the end of the last thing anyone did) in `stage`."""
    if not settings.enabled or stage == "ended":
        return "none"
    if stage == "waiting":
        return "prompt" if quiet_ms >= settings.prompt_after_ms else "none"
    if settings.hangup_after_ms > 0 and quiet_ms >= settings.hangup_after_ms:
        return "goodbye"
    return "none"


class IdleWatch:
    """One call's idle state: the stage and how long it has been quiet."""

    def __init__(self, settings: IdleSettings) -> None:
        self.settings = settings
        self.stage: IdleStage = "waiting"
        self.quiet_ms = 0.0

    def tick(self, ms: float, quiet: bool) -> IdleStep:
        """`ms` more of call time; `quiet`: nothing in flight and nothing that excuses the silence. The agent
        speaking (the prompt itself included) restarts the count without forgetting the stage, so the goodbye
        comes `hangup_after_ms` after the prompt has been *heard*."""
        if not quiet:
            self.quiet_ms = 0.0
            return "none"
        self.quiet_ms += ms
        step = idle_step(self.settings, self.stage, self.quiet_ms)
        if step == "prompt":
            self.stage, self.quiet_ms = "prompted", 0.0
        elif step == "goodbye":
            self.stage = "ended"
        return step

    def caller_active(self) -> None:
        """The caller spoke or pressed a key: they are there; the prompt may come again after a new silence.
        (Speech that cuts the goodbye short stops the hang-up with it: the call goes on from "waiting".)"""
        self.stage = "waiting"
        self.quiet_ms = 0.0
