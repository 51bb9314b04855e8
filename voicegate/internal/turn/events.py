"""The turn's own events, on the envelope of internal/event_envelope.py (docs/protocol.md is the wire format); the
TurnOwner (owner.py) emits them.

- `release`: the caller's turn was handed to the agent, and why.
- `overlap`: a sound over the agent was no turn (internal/turn/bargein.py decides). A turn taken over the
  agent shows as an interrupted `response`; a sound that was not one shows here, so a call's log (the
  DataChannel, the SIP call's event sink) tells a cough the agent talked through from a question it
  stopped for.
"""

from __future__ import annotations

from typing import Literal

from voicegate.internal.event_envelope import Event


class ReleaseEvent(Event):
    """The caller's turn was released to the agent, and why: `verdict` (the end-of-turn verdict reached the
    threshold: answered at once), `hold` (unsure: held for the caller to go on, then answered), `text_rules`
    (no end-of-turn model), `keypad` or `typed`. `probability`: the fused P(finished) it was decided on;
    `silence_ms`: from the caller's last sound to the release (0 for keys and typed turns)."""

    type: Literal["release"] = "release"
    reason: Literal["verdict", "hold", "text_rules", "keypad", "typed"]
    probability: float | None = None
    silence_ms: float = 0.0


class OverlapEvent(Event):
    """The caller's sound over the agent was no turn. `kind`: backchannel | non_speech; `reason`: the rule
    that decided; `action`: played_on (it was only ducked) or resumed (it had paused, and picked its
    sentence up again from the start: `sentence`)."""

    type: Literal["overlap"] = "overlap"
    kind: str
    reason: str
    action: Literal["played_on", "resumed"]
    sentence: str = ""
