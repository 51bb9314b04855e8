"""A call's recording as the pipeline sees it: consent first, then the stereo recorder.

One `ConsentedRecording` per session (kept in the session's slots, so a browser that resumes keeps its
consent and its file); each new pipeline attaches its event sink. The recorder starts only when consent
allows it (at the opening for `announce` and `none`, at the caller's yes for `ask`), and an opt-out
deletes what was recorded: the caller said not to record *this call*. A sensitive digit form pauses it
(`pause`: silence on both channels while the caller keys or says a card number or a PIN). Every change of consent is a
`recording` event (internal/recording/events.py), which a SIP call's log and a browser's DataChannel carry.

The agent's `stop_recording` tool stops it only when the caller's own recent words ask for that
(`stop_requested`): every caller turn in words passes through `caller_said`, so the last few are kept
here, and nothing else (the agent's text, a tool's result) ever is.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Literal

from voicegate.internal.event_envelope import EventSink, NullSink
from voicegate.internal.recording.consent import ConsentState, Decision, opts_out
from voicegate.internal.recording.events import RecordingEvent
from voicegate.internal.recording.objection import asks_to_stop_recording
from voicegate.internal.recording.recorder import CallRecorder

log = logging.getLogger(__name__)

StartRecorder = Callable[[int, str], CallRecorder]  # (sample rate, consent) -> a recorder that has begun
StopOutcome = Literal["stopped", "not_recording", "not_asked"]
# The caller's turns in words that may carry the request the agent's `stop_recording` acts on: the turn
# the model is answering and the one before it ("can you get rid of the recording?" "... yes, all of it").
# Any further back and a model steered by someone else's text could act on an old, answered remark.
REQUEST_TURNS = 2


def caller_asked_to_stop(turns: list[str], consent: ConsentState) -> bool:
    """Did the caller, in any of these turns of theirs, ask about stopping or deleting the recording (an
    opt-out phrase, an objection, or looser words only the model can weigh: objection.py)?"""
    return any(opts_out(text, consent.config) or asks_to_stop_recording(text) for text in turns)


class ConsentedRecording:
    def __init__(self, consent: ConsentState, start: StartRecorder, session_id: str) -> None:
        self.consent = consent
        self._start = start
        self._session_id = session_id
        self._sink: EventSink = NullSink()
        self._rate = 0
        self._greeting = ""  # said after the caller answers the question (ask)
        self.recorder: CallRecorder | None = None
        self.discarded = False
        self._pauses = 0  # sensitive digit forms under way: both channels are written as silence
        self._caller_turns: deque[str] = deque(maxlen=REQUEST_TURNS)  # the caller's latest words, theirs only

    def attach(self, sink: EventSink, sample_rate: int) -> ConsentedRecording:
        """A pipeline (the first, or one after a resume) takes over the call's audio and events."""
        self._sink = sink
        self._rate = self._rate or sample_rate
        return self

    @property
    def recording(self) -> bool:
        return self.recorder is not None and self.recorder.open

    # ---- what the pipeline asks ------------------------------------------------------------------

    def opening(self, greeting: str) -> str:
        self._greeting = greeting
        text = self.consent.opening(greeting)
        self._moved()
        return text

    def concerns(self, text: str) -> bool:
        return self.consent.concerns(text)

    @property
    def asking(self) -> bool:
        return self.consent.pending

    def caller_said(self, text: str) -> str | None:
        self._caller_turns.append(text)
        return self._apply(self.consent.spoken(text, self._take_greeting()))

    def caller_pressed(self, digits: str) -> str | None:
        return self._apply(self.consent.keys(digits, self._take_greeting()))

    def stop_requested(self) -> StopOutcome:
        """The agent's `stop_recording` tool: stop and delete, as an opt-out does, when the caller's latest
        turns ask for it. The model alone is not enough: text that is not the caller's (a tool result, a
        retrieved page) can tell it to call the tool, and deleting a recording nobody asked to delete
        destroys the call's evidence. Refused, the recording goes on and the refusal is logged."""
        if not self.consent.recording:
            return "not_recording"
        if not caller_asked_to_stop(list(self._caller_turns), self.consent):
            log.warning("stop_recording refused: the caller has not asked to stop the recording",
                        extra={"session_id": self._session_id, "consent": self.consent.outcome})
            return "not_asked"
        self._apply(self.consent.stop_requested())
        return "stopped"

    def heard(self, pcm: bytes) -> None:
        if self.recorder is not None and not self._pauses:  # paused: the recorder fills the tick with silence
            self.recorder.heard(pcm)

    def said(self, pcm: bytes | None) -> None:
        if self.recorder is not None:
            self.recorder.said(None if self._pauses else pcm)  # every tick still: the recording's clock

    @property
    def paused(self) -> bool:
        return self._pauses > 0

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        """A sensitive digit form (a card number, a PIN) is under way: nothing of either side is recorded
        until it ends, the time written as silence so the channels stay on the call's clock. An opt-out
        meanwhile still stops and deletes the recording."""
        self._pauses += 1
        if self._pauses == 1:
            self._emit()
        try:
            yield
        finally:
            self._pauses -= 1
            if self._pauses == 0:
                self._emit()

    # ---- the call's end --------------------------------------------------------------------------

    def finish(self) -> None:
        pending = self.consent.pending
        outcome = self.consent.ended()
        if pending:
            self._emit()
        if self.recorder is not None:
            self.recorder.finish(outcome, keep=True)

    # ---- consent moves ---------------------------------------------------------------------------

    def _take_greeting(self) -> str:
        return self._greeting if self.consent.pending else ""

    def _apply(self, decision: Decision) -> str | None:
        if decision.changed:
            if decision.outcome != "pending":
                self._greeting = ""
            self._moved()
        return decision.reply

    def _moved(self) -> None:
        if self.consent.recording and self.recorder is None and self._rate:
            self.recorder = self._start(self._rate, self.consent.outcome)
        elif self.consent.outcome == "opted_out" and self.recorder is not None and not self.discarded:
            self.discarded = True
            self.recorder.finish("opted_out", keep=False)
        self._emit()

    def _emit(self) -> None:
        recording, paused = self.recording and not self._pauses, self.recording and bool(self._pauses)
        log.info("call recording consent", extra={"session_id": self._session_id, "consent": self.consent.outcome,
                                                  "recording": recording, "paused": paused})
        self._sink.emit(RecordingEvent(consent=self.consent.outcome, recording=recording, paused=paused))
