"""Building pipelines for tests with real local engines and, where a test needs control, a scripted STT (the
fixtures tests/pipeline/ and tests/turn/ share: their conftest.py files import them)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from tests.conftest import tone_driven
from voicegate.internal.config import Config, load_config
from voicegate.internal.conversation.rolling_summary import RollingSummary
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.base import ChatModel
from voicegate.internal.llm.local import LocalAgent
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.session import Conversation, Session
from voicegate.internal.stt.base import SpeechToText, Transcript
from voicegate.internal.tools.registry import ToolRegistry, register_end_call
from voicegate.internal.tts.espeak import EspeakTextToSpeech


class ScriptedStt:
    """A speech-to-text stand-in for pipeline-logic tests: each utterance the VAD ends yields the next
    scripted final; real audio (tones, espeak) still drives the VAD, barge-in and timing."""

    name = "scripted"

    def __init__(self, finals: list[str | Transcript], partials: dict[int, str] | None = None, continuous: bool = False,
                 delay_s: float = 0.05) -> None:
        self.finals = list(finals)
        self.partials = partials or {}
        self.continuous = continuous
        self.delay_s = delay_s
        self.utterances: list[int] = []  # bytes of audio per utterance

    def open(self, sample_rate: int) -> ScriptedStream:
        return ScriptedStream(self)

    async def aclose(self) -> None:
        return None


class ScriptedStream:
    def __init__(self, engine: ScriptedStt) -> None:
        self.engine = engine
        self.continuous = engine.continuous
        self._queue: asyncio.Queue[Transcript | None] = asyncio.Queue()
        self._audio = 0
        self._sent_partial = False

    def push(self, pcm: bytes) -> None:
        self._audio += len(pcm)
        index = len(self.engine.utterances)
        partial = self.engine.partials.get(index)
        if partial and not self._sent_partial and self._audio > 16000 * 2 * 0.2:
            self._sent_partial = True
            self._queue.put_nowait(Transcript(partial, final=False))

    def end_of_speech(self) -> None:
        self.engine.utterances.append(self._audio)
        self._audio = 0
        self._sent_partial = False
        final = self.engine.finals.pop(0) if self.engine.finals else ""
        transcript = final if isinstance(final, Transcript) else Transcript(final, True)
        asyncio.get_running_loop().call_later(self.engine.delay_s, self._queue.put_nowait, transcript)

    def new_turn(self) -> None:
        return None

    async def results(self) -> AsyncIterator[Transcript]:
        while (item := await self._queue.get()) is not None:
            yield item

    async def aclose(self) -> None:
        self._queue.put_nowait(None)


@pytest.fixture
def config() -> Config:
    cfg = load_config(None)
    cfg.pipeline.debug = True
    cfg.pipeline.idle_prompt_s = 0  # the idle prompt and the thinking cue only where a test asks for them
    cfg.pipeline.thinking_cue = "off"
    return tone_driven(cfg)  # tones and espeak-ng drive these pipelines


PipelineFactory = Callable[..., tuple[VoicePipeline, CollectingSink]]


@pytest.fixture
def make_pipeline(config: Config) -> Iterator[PipelineFactory]:
    def build(*, stt: SpeechToText, model: ChatModel | None = None, rate: int = 16000,
              session: Session | None = None, greeting: str | None = "", summariser: Any = None,
              tools: ToolRegistry | None = None, **pipeline_overrides: Any) -> tuple[VoicePipeline, CollectingSink]:
        for key, value in pipeline_overrides.items():
            setattr(config.pipeline, key, value)
        registry = tools if tools is not None else ToolRegistry()
        if tools is None:
            register_end_call(registry)
        services = PipelineServices(stt=stt, tts=EspeakTextToSpeech(config.espeak), model=model or LocalAgent(),
                                    config=config.pipeline, tools=registry)
        sess = session or Session(CallerIdentity.anonymous(), "talk",
                                  Conversation(RollingSummary(summariser, config.pipeline.summary_timeout_s)))
        sink = CollectingSink()
        return VoicePipeline(sess, services, rate, sink, greeting=greeting), sink

    yield build
