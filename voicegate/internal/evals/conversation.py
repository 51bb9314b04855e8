"""Playing one call's turns against the agent the way a person would: listen to the greeting, say a turn,
wait for the answer to end, say the next; or cut in while the agent talks (barge_in_ms).

A reply has ended when the agent has been quiet for a while after speaking. With the server's events
(a WebRTC call's DataChannel, a SIP call's call events) its line for the reply says so sooner and more
surely: it is sent once the whole reply has been played, so a slow sentence boundary is not taken for
the end. Nothing here judges; it records when each turn's sound left (`Utterance`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from voicegate.internal.evals.phone import Phone
from voicegate.internal.evals.scenario import Call, Turn
from voicegate.internal.evals.voice import Sound
from voicegate.internal.evals.wire import Utterance

POLL_S = 0.05
GREETING_WAIT_S = 6.0  # how long a new call listens for a greeting to begin
QUIET_AFTER_FINAL_S = 0.5  # after the agent's line for the reply, this much quiet ends it
QUIET_S = 1.5  # without the server's events: this much quiet after speech ends a reply
QUIET_FINAL_LATE_S = 3.0  # with them, when the final transcript is late: this much quiet is enough
LONGEST_REPLY_S = 60.0  # a reply still going after this long is cut short by the caller's next turn
END_WAIT_S = 10.0  # when the call's end is part of what is checked: how long the agent gets to hang up
SETTLE_S = 0.5  # after hanging up: the server's last events reach us


@dataclass
class TurnRecord:
    turn: Turn
    utterance: Utterance | None = None
    skipped: str = ""  # why the turn was never played
    barge_in_missed: str = ""  # why there was nothing to cut in on


def answered_after(phone: Phone, moment: float, *, greeting: bool = False) -> bool:
    """Did the server, after `moment`, hear the caller's turn and then finish a reply to it?

    Order is what counts: the server's events arrive in the order it sent them, so an agent line after
    the caller's line is the reply to it. A line of the previous reply that arrives late (a loaded
    server, a slow network) comes before the caller's line and is not mistaken for this turn's answer.
    """
    heard_caller = greeting  # a greeting answers nobody
    for seen in phone.server_events():
        event = seen.event
        if seen.at <= moment or event.get("type") != "transcript" or not event.get("final"):
            continue
        if event.get("role") == "user":
            heard_caller = True
        elif heard_caller:
            return True
    return False


async def until(condition: Callable[[], bool], deadline: float, stop: asyncio.Event | None = None) -> bool:
    """Poll `condition` until it holds, `deadline` passes or `stop` is set; returns whether it holds."""
    while not condition():
        if (stop is not None and stop.is_set()) or time.monotonic() >= deadline:
            return condition()
        await asyncio.sleep(POLL_S)
    return True


async def await_reply(phone: Phone, since: float, timeout_s: float, *, greeting: bool = False) -> None:
    """Wait for the agent to begin answering (up to `timeout_s` after `since`), then for it to finish."""
    if not await until(lambda: phone.ear.loud_after(since) is not None, since + timeout_s, phone.ended):
        return
    events = not phone.server_events_problem

    def finished() -> bool:
        if events and answered_after(phone, since, greeting=greeting) and phone.ear.quiet_for(QUIET_AFTER_FINAL_S):
            return True
        return phone.ear.quiet_for(QUIET_FINAL_LATE_S if events else QUIET_S)

    await until(finished, time.monotonic() + LONGEST_REPLY_S, phone.ended)


async def agent_speaking_for(phone: Phone, since: float, ms: int, timeout_s: float) -> bool:
    """Wait until the agent has been answering for `ms` (it began after `since`); False if it never began."""
    if not await until(lambda: phone.ear.loud_after(since) is not None, since + timeout_s, phone.ended):
        return False
    began = phone.ear.loud_after(since)
    assert began is not None
    await until(lambda: False, began.at + ms / 1000, phone.ended)
    return not phone.ended.is_set()


async def converse(phone: Phone, call: Call, turn_sounds: list[list[Sound]],
                   on_turn: Callable[[int, TurnRecord], None] = lambda index, record: None) -> list[TurnRecord]:
    """Play every turn of `call` on a connected phone; returns what was played when."""
    records = [TurnRecord(turn) for turn in call.turns]
    connected = time.monotonic()
    # The greeting, if there is one: never cut in on it unless the first turn asks to.
    last_sound = connected
    if call.turns[0].barge_in_ms is None:
        await await_reply(phone, connected, GREETING_WAIT_S, greeting=True)
    for index, (turn, sounds) in enumerate(zip(call.turns, turn_sounds, strict=True)):
        record = records[index]
        if phone.ended.is_set():
            record.skipped = f"not played: the call had ended ({phone.end_reason or 'hung up'})"
            on_turn(index, record)
            continue
        if turn.barge_in_ms is not None and not await agent_speaking_for(phone, last_sound, turn.barge_in_ms,
                                                                         turn.timeout_s):
            record.barge_in_missed = (f"the agent did not start speaking within {turn.timeout_s:g} s of the "
                                      "turn before, so there was nothing to cut in on")
        record.utterance = phone.mouth.say(sounds)
        await _first(record.utterance.done.wait(), phone.ended.wait())
        last_sound = record.utterance.last_loud_at or time.monotonic()
        cut_in_next = index + 1 < len(call.turns) and call.turns[index + 1].barge_in_ms is not None
        if not cut_in_next:
            await await_reply(phone, last_sound, turn.timeout_s)
        on_turn(index, record)
    if call.expect.ended_by is not None:
        await until(phone.ended.is_set, time.monotonic() + END_WAIT_S)
    await phone.hang_up()
    await asyncio.sleep(SETTLE_S)
    return records


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
