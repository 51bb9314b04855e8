"""Seed 003's digest end to end: a call long enough to roll a summary leaves that summary as its line under
"Recent calls", and the next call's prompt carries it (real gateway, pipeline, PostgreSQL; the model is
the OpenAI fake, which also writes the rolling summary)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests.fakes.openai_fake import FakeOpenAI, echo_last_user
from tests.memory.test_calls import SAM, call, documents, memory_config
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.conversation.rolling_summary import SUMMARY_ACTIVATE_ENTRIES, SUMMARY_SYSTEM_PROMPT
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.memory.digest import QUOTED_PREFIX
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.server.gateway import Gateway

SUMMARY = "Sam booked a table for four at Luigi's on Friday and asked for a window seat."


def summary_or_echo(body: dict[str, Any]) -> str:
    """The rolling summary's request gets a summary; a turn gets its caller's words back."""
    if body["messages"][0]["content"] == SUMMARY_SYSTEM_PROMPT:
        return SUMMARY
    return echo_last_user(body)


async def test_a_long_calls_rolling_summary_is_the_next_calls_recent_calls_line(tmp_path: Path,
                                                                               fresh_db: str) -> None:
    async with FakeOpenAI() as fake:
        fake.default_reply = summary_or_echo
        config = memory_config(tmp_path, fresh_db)
        model = OpenAIChatModel(config.openai, base_url=fake.url + "/v1", api_key="k")
        gateway = Gateway(config, stt=ScriptedStt([]), model=model)
        await gateway.start()
        try:
            assert gateway.sessions is not None and gateway.session_memory is not None
            session = await gateway.open_session(SAM, "talk")
            pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
            async with LocalCall(pipeline, speed=30.0) as live:
                await live.wait_agent_quiet(100)
                turn = 0
                # Enough turns for the transcript to pass the summary's threshold (caller and agent lines).
                while len(session.conversation.transcript.entries()) < SUMMARY_ACTIVATE_ENTRIES + 2:
                    turn += 1
                    pipeline.submit_text(f"question number {turn} about the booking")
                    await live.wait_agent_quiet(100)
                deadline = time.monotonic() + 30
                while session.conversation.summary.text != SUMMARY:  # it is written off the turn path
                    assert time.monotonic() < deadline, "no rolling summary"
                    await asyncio.sleep(0.05)
            await gateway.sessions.end(session, "caller hung up")
            await gateway.sessions.drain()
            await gateway.session_memory.drain(30)

            memory = (await documents(gateway, SAM))["memory"]
            _, _, recent = memory.partition("## Recent calls")
            lines = [line for line in recent.splitlines() if line.startswith("- ")]
            assert len(lines) == 1 and lines[0].endswith(": " + SUMMARY)  # the summary, not quotes
            assert QUOTED_PREFIX not in memory and "question number" not in memory

            before = len(fake.requests)
            await call(gateway, SAM, "hello again")
            turns = [r for r in fake.requests[before:] if r["messages"][0]["content"] != SUMMARY_SYSTEM_PROMPT]
            system = turns[0]["messages"][0]["content"]
            assert "## Recent calls" in system and lines[0] in system  # the next call starts from it
        finally:
            await gateway.stop()
