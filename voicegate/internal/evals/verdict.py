"""Judging a call once it is over: which sounds and words answered which turn, what the caller heard
(Whisper), every expectation, the rubric, and a recording of each turn for the report."""

from __future__ import annotations

import time

from voicegate.internal.evals.checks import call_checks, turn_checks
from voicegate.internal.evals.conversation import TurnRecord
from voicegate.internal.evals.hearing import Transcriber, hear
from voicegate.internal.evals.judge import Completer, judge
from voicegate.internal.evals.phone import Phone
from voicegate.internal.evals.replies import GREETING, TurnView, attribute, call_transcript
from voicegate.internal.evals.results import CallResult, Clip, PlacedCall, TurnResult
from voicegate.internal.evals.wire import stereo_clip

CLIP_LEAD_S = 0.5  # a turn's recording starts this long before the caller speaks
CLIP_TAIL_S = 0.5  # ... and the last one ends this long after the last sound heard


async def judge_call(placed: PlacedCall, ears: Transcriber, model: Completer | None, unavailable: str) -> CallResult:
    call, facts, phone = placed.call, placed.facts, placed.phone
    if phone is None:
        nothing = TurnView(GREETING)
        return CallResult(placed.index, call.name, call_checks(call, nothing, [], facts), [], nothing, None, [],
                          facts, placed.seconds)
    records = placed.records
    views = attribute(records, phone.ear.runs(), placed.events)
    await hear(views, phone.ear.heard, ears)
    greeting, turn_views = views[0], views[1:]
    turns = [TurnResult(i, record.turn.label, turn_checks(record, view, facts), view,
                        turn_clip(phone, records, i, placed.connected))
             for i, (record, view) in enumerate(zip(records, turn_views, strict=True))]
    checks = call_checks(call, greeting, turn_views, facts)
    transcript = call_transcript(placed.events)
    if call.expect.rubric:
        checks.append(await judge(call.expect.rubric, transcript, model, unavailable))
    first = records[0].utterance.started_at if records and records[0].utterance else None
    greeting_clip = Clip(stereo_clip(phone.mouth.sent, phone.ear.heard, placed.connected, first or placed.connected),
                         phone.ear.heard.rate) if greeting.runs and first else None
    return CallResult(placed.index, call.name, checks, turns, greeting, greeting_clip, transcript, facts,
                      placed.seconds)


def turn_clip(phone: Phone, records: list[TurnRecord], index: int, connected: float) -> Clip | None:
    """Both sides from just before the turn to the start of the next (the last: to the last sound)."""
    utterance = records[index].utterance
    if utterance is None or utterance.started_at is None:
        return None
    following = [r.utterance.started_at for r in records[index + 1:] if r.utterance and r.utterance.started_at]
    heard = phone.ear.heard.frames
    end = following[0] if following else (heard[-1].at + CLIP_TAIL_S if heard else time.monotonic())
    start = max(connected, utterance.started_at - CLIP_LEAD_S)
    return Clip(stereo_clip(phone.mouth.sent, phone.ear.heard, start, end), phone.ear.heard.rate)
