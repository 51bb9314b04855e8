"""A local stand-in for the OpenAI HTTP API, speaking the same wire protocol as api.openai.com.

Served: POST /v1/chat/completions (streamed SSE chunks ending in `data: [DONE]`, or one JSON body),
/v1/audio/transcriptions (multipart upload), /v1/audio/speech (chunked raw PCM at 24 kHz) and
/v1/embeddings (float lists or base64, as the SDK asks). Point a client at `fake.url + "/v1"`.

    async with FakeOpenAI() as fake:
        fake.script_reply("Hello there. How can I help?")
        fake.script_tool_call("lookup", {"city": "Paris"})
        model = OpenAIChatModel(config, base_url=fake.url + "/v1", api_key="test")
        ...
        assert fake.requests[0]["messages"][0]["role"] == "system"
"""

from __future__ import annotations

import asyncio
import base64
import email.parser
import email.policy
import hashlib
import io
import json
import math
import re
import time
import wave
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from tests.fakes.background import BackgroundAsgiServer

SPEECH_RATE = 24_000


@dataclass
class ScriptedToolCall:
    name: str
    arguments: str  # the JSON text exactly as the model would stream it (may be invalid on purpose)
    id: str = ""


@dataclass
class ScriptedReply:
    text: str = ""
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)


@dataclass
class TranscriptionUpload:
    fields: dict[str, str]
    filename: str
    audio: bytes


def echo_last_user(body: dict[str, Any]) -> str:
    """The default reply: repeat what the user said last, so tests can see what reached the model."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            return f"You said: {message.get('content')}"
    return "Hello."


def text_pieces(text: str) -> list[str]:
    """Word-sized deltas, as a real model streams them."""
    return re.findall(r"\S+\s*|\s+", text)


def argument_pieces(arguments: str, size: int = 4) -> list[str]:
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


def tone_pcm(seconds: float, rate: int = SPEECH_RATE, hz: float = 440.0) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return (np.sin(2 * math.pi * hz * t) * 8000).astype("<i2").tobytes()


def embedding_for(text: str, dims: int) -> list[float]:
    """A deterministic unit vector from a hash of the text: equal inputs, equal vectors."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dims)
    return [float(x) for x in vector / np.linalg.norm(vector)]


def parse_multipart(content_type: str, body: bytes) -> tuple[dict[str, str], str, bytes]:
    """Form fields, the uploaded file's name and bytes. (The stdlib does this; no python-multipart.)"""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, str] = {}
    filename, audio = "", b""
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        if part.get_filename():
            filename, audio = part.get_filename() or "", data
        elif isinstance(name, str):
            fields[name] = data.decode()
    return fields, filename, audio


