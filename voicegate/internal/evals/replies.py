"""Which of the agent's sounds and words answer which of the caller's turns.

Times are the caller's: when each turn's sound left, when each stretch of the agent's speech arrived,
when each server event arrived. A stretch of agent speech answers the last turn the caller had begun
before it started: an answer cut short by a barge-in still belongs to the turn it answered, and so does
an early answer to the first half of a sentence the caller then finished. The server's own lines (its
transcript events) go with the stretch of speech that had begun when they arrived (the agent's line is
sent once it has been heard), and what the server heard the caller say, and the tools it ran, with the
last turn begun before they arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from voicegate.internal.evals.conversation import TurnRecord
from voicegate.internal.evals.server_api import Observed
from voicegate.internal.evals.wire import Run

GREETING = -1  # the index of what the agent said before the caller's first turn
TALKING_OVER_S = 0.3  # agent speech this close before the caller's last sound: it had not stopped talking


@dataclass
class AgentLine:
    text: str
    interrupted: bool = False


@dataclass
class TurnView:
    """One turn as the checks see it (index GREETING: the greeting)."""

    index: int
    runs: list[Run] = field(default_factory=list)
    agent: list[AgentLine] = field(default_factory=list)
    understood: list[str] = field(default_factory=list)  # the server's transcript of the caller
    tools: list[dict[str, Any]] = field(default_factory=list)  # the tool calls the server reported
    voice_to_voice_ms: float | None = None
    talked_over: bool = False  # the agent was still talking when the caller's turn ended
    stopped_ms: float | None = None  # barge-in: from the caller's first sound to the agent falling silent
    heard: str = ""  # Whisper, on the wire

    @property
    def said(self) -> str:
        return " ".join(line.text for line in self.agent)


def transcript_line(lines: list[list[str]], line: list[str], replaces: bool) -> None:
    """Add [role, text] to a call's transcript; a user line that `replaces` takes the last user line's
    place instead. The server sets it only while that turn is still open (not yet answered, or continued
    after its release), so the last user line is part of it even when an interrupted reply came between;
    the page (app.js) keeps such a line and adds the whole turn again under the reply."""
    if replaces and line[0] == "user":
        for index in range(len(lines) - 1, -1, -1):
            if lines[index][0] == "user":
                lines[index] = line
                return
    lines.append(line)


def _owner(moment: float, starts: list[float | None]) -> int:
    """The last turn begun before `moment` (GREETING when none had)."""
    found = GREETING
    for index, start in enumerate(starts):
        if start is not None and start < moment:
            found = index
    return found


def attribute(records: list[TurnRecord], runs: list[Run], events: list[Observed]) -> list[TurnView]:
    """The greeting's view followed by one view per turn."""
    starts = [record.utterance.started_at if record.utterance else None for record in records]
    views = {index: TurnView(index) for index in range(GREETING, len(records))}
    for run in runs:
        views[_owner(run.start, starts)].runs.append(run)
    interrupted = {seen.event.get("text") for seen in events
                   if seen.event.get("type") == "response" and seen.event.get("interrupted")}
    user_lines: list[list[str]] = []  # [role, text, owner], `replaces` honoured
    for seen in events:
        event = seen.event
        kind = event.get("type")
        if kind == "transcript" and event.get("final"):
            text = str(event.get("text", ""))
            if event.get("role") == "agent":
                begun = [run for run in runs if run.start < seen.at]
                owner = _owner(begun[-1].start, starts) if begun else _owner(seen.at, starts)
                views[owner].agent.append(AgentLine(text, text in interrupted))
            else:
                transcript_line(user_lines, ["user", text, str(_owner(seen.at, starts))],
                                bool(event.get("replaces")))
        elif kind == "tool":
            views[_owner(seen.at, starts)].tools.append(event)
    for _, line_text, owner_text in user_lines:
        views[int(owner_text)].understood.append(line_text)
    for index, record in enumerate(records):
        _timings(views[index], record, runs)
    return [views[index] for index in range(GREETING, len(records))]


def _timings(view: TurnView, record: TurnRecord, runs: list[Run]) -> None:
    utterance = record.utterance
    if utterance is None or utterance.last_loud_at is None:
        return
    end = utterance.last_loud_at
    view.talked_over = any(run.start <= end and run.end >= end - TALKING_OVER_S for run in view.runs)
    after = [run for run in view.runs if run.start > end]
    if after and not view.talked_over:
        view.voice_to_voice_ms = (after[0].start - end) * 1000
    if record.turn.barge_in_ms is not None and utterance.first_loud_at is not None:
        began = utterance.first_loud_at
        playing = [run for run in runs if run.start < began <= run.end + 0.1]
        if playing:
            view.stopped_ms = max(0.0, (playing[-1].end - began) * 1000)


def call_transcript(events: list[Observed]) -> list[list[str]]:
    """The call both ways, as the server told it: [role, text] per final line, `replaces` honoured."""
    lines: list[list[str]] = []
    for seen in events:
        event = seen.event
        if event.get("type") == "transcript" and event.get("final"):
            transcript_line(lines, [str(event.get("role", "")), str(event.get("text", ""))],
                            bool(event.get("replaces")))
    return lines
