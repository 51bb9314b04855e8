"""Faults: providers that hang or crash mid-call, and a server killed in the middle of memory writes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.conftest import REPO, free_port
from tests.pipeline.conftest import PipelineFactory, ScriptedStt
from tests.speech import silence, tone
from voicegate.internal.config import Config
from voicegate.internal.identity.jwt import mint_token
from voicegate.internal.llm.local import LocalAgent
from voicegate.internal.pipeline.events import TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.pipeline.responder import NOT_UNDERSTOOD
from voicegate.internal.stt.base import Transcript

pytestmark = pytest.mark.slow


class HangingTts:
    name = "hanging"

    def __init__(self) -> None:
        self.hang = True

    async def synthesize(self, text: str, sample_rate: int) -> AsyncIterator[bytes]:
        if self.hang:
            await asyncio.sleep(3600)
        yield bytes(sample_rate // 50 * 2 * 10)

    async def aclose(self) -> None:
        return None


class SilentStt(ScriptedStt):
    """An engine that takes audio and never answers (hung, or dead without saying so)."""

    def open(self, sample_rate: int):  # type: ignore[no-untyped-def]
        stream = super().open(sample_rate)
        stream.end_of_speech = lambda: None  # type: ignore[method-assign]
        return stream


def agent_lines(sink) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.text for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "agent"]


async def test_a_hanging_speech_synthesiser_does_not_hang_the_call(make_pipeline: PipelineFactory) -> None:
    pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=LocalAgent(), turn_timeout_s=1.0)
    tts = HangingTts()
    pipeline.services.tts = tts
    async with LocalCall(pipeline) as call:
        pipeline.submit_text("say hello world")
        await call.wait_agent_quiet(300, timeout_s=30)  # timed out, apology timed out too: quiet, not stuck
        tts.hang = False
        pipeline.submit_text("say hello world")
        await call.wait_agent_quiet(300, timeout_s=30)
    assert agent_lines(sink)[-1] == "Hello world."
    assert call.agent_frames > 0


async def test_a_speech_recogniser_that_never_answers_gets_the_caller_asked_to_repeat(
        make_pipeline: PipelineFactory) -> None:
    pipeline, sink = make_pipeline(stt=SilentStt([]), turn_timeout_s=1.0)
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(800) + silence(200))
        await call.wait_caller_done()
        await asyncio.sleep(1.5)
        await call.wait_agent_quiet(300, timeout_s=30)
    assert agent_lines(sink) == [NOT_UNDERSTOOD]
    assert pipeline.idle


class CrashingStt(ScriptedStt):
    def open(self, sample_rate: int):  # type: ignore[no-untyped-def]
        stream = super().open(sample_rate)

        async def results() -> AsyncIterator[Transcript]:
            raise RuntimeError("the engine died")
            yield Transcript("", True)  # pragma: no cover

        stream.results = results  # type: ignore[method-assign]
        return stream


async def test_a_crashing_speech_recogniser_leaves_typed_turns_working(make_pipeline: PipelineFactory) -> None:
    pipeline, sink = make_pipeline(stt=CrashingStt([]))
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(400) + silence(100))
        await call.wait_caller_done()
        pipeline.submit_text("say hello world")
        await call.wait_agent_quiet(300, timeout_s=60)
    assert "Hello world." in agent_lines(sink)


class DyingStt(ScriptedStt):
    """Its first stream dies as soon as it has an utterance to transcribe; later streams work."""

    def __init__(self, finals: list[str]) -> None:
        super().__init__(finals)
        self.opened = 0

    def open(self, sample_rate: int):  # type: ignore[no-untyped-def]
        self.opened += 1
        stream = super().open(sample_rate)
        if self.opened == 1:
            died = asyncio.Event()
            stream.end_of_speech = died.set  # type: ignore[method-assign]

            async def results() -> AsyncIterator[Transcript]:
                await died.wait()
                raise RuntimeError("the engine died mid-utterance")
                yield Transcript("", True)  # pragma: no cover

            stream.results = results  # type: ignore[method-assign]
        return stream


async def test_a_recogniser_dying_mid_call_gets_an_immediate_request_to_repeat_and_a_fresh_stream(
        make_pipeline: PipelineFactory, config: Config) -> None:
    config.pipeline.turn_timeout_s = 120.0  # far longer than this test waits: the death, not the timer, answers
    stt = DyingStt(["say hello world"])
    pipeline, sink = make_pipeline(stt=stt)
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(600) + silence(800))  # the utterance the dying stream owed
        await call.wait_caller_done()
        await call.wait_agent_quiet(300, timeout_s=30)
        assert agent_lines(sink) == [NOT_UNDERSTOOD]
        call.say(tone(600) + silence(800))  # heard by the fresh stream
        await call.wait_caller_done()
        await call.wait_agent_quiet(300, timeout_s=30)
    assert agent_lines(sink) == [NOT_UNDERSTOOD, "Hello world."]
    assert stt.opened == 2


SECRET = "kill-test-secret-0123456789abcdefghij"


def serve(tmp_path: Path, db: str, port: int) -> subprocess.Popen[str]:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\ndata_dir = "{tmp_path / "data"}"\n'
        f'jwt_secret = "{SECRET}"\npatch_rate_per_min = 0\n'
        f'[sip]\nenabled = false\n[pocketsphinx]\nworkers = 1\n'
        f'[memory]\nenabled = true\nmax_chars = 100000\n[pgvector]\nconnection_string = "{db}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
    return subprocess.Popen([sys.executable, "-m", "voicegate", "--config", str(config), "serve"], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def wait_healthy(url: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not become healthy")


async def test_a_server_killed_during_writes_leaves_no_partial_row_and_restarts_clean(
        tmp_path: Path, fresh_db: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": "Bearer " + mint_token(SECRET, "alice", issuer="voicegate", audience="voicegate",
                                                       ttl_s=600)}
    server = serve(tmp_path, fresh_db, port)
    try:
        await asyncio.to_thread(wait_healthy, url)
        landed: list[int] = []
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            async def write(n: int) -> None:
                try:
                    response = await http.patch("/api/memory", headers=headers, json={
                        "document": "memory", "action": "append", "content": f"- fact {n}"})
                    if response.status_code == 200:
                        landed.append(n)
                except httpx.HTTPError:
                    pass  # the server is gone mid-request

            writers = [asyncio.create_task(write(n)) for n in range(400)]
            deadline = time.monotonic() + 60
            while len(landed) < 20 and time.monotonic() < deadline:  # kill it in full flow
                await asyncio.sleep(0.05)
            server.send_signal(signal.SIGKILL)
            await asyncio.gather(*writers)
        server.wait(10)
    finally:
        if server.poll() is None:
            server.kill()
    async with await psycopg.AsyncConnection.connect(fresh_db) as conn:
        cursor = await conn.execute("SELECT scope, content, revision FROM memories")
        rows = await cursor.fetchall()
        cursor = await conn.execute("SELECT scope, revision, char_count FROM memory_history ORDER BY revision")
        history = await cursor.fetchall()
    assert rows, "some writes landed before the kill"
    (scope, content, revision) = rows[0]
    lines = content.split("\n")
    assert len(lines) == revision  # one line per committed revision: nothing half-written
    assert all(line.startswith("- fact ") for line in lines)
    assert history[-1] == (scope, revision, len(content))  # the document and its history agree

    restarted = serve(tmp_path, fresh_db, port)
    try:
        await asyncio.to_thread(wait_healthy, url)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            after = await http.patch("/api/memory", headers=headers, json={
                "document": "memory", "action": "append", "content": "- after the restart",
                "expectedRevision": revision})
        assert after.status_code == 200 and after.json()["documents"]["memory"]["revision"] == revision + 1
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(30)
