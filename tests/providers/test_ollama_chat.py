"""Ollama, natively (NDJSON /api/chat) and through its OpenAI-compatible /v1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.ollama_fake import FakeOllama
from tests.fakes.openai_fake import FakeOpenAI
from voicegate.internal.config.providers import OllamaConfig
from voicegate.internal.llm.base import ChatMessage, ChatRequest, LlmError, ReplyDelta, ToolCall, ToolSpec, Turn
from voicegate.internal.llm.ollama import OllamaChatModel

WEATHER = ToolSpec("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}})


def request(messages: list[ChatMessage] | None = None, tools: list[ToolSpec] | None = None) -> ChatRequest:
    return ChatRequest(
        session_id="s",
        resource_id=None,
        system="Be brief.",
        messages=messages or [ChatMessage("user", "hi")],
        turn=Turn(text="hi"),
        tools=tools or [],
    )


@pytest.fixture
async def fake() -> AsyncIterator[FakeOllama]:
    async with FakeOllama() as server:
        yield server


@pytest.fixture
async def model(fake: FakeOllama) -> AsyncIterator[OllamaChatModel]:
    chat = OllamaChatModel(OllamaConfig(base_url=fake.url + "/", model="llama3.2"))
    yield chat
    await chat.aclose()


async def test_native_stream_yields_content_deltas(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.script_reply("Hi there. How are you?")
    items = [item async for item in model.stream(request())]
    assert len(items) > 1
    assert "".join(i.text for i in items if isinstance(i, ReplyDelta)) == "Hi there. How are you?"
    body = fake.requests[0]
    assert body["stream"] is True and body["model"] == "llama3.2"
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


async def test_native_tool_calls_carry_object_arguments(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.script_tool_call("get_weather", {"city": "Oslo"})
    items = [item async for item in model.stream(request(tools=[WEATHER]))]
    assert items == [ToolCall(id="call_0", name="get_weather", arguments={"city": "Oslo"})]
    assert fake.requests[0]["tools"][0]["function"]["name"] == "get_weather"


async def test_native_tool_result_is_sent_back_with_the_tool_name(fake: FakeOllama, model: OllamaChatModel) -> None:
    history = [
        ChatMessage("user", "weather?"),
        ChatMessage("assistant", "", tool_calls=[ToolCall("call_0", "get_weather", {"city": "Oslo"})]),
        ChatMessage("tool", "12 degrees", tool_call_id="call_0"),
    ]
    [item async for item in model.stream(request(history, [WEATHER]))]
    sent = fake.requests[0]["messages"]
    assert sent[2]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert sent[3] == {"role": "tool", "content": "12 degrees", "tool_name": "get_weather"}


async def test_native_error_line_and_status_become_llm_error(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.stream_error = "model crashed"
    with pytest.raises(LlmError, match="reported an error"):
        [item async for item in model.stream(request())]
    fake.error_status = 500
    with pytest.raises(LlmError, match="ollama returned 500"):
        [item async for item in model.stream(request())]


async def test_unknown_model_is_404(fake: FakeOllama) -> None:
    chat = OllamaChatModel(OllamaConfig(base_url=fake.url, model="nope"))
    try:
        with pytest.raises(LlmError, match="404"):
            [item async for item in chat.stream(request())]
    finally:
        await chat.aclose()


async def test_native_closing_the_iteration_closes_the_connection(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.chunk_delay_s = 0.05
    fake.script_reply(" ".join(["word"] * 200))
    stream = model.stream(request())
    await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert await fake.wait_disconnect()


async def test_native_complete(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.script_reply(" Summary. ")
    assert await model.complete("Summarise", "text", 5) == "Summary."
    assert fake.requests[0]["stream"] is False


async def test_openai_mode_goes_through_v1_with_a_dummy_key() -> None:
    async with FakeOpenAI() as fake:
        fake.script_reply("Compat reply.")
        chat = OllamaChatModel(OllamaConfig(base_url=fake.url, model="llama3.2", api="openai"))
        try:
            items = [item async for item in chat.stream(request())]
        finally:
            await chat.aclose()
    assert "".join(i.text for i in items if isinstance(i, ReplyDelta)) == "Compat reply."
    assert fake.requests[0]["model"] == "llama3.2"
    assert fake.headers[0]["authorization"] == "Bearer ollama"
