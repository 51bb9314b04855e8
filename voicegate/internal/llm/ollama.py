"""Chat with a local or self-hosted Ollama.

`api = "native"` speaks Ollama's own /api/chat (NDJSON stream, tool arguments as JSON objects);
`api = "openai"` goes through Ollama's OpenAI-compatible /v1 with the OpenAI client, for deployments
that front Ollama with an OpenAI-shaped gateway.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx

from voicegate.internal.config.providers import OllamaConfig, OpenAIConfig
from voicegate.internal.llm.base import ChatMessage, ChatModel, ChatRequest, LlmError, ReplyDelta, ToolCall
from voicegate.internal.llm.openai import OpenAIChatModel, ToolNames, parse_arguments

log = logging.getLogger(__name__)

# Ollama loads a model into memory on its first request, which can take a minute on a cold CPU box;
# a shorter read timeout would fail the first turn of every deployment.
READ_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0
OPENAI_COMPAT_KEY = "ollama"  # Ollama ignores the key; the OpenAI client insists on one


class OllamaChatModel:
    name = "ollama"

    def __init__(self, config: OllamaConfig) -> None:
        self.model = config.model
        self._base_url = config.base_url.strip().rstrip("/")
        self._compat: ChatModel | None = None
        self._http: httpx.AsyncClient | None = None
        if config.api == "openai":
            self._compat = OpenAIChatModel(
                OpenAIConfig(timeout_s=READ_TIMEOUT_S),
                model=config.model,
                base_url=f"{self._base_url}/v1",
                api_key=OPENAI_COMPAT_KEY,
            )
        else:
            self._http = httpx.AsyncClient(
                base_url=self._base_url, timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
            )

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        if self._compat is not None:
            async for item in self._compat.stream(request):
                yield item
            return
        assert self._http is not None
        names = ToolNames(request.tools)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_ollama_messages(request.system, request.messages, names),
            "stream": True,
        }
        if request.tools:
            body["tools"] = [names.spec(tool) for tool in request.tools]
        calls = 0
        try:
            async with self._http.stream("POST", "/api/chat", json=body) as response:
                await _raise_for_status(response)
                async for line in response.aiter_lines():
                    event = _parse_line(line)
                    if event is None:
                        continue
                    message = event.get("message") or {}
                    if content := message.get("content"):
                        yield ReplyDelta(str(content))
                    for raw in message.get("tool_calls") or ():
                        yield _tool_call(raw, calls, names)
                        calls += 1
                    if event.get("done"):
                        return
        except httpx.TimeoutException:
            raise LlmError("ollama timed out") from None
        except httpx.HTTPError as exc:
            raise LlmError(f"ollama unreachable ({type(exc).__name__})") from None

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        if self._compat is not None:
            return await self._compat.complete(system, user, timeout_s)
        assert self._http is not None
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "stream": False,
            "options": {"temperature": 0},
        }
        try:
            response = await self._http.post("/api/chat", json=body, timeout=timeout_s)
            await _raise_for_status(response)
            reply = response.json()
        except httpx.TimeoutException:
            raise LlmError("ollama timed out") from None
        except httpx.HTTPError as exc:
            raise LlmError(f"ollama unreachable ({type(exc).__name__})") from None
        except ValueError:
            raise LlmError("ollama sent a malformed reply") from None
        return str((reply.get("message") or {}).get("content") or "").strip()

    async def aclose(self) -> None:
        if self._compat is not None:
            await self._compat.aclose()
        if self._http is not None:
            await self._http.aclose()


def to_ollama_messages(system: str, messages: list[ChatMessage], names: ToolNames) -> list[dict[str, Any]]:
    """Ollama's message shape: tool arguments as objects, tool results named by tool rather than id."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    call_names: dict[str, str] = {}
    for message in messages:
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            entry["tool_calls"] = [
                {"id": call.id, "function": {"name": names.wire(call.name), "arguments": call.arguments}}
                for call in message.tool_calls
            ]
            call_names.update({call.id: names.wire(call.name) for call in message.tool_calls})
        if message.role == "tool" and message.tool_call_id in call_names:
            entry["tool_name"] = call_names[message.tool_call_id]
        out.append(entry)
    return out


def _tool_call(raw: dict[str, Any], ordinal: int, names: ToolNames) -> ToolCall:
    function = raw.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):  # some builds send a JSON string, like OpenAI
        arguments = parse_arguments(arguments)
    elif not isinstance(arguments, dict):
        arguments = {}
    # Older Ollama versions send no call id; the agent loop still needs one to pair the result.
    return ToolCall(
        id=str(raw.get("id") or f"call_{ordinal}"),
        name=names.original(str(function.get("name", ""))),
        arguments=arguments,
    )


def _parse_line(line: str) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        raise LlmError("ollama sent a malformed stream") from None
    if not isinstance(event, dict):
        raise LlmError("ollama sent a malformed stream")
    if event.get("error"):
        log.warning("ollama stream error", extra={"text": str(event["error"])[:300]})
        raise LlmError("ollama reported an error")
    return event


async def _raise_for_status(response: httpx.Response) -> None:
    if response.is_success:
        return
    detail = (await response.aread())[:300].decode(errors="replace")
    # Ollama's errors name the model ("model 'x' not found"), never content; still kept out of the message.
    log.warning("ollama returned %s", response.status_code, extra={"text": detail})
    raise LlmError(f"ollama returned {response.status_code}")

