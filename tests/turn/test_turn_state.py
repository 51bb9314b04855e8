"""The turn owner's state machine as tables (internal/turn/state.py), and the owner moving through it, and
announcing its own decisions (`release`, `overlap`: internal/turn/events.py), when driven through its inputs."""

from __future__ import annotations

import asyncio

import pytest

from tests.turn.test_turn_policy import Line, Replies
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.stt.base import Transcript
from voicegate.internal.turn.events import OverlapEvent, ReleaseEvent
from voicegate.internal.turn.owner import TurnOwner, TurnSettings
from voicegate.internal.turn.state import TRANSITIONS, TurnState, TurnStep, heard, next_state

S, T = TurnState, TurnStep


@pytest.mark.parametrize(("state", "step", "after"), [
    # Onsets: the step says what the new utterance is, whatever came before.
    (S.LISTENING, T.HEARD_TURN, S.SPEAKING),
    (S.LISTENING, T.HEARD_OVER_AGENT, S.OVER_AGENT),
    (S.LISTENING, T.HEARD_AFTER_RELEASE, S.CONTINUING),
    (S.AFTER_OVER_AGENT, T.HEARD_TURN, S.SPEAKING),
    (S.AFTER_CONTINUING, T.HEARD_AFTER_RELEASE, S.CONTINUING),
    (S.AFTER_CONTINUING, T.HEARD_OVER_AGENT, S.OVER_AGENT),
    (S.SPEAKING, T.HEARD_TURN, S.SPEAKING),  # an offset the owner never saw (a digit form held the input)
    # The agent still paused for the caller's sound: more sound over it keeps it paused.
    (S.AFTER_OVER_AGENT_PAUSED, T.HEARD_OVER_AGENT, S.OVER_AGENT_PAUSED),
    (S.AFTER_OVER_AGENT_PAUSED, T.HEARD_AFTER_RELEASE, S.CONTINUING),
    # Offsets keep the utterance's relation to the agent: its words are still to come.
    (S.SPEAKING, T.STOPPED_SPEAKING, S.LISTENING),
    (S.OVER_AGENT, T.STOPPED_SPEAKING, S.AFTER_OVER_AGENT),
    (S.OVER_AGENT_PAUSED, T.STOPPED_SPEAKING, S.AFTER_OVER_AGENT_PAUSED),
    (S.CONTINUING, T.STOPPED_SPEAKING, S.AFTER_CONTINUING),
    (S.LISTENING, T.STOPPED_SPEAKING, S.LISTENING),
    # The agent paused for sound over it, and what ends the pause.
    (S.OVER_AGENT, T.AGENT_PAUSED, S.OVER_AGENT_PAUSED),
    (S.SPEAKING, T.AGENT_PAUSED, S.SPEAKING),  # only sound over the agent pauses it
    (S.AFTER_OVER_AGENT_PAUSED, T.AGENT_RESUMED, S.AFTER_OVER_AGENT),
    (S.OVER_AGENT_PAUSED, T.AGENT_STOPPED, S.OVER_AGENT),
    (S.AFTER_OVER_AGENT_PAUSED, T.AGENT_DONE, S.AFTER_OVER_AGENT),
    (S.AFTER_OVER_AGENT, T.AGENT_RESUMED, S.AFTER_OVER_AGENT),  # it was only ducked: still over the agent
    (S.CONTINUING, T.AGENT_STOPPED, S.CONTINUING),
    # The words after a release are in: an ordinary turn from here.
    (S.CONTINUING, T.CONTINUATION_SETTLED, S.SPEAKING),
    (S.AFTER_CONTINUING, T.CONTINUATION_SETTLED, S.LISTENING),
    (S.AFTER_OVER_AGENT, T.CONTINUATION_SETTLED, S.AFTER_OVER_AGENT),
])
def test_transitions(state: TurnState, step: TurnStep, after: TurnState) -> None:
    assert next_state(state, step) is after


