"""The recording's event: the call's consent moved (docs/recording.md, docs/protocol.md)."""

from __future__ import annotations

from typing import Literal

from voicegate.internal.event_envelope import Event

ConsentOutcome = Literal["pending", "not_asked", "announced", "granted", "declined", "no_answer", "opted_out"]


class RecordingEvent(Event):
    """The call's recording consent moved: `recording` says whether the call is being recorded from now
    on (docs/recording.md). Never carries audio, a file name or who the caller is."""

    type: Literal["recording"] = "recording"
    consent: ConsentOutcome
    recording: bool
    paused: bool = False  # consent holds, but a sensitive digit form has the recording paused (silence)
