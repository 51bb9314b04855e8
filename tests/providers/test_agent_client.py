"""The bring-your-own-agent client against an endpoint answering in each shape and failure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fakes.agent_fake import HUGE_BYTES, FakeAgent, Mode
from voicegate.internal.agent.client import AgentChatModel, SseParser, chat_body, sse_data_text
from voicegate.internal.config.providers import AgentConfig
from voicegate.internal.llm.base import ChatMessage, ChatRequest, LlmError, ReplyDelta, Turn

REPLY = "It is twenty two degrees and sunny. Want tomorrow's forecast as well?"


def request(text: str = "what's the weather", resource_id: str | None = None, **turn: object) -> ChatRequest:
    return ChatRequest(
        session_id="sess-1",
        resource_id=resource_id,
        system="",
        messages=[ChatMessage("user", text)],
        turn=Turn(text=text, **turn),  # type: ignore[arg-type]
    )


@pytest.fixture
async def agent() -> AsyncIterator[FakeAgent]:
    async with FakeAgent(reply=REPLY) as server:
        yield server


def model_for(agent: FakeAgent, **config: object) -> AgentChatModel:
    return AgentChatModel(AgentConfig(url=agent.url + "/agent", **config))  # type: ignore[arg-type]


async def reply_parts(model: AgentChatModel, req: ChatRequest | None = None) -> list[str]:
    try:
        return [item.text async for item in model.stream(req or request()) if isinstance(item, ReplyDelta)]
    finally:
        await model.aclose()


@pytest.mark.parametrize("mode", ["json", "json_response_key", "plain_chunked", "sse_json_delta", "sse_raw"])
async def test_every_reply_shape_yields_the_agents_words(agent: FakeAgent, mode: Mode) -> None:
    agent.mode = mode
    parts = await reply_parts(model_for(agent))
    assert "".join(parts) == REPLY
    if mode.startswith("sse"):
        assert len(parts) > 1  # streamed, not buffered


async def test_plain_text_is_yielded_as_it_arrives(agent: FakeAgent) -> None:
    agent.mode, agent.chunk_delay_s = "plain_chunked", 0.2
    model = model_for(agent)
    stream = model.stream(request())
    first = await asyncio.wait_for(anext(stream), 5)
    assert isinstance(first, ReplyDelta) and REPLY.startswith(first.text) and first.text != REPLY
    await stream.aclose()  # type: ignore[attr-defined]
    await model.aclose()


async def test_sse_done_ends_the_reply(agent: FakeAgent) -> None:
    agent.mode = "sse_json_delta"
    assert "SHOULD NOT" not in "".join(await reply_parts(model_for(agent)))


async def test_garbage_sse_speaks_only_the_readable_text(agent: FakeAgent) -> None:
    agent.mode = "garbage_sse"
    assert "".join(await reply_parts(model_for(agent))) == REPLY


async def test_status_500_is_llm_error(agent: FakeAgent) -> None:
    agent.mode = "status_500"
    with pytest.raises(LlmError, match=r"^agent returned 500$"):
        await reply_parts(model_for(agent))


async def test_malformed_json_is_llm_error(agent: FakeAgent) -> None:
    agent.mode = "malformed_json"
    with pytest.raises(LlmError, match="malformed JSON"):
        await reply_parts(model_for(agent))


@pytest.mark.parametrize("mode", ["hang", "hang_mid_stream"])
async def test_whole_turn_timeout_covers_streaming(agent: FakeAgent, mode: Mode) -> None:
    agent.mode = mode
    with pytest.raises(LlmError, match="timed out after 500 ms"):
        await reply_parts(model_for(agent, timeout_ms=500))
    assert await agent.wait_disconnect()


async def test_huge_body_is_cut_at_max_reply_bytes_and_the_connection_closed(agent: FakeAgent) -> None:
    agent.mode = "huge"
    parts = await reply_parts(model_for(agent, max_reply_bytes=100_000))
    text = "".join(parts)
    assert len(text.encode()) == 100_000 and text.startswith("blah blah")
    assert await agent.wait_disconnect()
    assert agent.huge_bytes_sent < HUGE_BYTES


async def test_huge_json_body_fails_the_turn(agent: FakeAgent) -> None:
    agent.reply = "x" * 5000
    with pytest.raises(LlmError, match="exceeds max_reply_bytes"):
        await reply_parts(model_for(agent, max_reply_bytes=1000))


async def test_cancelling_the_iteration_closes_the_connection(agent: FakeAgent) -> None:
    agent.mode, agent.chunk_delay_s = "sse_json_delta", 0.3
    agent.reply = " ".join(["word"] * 50)
    model = model_for(agent)
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in model.stream(request()):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await agent.wait_disconnect()
    await model.aclose()


async def test_request_body_carries_exactly_the_specified_fields(agent: FakeAgent) -> None:
    await reply_parts(model_for(agent, api_key="agent-key-1234"), request())
    sent = agent.requests[0]
    assert sent.body == {"session_id": "sess-1", "type": "chat", "text": "what's the weather"}
    assert sent.headers["authorization"] == "Bearer agent-key-1234"
    assert sent.headers["content-type"] == "application/json"
    assert "text/event-stream" in sent.headers["accept"]


async def test_request_body_with_every_optional_field(agent: FakeAgent) -> None:
    req = request(
        "and tomorrow?", resource_id="+15551234567", interrupted_text="It is twenty",
        context=["Forecast: rain"], summary="Asked about weather.", memory="Lives in Oslo.", note="Be brief.",
    )
    req.agent_system = "Skill: weather."
    await reply_parts(model_for(agent), req)
    assert agent.requests[0].body == {
        "session_id": "sess-1",
        "resource_id": "+15551234567",
        "type": "chat",
        "text": "and tomorrow?",
        "system": "Skill: weather.\n\nBe brief.",
        "interrupted_text": "It is twenty",
        "context": ["Forecast: rain"],
        "summary": "Asked about weather.",
        "memory": "Lives in Oslo.",
    }
    assert "authorization" not in agent.requests[0].headers


def test_a_turn_prepared_before_the_caller_finished_says_so() -> None:
    # The reply may be thrown away unheard: the agent must not act irreversibly on it.
    assert chat_body(request("book a table", prepared=True))["prepared"] is True
    assert "prepared" not in chat_body(request("book a table"))


def test_empty_text_is_still_sent() -> None:
    assert chat_body(request("")) == {"session_id": "sess-1", "type": "chat", "text": ""}


async def test_complete_sends_a_oneshot(agent: FakeAgent) -> None:
    agent.reply = "  Summary text.  "
    model = model_for(agent)
    try:
        assert await model.complete("Summarise this.", "transcript", timeout_s=5) == "Summary text."
    finally:
        await model.aclose()
    body = agent.requests[0].body
    assert body["type"] == "oneshot" and body["text"] == "transcript" and body["system"] == "Summarise this."
    assert set(body) == {"session_id", "type", "text", "system"}


@pytest.mark.parametrize("mode", ["json", "sse_json_delta", "plain_chunked"])
async def test_one_warm_connection_serves_every_turn(agent: FakeAgent, mode: Mode) -> None:
    agent.mode = mode
    model = model_for(agent)
    try:
        for _ in range(3):
            [item async for item in model.stream(request())]
    finally:
        await model.aclose()
    assert len({sent.client_port for sent in agent.requests}) == 1


async def test_a_shared_http_client_is_used_and_left_open(agent: FakeAgent) -> None:
    async with httpx.AsyncClient() as http:
        model = AgentChatModel(AgentConfig(url=agent.url + "/agent"), http=http)
        assert "".join(await reply_parts(model)) == REPLY
        assert not http.is_closed


async def test_unreachable_agent_is_llm_error() -> None:
    from tests.conftest import free_port

    model = AgentChatModel(AgentConfig(url=f"http://127.0.0.1:{free_port()}/agent", timeout_ms=3000))
    with pytest.raises(LlmError, match="unreachable"):
        await reply_parts(model)


# SSE parsing, without a socket -------------------------------------------------------------------


def test_sse_multi_line_data_is_joined_with_newlines() -> None:
    parser = SseParser()
    assert parser.feed("data: one\ndata: two\n\n") == ["one\ntwo"]


def test_sse_crlf_split_across_reads_is_one_line_end() -> None:
    parser = SseParser()
    assert parser.feed("data: a\r") == []
    assert parser.feed("\n\r\n") == ["a"]


def test_sse_unterminated_last_event_is_dispatched_at_the_end() -> None:
    parser = SseParser()
    assert parser.feed("data: tail") == []
    assert parser.finish() == ["tail"]


@pytest.mark.parametrize(
    ("data", "spoken"),
    [
        ('{"delta": "hi"}', "hi"),
        ('{"text": "hi"}', "hi"),
        ('"hi"', "hi"),
        ('{"choices": [{"delta": {"content": "hi"}}]}', "hi"),
        ('{"delta": {"text": "hi"}}', "hi"),
        ('{"type": "ping"}', ""),
        (" plain words ", " plain words "),
        ('{"delta": "cut', None),
        ("[1, 2", None),
        ("bell\x07", None),
        ("bad \ufffd bytes", None),
    ],
)
def test_sse_data_rule(data: str, spoken: str | None) -> None:
    assert sse_data_text(data) == spoken


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1), max_size=8),
       st.integers(min_value=1, max_value=9), st.sampled_from(["\n", "\r\n", "\r"]))
def test_sse_events_survive_any_split_and_line_ending(texts: list[str], step: int, eol: str) -> None:
    import json

    wire = "".join(f"data: {json.dumps({'delta': t})}{eol}{eol}" for t in texts)
    parser = SseParser()
    events: list[str] = []
    for start in range(0, len(wire), step):
        events += parser.feed(wire[start : start + step])
    events += parser.finish()
    assert [sse_data_text(e) for e in events] == texts


async def test_missing_url_is_an_actionable_llm_error() -> None:
    with pytest.raises(LlmError, match=r"\[agent\] url"):
        await reply_parts(AgentChatModel(AgentConfig()))
