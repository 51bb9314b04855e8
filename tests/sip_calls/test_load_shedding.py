"""Load shedding on the offline defaults: when the recogniser's queue is longer than a reply can afford,
new callers get 503 + Retry-After and a caller whose words were shed hears a short apology.

A real Whisper pool (one worker) is kept busy by decodes from this test, standing in for other callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.sip_calls.conftest import (
    ServerFactory,
    agent_said,
    caller_bye,
    eventually,
    neural_caller,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from tests.speech import neural
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.pipeline.responder import TOO_BUSY
from voicegate.internal.stt.whisper import WhisperSpeechToText
from voicegate.internal.stt.workers import SttOverloaded

pytestmark = pytest.mark.slow

LONG_SPEECH = ["I would like to report a problem with my last bill, it was far too high this month.",
               "Can you move my appointment to next Tuesday morning, or failing that, Wednesday afternoon?",
               "Please send the receipt to my email address and also a copy to my office."]


@pytest_asyncio.fixture
async def whisper(tmp_path: Path) -> AsyncIterator[WhisperSpeechToText]:
    engine = WhisperSpeechToText(WhisperConfig(workers=1, shed_after_ms=1), tmp_path / "models")
    yield engine
    await engine.aclose()


@contextlib.asynccontextmanager
async def busy(engine: WhisperSpeechToText) -> AsyncIterator[None]:
    """Keep the one worker decoding long speech, with another utterance always waiting behind it."""
    audio = b"".join(neural(LONG_SPEECH, 8000))
    stop = asyncio.Event()

    async def other_caller(name: str) -> None:
        while not stop.is_set():
            with contextlib.suppress(SttOverloaded):
                await engine.transcribe(audio, 8000, caller=name)

    tasks = [asyncio.create_task(other_caller(f"other-{i}")) for i in range(2)]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_new_calls_get_503_while_the_recogniser_is_too_far_behind_and_are_taken_again_after(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    config = sip_calls_config(tmp_path)
    config.server.shed_wait_ms = 300
    config.telemetry.metrics = True
    server = await make_server(stt=whisper, config=config)
    async with busy(whisper):
        await eventually(lambda: server.sessions.at_capacity(), 60, "the node to start shedding")
        refused = render(tmp_path, "uac_refused.xml", EXPECTED_STATUS="503", EXPECTED_REGEXP="Retry-After: [0-9]+")
        (await run_sipp(tmp_path, refused, server.target)).check()
        health = await server.gateway.health()
        assert health["components"]["workers"]["shedding"] is True
        assert health["status"] == "ok"  # advisory: the calls it has are still served
    assert len(server.ended) == 0  # the refused caller never had a session
    await eventually(lambda: not server.sessions.at_capacity(), 60, "the node to take calls again")
    assert server.gateway.telemetry.worker_waits is not None
    metrics = server.gateway.telemetry.prometheus()
    assert 'voicegate_worker_queue{pool="whisper",state="waiting"} 0' in metrics
    assert 'voicegate_worker_wait_ms_count{pool="whisper"}' in metrics


async def test_a_caller_whose_words_were_shed_hears_a_short_apology(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    config = sip_calls_config(tmp_path)
    config.server.shed_wait_ms = 0  # admit the call: this test is about the call in progress
    config.admission.enabled = False  # ... whatever admission control makes of the busy recogniser
    server = await make_server(stt=whisper, config=config)
    audio = neural_caller(tmp_path, "What time is it?")
    async with busy(whisper):
        scenario = render(tmp_path, media=stream(audio), ending=caller_bye(9000))
        sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
        (session,) = await server.wait_live()
        entries = await agent_said(session, containing=TOO_BUSY)
    (await sipp).check()
    assert whisper.pool.shed >= 1
    assert not [e for e in entries if e.role == "user" and e.text]  # nothing was made up for the shed words
    assert session.conversation.misunderstanding_streak == 0  # being busy is not the caller's fault


@contextlib.contextmanager
def overloaded_loop(busy_s: float = 0.3) -> Iterator[None]:
    """Keep this process's event loop (the in-process node's) late: every iteration runs a callback that
    holds it `busy_s`, as a node with more calls than its core can carry does."""
    loop = asyncio.get_running_loop()
    handles: list[asyncio.Handle] = []

    def hold() -> None:
        time.sleep(busy_s)
        handles.append(loop.call_soon(hold))

    handles.append(loop.call_soon(hold))
    try:
        yield
    finally:
        handles[-1].cancel()


async def test_new_calls_get_503_while_the_event_loop_runs_late_and_are_taken_again_after(
        make_server: ServerFactory, tmp_path: Path) -> None:
    config = sip_calls_config(tmp_path)
    config.server.shed_wait_ms = 0  # only the loop's lateness counts here
    config.telemetry.metrics = True
    server = await make_server(config=config)
    assert server.gateway.config.server.shed_loop_lag_ms == 250  # the default
    with overloaded_loop():
        await eventually(lambda: server.sessions.at_capacity(), 60, "the node to start shedding")
        refused = render(tmp_path, "uac_refused.xml", EXPECTED_STATUS="503", EXPECTED_REGEXP="Retry-After: [0-9]+")
        (await run_sipp(tmp_path, refused, server.target)).check()
        health = await server.gateway.health()
        assert health["components"]["event_loop"]["ok"] is False
        assert health["components"]["event_loop"]["lag_ms"] >= 250
        assert health["status"] == "ok"  # advisory: the calls it has are still served
    assert len(server.ended) == 0
    await eventually(lambda: not server.sessions.at_capacity(), 60, "the node to take calls again")
    assert (await server.gateway.health())["components"]["event_loop"]["ok"] is True
    assert "voicegate_event_loop_lag_ms_count" in server.gateway.telemetry.prometheus()
