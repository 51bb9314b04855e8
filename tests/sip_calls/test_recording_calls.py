"""Recorded phone calls with consent "ask", end to end: sipp calls through a wire tap, the caller (the Piper
voice) answers the question by voice, Whisper understands it on the server and checks the file after.

- "No": nothing is recorded, not even a sidecar.
- "Yes": the file's left channel holds the caller's words and its right the agent's (Whisper hears each),
  the two are aligned within 60 ms on the wire's clock (tests/recording/alignment.py says exactly what is
  measured), and `voicegate memory delete --caller`, run as its own process, removes it and names it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from bench.common.wire_tap import WireTap
from tests.conftest import run_cli
from tests.fakes.models import RecordingModel
from tests.recording.alignment import alignment, wire_audio
from tests.sip_calls.conftest import (
    CALLER,
    WAIT_FOR_BYE,
    ServerFactory,
    SipServer,
    agent_said,
    loud_part,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from tests.speech import neural, silence
from voicegate.internal.audio.g711 import ulaw_encode
from voicegate.internal.config import Config
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.stt.whisper import WhisperSpeechToText

pytestmark = pytest.mark.slow

QUESTION = "May I record this call? Please say yes or no."
REQUEST = "Please book a table for four people on Friday."
REPLY = "Your reservation is confirmed."
ALIGNED_MS = 60.0


@pytest_asyncio.fixture
async def whisper(tmp_path: Path) -> AsyncIterator[WhisperSpeechToText]:
    engine = WhisperSpeechToText(WhisperConfig(workers=1), tmp_path / "models")
    yield engine
    await engine.aclose()


def recording_config(tmp_path: Path) -> Config:
    # Symmetric RTP on: voicegate answers the tap, which relays the caller. The trunk (here) is trusted, so
    # the caller is their number, and their recording carries its owner key.
    config = sip_calls_config(tmp_path, trusted_peers=["127.0.0.1/32"])
    config.tts.provider = "auto"  # Piper
    config.piper.workers = 1
    config.recording.enabled = True
    config.recording.consent = "ask"
    config.recording.question = QUESTION
    return config


def caller_says(directory: Path, *parts: str | int) -> Path:
    """RAW mu-law for sipp: Piper saying each string, silence for each number of milliseconds."""
    texts = [part for part in parts if isinstance(part, str)]
    spoken = iter(neural(texts, 8000))
    pcm = b"".join(next(spoken) if isinstance(part, str) else silence(part, 8000) for part in parts)
    path = directory / f"caller-{abs(hash(parts)) % 10**8}.pcmu"
    path.write_bytes(ulaw_encode(pcm))
    return path


async def call_through_tap(server: SipServer, directory: Path, audio: Path, agent_finally: str) -> tuple[WireTap, str]:
    """Place the call through a wire tap, wait until the agent has said `agent_finally`, hang up; returns the
    tap (both directions' packets) and the session id."""
    with WireTap(("127.0.0.1", server.port)) as tap:
        scenario = render(directory, media=stream(audio), ending=WAIT_FOR_BYE, media_port=tap.media_port)
        scenario.write_text(scenario.read_text().replace(";branch=[branch]", ";branch=[branch];rport"))
        sipp = asyncio.create_task(run_sipp(directory, scenario, f"127.0.0.1:{tap.sip_port}", timeout=120))
        (session,) = await server.wait_live(timeout=60)
        await agent_said(session, agent_finally, timeout=90)
        await asyncio.sleep(0.3)  # the reply's last packets reach the tap
        await server.hang_up(session)
        (await sipp).check()
    return tap, session.id


def channels(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with wave.open(str(path)) as wav:
        assert wav.getnchannels() == 2 and wav.getframerate() == 8000
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    return samples[:, 0].copy(), samples[:, 1].copy()


async def heard(whisper: WhisperSpeechToText, samples: np.ndarray) -> str:
    return (await whisper.transcribe(loud_part(samples.astype("<i2").tobytes()), 8000)).lower()


async def test_a_caller_who_says_no_is_not_recorded_at_all(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="voicegate.internal.recording.call")
    config = recording_config(tmp_path)
    server = await make_server(stt=whisper, config=config, model=RecordingModel(REPLY))
    audio = caller_says(tmp_path, 5000, "No, thank you.", 4000)
    await call_through_tap(server, tmp_path, audio, "not be recorded")
    (session,) = await server.wait_ended()
    directory = config.data_dir / "recordings"
    assert not directory.exists() or list(directory.iterdir()) == []
    outcomes = [getattr(r, "consent", "") for r in caplog.records if r.getMessage() == "call recording consent"]
    assert outcomes == ["pending", "declined"], outcomes
    said = [e.text for e in session.conversation.transcript.entries() if e.role == "agent"]
    assert said[0] == QUESTION and said[1] == config.recording.declined_reply, said


async def test_a_caller_who_says_yes_is_recorded_in_stereo_aligned_and_delete_removes_it(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    config = recording_config(tmp_path)
    server = await make_server(stt=whisper, config=config, model=RecordingModel(REPLY))
    audio = caller_says(tmp_path, 5000, "Yes, you may.", 6000, REQUEST, 2000)
    tap, session_id = await call_through_tap(server, tmp_path, audio, "confirmed")
    await server.wait_ended()
    directory = config.data_dir / "recordings"
    sidecar = directory / f"{session_id}.json"
    for _ in range(200):  # the writer thread finishes the file just after the hang-up
        if sidecar.exists() and json.loads(sidecar.read_text())["ended_at"]:
            break
        await asyncio.sleep(0.05)
    info = json.loads(sidecar.read_text())
    assert info["consent"] == "granted" and info["call_id"] == tap.call_id and info["transport"] == "sip"
    assert len(info["owner_key"]) == 64 and CALLER not in sidecar.read_text()
    left, right = channels(directory / info["file"])

    # Whisper hears the caller's request on the left only, and the agent's words on the right only.
    on_left, on_right = await heard(whisper, left), await heard(whisper, right)
    assert "table" in on_left and "friday" in on_left and "confirm" not in on_left, on_left
    assert "confirmed" in on_right and "recorded" in on_right and "friday" not in on_right, on_right
    assert "may i record" not in on_right  # the question came before the yes: not recorded

    # Aligned on the call's clock: each channel found in its own direction's wire audio.
    measured = alignment(left, right, wire_audio((h.at, h.data) for h in tap.caller),
                         wire_audio((h.at, h.data) for h in tap.reply))
    print(f"caller channel behind the agent's by {measured.misalignment_ms:.1f} ms "
          f"(matches {measured.caller_match:.3f} / {measured.agent_match:.3f})")
    assert measured.caller_match > 0.9 and measured.agent_match > 0.9, measured
    assert abs(measured.misalignment_ms) <= ALIGNED_MS, measured

    # The caller's erasure, from another process, takes the recording with it and names it.
    config_file = tmp_path / "cli.toml"
    config_file.write_text(f'[server]\ndata_dir = "{config.data_dir}"\n\n[memory]\nprovider = "markdown"\n')
    done = await asyncio.to_thread(run_cli, "memory", "delete", "--caller", f"sip:{CALLER}", "--yes",
                                   "--config", str(config_file))
    assert done.returncode == 0, done.stderr
    assert "call recordings (files): 1 removed" in done.stdout and info["file"] in done.stdout, done.stdout
    assert not (directory / info["file"]).exists() and not sidecar.exists()