class FakeOpenAI(BackgroundAsgiServer):
    def __init__(self, *, api_key: str | None = None, embedding_dims: int = 1536) -> None:
        super().__init__()
        self.api_key = api_key  # when set, other keys get a 401 like the real API
        self.embedding_dims = embedding_dims
        # What arrived, in order.
        self.requests: list[dict[str, Any]] = []  # chat completion bodies
        self.headers: list[dict[str, str]] = []  # headers of every request, any endpoint
        self.transcriptions: list[TranscriptionUpload] = []
        self.speech_requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []
        # How to answer.
        self.default_reply: Callable[[dict[str, Any]], str] = echo_last_user
        self.chunk_delay_s = 0.0
        self.hang_after_chunks: int | None = None  # streams: stop after N chunks; others: never answer
        self.error_status: int | None = None  # every request fails with this status while set
        self.transcript: str | Callable[[bytes], str] = "hello world"
        self.speech_audio: bytes | None = None  # scripted PCM; a 440 Hz tone when None
        self.speech_seconds_per_char = 0.06
        self.speech_chunk_bytes = 4801  # odd on purpose: clients must keep samples aligned
        self._script: deque[ScriptedReply] = deque()
        self._ids = 0

    # Scripting -------------------------------------------------------------------------------

    def script(self, reply: ScriptedReply) -> None:
        self._script.append(reply)

    def script_reply(self, text: str) -> None:
        self.script(ScriptedReply(text=text))

    def script_tool_call(self, name: str, arguments: dict[str, Any] | str, *, call_id: str = "") -> None:
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        self.script(ScriptedReply(tool_calls=[ScriptedToolCall(name, raw, call_id)]))

    def _next_reply(self, body: dict[str, Any]) -> ScriptedReply:
        return self._script.popleft() if self._script else ScriptedReply(text=self.default_reply(body))

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:06d}"

    # App -------------------------------------------------------------------------------------

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            if refusal := self._gate(request):
                return refusal
            body = await request.json()
            self.requests.append(body)
            reply = self._next_reply(body)
            if body.get("stream"):
                return StreamingResponse(
                    self.watch(self._chat_chunks(body, reply)), media_type="text/event-stream"
                )
            if self.hang_after_chunks is not None:
                await self.hang(request)
            return JSONResponse(self._chat_completion(body, reply))

        @app.post("/v1/audio/transcriptions")
        async def transcriptions(request: Request) -> Response:
            if refusal := self._gate(request):
                return refusal
            fields, filename, audio = parse_multipart(request.headers["content-type"], await request.body())
            self.transcriptions.append(TranscriptionUpload(fields, filename, audio))
            if self.hang_after_chunks is not None:
                await self.hang(request)
            text = self.transcript(audio) if callable(self.transcript) else self.transcript
            if fields.get("response_format") == "text":
                return PlainTextResponse(text)
            return JSONResponse({"text": text})

        @app.post("/v1/audio/speech")
        async def speech(request: Request) -> Response:
            if refusal := self._gate(request):
                return refusal
            body = await request.json()
            self.speech_requests.append(body)
            pcm = self.speech_audio
            if pcm is None:
                pcm = tone_pcm(max(0.2, len(body.get("input", "")) * self.speech_seconds_per_char))
            if body.get("response_format") == "wav":
                pcm = wav_bytes(pcm)
            elif body.get("response_format") != "pcm":
                return error_response(400, "this fake speaks pcm and wav only", "unsupported_format")
            return StreamingResponse(self.watch(self._audio_chunks(pcm)), media_type="audio/pcm")

        @app.post("/v1/embeddings")
        async def embeddings(request: Request) -> Response:
            if refusal := self._gate(request):
                return refusal
            body = await request.json()
            self.embedding_requests.append(body)
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            dims = int(body.get("dimensions") or self.embedding_dims)
            data = []
            for index, text in enumerate(inputs):
                vector = embedding_for(str(text), dims)
                encoded: Any = vector
                if body.get("encoding_format") == "base64":
                    encoded = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
                data.append({"object": "embedding", "index": index, "embedding": encoded})
            tokens = sum(len(str(text).split()) for text in inputs)
            return JSONResponse(
                {
                    "object": "list",
                    "data": data,
                    "model": body.get("model", ""),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                }
            )

        return app

    def _gate(self, request: Request) -> Response | None:
        """Record the headers; refuse like the real API on a wrong key or a scripted error status."""
        self.headers.append(dict(request.headers))
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return error_response(401, "Incorrect API key provided.", "invalid_api_key")
        if self.error_status is not None:
            return error_response(self.error_status, "The server had an error.", None)
        return None

    # Chat bodies -----------------------------------------------------------------------------

    async def _chat_chunks(self, body: dict[str, Any], reply: ScriptedReply) -> AsyncIterator[bytes]:
        completion_id, created, model = self._next_id("chatcmpl-"), int(time.time()), body.get("model", "")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            return f"data: {json.dumps(payload)}\n\n".encode()

        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": piece} for piece in text_pieces(reply.text)]
        for index, call in enumerate(reply.tool_calls):
            call_id = call.id or self._next_id("call_")
            function = {"name": call.name, "arguments": ""}
            first = {"index": index, "id": call_id, "type": "function", "function": function}
            deltas.append({"tool_calls": [first]})
            deltas += [
                {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                for piece in argument_pieces(call.arguments)
            ]
        for sent, delta in enumerate(deltas):
            if self.hang_after_chunks is not None and sent >= self.hang_after_chunks:
                await self.hang()
                return
            yield chunk(delta)
            await self._pause()
        yield chunk({}, "tool_calls" if reply.tool_calls else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 10, "completion_tokens": len(deltas), "total_tokens": 10 + len(deltas)}
            payload = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                       "model": model, "choices": [], "usage": usage}
            yield f"data: {json.dumps(payload)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    def _chat_completion(self, body: dict[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": call.id or self._next_id("call_"), "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}
                for call in reply.tool_calls
            ]
        return {
            "id": self._next_id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [
                {"index": 0, "message": message, "logprobs": None,
                 "finish_reason": "tool_calls" if reply.tool_calls else "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    async def _audio_chunks(self, data: bytes) -> AsyncIterator[bytes]:
        for sent, start in enumerate(range(0, len(data), self.speech_chunk_bytes)):
            if self.hang_after_chunks is not None and sent >= self.hang_after_chunks:
                await self.hang()
                return
            yield data[start : start + self.speech_chunk_bytes]
            await self._pause()

    async def _pause(self) -> None:
        await asyncio.sleep(self.chunk_delay_s)


def error_response(status: int, message: str, code: str | None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}, status_code=status
    )


def wav_bytes(pcm: bytes, rate: int = SPEECH_RATE) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(pcm)
    return out.getvalue()
