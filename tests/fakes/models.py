"""A chat model stand-in for pipeline logic and benchmarks: what the agent says is not what they test."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from voicegate.internal.llm.base import ChatRequest, ReplyDelta, ToolCall


class RecordingModel:
    """A chat model that answers from a function and records every request (for pipeline logic)."""

    name = "recording"

    def __init__(self, reply: str = "Okay.", delay_s: float = 0.0) -> None:
        self.reply = reply
        self.delay_s = delay_s
        self.requests: list[ChatRequest] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        self.requests.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        for word in self.reply.split(" "):
            yield ReplyDelta(word + " ")

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        return ""

    async def aclose(self) -> None:
        return None


class ToolCallingModel:
    """A chat model that, on each new caller turn, calls the next scripted tool, then answers from its result
    (`answer(result)`, the tool's JSON parsed); with no scripted call left it says `reply`. Records every
    request and every tool result, for tests of tools that act on the call (digits, keys, transfers)."""

    name = "tool-calling"

    def __init__(self, calls: list[tuple[str, dict[str, object]]], answer: Callable[[dict[str, Any]], str],
                 reply: str = "Okay.") -> None:
        self.calls = list(calls)
        self.answer = answer
        self.reply = reply
        self.requests: list[ChatRequest] = []
        self.results: list[dict[str, Any]] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        self.requests.append(request)
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "tool":
            result = json.loads(last.content)
            self.results.append(result)
            text = self.answer(result)
        elif self.calls:
            name, arguments = self.calls.pop(0)
            yield ToolCall(f"call-{len(self.requests)}", name, dict(arguments))
            return
        else:
            text = self.reply
        for word in text.split(" "):
            yield ReplyDelta(word + " ")

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        return ""

    async def aclose(self) -> None:
        return None
