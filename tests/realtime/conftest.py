"""Realtime fixtures: a gateway whose agent is a Realtime model (the fake in tests/fakes/realtime_fake.py),
driven as a caller by LocalCall (internal/pipeline/localcall.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import tone_driven
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.config import Config, load_config
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.pipeline.events import TranscriptEvent
from voicegate.internal.realtime.pipeline import RealtimePipeline
from voicegate.internal.session import Session
from voicegate.internal.tools.registry import ToolRegistry
from voicegate.server.gateway import Gateway

KEY = "rt-test-key"


def realtime_config(tmp_path: Path, url: str, **realtime: Any) -> Config:
    """The defaults, no SIP, the energy VAD (a tone is the caller in these tests), the Realtime agent at `url`."""
    config = tone_driven(load_config(None))
    config.server.data_dir = str(tmp_path / "data")
    config.sip.enabled = False
    config.realtime.enabled = True
    config.realtime.url = url
    config.realtime.api_key = KEY
    for key, value in realtime.items():
        setattr(config.realtime, key, value)
    return config


GatewayFactory = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def realtime_gateway(tmp_path: Path) -> AsyncIterator[GatewayFactory]:
    """make(url, tools=None, greeting=None, **realtime): a started Gateway whose calls use the Realtime agent."""
    started: list[Gateway] = []

    async def make(url: str, *, tools: ToolRegistry | None = None, greeting: str | None = None,
                   **realtime: Any) -> Gateway:
        config = realtime_config(tmp_path, url, **realtime)
        if greeting is not None:
            config.pipeline.greeting = greeting
        gateway = Gateway(config, stt=ScriptedStt([]), tools=tools)
        await gateway.start()
        started.append(gateway)
        return gateway

    yield make
    for gateway in started:
        await gateway.stop()


class Call:
    """A session on `gateway` with its pipeline and what its sink saw; `hung_up` counts session.hangup()."""

    def __init__(self, gateway: Gateway, session: Session, pipeline: RealtimePipeline, sink: CollectingSink) -> None:
        self.gateway = gateway
        self.session = session
        self.pipeline = pipeline
        self.sink = sink
        self.hung_up = 0

    def agent_lines(self) -> list[str]:
        return [e.text for e in self.sink.events if isinstance(e, TranscriptEvent) and e.role == "agent"]

    def transcript(self) -> list[tuple[str, str]]:
        return [(entry.role, entry.text) for entry in self.session.conversation.transcript.entries()]


async def open_call(gateway: Gateway, rate: int = 16000) -> Call:
    session = await gateway.open_session(CallerIdentity.anonymous(), "talk")
    sink = CollectingSink()
    pipeline = gateway.new_pipeline(session, rate, sink)
    assert isinstance(pipeline, RealtimePipeline)
    call = Call(gateway, session, pipeline, sink)

    async def hangup() -> None:
        call.hung_up += 1

    session.hangup = hangup
    return call
