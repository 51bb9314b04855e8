"""Pipecat 1.14 as the reference for bench/turns/voice_to_voice.py --reference pipecat: the same caller, the same
turns, over WebRTC, with the models voicegate uses.

Pipecat is installed by the bench into its own virtual environment (bench/.pipecat-venv, git-ignored,
created on first use from PyPI with the versions pinned in PINS), never into the product's. Its bot is this
file run by that environment's Python (`--serve`): an aiohttp server speaking Pipecat's SmallWebRTC
signalling (POST /api/offer, JSON {sdp, type} -> {sdp, type, pc_id}; Pipecat does not speak WHIP), one
pipeline per call:

    SmallWebRTC in -> Whisper tiny.en (voicegate's model directory, int8, CPU)
      -> user aggregator (Silero VAD; Smart Turn v3.2, LocalSmartTurnAnalyzerV3, voicegate's onnx file)
      -> canned agent (one fixed sentence per turn, at once) -> Piper (the joe voice voicegate's caller
      and agent use) -> SmallWebRTC out

Everything else is Pipecat's default (VAD stop 0.2 s, Smart Turn's own thresholds and 3 s timeout, Whisper's
decode settings); the Whisper model is loaded and run once before the bot is ready (voicegate warms its
recogniser up too) and shared by the calls. The bot prints one JSON line per event on stdout
(transcripts, turn released, first audio out) with time.monotonic(), the same clock in both processes on
Linux.

    bench/.pipecat-venv/bin/python bench/turns/pipecat_reference.py --serve --port 8765 --smart-turn F --whisper D \\
        --voice F.onnx
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / "bench" / ".pipecat-venv"
VERSION = "1.14.0"
# Pipecat with what SmallWebRTC (aiortc), Whisper (faster-whisper) and Piper need; Silero and Smart Turn v3
# run on onnxruntime, a core dependency. The shared pieces are pinned to the versions voicegate runs.
PINS = [f"pipecat-ai[webrtc,whisper,piper]=={VERSION}", "aiortc==1.16.0", "av==18.1.0", "faster-whisper==1.2.1",
        "ctranslate2==4.8.5", "piper-tts==1.8.0", "onnxruntime==1.32.0", "numpy==2.4.6"]
ANSWER = "Sure, I can help you with that."  # the canned agent's reply to every turn
READY = "pipecat bot ready"


# ---- the bench's side (voicegate's environment) ----------------------------------------------------


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv(say: Any = print) -> Path:
    """bench/.pipecat-venv with PINS installed (made on first use: a few minutes, ~1 GB); its Python."""
    marker = VENV / "voicegate-pins.json"
    if venv_python().is_file() and marker.is_file() and json.loads(marker.read_text()) == PINS:
        return venv_python()
    base = getattr(sys, "_base_executable", sys.executable)
    if not venv_python().is_file():
        say(f"pipecat reference: creating {VENV.relative_to(REPO)} with {base}")
        subprocess.run([base, "-m", "venv", str(VENV)], check=True)
    say(f"pipecat reference: installing {' '.join(PINS)} from PyPI (first use only)")
    process = subprocess.Popen([str(venv_python()), "-m", "pip", "install", "--progress-bar", "off", *PINS],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(("Collecting", "Installing", "Successfully", "ERROR")):
            say("  " + line.rstrip())
    if process.wait() != 0:
        raise RuntimeError(f"pip install into {VENV} failed (rc {process.returncode}); see the lines above")
    marker.write_text(json.dumps(PINS))
    return venv_python()


def model_files() -> dict[str, str]:
    """voicegate's own model files, for Pipecat to load: Smart Turn v3.2, Whisper tiny.en, Piper joe."""
    import tempfile

    from tests.speech import neural_voice
    from voicegate.internal.stt.whisper_models import resolve_model
    from voicegate.internal.turn.weights import smart_turn_path

    with tempfile.TemporaryDirectory() as work:
        whisper = resolve_model("tiny.en", Path(work)).path
    return {"smart_turn": str(smart_turn_path("", download=False)), "whisper": str(whisper),
            "voice": str(neural_voice())}


class PipecatBot:
    def __init__(self, process: subprocess.Popen[bytes], base_url: str, log: Path, errors: Path) -> None:
        self.process, self.base_url, self.log, self.errors = process, base_url, log, errors

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                entry = json.loads(line)
                if isinstance(entry, dict) and "event" in entry:
                    out.append(entry)
        return out


