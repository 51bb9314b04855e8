"""A local stand-in for Deepgram's live transcription WebSocket (wss://api.deepgram.com/v1/listen).

It runs in the test's event loop (websockets' asyncio server), so use it from async tests:

    async with FakeDeepgram(api_key="dg-key") as fake:
        fake.script_result("hello", after_bytes=3200)                  # an interim
        fake.script_result("hello world", after_bytes=6400, is_final=True, speech_final=True)
        fake.finalize_transcript = "hello world"                      # answer to Finalize
        stt = DeepgramSpeechToText(DeepgramConfig(api_key="dg-key", url=fake.url))
        ...
        assert fake.control_messages == ["Finalize", "CloseStream"]

Wrong `Authorization: Token ...` gets a 401 at the handshake; a missing or wrong encoding, sample rate
or channel count a 400, as the real service answers.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response


@dataclass
class ScriptedResult:
    after_bytes: int  # sent once the server has received this much audio (all connections together)
    message: dict[str, Any]
    sent: bool = False


@dataclass
class DeepgramConnection:
    params: dict[str, list[str]]
    headers: dict[str, str]
    audio_bytes: int = 0
    control_messages: list[str] = field(default_factory=list)


class FakeDeepgram:
    def __init__(self, api_key: str = "dg-test-key") -> None:
        self.api_key = api_key
        self.url = ""
        self.connections: list[DeepgramConnection] = []
        self.rejected: list[int] = []  # statuses of refused handshakes
        self.audio_bytes = 0
        self.control_messages: list[str] = []  # KeepAlive / Finalize / CloseStream, in arrival order
        self.finalize_transcript: str | None = None  # when set, a Finalize is answered with this final
        self.drop_after_bytes: int | None = None  # abort sockets once this much audio has arrived ...
        self.max_drops = 1  # ... this many times
        self.drops = 0
        self._scripts: list[ScriptedResult] = []
        self._server: Server | None = None

    def script_result(
        self, transcript: str, *, after_bytes: int, is_final: bool = False, speech_final: bool = False,
        confidence: float = 0.93,
    ) -> None:
        message = results_message(transcript, is_final, speech_final, confidence)
        self._scripts.append(ScriptedResult(after_bytes, message))

    def script_utterance_end(self, *, after_bytes: int) -> None:
        message = {"type": "UtteranceEnd", "channel": [0, 1], "last_word_end": 1.0}
        self._scripts.append(ScriptedResult(after_bytes, message))

    async def __aenter__(self) -> Self:
        self._server = await serve(self._handle, "127.0.0.1", 0, process_request=self._check)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/v1/listen"
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.headers.get("Authorization") != f"Token {self.api_key}":
            self.rejected.append(401)
            return connection.respond(401, "Invalid credentials.\n")
        params = parse_qs(urlsplit(request.path).query)
        if params.get("encoding") != ["linear16"] or params.get("channels") != ["1"] or "sample_rate" not in params:
            self.rejected.append(400)
            return connection.respond(400, "Bad audio parameters.\n")
        return None

    async def _handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        conn = DeepgramConnection(parse_qs(urlsplit(ws.request.path).query), dict(ws.request.headers.raw_items()))
        self.connections.append(conn)
        await ws.send(json.dumps({"type": "Metadata", "request_id": str(uuid.uuid4()), "channels": 1}))
        async for message in ws:
            if isinstance(message, bytes):
                conn.audio_bytes += len(message)
                self.audio_bytes += len(message)
                for script in self._scripts:
                    if not script.sent and self.audio_bytes >= script.after_bytes:
                        script.sent = True
                        await ws.send(json.dumps(script.message))
                threshold = self.drop_after_bytes
                if threshold is not None and self.drops < self.max_drops and self.audio_bytes >= threshold:
                    self.drops += 1
                    ws.transport.abort()  # no close frame: a network drop
                    return
                continue
            kind = json.loads(message).get("type", "")
            conn.control_messages.append(kind)
            self.control_messages.append(kind)
            if kind == "Finalize" and self.finalize_transcript is not None:
                reply = results_message(self.finalize_transcript, True, True, 0.9)
                reply["from_finalize"] = True
                await ws.send(json.dumps(reply))
            elif kind == "CloseStream":
                await ws.send(json.dumps({"type": "Metadata", "request_id": str(uuid.uuid4()), "channels": 1}))
                await ws.close(1000)
                return


def results_message(transcript: str, is_final: bool, speech_final: bool, confidence: float) -> dict[str, Any]:
    """A `Results` message shaped like the live API's."""
    words = [
        {"word": w.strip(".,?!").lower(), "start": i * 0.3, "end": i * 0.3 + 0.25, "confidence": confidence,
         "punctuated_word": w}
        for i, w in enumerate(transcript.split())
    ]
    return {
        "type": "Results",
        "channel_index": [0, 1],
        "duration": 1.0,
        "start": 0.0,
        "is_final": is_final,
        "speech_final": speech_final,
        "from_finalize": False,
        "channel": {"alternatives": [{"transcript": transcript, "confidence": confidence, "words": words}]},
        "metadata": {"request_id": str(uuid.uuid4()), "model_info": {"name": "fake", "version": "0"},
                     "model_uuid": str(uuid.uuid4())},
    }
