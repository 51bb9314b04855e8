"""Chat over the OpenAI chat-completions protocol: OpenAI itself, vLLM, DeepSeek, Ollama's /v1, ...

The model has no memory of its own: each `stream` call sends the system context and the whole
conversation the pipeline keeps. Tool calls arrive as streamed fragments keyed by index and are
handed to the agent loop only once the model has finished the message, so arguments are complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

from voicegate.internal.config.providers import OpenAIConfig
from voicegate.internal.llm.base import ChatMessage, ChatRequest, LlmError, ReplyDelta, ToolCall, ToolSpec

log = logging.getLogger(__name__)

# The SDK refuses to start without a key; local servers (vLLM, Ollama) accept any.
KEYLESS_PLACEHOLDER = "unused"
# A retry on the live audio path doubles the silence the caller hears; the pipeline apologises
# instead. Background one-shots (summaries) can afford the SDK's backoff.
STREAM_RETRIES = 0
COMPLETE_RETRIES = 2
# Connecting is fast or broken; waiting the whole turn budget for a SYN helps no one.
CONNECT_TIMEOUT_S = 10.0

_TOOL_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class OpenAIChatModel:
    name = "openai"

    def __init__(
        self,
        config: OpenAIConfig,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        self.model = model or config.model
        self._temperature = config.temperature
        # A trailing slash would make the SDK request ".../v1//chat/completions", a 404 on most gateways.
        url = (base_url or config.base_url).strip().rstrip("/")
        key = api_key if api_key is not None else config.api_key
        self._client = openai.AsyncOpenAI(
            api_key=key or KEYLESS_PLACEHOLDER,
            base_url=url,
            timeout=openai.Timeout(config.timeout_s, connect=min(CONNECT_TIMEOUT_S, config.timeout_s)),
            max_retries=STREAM_RETRIES,
        )

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        names = ToolNames(request.tools)
        messages = to_openai_messages(request.system, request.messages, names)
        tools = [names.spec(tool) for tool in request.tools]
        try:
            stream = await self._client.chat.completions.create(
                model=self.model,
                messages=cast("list[ChatCompletionMessageParam]", messages),
                temperature=self._temperature,
                tools=cast("list[ChatCompletionToolUnionParam]", tools) if tools else openai.omit,
                stream=True,
            )
        except openai.OpenAIError as exc:
            raise LlmError(describe_error(exc)) from None
        calls = ToolCallAssembler(names)
        try:
            async for chunk in stream:
                if not chunk.choices:
                    continue  # usage-only chunks
                choice = chunk.choices[0]
                delta = choice.delta
                if delta.content:
                    yield ReplyDelta(delta.content)
                for fragment in delta.tool_calls or ():
                    calls.add(
                        fragment.index,
                        fragment.id,
                        fragment.function.name if fragment.function else None,
                        fragment.function.arguments if fragment.function else None,
                    )
                if choice.finish_reason:
                    # Everything the model meant to call is complete once it finishes the message.
                    for call in calls.drain():
                        yield call
            # A server that ends the stream without a finish_reason still gets its calls run.
            for call in calls.drain():
                yield call
        except openai.OpenAIError as exc:
            raise LlmError(describe_error(exc)) from None
        finally:
            # Closing the response mid-body closes the connection, which is how the server learns
            # that a barge-in cancelled the turn and stops generating (and billing).
            await stream.close()

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        client = self._client.with_options(timeout=timeout_s, max_retries=COMPLETE_RETRIES)
        try:
            # timeout_s bounds the whole call, retries included.
            async with asyncio.timeout(timeout_s):
                reply = await client.chat.completions.create(model=self.model, messages=messages, temperature=0)
        except TimeoutError:
            raise LlmError("model request timed out") from None
        except openai.OpenAIError as exc:
            raise LlmError(describe_error(exc)) from None
        if not reply.choices:
            return ""
        return (reply.choices[0].message.content or "").strip()

    async def aclose(self) -> None:
        await self._client.close()


def describe_error(exc: openai.OpenAIError) -> str:
    """A short, loggable reason: status and error code only. Provider messages can quote the key."""
    if isinstance(exc, openai.APITimeoutError):
        return "model request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "model endpoint unreachable"
    if isinstance(exc, openai.APIStatusError):
        code = exc.code if isinstance(exc.code, str) and re.fullmatch(r"[a-z0-9_.-]{1,64}", exc.code) else ""
        return f"model returned {exc.status_code}" + (f" ({code})" if code else "")
    if isinstance(exc, openai.APIError):
        return "model stream failed"
    return f"model client error: {type(exc).__name__}"


class ToolNames:
    """OpenAI accepts tool names matching ^[A-Za-z0-9_-]+$; plug-in names may not, so map both ways."""

    def __init__(self, tools: list[ToolSpec]) -> None:
        self._to_wire = {tool.name: _TOOL_NAME_UNSAFE.sub("_", tool.name)[:64] for tool in tools}
        self._from_wire = {wire: name for name, wire in self._to_wire.items()}

    def wire(self, name: str) -> str:
        return self._to_wire.get(name) or _TOOL_NAME_UNSAFE.sub("_", name)[:64]

    def original(self, wire_name: str) -> str:
        return self._from_wire.get(wire_name, wire_name)

    def spec(self, tool: ToolSpec) -> dict[str, Any]:
        parameters = tool.parameters or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {"name": self.wire(tool.name), "description": tool.description, "parameters": parameters},
        }


def to_openai_messages(system: str, messages: list[ChatMessage], names: ToolNames) -> list[dict[str, Any]]:
    """The chat-completions message list: the system context first, then the conversation."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "tool":
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        elif message.role == "assistant" and message.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    # OpenAI wants null, not "", beside tool calls.
                    "content": message.content or None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": names.wire(call.name), "arguments": call.arguments_json()},
                        }
                        for call in message.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": message.role, "content": message.content})
    return out


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ToolCallAssembler:
    """Joins streamed tool-call fragments by index and parses their arguments once complete."""

    def __init__(self, names: ToolNames) -> None:
        self._names = names
        self._calls: dict[int, _PartialCall] = {}

    def add(self, index: int | None, call_id: str | None, name: str | None, arguments: str | None) -> None:
        # Some OpenAI-compatible servers omit the index; they only ever stream one call at a time.
        call = self._calls.setdefault(index or 0, _PartialCall())
        if call_id:
            call.id = call_id
        if name:
            call.name = name
        if arguments:
            call.arguments.append(arguments)

    def drain(self) -> list[ToolCall]:
        calls = [
            ToolCall(
                id=call.id or f"call_{index}",
                name=self._names.original(call.name),
                arguments=parse_arguments("".join(call.arguments)),
            )
            for index, call in sorted(self._calls.items())
        ]
        self._calls.clear()
        return calls


def parse_arguments(text: str) -> dict[str, Any]:
    """Arguments as a dict; anything else is passed on as {"_raw": text} for the loop to report back."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}
