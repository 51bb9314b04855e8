"""`voicegate talk FILE.wav ...`: one conversation through the real pipeline, a file per caller turn.

Each file is played to the pipeline as the caller's speech (at real-time pace, as a phone would), the
agent answers, and the transcript and per-turn timings are printed. `--out` keeps the agent's audio.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from voicegate.internal.audio.resample import resample
from voicegate.internal.config import Config
from voicegate.internal.event_envelope import Event
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.pipeline.events import ReleaseEvent, StateEvent, TimingEvent, TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.session.session import Session
from voicegate.internal.tts.wav import pcm_to_wav, wav_to_pcm
from voicegate.server.providers import build_model, build_services, build_stt, build_tts, new_conversation_factory

TRAILING_SILENCE_MS = 800


class PrintingSink:
    """Prints the conversation as it was answered: the caller's words once per turn, as the agent took them
    (a fragment that the whole turn's transcript replaced is not a line of its own), then the agent's."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._caller: list[str] = []  # the caller's words since their last printed line

    def emit(self, event: Event) -> None:
        if isinstance(event, TranscriptEvent) and event.final and event.role == "user":
            if event.replaces:
                self._caller = []
            self._caller.append(event.text)
        elif isinstance(event, ReleaseEvent):
            self._print_caller()
        elif isinstance(event, TranscriptEvent) and event.final:
            self._print_caller()
            print(f"agent : {event.text}", flush=True)
        elif isinstance(event, TimingEvent):
            self.timings[event.stage] = event.ms
        elif isinstance(event, StateEvent) and event.state == "listening" and self.timings:
            parts = ", ".join(f"{stage} {ms:.0f} ms" for stage, ms in self.timings.items())
            print(f"        [{parts}]", flush=True)
            self.timings = {}

    def _print_caller(self) -> None:
        if self._caller:
            print(f"caller: {' '.join(self._caller)}", flush=True)
            self._caller = []


def load_caller_audio(path: Path, rate: int) -> bytes:
    pcm, source_rate = wav_to_pcm(path.read_bytes())
    return resample(pcm, source_rate, rate)


async def talk(config: Config, files: list[Path], out: Path | None, speed: float) -> int:
    config.pipeline.debug = True
    stt, tts, model = build_stt(config), build_tts(config), build_model(config)
    for engine in (stt, tts):
        warm_up = getattr(engine, "warm_up", None)
        if warm_up is not None:
            await warm_up()
    services = build_services(config, stt, tts, model)
    session = Session(CallerIdentity.anonymous("voicegate talk"), "talk",
                      new_conversation_factory(config, model)())
    ended = asyncio.Event()

    async def hangup() -> None:
        ended.set()

    session.hangup = hangup
    rate = config.pipeline.sample_rate
    pipeline = VoicePipeline(session, services, rate, PrintingSink())
    try:
        async with LocalCall(pipeline, speed=speed) as call:
            await call.wait_agent_quiet(300)
            for path in files:
                if ended.is_set():
                    break
                call.say(load_caller_audio(path, rate) + bytes(rate * TRAILING_SILENCE_MS // 1000 * 2))
                await call.wait_caller_done()
                await call.wait_agent_quiet(600)
        if out is not None:
            await asyncio.to_thread(out.write_bytes, pcm_to_wav(bytes(call.agent_audio), rate))
            print(f"agent audio written to {out}")
    finally:
        await asyncio.gather(stt.aclose(), tts.aclose(), model.aclose(), return_exceptions=True)
    if ended.is_set():
        print("(the agent ended the call)")
    return 0


def run_talk(config: Config, files: list[str], out: str | None, speed: float) -> int:
    paths = [Path(f) for f in files]
    for path in paths:
        if not path.is_file():
            print(f"voicegate talk: no such file: {path}", file=sys.stderr)
            return 2
        try:
            wav_to_pcm(path.read_bytes())
        except ValueError as exc:
            print(f"voicegate talk: {path}: {exc}", file=sys.stderr)
            return 2
    return asyncio.run(talk(config, paths, Path(out) if out else None, speed))


def run_mic(config: Config) -> int:
    """Live conversation through the microphone and speakers, using sox's `rec` and `play`."""
    import shutil

    if shutil.which("rec") is None or shutil.which("play") is None:
        print("voicegate talk --mic: needs sox's `rec` and `play` (apt-get install sox)", file=sys.stderr)
        return 2
    return asyncio.run(_mic(config))


async def _mic(config: Config) -> int:
    rate = config.pipeline.sample_rate
    raw = ["-q", "-t", "raw", "-r", str(rate), "-b", "16", "-c", "1", "-e", "signed-integer"]
    recorder = await asyncio.create_subprocess_exec("rec", *raw, "-", stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
    player = await asyncio.create_subprocess_exec("play", *raw, "-", stdin=asyncio.subprocess.PIPE,
                                                  stderr=asyncio.subprocess.DEVNULL)
    assert recorder.stdout is not None and player.stdin is not None
    try:
        first = await asyncio.wait_for(recorder.stdout.read(rate // 50 * 2), 3)
    except TimeoutError:
        first = b""
    if not first:
        error = (await recorder.stderr.read()).decode(errors="replace").strip() if recorder.stderr else ""
        print(f"voicegate talk --mic: no microphone ({error or 'no audio from rec'})", file=sys.stderr)
        recorder.kill()
        player.kill()
        return 2
    stt, tts, model = build_stt(config), build_tts(config), build_model(config)
    services = build_services(config, stt, tts, model)
    session = Session(CallerIdentity.anonymous("voicegate talk"), "talk", new_conversation_factory(config, model)())
    pipeline = VoicePipeline(session, services, rate, PrintingSink())
    await pipeline.start()
    frame = rate // 50 * 2
    print("Talking; Ctrl-C ends.", flush=True)
    try:
        while chunk := await recorder.stdout.readexactly(frame):
            pipeline.push_audio(chunk)
            player.stdin.write(pipeline.pull_audio() or bytes(frame))
    except (asyncio.IncompleteReadError, KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        await pipeline.close()
        recorder.kill()
        player.kill()
    return 0