def test_every_onset_is_defined_from_every_state_and_lands_speaking() -> None:
    for state in TurnState:
        for step in (T.HEARD_TURN, T.HEARD_OVER_AGENT, T.HEARD_AFTER_RELEASE):
            assert (state, step) in TRANSITIONS
            assert TRANSITIONS[(state, step)].speaking
        assert not next_state(state, T.STOPPED_SPEAKING).speaking
        assert next_state(state, T.STOPPED_SPEAKING).over_agent is state.over_agent


@pytest.mark.parametrize(("state", "speaking", "over_agent", "paused", "continuing"), [
    (S.LISTENING, False, False, False, False),
    (S.SPEAKING, True, False, False, False),
    (S.OVER_AGENT, True, True, False, False),
    (S.OVER_AGENT_PAUSED, True, True, True, False),
    (S.AFTER_OVER_AGENT, False, True, False, False),
    (S.AFTER_OVER_AGENT_PAUSED, False, True, True, False),
    (S.CONTINUING, True, False, False, True),
    (S.AFTER_CONTINUING, False, False, False, True),
])
def test_what_each_state_means(state: TurnState, speaking: bool, over_agent: bool, paused: bool,
                               continuing: bool) -> None:
    assert (state.speaking, state.over_agent, state.agent_paused, state.continuing) == (
        speaking, over_agent, paused, continuing)


@pytest.mark.parametrize(("after_release", "audible", "paused", "step"), [
    (False, False, False, T.HEARD_TURN),
    (False, True, False, T.HEARD_OVER_AGENT),
    (False, False, True, T.HEARD_OVER_AGENT),  # paused for the caller: silent, but still over it
    (True, True, False, T.HEARD_AFTER_RELEASE),  # the release's question comes first
    (True, False, False, T.HEARD_AFTER_RELEASE),
])
def test_which_onset(after_release: bool, audible: bool, paused: bool, step: TurnStep) -> None:
    assert heard(after_release, audible, paused) is step


def settings(window_s: float = 0.0) -> TurnSettings:
    return TurnSettings(350, 5000, 2000, 0.5, True, 100, 120, resume_after_false_interruption_s=window_s)


def voiced(turn: TurnOwner, frames: int) -> None:
    for _ in range(frames):
        turn.audio(b"\0" * 320, True)


async def test_the_owner_moves_through_the_states_of_a_sound_over_the_agent() -> None:
    replies = Replies()
    turn = TurnOwner(settings(2.0), replies, Line(), 8000, events=CollectingSink())
    replies.active = replies.audible = True
    assert turn.state is S.LISTENING
    turn.speech_started()
    assert turn.state is S.OVER_AGENT
    voiced(turn, 10)  # past barge_in_confirm_ms: the agent is paused, the words decide
    assert turn.state is S.OVER_AGENT_PAUSED and replies.calls == ["pause"]
    turn.speech_ended(final_owed=True)
    assert turn.state is S.AFTER_OVER_AGENT_PAUSED


async def test_the_owner_emits_its_own_release_event() -> None:
    sink = CollectingSink()
    turn = TurnOwner(settings(), Replies(), Line(), 8000, events=sink)
    turn.typed("What time is it?")
    turn.digit("4")
    turn.digit("#")  # ends the entry on the loop's next turn
    await asyncio.sleep(0.05)
    releases = [event for event in sink.events if isinstance(event, ReleaseEvent)]
    assert [(event.reason, event.probability, event.silence_ms) for event in releases] == [
        ("typed", None, 0.0), ("keypad", None, 0.0)]


async def test_the_owner_emits_its_own_overlap_event() -> None:
    """A sound over the agent that was no turn: the owner reports what the agent did (the reply side only
    says whether it resumed or played on)."""
    sink = CollectingSink()
    replies = Replies()
    turn = TurnOwner(settings(2.0), replies, Line(), 8000, events=sink)
    replies.active = replies.audible = True
    turn.speech_started()
    voiced(turn, 10)
    turn.speech_ended(final_owed=True)
    turn.transcript(Transcript("", final=True))
    overlaps = [event for event in sink.events if isinstance(event, OverlapEvent)]
    assert [(event.kind, event.action) for event in overlaps] == [("non_speech", "resumed")]
    assert turn.state is S.AFTER_OVER_AGENT
