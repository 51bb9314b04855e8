"""The event a sound over the agent leaves when it was no turn (internal/turn/bargein.py decides).

A turn taken over the agent shows as an interrupted `response`; a sound that was not one shows here, so a
call's log (the DataChannel, the SIP call's event sink) tells a cough the agent talked through from a
question it stopped for.
"""

from __future__ import annotations

from typing import Literal

from voicegate.internal.events import Event


class OverlapEvent(Event):
    """The caller's sound over the agent was no turn. `kind`: backchannel | non_speech; `reason`: the rule
    that decided; `action`: played_on (it was only ducked) or resumed (it had paused, and picked its
    sentence up again from the start: `sentence`)."""

    type: Literal["overlap"] = "overlap"
    kind: str
    reason: str
    action: Literal["played_on", "resumed"]
    sentence: str = ""
