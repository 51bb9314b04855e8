"""The phone flows' events: a digit form ended, answering-machine detection decided (and the message for
a machine started), a transfer moved on. Their JSON shape is docs/protocol.md's."""

from __future__ import annotations

from typing import Literal

from voicegate.internal.event_envelope import Event


class DigitsEvent(Event):
    """A digit form ended (collect_digits). Never the digits themselves: they may be a PIN or a card."""

    type: Literal["digits"] = "digits"
    form: str = ""  # the [digits.forms] name, "" for a form the model described
    status: Literal["complete", "invalid", "timeout"]
    via: Literal["keys", "speech", "both", ""] = ""
    length: int = 0
    attempts: int = 1


class AmdEvent(Event):
    """Answering-machine detection on an outbound call decided who answered, and what it led to."""

    type: Literal["amd"] = "amd"
    result: Literal["human", "machine", "unknown"]
    reason: str
    decision_ms: int  # from the answer to the decision
    greeting_ms: int = 0  # how long the callee's greeting had run by then
    outcome: Literal["continue", "leave_message", "hangup"]


class VoicemailEvent(Event):
    """The message for an answering machine: when it started (after the beep, or after the greeting)."""

    type: Literal["voicemail"] = "voicemail"
    after: Literal["beep", "greeting", "wait"]  # what let it start ("wait": amd.beep_wait_s ran out)
    start_ms: int  # from the answer
    beep_hz: float = 0.0


class TransferEvent(Event):
    """A warm transfer moved on: holding, dialling, briefing, connected, or failed (the caller is back)."""

    type: Literal["transfer"] = "transfer"
    mode: Literal["cold", "warm"] = "warm"
    target: str  # the sip.transfer_targets name
    phase: Literal["holding", "dialling", "briefing", "connected", "failed", "ended"]
    status: int = 0  # the deciding SIP status of a failure (486, 603, 408 for no answer)
