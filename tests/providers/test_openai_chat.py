"""The OpenAI-compatible chat client against a local server speaking the chat-completions protocol."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.fakes.openai_fake import FakeOpenAI, ScriptedReply, ScriptedToolCall
from voicegate.internal.config.providers import OpenAIConfig
from voicegate.internal.llm.base import ChatMessage, ChatRequest, LlmError, ReplyDelta, ToolCall, ToolSpec, Turn
from voicegate.internal.llm.openai import OpenAIChatModel, parse_arguments

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def request(text: str = "what is the weather", **kwargs: object) -> ChatRequest:
    defaults: dict[str, object] = {
        "session_id": "s1",
        "resource_id": None,
        "system": "You are terse.",
        "messages": [ChatMessage("user", text)],
        "turn": Turn(text=text),
    }
    defaults.update(kwargs)
    return ChatRequest(**defaults)  # type: ignore[arg-type]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test-key-123456") as server:
        yield server


@pytest.fixture
async def model(fake: FakeOpenAI) -> AsyncIterator[OpenAIChatModel]:
    chat = OpenAIChatModel(
        OpenAIConfig(timeout_s=5), model="gpt-test", base_url=fake.url + "/v1/", api_key="sk-test-key-123456"
    )
    yield chat
    await chat.aclose()


async def collect(model: OpenAIChatModel, req: ChatRequest) -> list[ReplyDelta | ToolCall]:
    return [item async for item in model.stream(req)]


async def test_streamed_reply_arrives_as_deltas_that_join_to_the_scripted_text(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake.script_reply("Sunny and warm. Anything else?")
    items = await collect(model, request())
    assert all(isinstance(item, ReplyDelta) for item in items)
    assert len(items) > 1
    assert "".join(item.text for item in items if isinstance(item, ReplyDelta)) == "Sunny and warm. Anything else?"
    body = fake.requests[0]
    assert body["model"] == "gpt-test" and body["stream"] is True
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "what is the weather"},
    ]
    assert "tools" not in body
    assert fake.headers[0]["authorization"] == "Bearer sk-test-key-123456"


async def test_tool_call_streamed_in_pieces_is_yielded_once_with_parsed_arguments(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake.script_tool_call("get_weather", {"city": "Paris", "unit": "celsius"}, call_id="call_abc")
    items = await collect(model, request(tools=[WEATHER]))
    assert items == [ToolCall(id="call_abc", name="get_weather", arguments={"city": "Paris", "unit": "celsius"})]
    (tool,) = fake.requests[0]["tools"]
    assert tool == {
        "type": "function",
        "function": {"name": "get_weather", "description": WEATHER.description, "parameters": WEATHER.parameters},
    }


async def test_two_tool_calls_and_text_in_one_reply(fake: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake.script(
        ScriptedReply(
            text="Let me check.",
            tool_calls=[ScriptedToolCall("get_weather", '{"city": "Oslo"}'), ScriptedToolCall("get_weather", "{}")],
        )
    )
    items = await collect(model, request(tools=[WEATHER]))
    assert "".join(i.text for i in items if isinstance(i, ReplyDelta)) == "Let me check."
    calls = [i for i in items if isinstance(i, ToolCall)]
    assert [c.arguments for c in calls] == [{"city": "Oslo"}, {}]
    assert len({c.id for c in calls}) == 2


async def test_invalid_tool_arguments_are_passed_on_raw(fake: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake.script_tool_call("get_weather", '{"city": "Par')
    items = await collect(model, request(tools=[WEATHER]))
    assert items == [ToolCall(id=items[0].id, name="get_weather", arguments={"_raw": '{"city": "Par'})]  # type: ignore[union-attr]


async def test_tool_names_openai_rejects_are_sanitised_and_mapped_back(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    dotted = ToolSpec(name="memory.save", description="save", parameters={})
    fake.script_tool_call("memory_save", {"fact": "likes tea"})
    items = await collect(model, request(tools=[dotted]))
    assert fake.requests[0]["tools"][0]["function"]["name"] == "memory_save"
    assert items == [ToolCall(id=items[0].id, name="memory.save", arguments={"fact": "likes tea"})]  # type: ignore[union-attr]


async def test_tool_result_round_trip_uses_the_chat_completions_message_format(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    call = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})
    history = [
        ChatMessage("user", "weather in Paris?"),
        ChatMessage("assistant", "", tool_calls=[call]),
        ChatMessage("tool", '{"temp_c": 21}', tool_call_id="call_1"),
    ]
    fake.script_reply("It is 21 degrees.")
    items = await collect(model, request(messages=history, tools=[WEATHER]))
    assert "".join(i.text for i in items if isinstance(i, ReplyDelta)) == "It is 21 degrees."
    assert fake.requests[0]["messages"][1:] == [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
    ]


async def test_closing_the_iteration_mid_stream_closes_the_connection(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake.chunk_delay_s = 0.05
    fake.script_reply(" ".join(f"word{i}" for i in range(200)))
    stream = model.stream(request())
    first = await anext(stream)
    assert isinstance(first, ReplyDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    assert await fake.wait_disconnect()


async def test_cancelling_the_task_mid_stream_closes_the_connection(fake: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake.hang_after_chunks = 2
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in model.stream(request()):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await fake.wait_disconnect()


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
async def test_error_status_becomes_llm_error_without_key_or_content(
    fake: FakeOpenAI, model: OpenAIChatModel, status: int
) -> None:
    fake.error_status = status
    with pytest.raises(LlmError) as caught:
        await collect(model, request("my secret words"))
    message = str(caught.value)
    assert str(status) in message
    assert "sk-test" not in message and "secret words" not in message


async def test_wrong_key_is_reported_as_401(fake: FakeOpenAI) -> None:
    chat = OpenAIChatModel(OpenAIConfig(timeout_s=5), base_url=fake.url + "/v1", api_key="sk-wrong-key-999999")
    try:
        with pytest.raises(LlmError, match="401 \\(invalid_api_key\\)"):
            await collect(chat, request())
    finally:
        await chat.aclose()


async def test_stalled_stream_times_out_as_llm_error(fake: FakeOpenAI) -> None:
    fake.hang_after_chunks = 1
    chat = OpenAIChatModel(OpenAIConfig(timeout_s=0.5), base_url=fake.url + "/v1", api_key="sk-test-key-123456")
    try:
        with pytest.raises(LlmError, match="timed out"):
            await collect(chat, request())
    finally:
        await chat.aclose()


async def test_unreachable_endpoint_is_llm_error() -> None:
    from tests.conftest import free_port

    chat = OpenAIChatModel(OpenAIConfig(timeout_s=2), base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k")
    try:
        with pytest.raises(LlmError, match="unreachable"):
            await collect(chat, request())
    finally:
        await chat.aclose()


async def test_complete_is_one_non_streaming_request(fake: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake.script_reply("  A short summary.  ")
    assert await model.complete("Summarise.", "long transcript", timeout_s=5) == "A short summary."
    body = fake.requests[0]
    assert not body.get("stream")
    assert body["messages"] == [
        {"role": "system", "content": "Summarise."},
        {"role": "user", "content": "long transcript"},
    ]


async def test_complete_timeout_is_llm_error(fake: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake.hang_after_chunks = 0
    with pytest.raises(LlmError, match="timed out"):
        await model.complete("s", "u", timeout_s=0.3)


def test_fake_serves_sync_code_too() -> None:
    import httpx

    with FakeOpenAI() as fake:
        fake.script_reply("hi")
        reply = httpx.post(fake.url + "/v1/chat/completions", json={"model": "m", "messages": []}, timeout=10)
        assert reply.json()["choices"][0]["message"]["content"] == "hi"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", {}), ('{"a": 1}', {"a": 1}), ("[1, 2]", {"_raw": "[1, 2]"}), ("{oops", {"_raw": "{oops"})],
)
def test_parse_arguments(text: str, expected: dict[str, object]) -> None:
    assert parse_arguments(text) == expected
