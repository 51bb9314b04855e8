"""The caller's side of a turn as an explicit state machine: the TurnOwner's state and what moves it.

Two things about the caller decide what the owner does with their sound and words: whether they are
speaking now, and how the utterance they began relates to the agent:
- an ordinary turn (the agent was quiet);
- over the agent (it was audible: ducked, and the barge-in rules judge the words, bargein.py); the
  agent may have been *paused* for it (resume_after_false_interruption_s), silent until the words say
  whether it was a turn;
- right after a release (continuing): the reply just released is held until their words say whether
  they are going on with the turn it answers.
An utterance keeps its relation after it ends (its finals still arrive as sound over the agent, or as
the continuation of a released turn) until the next one begins or the continuation is settled.

`next_state` is the one transition function: the owner works out which `TurnStep` happened (a pure
`heard` for the onset) and applies the table. A step that does not apply to a state leaves it as it is
(the agent resumed while it was not paused, a second end of speech).
"""

from __future__ import annotations

from enum import Enum


class TurnState(Enum):
    LISTENING = "listening"  # quiet; nothing over the agent, no continuation pending
    SPEAKING = "speaking"  # an ordinary turn
    OVER_AGENT = "over_agent"  # speaking over the audible agent (ducked)
    OVER_AGENT_PAUSED = "over_agent_paused"  # ... long enough that the agent went silent, reply kept
    AFTER_OVER_AGENT = "after_over_agent"  # quiet again; the words (or the window) say what it was
    AFTER_OVER_AGENT_PAUSED = "after_over_agent_paused"  # ... with the agent still paused for it
    CONTINUING = "continuing"  # speaking right after a release, its reply held
    AFTER_CONTINUING = "after_continuing"  # quiet again; their words say whether they went on

    @property
    def speaking(self) -> bool:
        return self in _SPEAKING

    @property
    def over_agent(self) -> bool:
        """The caller's latest utterance began while the agent was audible (or paused for them)."""
        return self in _OVER_AGENT

    @property
    def agent_paused(self) -> bool:
        return self in (TurnState.OVER_AGENT_PAUSED, TurnState.AFTER_OVER_AGENT_PAUSED)

    @property
    def continuing(self) -> bool:
        """The caller spoke right after a release: are they going on with that turn?"""
        return self in (TurnState.CONTINUING, TurnState.AFTER_CONTINUING)


_SPEAKING = frozenset({TurnState.SPEAKING, TurnState.OVER_AGENT, TurnState.OVER_AGENT_PAUSED, TurnState.CONTINUING})
_OVER_AGENT = frozenset({TurnState.OVER_AGENT, TurnState.OVER_AGENT_PAUSED, TurnState.AFTER_OVER_AGENT,
                         TurnState.AFTER_OVER_AGENT_PAUSED})


class TurnStep(Enum):
    HEARD_TURN = "heard_turn"  # the VAD's onset, the agent quiet
    HEARD_OVER_AGENT = "heard_over_agent"  # the onset while the agent was audible or paused for the caller
    HEARD_AFTER_RELEASE = "heard_after_release"  # the onset right after a release (its reply can still go)
    STOPPED_SPEAKING = "stopped_speaking"  # the VAD's offset
    AGENT_PAUSED = "agent_paused"  # speech over the agent lasted past barge_in_confirm_ms (a pause window set)
    AGENT_RESUMED = "agent_resumed"  # the sound over it was no turn: it plays on
    AGENT_STOPPED = "agent_stopped"  # it was interrupted (a turn over it, keys, typed text)
    AGENT_DONE = "agent_done"  # at an onset, no reply is active: any pause it was in is over
    CONTINUATION_SETTLED = "continuation_settled"  # the words after a release were in (or none came)


def heard(after_release: bool, agent_audible: bool, agent_paused: bool) -> TurnStep:
    """Which onset this is. Speech right after a release may be the rest of that turn, and that question
    comes first: its reply is held (so nothing of it is talked over) until the words tell. Otherwise speech
    while the agent can be heard, or is paused for the caller's sound, is sound over the agent."""
    if after_release:
        return TurnStep.HEARD_AFTER_RELEASE
    if agent_audible or agent_paused:
        return TurnStep.HEARD_OVER_AGENT
    return TurnStep.HEARD_TURN


_S = TurnState
_T = TurnStep
_QUIET_OF = {_S.SPEAKING: _S.LISTENING, _S.OVER_AGENT: _S.AFTER_OVER_AGENT,
             _S.OVER_AGENT_PAUSED: _S.AFTER_OVER_AGENT_PAUSED, _S.CONTINUING: _S.AFTER_CONTINUING}
_UNPAUSED_OF = {_S.OVER_AGENT_PAUSED: _S.OVER_AGENT, _S.AFTER_OVER_AGENT_PAUSED: _S.AFTER_OVER_AGENT}

TRANSITIONS: dict[tuple[TurnState, TurnStep], TurnState] = {
    # An onset starts a new utterance whatever the last one was (an onset the owner missed, while a digit
    # form held the input, changes nothing): its relation to the agent is the step's. A pause the agent is
    # in carries over to sound that goes on over it.
    **{(state, _T.HEARD_TURN): _S.SPEAKING for state in _S},
    **{(state, _T.HEARD_AFTER_RELEASE): _S.CONTINUING for state in _S},
    **{(state, _T.HEARD_OVER_AGENT): _S.OVER_AGENT_PAUSED if state.agent_paused else _S.OVER_AGENT for state in _S},
    **{(state, _T.STOPPED_SPEAKING): quiet for state, quiet in _QUIET_OF.items()},
    (_S.OVER_AGENT, _T.AGENT_PAUSED): _S.OVER_AGENT_PAUSED,
    **{(state, step): unpaused for state, unpaused in _UNPAUSED_OF.items()
       for step in (_T.AGENT_RESUMED, _T.AGENT_STOPPED, _T.AGENT_DONE)},
    (_S.CONTINUING, _T.CONTINUATION_SETTLED): _S.SPEAKING,
    (_S.AFTER_CONTINUING, _T.CONTINUATION_SETTLED): _S.LISTENING,
}


def next_state(state: TurnState, step: TurnStep) -> TurnState:
    """The state after `step` (unchanged where the step does not apply)."""
    return TRANSITIONS.get((state, step), state)


class Verdict(Enum):
    """The end-of-turn verdict on the caller's latest silence."""

    NONE = "none"  # not asked, or answered by the end-of-turn model (or it failed): the fusion decides
    OWED = "owed"  # asked (the model, or the recogniser's head in its final): the release waits for it
    HEAD = "head"  # the recogniser's phone-band head judged the sound (trained on noisy lines: full weight)
