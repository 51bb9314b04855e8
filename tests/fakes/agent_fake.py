"""A bring-your-own-agent endpoint that answers in every shape (and every failure) agents produce.

    async with FakeAgent(mode="sse_json_delta", reply="It is sunny. Anything else?") as agent:
        model = AgentChatModel(AgentConfig(url=agent.url + "/agent", api_key="k"))
        ...
        assert agent.requests[0].body["text"] == "what's the weather"
        agent.mode = "hang"          # modes can change between turns
        assert await agent.wait_disconnect()

Modes: json, json_response_key, plain_chunked, sse_json_delta (ends with [DONE], then junk that must be
ignored), sse_raw (raw text events, no [DONE]), status_500, hang (no headers ever), hang_mid_stream
(headers and a first piece, then nothing), garbage_sse (see `garbage_sse_body`), malformed_json,
huge (a 10 MB text/plain body, streamed slowly enough that a client cutting it off is seen to leave).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.fakes.background import BackgroundAsgiServer

Mode = Literal[
    "json", "json_response_key", "plain_chunked", "sse_json_delta", "sse_raw", "status_500", "hang",
    "hang_mid_stream", "garbage_sse", "malformed_json", "huge",
]
HUGE_BYTES = 10 * 1024 * 1024
HUGE_CHUNK = 64 * 1024


@dataclass
class AgentRequest:
    headers: dict[str, str]
    body: dict[str, Any]
    client_port: int  # the same port on two requests means one reused connection


def pieces(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text) or [""]


def thirds(text: str) -> tuple[str, str, str]:
    words = pieces(text)
    a, b = len(words) // 3, 2 * len(words) // 3
    return "".join(words[:a]), "".join(words[a:b]), "".join(words[b:])


def garbage_sse_body(reply: str) -> bytes:
    """A stream whose readable parts spell `reply`, among everything a sloppy or broken agent sends."""
    first, second, third = thirds(reply)
    return b"".join(
        [
            b": keep-alive comment\r\n",
            b"retry: 1000\r\n\r\n",
            b"event: message\r\nid: 1\r\ndata: " + json.dumps({"delta": first}).encode() + b"\r\n\r\n",
            b'data: {"delta": "truncated json\r\n\r\n',  # looks like JSON, is not: dropped
            b"data: \x00\x01\x02 binary junk\r\n\r\n",  # control characters: dropped
            b"data: \xff\xfe not utf-8\n\n",  # undecodable: dropped
            b'data: {"type": "ping"}\n\n',  # JSON without text: skipped
            b"data:" + second.encode() + b"\r\r",  # raw text, no space after the colon, CR line ends
            b'data: {"delta":\n',  # one JSON object over two data lines
            b"data: " + json.dumps(third).encode() + b"}\n\n",
            b"data: [DONE]\n\n",
            b'data: {"delta": " SHOULD NOT BE SPOKEN"}\n\n',
        ]
    )


class FakeAgent(BackgroundAsgiServer):
    def __init__(self, mode: Mode = "json", reply: str = "Hello from the agent. How can I help?") -> None:
        super().__init__()
        self.mode: Mode = mode
        self.reply = reply
        self.chunk_delay_s = 0.0
        self.requests: list[AgentRequest] = []
        self.huge_bytes_sent = 0

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/agent")
        async def agent(request: Request) -> Response:
            port = request.client.port if request.client else 0
            self.requests.append(AgentRequest(dict(request.headers), await request.json(), port))
            return await self._answer(request)

        return app

    async def _answer(self, request: Request) -> Response:
        mode, reply = self.mode, self.reply
        if mode == "json":
            return JSONResponse({"text": reply})
        if mode == "json_response_key":
            return JSONResponse({"response": reply})
        if mode == "malformed_json":
            return Response(b'{"text": "unterminated', media_type="application/json")
        if mode == "status_500":
            return JSONResponse({"error": "agent crashed"}, status_code=500)
        if mode == "hang":
            await self.hang(request)
            return JSONResponse({"text": "too late"})
        return StreamingResponse(self.watch(self._stream(mode, reply)), media_type=self._media_type(mode))

    @staticmethod
    def _media_type(mode: Mode) -> str:
        return "text/event-stream" if mode in ("sse_json_delta", "sse_raw", "garbage_sse") else "text/plain"

    async def _stream(self, mode: Mode, reply: str) -> AsyncIterator[bytes]:
        if mode == "plain_chunked":
            for piece in pieces(reply):
                yield piece.encode()
                await asyncio.sleep(self.chunk_delay_s)
        elif mode == "sse_json_delta":
            for piece in pieces(reply):
                yield f"data: {json.dumps({'delta': piece})}\n\n".encode()
                await asyncio.sleep(self.chunk_delay_s)
            yield b"data: [DONE]\n\ndata: " + json.dumps({"delta": " SHOULD NOT BE SPOKEN"}).encode() + b"\n\n"
        elif mode == "sse_raw":
            for piece in pieces(reply):
                yield f"data: {piece}\n\n".encode()
                await asyncio.sleep(self.chunk_delay_s)
        elif mode == "garbage_sse":
            body = garbage_sse_body(reply)
            for start in range(0, len(body), 7):  # small reads split lines, CRLFs and characters
                yield body[start : start + 7]
        elif mode == "hang_mid_stream":
            yield pieces(reply)[0].encode()
            await self.hang()
        elif mode == "huge":
            filler = (b"blah " * (HUGE_CHUNK // 5 + 1))[:HUGE_CHUNK]
            while self.huge_bytes_sent < HUGE_BYTES:
                yield filler
                self.huge_bytes_sent += len(filler)
                await asyncio.sleep(0.005)  # slower than any client reading it, so a cut-off is seen
