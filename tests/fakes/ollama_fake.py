"""A local stand-in for Ollama's native API: POST /api/chat streaming NDJSON, and /api/tags.

    async with FakeOllama() as fake:
        fake.script_reply("Hi there. Bye.")
        fake.script_tool_call("get_weather", {"city": "Oslo"})
        model = OllamaChatModel(OllamaConfig(base_url=fake.url, model="llama3.2"))
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.fakes.background import BackgroundAsgiServer


@dataclass
class OllamaReply:
    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class FakeOllama(BackgroundAsgiServer):
    def __init__(self, *, models: tuple[str, ...] = ("llama3.2",)) -> None:
        super().__init__()
        self.models = models
        self.requests: list[dict[str, Any]] = []
        self.chunk_delay_s = 0.0
        self.error_status: int | None = None
        self.stream_error: str | None = None  # sent as {"error": ...} after the first line
        self._script: deque[OllamaReply] = deque()

    def script_reply(self, text: str) -> None:
        self._script.append(OllamaReply(text=text))

    def script_tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        self._script.append(OllamaReply(tool_calls=[(name, arguments)]))

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/api/tags")
        async def tags() -> Response:
            return JSONResponse({"models": [{"name": name, "model": name} for name in self.models]})

        @app.post("/api/chat")
        async def chat(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            if self.error_status is not None:
                return JSONResponse({"error": "something went wrong"}, status_code=self.error_status)
            if body.get("model") not in self.models:
                return JSONResponse({"error": f"model '{body.get('model')}' not found"}, status_code=404)
            reply = self._script.popleft() if self._script else OllamaReply(text="Hello from Ollama.")
            if body.get("stream", True) is False:
                return JSONResponse(self._line(body, {"role": "assistant", "content": reply.text}, done=True))
            return StreamingResponse(self.watch(self._lines(body, reply)), media_type="application/x-ndjson")

        return app

    def _line(self, body: dict[str, Any], message: dict[str, Any], *, done: bool) -> dict[str, Any]:
        line: dict[str, Any] = {
            "model": body.get("model"),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "message": message,
            "done": done,
        }
        if done:
            line |= {"done_reason": "stop", "total_duration": 1000, "eval_count": 3}
        return line

    async def _lines(self, body: dict[str, Any], reply: OllamaReply) -> AsyncIterator[bytes]:
        messages = [{"role": "assistant", "content": piece} for piece in re.findall(r"\S+\s*", reply.text)]
        if reply.tool_calls:
            calls = [{"function": {"name": name, "arguments": args}} for name, args in reply.tool_calls]
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        for index, message in enumerate(messages):
            yield (json.dumps(self._line(body, message, done=False)) + "\n").encode()
            if index == 0 and self.stream_error:
                yield (json.dumps({"error": self.stream_error}) + "\n").encode()
                return
            await asyncio.sleep(self.chunk_delay_s)
        yield (json.dumps(self._line(body, {"role": "assistant", "content": ""}, done=True)) + "\n").encode()
