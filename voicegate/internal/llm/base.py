"""Language models (and BYO agents) behind one small interface.

`ChatModel.stream` yields reply text as it is generated and tool calls the model wants made; the agent
loop in the pipeline runs the tools and calls `stream` again with their results. A model that carries
its context in messages reads `messages`; an external agent that keeps its own conversation reads
`turn` (exactly what the caller said, with context kept apart).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

# The messages live with the conversation they make up (a model reads them, the call keeps them).
from voicegate.internal.conversation.messages import ChatMessage, ToolCall


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as an OpenAI-style function definition: name, description, JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReplyDelta:
    text: str


@dataclass(slots=True)
class Turn:
    """One caller turn and what the pipeline gathered for it."""

    text: str  # exactly what the caller said, never decorated
    interrupted_text: str = ""  # what the agent was saying when the caller cut in
    context: list[str] = field(default_factory=list)  # retrieved knowledge chunks
    summary: str = ""  # rolling summary of earlier turns
    note: str = ""  # an instruction for this turn only (e.g. "ask them to repeat")
    memory: str = ""  # the caller's injected memory block ("" when none)
    dtmf: str = ""  # keypad digits pressed since the last turn
    # Asked before the caller's turn was known to be over: the reply may be thrown away unheard (the request
    # is then closed), so nothing irreversible should happen on it.
    prepared: bool = False


@dataclass(slots=True)
class ChatRequest:
    session_id: str
    resource_id: str | None
    system: str  # the whole system context: policy, profile, preferences, memory, summary, skills
    messages: list[ChatMessage]  # conversation so far, ending with this turn's user message
    turn: Turn
    tools: list[ToolSpec] = field(default_factory=list)
    # What a BYO agent gets as `system`: the deployer's skills only. The agent owns its own prompt; memory
    # and the summary reach it in their own fields, so they are not repeated here.
    agent_system: str = ""


class LlmError(Exception):
    """The model or agent failed this turn (status, timeout, bad stream); the caller hears an apology."""


class ChatModel(Protocol):
    name: str

    def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        """Reply deltas and tool calls. Cancelling the iteration must abort the request."""

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        """One stateless request (summaries, reconciliation); raises LlmError on failure."""

    async def aclose(self) -> None: ...
