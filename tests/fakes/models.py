"""A chat model stand-in for pipeline logic and benchmarks: what the agent says is not what they test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from internal.llm.base import ChatRequest, ReplyDelta, ToolCall


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
