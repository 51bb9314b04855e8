"""The pipeline with cloud providers, against local servers that speak their real wire protocols.

The production clients (OpenAI SDK, Deepgram WebSocket, BYO agent over HTTP) run unchanged; only the
endpoints are local fakes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.fakes.agent_fake import FakeAgent
from tests.fakes.deepgram_fake import FakeDeepgram
from tests.fakes.openai_fake import FakeOpenAI
from tests.pipeline.conftest import PipelineFactory, ScriptedStt
from tests.speech import active_ms, silence, tone
from voicegate.internal.agent.client import AgentChatModel
from voicegate.internal.config import Config
from voicegate.internal.config.providers import AgentConfig, DeepgramConfig
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.pipeline.events import ResponseEvent, TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.pipeline.pipeline import APOLOGY
from voicegate.internal.stt.deepgram import DeepgramSpeechToText
from voicegate.internal.stt.openai import OpenAISpeechToText
from voicegate.internal.tools.registry import ToolContext, ToolError, ToolRegistry, register_end_call
from voicegate.internal.tts.openai import OpenAITextToSpeech

pytestmark = pytest.mark.slow


def agent_texts(events: list[Any]) -> list[str]:
    return [e.text for e in events if isinstance(e, TranscriptEvent) and e.role == "agent"]


def weather_tools(calls: list[dict[str, Any]], fail: bool = False) -> ToolRegistry:
    registry = ToolRegistry()
    register_end_call(registry)

    async def get_weather(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        calls.append(arguments)
        if fail:
            raise ToolError("the weather service is down")
        return {"city": arguments.get("city"), "sky": "sunny"}

    registry.register("get_weather", "Current weather for a city.",
                      {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                      get_weather)
    return registry


async def test_openai_transcription_chat_with_a_tool_call_and_speech(
        make_pipeline: PipelineFactory, config: Config) -> None:
    async with FakeOpenAI(api_key="sk-test") as fake:
        config.openai.base_url = fake.url + "/v1"
        config.openai.api_key = "sk-test"
        fake.transcript = "what is the weather in Oslo"
        fake.script_tool_call("get_weather", {"city": "Oslo"})
        fake.script_reply("It is sunny in Oslo today.")
        calls: list[dict[str, Any]] = []
        pipeline, sink = make_pipeline(stt=OpenAISpeechToText(config.openai), model=OpenAIChatModel(config.openai),
                                       tools=weather_tools(calls))
        pipeline.services.tts = OpenAITextToSpeech(config.openai)
        async with LocalCall(pipeline) as call:
            call.say(silence(200) + tone(800) + silence(100))
            await call.wait_caller_done()
            await call.wait_agent_quiet(800)
    assert calls == [{"city": "Oslo"}]
    assert len(fake.transcriptions) == 1 and fake.transcriptions[0].audio[:4] == b"RIFF"
    first, second = fake.requests
    assert first["messages"][-1] == {"role": "user", "content": "what is the weather in Oslo"}
    assert {t["function"]["name"] for t in first["tools"]} >= {"get_weather", "end_call"}
    tool_results = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool_results and json.loads(tool_results[0]["content"]) == {"city": "Oslo", "sky": "sunny"}
    assert agent_texts(sink.events) == ["It is sunny in Oslo today."]
    assert fake.speech_requests and fake.speech_requests[0]["input"] == "It is sunny in Oslo today."
    assert active_ms(bytes(call.agent_audio), 16000) > 500
    history = pipeline.session.conversation.history
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]


async def test_a_failing_tool_goes_back_to_the_model_and_the_turn_completes(
        make_pipeline: PipelineFactory, config: Config) -> None:
    async with FakeOpenAI() as fake:
        fake.script_tool_call("get_weather", {"city": "Oslo"})
        fake.script_reply("Sorry, I can't check the weather right now.")
        model = OpenAIChatModel(config.openai, base_url=fake.url + "/v1", api_key="k")
        pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=model, tools=weather_tools([], fail=True))
        async with LocalCall(pipeline, speed=8.0) as call:
            pipeline.submit_text("weather in Oslo?")
            await call.wait_agent_quiet(500)
    tool_message = next(m for m in fake.requests[1]["messages"] if m["role"] == "tool")
    assert json.loads(tool_message["content"]) == {"error": "the weather service is down"}
    assert agent_texts(sink.events) == ["Sorry, I can't check the weather right now."]


async def test_invalid_tool_arguments_are_reported_to_the_model(make_pipeline: PipelineFactory,
                                                                 config: Config) -> None:
    async with FakeOpenAI() as fake:
        fake.script_tool_call("get_weather", '{"city": "Os')  # truncated JSON, as models sometimes stream
        fake.script_reply("Let me try that again later.")
        model = OpenAIChatModel(config.openai, base_url=fake.url + "/v1", api_key="k")
        calls: list[dict[str, Any]] = []
        pipeline, _sink = make_pipeline(stt=ScriptedStt([]), model=model, tools=weather_tools(calls))
        async with LocalCall(pipeline, speed=8.0) as call:
            pipeline.submit_text("weather?")
            await call.wait_agent_quiet(500)
    assert calls == []
    tool_message = next(m for m in fake.requests[1]["messages"] if m["role"] == "tool")
    assert "not valid JSON" in json.loads(tool_message["content"])["error"]


async def test_deepgram_streaming_transcripts_drive_turns(make_pipeline: PipelineFactory) -> None:
    async with FakeDeepgram(api_key="dg") as deepgram:
        deepgram.script_result("say hello", after_bytes=6400)
        deepgram.script_result("say hello world", after_bytes=12800, is_final=True, speech_final=True)
        stt = DeepgramSpeechToText(DeepgramConfig(api_key="dg", url=deepgram.url), keepalive_s=1.0)
        pipeline, sink = make_pipeline(stt=stt)
        async with LocalCall(pipeline) as call:
            call.say(silence(200) + tone(900) + silence(200))
            await call.wait_caller_done()
            await call.wait_agent_quiet(800)
        params = deepgram.connections[0].params
    assert params["encoding"] == ["linear16"] and params["sample_rate"] == ["16000"]
    partials = [e.text for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "user" and not e.final]
    assert "say hello" in partials
    assert agent_texts(sink.events) == ["Hello world."]
    assert "Finalize" in " ".join(deepgram.control_messages)


@pytest.mark.parametrize("mode", ["json", "json_response_key", "plain_chunked", "sse_json_delta", "sse_raw"])
async def test_byo_agent_reply_shapes_are_spoken(make_pipeline: PipelineFactory, mode: str) -> None:
    reply = "It is sunny today. Anything else?"
    async with FakeAgent(mode=mode, reply=reply) as agent:  # type: ignore[arg-type]
        model = AgentChatModel(AgentConfig(url=agent.url + "/agent", api_key="agent-key"))
        pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=model)
        async with LocalCall(pipeline, speed=8.0) as call:
            pipeline.submit_text("what's the weather")
            await call.wait_agent_quiet(500)
        await model.aclose()
    body = agent.requests[0].body
    assert body["type"] == "chat" and body["text"] == "what's the weather"
    assert body["session_id"] == pipeline.session.id
    assert "resource_id" not in body  # anonymous callers have none
    assert agent.requests[0].headers["authorization"] == "Bearer agent-key"
    assert " ".join(agent_texts(sink.events)) == reply


@pytest.mark.parametrize("mode", ["status_500", "malformed_json"])
async def test_a_failing_byo_agent_gets_an_apology_and_the_call_continues(make_pipeline: PipelineFactory,
                                                                         mode: str) -> None:
    async with FakeAgent(mode=mode) as agent:  # type: ignore[arg-type]
        model = AgentChatModel(AgentConfig(url=agent.url + "/agent"))
        pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=model)
        async with LocalCall(pipeline, speed=8.0) as call:
            pipeline.submit_text("hello")
            await call.wait_agent_quiet(500)
            agent.mode = "json"
            pipeline.submit_text("hello again")
            await call.wait_agent_quiet(500)
        await model.aclose()
    assert agent_texts(sink.events) == [APOLOGY, agent.reply]


async def test_garbage_sse_speaks_only_the_readable_text(make_pipeline: PipelineFactory) -> None:
    async with FakeAgent(mode="garbage_sse", reply="The readable words survive.") as agent:
        model = AgentChatModel(AgentConfig(url=agent.url + "/agent"))
        pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=model)
        async with LocalCall(pipeline, speed=8.0) as call:
            pipeline.submit_text("hello")
            await call.wait_agent_quiet(500)
        await model.aclose()
    assert " ".join(agent_texts(sink.events)).replace("  ", " ") == "The readable words survive."


async def test_a_10mb_agent_reply_is_cut_off_and_the_call_survives(make_pipeline: PipelineFactory) -> None:
    async with FakeAgent(mode="huge") as agent:
        model = AgentChatModel(AgentConfig(url=agent.url + "/agent", max_reply_bytes=300))
        pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=model, turn_timeout_s=15)
        async with LocalCall(pipeline, speed=4.0) as call:
            pipeline.submit_text("tell me everything")
            await call.wait_agent_quiet(500, timeout_s=120)
            assert await agent.wait_disconnect()
        await model.aclose()
    spoken = " ".join(agent_texts(sink.events))
    assert 0 < len(spoken) <= 320


async def test_barge_in_closes_the_byo_agent_request(make_pipeline: PipelineFactory) -> None:
    async with FakeAgent(mode="hang_mid_stream", reply="This answer starts and then never finishes.") as agent:
        model = AgentChatModel(AgentConfig(url=agent.url + "/agent"))
        pipeline, sink = make_pipeline(stt=ScriptedStt(["stop"]), model=model, turn_timeout_s=120)
        async with LocalCall(pipeline) as call:
            pipeline.submit_text("tell me a story")
            while not agent.requests:  # the request is in flight (the agent sent one piece, then stalls)
                await call.ticks_later(1)
            call.say(tone(600, level_dbfs=-15) + silence(400))
            assert await agent.wait_disconnect()
            agent.mode = "json"
            await call.wait_agent_quiet(300)
        await model.aclose()
    assert [e for e in sink.events if isinstance(e, ResponseEvent) and e.interrupted]
    assert APOLOGY not in agent_texts(sink.events)  # cancelled by the barge-in, not by a timeout
    assert [r.body["text"] for r in agent.requests] == ["tell me a story", "stop"]


async def test_dtmf_reaches_a_byo_agent(make_pipeline: PipelineFactory) -> None:
    async with FakeAgent(mode="json", reply="Got your digits.") as agent:
        model = AgentChatModel(AgentConfig(url=agent.url + "/agent"))
        pipeline, _sink = make_pipeline(stt=ScriptedStt([]), model=model)
        async with LocalCall(pipeline, speed=8.0) as call:
            for digit in "12#":
                pipeline.push_dtmf(digit)
            await call.wait_agent_quiet(500)
            await asyncio.sleep(0)
        await model.aclose()
    assert agent.requests[0].body["dtmf"] == "12#"
