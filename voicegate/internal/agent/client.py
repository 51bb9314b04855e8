"""Bring your own agent: each caller turn is POSTed to the deployer's HTTP endpoint, the reply spoken.

The endpoint owns the conversation (history, prompting, tools), keyed by `session_id`; `resource_id`
names the person, so it can remember a caller between calls. `text` is exactly what the caller said:
context the pipeline gathered travels in fields of its own, so an agent that stores what it receives
stores the caller's words, not our scaffolding.

The reply shape is chosen by its Content-Type:
- `application/json`: `{"text": ...}` or `{"response": ...}`, buffered.
- `text/event-stream`: each event's data is JSON (`{"delta": ...}`, `{"text": ...}`, a JSON string, or
  a relayed OpenAI chunk) or raw text; `data: [DONE]` ends the reply.
- anything else (normally `text/plain`): raw text, spoken as it arrives.

SSE data that is not JSON is spoken only when it is plain text. Data that starts like JSON (`{`, `[`,
`"`) but does not parse, or that holds control characters or undecodable bytes, is dropped and
logged: a broken agent should produce silence, not the caller hearing braces read aloud. A JSON
object without a recognised text field (a keep-alive, a tool event) is skipped quietly.

`timeout_ms` bounds the whole turn, streaming included. A body beyond `max_reply_bytes` is cut there:
reading stops, the connection is closed, and the text received so far stands (a cut JSON body cannot
be parsed, so it fails the turn).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import re
import unicodedata
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import httpx

from voicegate.internal.config.providers import AgentConfig
from voicegate.internal.llm.base import ChatRequest, LlmError, ReplyDelta, ToolCall

log = logging.getLogger(__name__)

ACCEPT = "text/event-stream, text/plain, application/json"
# A cold TLS handshake on a turn is audible; keep a few connections warm between turns and calls.
KEEPALIVE_CONNECTIONS = 8
KEEPALIVE_EXPIRY_S = 90.0
ERROR_SNIPPET_BYTES = 512
# After `[DONE]`, how long to wait for the body's end before giving the connection up instead.
DRAIN_S = 0.1

_EOL = re.compile(r"\r\n|\r|\n")


class AgentChatModel:
    name = "agent"

    def __init__(self, config: AgentConfig, http: httpx.AsyncClient | None = None) -> None:
        self._config = config
        self._timeout_s = config.timeout_ms / 1000
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(self._timeout_s),
            limits=httpx.Limits(max_keepalive_connections=KEEPALIVE_CONNECTIONS, keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )
        # One-shot transforms belong to no call; a stable id per client lets an agent group them.
        self._oneshot_session = uuid.uuid4().hex
        # The call's memory capability for the agent (internal/memory/call_access.py), by session id: set
        # by the gateway when memory is on; None, or an answer of None, sends none.
        self.call_access: Callable[[str], dict[str, str] | None] | None = None

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        if request.tools:
            log.debug("agent provider ignores %d server-side tools (the agent owns tool use)", len(request.tools))
        body = chat_body(request)
        access = self.call_access(request.session_id) if self.call_access is not None else None
        if access:
            body["memory_access"] = access
        async for text in self._post(body, self._timeout_s):
            yield ReplyDelta(text)

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        body: dict[str, Any] = {"session_id": self._oneshot_session, "type": "oneshot", "text": user}
        if system:
            body["system"] = system
        parts = [text async for text in self._post(body, min(timeout_s, self._timeout_s))]
        return "".join(parts).strip()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def _post(self, body: dict[str, Any], budget_s: float) -> AsyncIterator[str]:
        if not self._config.url:
            raise LlmError("agent url is not configured ([agent] url)")
        deadline = asyncio.get_running_loop().time() + budget_s
        headers = {"Accept": ACCEPT}
        if self._config.api_key:
            headers["Authorization"] = f"Bearer {self._config.api_key}"
        request = self._http.build_request("POST", self._config.url, json=body, headers=headers)
        response: httpx.Response | None = None
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._http.send(request, stream=True)
            if not response.is_success:
                await self._log_failure(response, deadline)
                raise LlmError(f"agent returned {response.status_code}")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            async with aclosing(self._body(response, deadline)) as chunks:
                if kind == "application/json":
                    if text := await read_json_reply(chunks):
                        yield text
                else:
                    reader = read_sse_reply if kind == "text/event-stream" else read_text_reply
                    async with aclosing(reader(chunks)) as texts:
                        async for text in texts:
                            yield text
                    await _drain(chunks)
        except (TimeoutError, httpx.TimeoutException):
            raise LlmError(f"agent timed out after {round(budget_s * 1000)} ms") from None
        except httpx.HTTPError as exc:
            if response is None:
                raise LlmError(f"agent unreachable ({type(exc).__name__})") from None
            raise LlmError(f"agent reply broke off ({type(exc).__name__})") from None
        finally:
            # Closing a response mid-body drops the connection: on barge-in the agent sees the client
            # go away and can stop generating.
            if response is not None:
                await response.aclose()

    async def _body(self, response: httpx.Response, deadline: float) -> AsyncGenerator[bytes, None]:
        """The body's bytes, under the turn deadline (checked per read, never across our yields)."""
        limit, received = self._config.max_reply_bytes, 0
        chunks = response.aiter_bytes()
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            if received + len(chunk) > limit:
                log.warning("agent reply cut at max_reply_bytes=%d", limit)
                yield chunk[: limit - received]
                raise _ReplyCut
            received += len(chunk)
            yield chunk

    async def _log_failure(self, response: httpx.Response, deadline: float) -> None:
        snippet = b""
        try:
            async with asyncio.timeout_at(deadline):
                async for chunk in response.aiter_bytes():
                    snippet += chunk
                    if len(snippet) >= ERROR_SNIPPET_BYTES:
                        break
        except (TimeoutError, httpx.HTTPError):
            pass
        log.warning(
            "agent returned %d", response.status_code,
            extra={"text": snippet[:ERROR_SNIPPET_BYTES].decode(errors="replace")},
        )


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows `[DONE]` for a moment, so the connection goes back to the pool warm."""
    try:
        async with asyncio.timeout(DRAIN_S):
            async for _ in chunks:
                pass
    except (TimeoutError, _ReplyCut, httpx.HTTPError):
        pass  # the reply is complete; only the connection's reuse is lost


class _ReplyCut(Exception):
    """The body reached max_reply_bytes; readers keep what they have and stop."""


def chat_body(request: ChatRequest) -> dict[str, Any]:
    """The JSON for one caller turn: empty optional fields are left out, `text` is never decorated."""
    turn = request.turn
    body: dict[str, Any] = {"session_id": request.session_id}
    if request.resource_id:
        body["resource_id"] = request.resource_id
    body["type"] = "chat"
    body["text"] = turn.text
    # A per-turn note ("ask them to repeat") is an instruction, so it rides with the system text.
    system = "\n\n".join(part for part in (request.agent_system, turn.note) if part)
    optional = {
        "system": system,
        "interrupted_text": turn.interrupted_text,
        "context": list(turn.context),
        "summary": turn.summary,
        "memory": turn.memory,
        "dtmf": turn.dtmf,
        "prepared": turn.prepared,
    }
    body.update({key: value for key, value in optional.items() if value})
    return body


async def read_json_reply(chunks: AsyncIterator[bytes]) -> str:
    raw = b""
    try:
        async for chunk in chunks:
            raw += chunk
    except _ReplyCut:
        raise LlmError("agent JSON reply exceeds max_reply_bytes") from None
    try:
        reply = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise LlmError("agent sent malformed JSON") from None
    if not isinstance(reply, dict):
        raise LlmError("agent JSON reply is not an object")
    text = reply.get("text") or reply.get("response") or ""
    if not isinstance(text, str):
        raise LlmError("agent JSON reply text is not a string")
    if "text" not in reply and "response" not in reply:
        log.warning("agent JSON reply has neither text nor response")
    return text


async def read_text_reply(chunks: AsyncIterator[bytes]) -> AsyncGenerator[str, None]:
    # Incremental decoding keeps a character split across two reads whole.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        async for chunk in chunks:
            if text := decoder.decode(chunk):
                yield text
    except _ReplyCut:
        return
    if tail := decoder.decode(b"", final=True):
        yield tail


async def read_sse_reply(chunks: AsyncIterator[bytes]) -> AsyncGenerator[str, None]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    parser = SseParser()
    dropped = 0
    try:
        async for chunk in chunks:
            for data in parser.feed(decoder.decode(chunk)):
                if data.strip() == "[DONE]":
                    return
                text = sse_data_text(data)
                if text is None:
                    dropped += 1
                elif text:
                    yield text
    except _ReplyCut:
        pass
    else:
        parser.feed(decoder.decode(b"", final=True))
    for data in parser.finish():
        if data.strip() == "[DONE]":
            break
        if text := sse_data_text(data):
            yield text
    if dropped:
        log.warning("agent stream had %d unreadable data events (dropped)", dropped)


class SseParser:
    """Server-sent events per the HTML spec: CR, LF or CRLF line ends, comments, multi-line data.

    One liberty: a data line that is on its own a complete JSON object is dispatched at once, so an
    agent that forgets the blank line between events still streams instead of arriving all at the end.
    """

    def __init__(self) -> None:
        self._buf = ""
        self._data: list[str] = []

    def feed(self, text: str) -> list[str]:
        """Complete events' data from this text (plus what was buffered)."""
        self._buf += text
        out: list[str] = []
        pos = 0
        while match := _EOL.search(self._buf, pos):
            if match.group() == "\r" and match.end() == len(self._buf):
                break  # maybe the first half of a CRLF split across reads
            self._line(self._buf[pos : match.start()], out)
            pos = match.end()
        self._buf = self._buf[pos:]
        return out

    def finish(self) -> list[str]:
        """The end of the stream: a last unterminated line and any undispatched event."""
        out: list[str] = []
        if self._buf:
            self._line(self._buf.rstrip("\r"), out)
            self._buf = ""
        self._line("", out)
        return out

    def _line(self, line: str, out: list[str]) -> None:
        if not line:
            if self._data:
                out.append("\n".join(self._data))
                self._data = []
            return
        if line.startswith(":"):
            return  # comment, often a keep-alive
        name, colon, value = line.partition(":")
        if name != "data":
            return  # event, id, retry: nothing to speak
        if colon and value.startswith(" "):
            value = value[1:]
        if not self._data and _is_json_object(value):
            out.append(value)
            return
        self._data.append(value)


def sse_data_text(data: str) -> str | None:
    """What to speak for one event's data: text, "" for nothing, None for unreadable (see module doc)."""
    stripped = data.strip()
    if stripped.startswith(("{", "[", '"')):
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError:
            return None
        return _json_text(value)
    if "\ufffd" in data or any(unicodedata.category(ch) == "Cc" and ch not in "\t\n\r" for ch in data):
        return None
    return data


def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return ""
    for key in ("delta", "text", "content", "response"):
        field = value.get(key)
        if isinstance(field, str):
            return field
        if isinstance(field, dict):  # {"delta": {"text": ...}} / {"delta": {"content": ...}}
            inner = field.get("text", field.get("content"))
            if isinstance(inner, str):
                return inner
    choices = value.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta")  # an OpenAI chunk relayed as is
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            return str(delta["content"])
    return ""


def _is_json_object(text: str) -> bool:
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return False
    try:
        return isinstance(json.loads(stripped), dict)
    except json.JSONDecodeError:
        return False
