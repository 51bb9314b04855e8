"""A local stand-in for an OpenAI Realtime WebSocket (wss://api.openai.com/v1/realtime), both dialects.

It runs in the test's event loop (websockets' asyncio server), like tests/fakes/deepgram_fake.py:

    async with FakeRealtime(api_key="rt-key") as fake:
        fake.script_reply("The parcel arrives on Monday.")
        config = RealtimeConfig(enabled=True, url=fake.url, api_key="rt-key")
        ...
        assert fake.heard == ["When does my parcel arrive?"]
        assert fake.truncations[0].audio_end_ms < fake.audio_items[fake.truncations[0].item_id]

It hears (an energy VAD standing in for server VAD, then Whisper on each committed turn: the
`input_audio_transcription.completed` event), thinks (scripted replies and tool calls, as FakeOpenAI,
else `brain`: echo by default) and speaks (Piper, streamed as ~100 ms audio deltas faster than real
time, with transcript deltas). `stub=True` answers at once with a fixed burst and no Whisper or Piper.
The dialect of a connection is the one its client speaks: `OpenAI-Beta: realtime=v1` means beta
(response.audio.delta, conversation.item.created, 24 kHz pcm16), else GA. Where the real service
answers a client's mistake with an `error` event (cancelling no response, truncating past an item's
end, a second response.create while one runs), so does this fake, with the same codes.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from tests.fakes.openai_fake import ScriptedReply, ScriptedToolCall
from tests.fakes.realtime_session import RealtimeConnection, ResponseRun, Truncation
from tests.fakes.realtime_voice import shared_whisper

__all__ = ["FakeRealtime", "RealtimeConnection", "ScriptedReply", "ScriptedToolCall", "Truncation", "echo",
           "verbatim_line"]

Brain = Callable[["FakeRealtime", str], str]


def echo(fake: FakeRealtime, user_text: str) -> str:
    """The default brain: repeat what the caller said, so tests can see what reached the model."""
    return f"You said: {user_text}" if user_text else "Hello."


def verbatim_line(instructions: str) -> str:
    """What a response.create's own instructions ask to be said word for word (a greeting, a fixed line):
    what follows their first colon ("Say exactly the following ...: <text>", internal/realtime/protocol.py),
    without quotes around it; all of them when there is no colon."""
    _, colon, after = instructions.partition(":")
    line = after.strip() if colon and after.strip() else instructions.strip()
    for opening, closing in (('"', '"'), ("\u201c", "\u201d"), ("'", "'")):
        if len(line) > 1 and line.startswith(opening) and line.endswith(closing):
            return line[1:-1].strip()
    return line


class FakeRealtime:
    def __init__(self, *, api_key: str | None = None, stub: bool = False, brain: Brain = echo,
                 chunk_ms: int = 100, speed: float = 4.0, stub_ms: int = 600) -> None:
        self.api_key = api_key  # when set, other keys get a 401 at the handshake like the real service
        self.stub = stub
        self.brain = brain
        self.chunk_ms = chunk_ms  # audio per response.output_audio.delta
        self.speed = speed  # how much faster than real time deltas go out (stub: at once)
        self.stub_ms = stub_ms
        self.url = ""
        # What arrived and what was said, for assertions (every connection together, in order).
        self.connections: list[RealtimeConnection] = []
        self.received: list[dict[str, Any]] = []  # client events; appends as {"type", "bytes"}, no audio
        self.sent: list[str] = []  # the types of the server events sent
        self.sessions: list[dict[str, Any]] = []  # each session.update's session dict
        self.truncations: list[Truncation] = []
        self.responses_created = 0  # response.create events received
        self.appended_bytes = 0
        self.heard: list[str] = []  # Whisper's transcript of each committed caller turn
        self.said: list[str] = []  # the text of each audio reply begun
        self.audio_items: dict[str, int] = {}  # item id of each audio reply -> ms of audio sent
        self.item_text: dict[str, str] = {}  # item id of each audio reply -> the text it speaks
        self.function_outputs: list[tuple[str, str]] = []  # (call_id, output) items the client created
        self.rejected: list[int] = []  # statuses of refused handshakes
        self.errors_sent: list[dict[str, Any]] = []
        self.failures: list[str] = []  # the fake's own exceptions (a test should find none)
        # Faults.
        self.fail_connect: int | None = None  # answer handshakes with this HTTP status (401/429/503)
        self.hang_handshake = False  # accept the TCP connection, never finish the handshake
        self.stall = False  # accept, then never answer anything (no session.created, no response)
        self._drop_event: str | None = None
        self._stall_event: str | None = None
        self._drop_seconds: float | None = None
        self._errors: deque[dict[str, Any]] = deque()
        self._script: deque[ScriptedReply] = deque()
        self._ids = 0
        self._server: Server | None = None

    # Scripting and faults --------------------------------------------------------------------

    def script(self, reply: ScriptedReply) -> None:
        self._script.append(reply)

    def script_reply(self, text: str) -> None:
        self.script(ScriptedReply(text=text))

    def script_tool_call(self, name: str, arguments: dict[str, Any] | str, *, call_id: str = "") -> None:
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        self.script(ScriptedReply(tool_calls=[ScriptedToolCall(name, raw, call_id)]))

    def drop_after(self, when: str | float) -> None:
        """Abort the socket (no close frame: a network drop) once, right after the fake sends or receives an
        event of type `when`, or `when` seconds into the next connection."""
        if isinstance(when, str):
            self._drop_event = when
        else:
            self._drop_seconds = float(when)

    def stall_after(self, kind: str) -> None:
        """Go silent (socket open, nothing more sent or acted on) once the fake has sent an event of type
        `kind`: `stall_after("response.output_audio.delta")` is a model that stops in the middle of a reply."""
        self._stall_event = kind

    def error_next(self, type_: str, code: str = "", message: str = "", *, on: str = "") -> None:
        """Answer the next client event of type `on` (any type when ""; it is not acted on) with an `error`
        event: `error_next("rate_limit_exceeded", on="response.create")`."""
        self._errors.append({"on": on, "error": {"type": type_, "code": code or None,
                                                 "message": message or f"fake {type_}", "param": None}})

    @property
    def instructions(self) -> str:
        """The instructions of the latest session.update that set them."""
        for session in reversed(self.sessions):
            if "instructions" in session:
                return str(session["instructions"])
        return ""

    def received_of(self, type_: str) -> list[dict[str, Any]]:
        return [event for event in self.received if event.get("type") == type_]

    # Server ----------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if not self.stub:
            await warm(shared_whisper())
        self._server = await serve(self._handle, "127.0.0.1", 0, process_request=self._check,
                                   open_timeout=None, max_size=None)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/v1/realtime"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_fake{self._ids:06d}"

    async def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        while self.hang_handshake and self._server is not None and self._server.is_serving():
            await asyncio.sleep(0.05)
        if self.fail_connect is not None:
            self.rejected.append(self.fail_connect)
            body = json.dumps({"error": {"type": "fake", "code": str(self.fail_connect), "message": "refused"}})
            return connection.respond(self.fail_connect, body + "\n")
        if self.api_key is not None:
            headers = request.headers
            if headers.get("Authorization") != f"Bearer {self.api_key}" and headers.get("api-key") != self.api_key:
                self.rejected.append(401)
                return connection.respond(401, "Incorrect API key provided.\n")
        return None

    async def _handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        beta = ws.request.headers.get("OpenAI-Beta", "") == "realtime=v1"
        conn = RealtimeConnection(self, ws, parse_qs(urlsplit(ws.request.path).query),
                                  dict(ws.request.headers.raw_items()), "beta" if beta else "ga")
        self.connections.append(conn)
        timer = None
        if self._drop_seconds is not None:
            seconds, self._drop_seconds = self._drop_seconds, None
            timer = asyncio.get_running_loop().call_later(seconds, self.drop, conn)
        try:
            await conn.send({"type": "session.created", "session": conn.session_view()})
            async for message in ws:
                event = json.loads(message)
                self._record(event)
                if self.stall:
                    continue
                if self._errors and self._errors[0]["on"] in ("", event.get("type")):
                    await self.send_error(conn, self._errors.popleft()["error"])
                    continue
                await conn.on_event(event)
                self._maybe_drop(conn, str(event.get("type", "")))
        except ConnectionClosed:
            pass
        finally:
            conn.closed = True
            if timer is not None:
                timer.cancel()
            await conn.close()

    def _record(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "input_audio_buffer.append":
            size = len(event.get("audio", "")) * 3 // 4
            self.appended_bytes += size
            self.received.append({"type": kind, "bytes": size})
            return
        self.received.append(event)
        if kind == "session.update":
            self.sessions.append(dict(event.get("session") or {}))
        elif kind == "response.create":
            self.responses_created += 1
        elif kind == "conversation.item.truncate":
            self.truncations.append(Truncation(str(event.get("item_id", "")), int(event.get("content_index", 0)),
                                               int(event.get("audio_end_ms", -1))))
        elif kind == "conversation.item.create":
            item = event.get("item") or {}
            if item.get("type") == "function_call_output":
                self.function_outputs.append((str(item.get("call_id", "")), str(item.get("output", ""))))

    def _maybe_drop(self, conn: RealtimeConnection, kind: str) -> None:
        if self._drop_event is not None and kind == self._drop_event:
            self._drop_event = None
            self.drop(conn)

    def drop(self, conn: RealtimeConnection) -> None:
        """Abort the connection's socket now: no close frame, as a network drop."""
        conn.closed = True
        transport = conn.ws.transport
        if transport is not None:
            transport.abort()

    async def send(self, conn: RealtimeConnection, event: dict[str, Any]) -> None:
        """Every server event goes out here (not while stalled, not on a dropped socket)."""
        if self.stall or conn.closed:
            return
        event.setdefault("event_id", self.next_id("event"))
        try:
            await conn.ws.send(json.dumps(event))
        except ConnectionClosed:
            conn.closed = True
            return
        kind = str(event["type"])
        self.sent.append(kind)
        self._maybe_drop(conn, kind)
        if self._stall_event is not None and kind == self._stall_event:
            self._stall_event = None
            self.stall = True

    async def send_error(self, conn: RealtimeConnection, error: dict[str, Any]) -> None:
        self.errors_sent.append(error)
        await self.send(conn, {"type": "error", "error": error})

    # Thinking --------------------------------------------------------------------------------

    def decide(self, run: ResponseRun, user_text: str, after_tools: bool) -> ScriptedReply:
        """The reply for a response: a verbatim line its instructions ask for, else the next scripted reply,
        else the brain's answer to the caller's latest words (after tool outputs with nothing scripted: "Done.")."""
        if run.instructions:
            return ScriptedReply(text=verbatim_line(run.instructions))
        if self._script:
            return self._script.popleft()
        if after_tools:
            return ScriptedReply(text="Done.")
        return ScriptedReply(text=self.brain(self, user_text))


async def warm(engine: Any) -> None:
    """Start the shared Whisper worker once per process (later fakes find it warm)."""
    if not getattr(engine, "_fake_realtime_warm", False):
        await engine.warm_up()
        engine._fake_realtime_warm = True


async def wait_for(condition: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """Poll `condition` until it holds (tests: generous, no timing asserted)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await asyncio.sleep(0.02)