@contextlib.contextmanager
def pipecat_bot(work: Path, port: int, say: Any = print, timeout_s: float = 240.0) -> Iterator[PipecatBot]:
    python = ensure_venv(say)
    files = model_files()
    log, errors = work / "pipecat.log", work / "pipecat.err"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VOICEGATE_", "PYTHON"))}
    with log.open("wb") as out, errors.open("wb") as err:
        process = subprocess.Popen([str(python), str(Path(__file__).resolve()), "--serve", "--port", str(port),
                                    "--smart-turn", files["smart_turn"], "--whisper", files["whisper"],
                                    "--voice", files["voice"]], cwd=work, env=env, stdout=out, stderr=err)
    bot = PipecatBot(process, f"http://127.0.0.1:{port}", log, errors)
    try:
        deadline = time.monotonic() + timeout_s
        while READY not in errors.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Pipecat bot did not start (rc {process.poll()}):\n"
                                   f"{errors.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield bot
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---- the bot (Pipecat's environment) -----------------------------------------------------------------


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


def serve(args: argparse.Namespace) -> None:  # pragma: no cover - runs in bench/.pipecat-venv
    import asyncio

    import aioice.ice
    from aiohttp import web
    from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.frames.frames import (
        BotStartedSpeakingFrame,
        Frame,
        LLMContextFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TranscriptionFrame,
        UserStoppedSpeakingFrame,
        VADUserStoppedSpeakingFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.piper.tts import PiperTTSService
    from pipecat.services.whisper.stt import WhisperSTTService
    from pipecat.transports.base_transport import TransportParams
    from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection
    from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport
    from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy
    from pipecat.turns.user_turn_strategies import UserTurnStrategies

    # The caller offers 127.0.0.1 only (aioice leaves loopback out by default): offer the same here.
    def loopback(*_args: Any, **_kwargs: Any) -> list[str]:
        return ["127.0.0.1"]

    aioice.ice.get_host_addresses = loopback  # type: ignore[assignment]

    class Watch(FrameProcessor):
        """Passes every frame on; prints the ones that time a turn."""

        def __init__(self, where: str) -> None:
            super().__init__()
            self.where = where

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TranscriptionFrame):
                emit("transcript", text=frame.text)
            elif isinstance(frame, VADUserStoppedSpeakingFrame) and self.where == "stt":
                emit("vad_stopped")  # Silero's stop (stop_secs of silence)
            elif isinstance(frame, UserStoppedSpeakingFrame) and self.where == "stt":
                emit("user_turn_ended")  # the user aggregator's verdict (Smart Turn, or its timeout)
            elif isinstance(frame, BotStartedSpeakingFrame) and self.where == "out":
                emit("bot_started")
            await self.push_frame(frame, direction)

    class CannedAgent(FrameProcessor):
        """An instant agent: the same sentence for every turn the user aggregator releases."""

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, LLMContextFrame):
                emit("turn_released")
                await self.push_frame(LLMFullResponseStartFrame())
                await self.push_frame(LLMTextFrame(ANSWER))
                await self.push_frame(LLMFullResponseEndFrame())
            else:
                await self.push_frame(frame, direction)

    # Whisper loads in the service's constructor, on the event loop, when a call comes in: load it (and run
    # its first decode) once before the bot says it is ready, as voicegate warms its recogniser up, and hand
    # every call's service the same model.
    import numpy as np
    from faster_whisper import WhisperModel

    whisper = WhisperModel(args.whisper, device="cpu", compute_type="int8")
    list(whisper.transcribe(np.zeros(16000, dtype=np.float32), language="en")[0])

    class WarmWhisper(WhisperSTTService):
        def _load(self) -> None:
            self._model = whisper

    voice = Path(args.voice)
    tts = PiperTTSService(download_dir=voice.parent, settings=PiperTTSService.Settings(voice=voice.stem))
    stt_settings = WhisperSTTService.Settings(model=args.whisper)
    tasks: set[asyncio.Task[None]] = set()

    async def run_bot(connection: SmallWebRTCConnection) -> None:
        transport = SmallWebRTCTransport(webrtc_connection=connection,
                                         params=TransportParams(audio_in_enabled=True, audio_out_enabled=True))
        stt = WarmWhisper(device="cpu", compute_type="int8", settings=stt_settings)
        turn = LocalSmartTurnAnalyzerV3(smart_turn_model_path=args.smart_turn)
        user, assistant = LLMContextAggregatorPair(LLMContext(), user_params=LLMUserAggregatorParams(
            vad_analyzer=SileroVADAnalyzer(),
            user_turn_strategies=UserTurnStrategies(stop=[TurnAnalyzerUserTurnStopStrategy(turn_analyzer=turn)])))
        pipeline = Pipeline([transport.input(), stt, Watch("stt"), user, CannedAgent(), tts, transport.output(),
                             Watch("out"), assistant])
        task = PipelineTask(pipeline, params=PipelineParams(audio_in_sample_rate=16000))

        @transport.event_handler("on_client_disconnected")
        async def gone(_transport: Any, _client: Any) -> None:
            await task.cancel()

        await PipelineRunner(handle_sigint=False).run(task)

    async def offer(request: web.Request) -> web.Response:
        body = await request.json()
        connection = SmallWebRTCConnection(ice_servers=[])
        await connection.initialize(sdp=body["sdp"], type=body["type"])
        bot = asyncio.create_task(run_bot(connection))
        tasks.add(bot)
        bot.add_done_callback(tasks.discard)
        return web.json_response(connection.get_answer())

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/api/offer", offer)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", args.port).start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print(READY, file=sys.stderr, flush=True)
        await stop.wait()
        for bot in list(tasks):
            bot.cancel()
        await runner.cleanup()

    asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", action="store_true", help="run the bot (in bench/.pipecat-venv)")
    parser.add_argument("--install", action="store_true", help="only create bench/.pipecat-venv")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--smart-turn", default="")
    parser.add_argument("--whisper", default="")
    parser.add_argument("--voice", default="")
    args = parser.parse_args()
    if args.serve:
        serve(args)
    else:
        sys.path.insert(0, str(REPO))
        ensure_venv()
    return 0


if __name__ == "__main__":
    sys.exit(main())
