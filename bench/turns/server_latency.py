"""Server-added turn latency: from the end-of-speech decision (a turn released) to the first reply frame.

    .venv/bin/python -m bench.turns.server_latency [--turns 200] [--local]

With stubs (a model and a speech synthesiser that answer instantly) the figure is pure pipeline
overhead: context assembly, the sentence chunker, task hand-offs and framing. With --local the real
offline engines answer (the local agent and espeak-ng), and the speech-to-text time of pocketsphinx
is measured separately on espeak-generated utterances. The target is <= 10 ms p95 with stubs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import percentiles, progress, save, table
from voicegate.internal.config import load_config
from voicegate.internal.conversation.rolling_summary import RollingSummary
from voicegate.internal.event_envelope import NullSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.base import ChatRequest, ReplyDelta, ToolCall
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.session import Conversation, Session


class InstantModel:
    name = "stub"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        for word in "Sure, I can help with that. What else would you like to know?".split(" "):
            yield ReplyDelta(word + " ")

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        return ""

    async def aclose(self) -> None:
        return None


class InstantTts:
    name = "stub"

    async def synthesize(self, text: str, sample_rate: int) -> AsyncIterator[bytes]:
        yield bytes(sample_rate // 50 * 2 * 10)  # 200 ms of audio per sentence, at once

    async def aclose(self) -> None:
        return None


class NoStt:
    name = "none"

    def open(self, sample_rate: int) -> object:
        from tests.pipeline.conftest import ScriptedStream, ScriptedStt

        return ScriptedStream(ScriptedStt([]))

    async def aclose(self) -> None:
        return None


async def measure(services: PipelineServices, turns: int, label: str) -> list[float]:
    session = Session(CallerIdentity.anonymous(), "talk", Conversation(RollingSummary(None, 5)))
    pipeline = VoicePipeline(session, services, 16000, NullSink(), greeting="")
    await pipeline.start()
    latencies: list[float] = []
    for n in range(turns):
        started = time.perf_counter()
        pipeline.submit_text(f"question number {n}")
        while pipeline.pull_audio() is None:
            await asyncio.sleep(0)
        latencies.append((time.perf_counter() - started) * 1000.0)
        while not pipeline.idle:  # play the rest out, as fast as the loop allows
            pipeline.pull_audio()
            await asyncio.sleep(0)
        progress(label, n + 1, turns)
    await pipeline.close()
    return latencies


async def stt_times(utterances: int) -> list[float]:
    from tests.speech import speak
    from voicegate.internal.stt.pocketsphinx import PocketsphinxSpeechToText

    engine = PocketsphinxSpeechToText(load_config(None).pocketsphinx)
    await engine.warm_up()
    phrases = ["what time is it", "my name is sam", "keep your answers short", "goodbye", "say hello world"]
    times: list[float] = []
    audio_s = 0.0
    for n in range(utterances):
        pcm = speak(phrases[n % len(phrases)])
        audio_s += len(pcm) / 32000
        started = time.perf_counter()
        await engine.transcribe(pcm, 16000)
        times.append((time.perf_counter() - started) * 1000.0)
        progress("pocketsphinx", n + 1, utterances)
    await engine.aclose()
    times.append(sum(times) / 1000.0 / audio_s)  # last entry: real-time factor
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--local", action="store_true", help="also measure the local engines")
    args = parser.parse_args()
    config = load_config(None)
    results: dict[str, object] = {"turns": args.turns}
    rows = []
    stub = PipelineServices(stt=NoStt(), tts=InstantTts(), model=InstantModel(), config=config.pipeline)  # type: ignore[arg-type]
    stub_ms = await measure(stub, args.turns, "stubs")
    results["stubs_ms"] = percentiles(stub_ms)
    rows.append(["stubs (0 ms model/TTS)", *(f"{v:.2f}" for v in percentiles(stub_ms).values())])
    if args.local:
        from voicegate.internal.llm.local import LocalAgent
        from voicegate.internal.tts.espeak import EspeakTextToSpeech

        local = PipelineServices(stt=NoStt(), tts=EspeakTextToSpeech(config.espeak), model=LocalAgent(),  # type: ignore[arg-type]
                                 config=config.pipeline)
        local_ms = await measure(local, args.turns, "local agent + espeak-ng")
        results["local_ms"] = percentiles(local_ms)
        rows.append(["local agent + espeak-ng", *(f"{v:.2f}" for v in percentiles(local_ms).values())])
        stt = await stt_times(min(args.turns, 50))
        rtf = stt.pop()
        results["pocketsphinx_ms"] = percentiles(stt)
        results["pocketsphinx_rtf"] = rtf
        rows.append([f"pocketsphinx decode (RTF {rtf:.3f})", *(f"{v:.2f}" for v in percentiles(stt).values())])
    print(table(rows, ["turn latency, ms", "p50", "p95", "p99"]))
    print(f"results: {save('turn_latency', results)}")


if __name__ == "__main__":
    asyncio.run(main())
