"""A 10-minute call keeps resident memory flat: ten minutes of 20 ms frames, both ways, through a real
pipeline's recording path (VoicePipeline.push_audio / pull_audio -> ConsentedRecording -> CallRecorder ->
writer threads -> a file), as fast as they go rather than in ten real minutes."""

from __future__ import annotations

import asyncio
import time
import wave
from pathlib import Path

import av
import numpy as np
import psutil
import pytest

from tests.conftest import tone_driven
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.config import load_config
from voicegate.internal.conversation.rolling_summary import RollingSummary
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.local import LocalAgent
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.recording.service import RecordingService
from voicegate.internal.session import Conversation, Session
from voicegate.internal.tts.espeak import EspeakTextToSpeech

RATE = 16000  # a browser call's rate: twice a phone call's bytes
MINUTES = 10
TICKS = MINUTES * 60 * 50
AUDIO_BYTES = TICKS * RATE // 50 * 2 * 2  # both channels: 38.4 MB at 16 kHz


@pytest.mark.parametrize("kind", ["wav", "opus"])
async def test_a_ten_minute_recorded_call_keeps_resident_memory_flat(tmp_path: Path, kind: str) -> None:
    started = time.monotonic()
    config = tone_driven(load_config(None))
    config.server.data_dir = str(tmp_path)
    config.recording.enabled = True
    config.recording.consent = "none"
    config.recording.format = kind  # type: ignore[assignment]
    service = RecordingService(config.recording, config.data_dir, owner_key=lambda identity: "a" * 64)
    await service.start()
    services = PipelineServices(stt=ScriptedStt([]), tts=EspeakTextToSpeech(config.espeak), model=LocalAgent(),
                                config=config.pipeline, recording=service.for_pipeline)
    session = Session(CallerIdentity("sip", "+15551234567"), "webrtc",
                      Conversation(RollingSummary(None, config.pipeline.summary_timeout_s)))
    pipeline = VoicePipeline(session, services, RATE, CollectingSink(), greeting="")
    await pipeline.start()
    rng = np.random.default_rng(1)
    caller = [(rng.standard_normal(RATE // 50) * 30).astype("<i2").tobytes() for _ in range(50)]
    process = psutil.Process()
    samples: list[int] = []
    for tick in range(TICKS):
        pipeline.push_audio(caller[tick % 50])
        pipeline.pull_audio()
        if tick % 50 == 49:
            # A second of call: the loop breathes, as between real ticks; and since ten minutes go by in
            # seconds here, the writer thread (not the wall clock) sets the pace: it is kept a second or
            # two behind, as a real call keeps it, so no second is lost to the bound on waiting audio.
            await asyncio.sleep(0)
            while service.writers.pending_bytes > 2 * RATE * 4:
                await asyncio.sleep(0.002)
        if tick % (60 * 50) == 60 * 50 - 1:
            samples.append(process.memory_info().rss)
    await pipeline.close()
    await service.session_ended(session)
    await service.stop()
    print(f"{kind}: {MINUTES} minutes recorded in {time.monotonic() - started:.1f} s; resident memory per minute "
          f"(MB over the first): {[round((s - samples[0]) / 1e6, 1) for s in samples]}")
    growth = max(samples) - samples[0]
    # Held in memory, the recording would grow by AUDIO_BYTES (38 MB); bounded, it stays within a few.
    assert growth < AUDIO_BYTES / 8, [f"{(s - samples[0]) / 1e6:.1f} MB" for s in samples]
    info = service.store.read(session.id)
    assert info is not None and info.duration_s == MINUTES * 60 and info.gaps_s == 0.0, info
    path = service.store.audio_path(info)
    if kind == "wav":
        with wave.open(str(path)) as wav:
            assert wav.getnframes() == MINUTES * 60 * RATE and wav.getnchannels() == 2
    else:
        with av.open(str(path)) as container:
            stream = container.streams.audio[0]
            assert stream.channels == 2
            assert abs(float(stream.duration * stream.time_base) - MINUTES * 60) < 1.0  # type: ignore[operator]
