"""Turn-taking: does a caller who pauses mid-sentence get answered half-way, and how long does a caller who
has finished wait for the turn to be released?

    .venv/bin/python bench/turns.py [--stt whisper|pocketsphinx] [--vad energy|webrtc] [--noise none,white]

It builds its own dialogues, spoken by Piper's neural voice and delivered as a phone delivers them (8 kHz
through G.711): support-line sentences with a pause of 0.5, 1.0 or 1.5 s spliced in where a person
would pause (inside a phone number, an address, a list), and complete questions. The pause is cut into
the whole sentence between two words (Whisper's word timestamps; the quietest point near the mark
where they cannot place it), so the words before it keep
the prosody of a sentence that goes on (synthesising the first half on its own gives it a final fall,
which no caller's half-sentence has). Each dialogue runs through the real pipeline (VAD, recogniser,
turn buffer, the local agent) on a 20 ms clock, clean and with white noise at 10 dB SNR.

- Premature end of turn: a paused sentence answered as more than one turn.
- Turn released: from the end of the caller's speech to the turn's release (the agent starts thinking),
  for complete questions.
This is the baseline for issue 16 (a neural VAD and an end-of-turn model); barge-in cases, babble noise
and the other configurations come with it. Known weakness: where the timestamps cannot place the mark, the
quietest point near it is sometimes inside a word (a stop consonant).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import percentiles, progress, save, table
from internal.audio.g711 import ulaw_decode, ulaw_encode
from internal.audio.resample import resample
from internal.config import load_config
from internal.config.providers import PiperConfig

RATE = 8000
# "|" marks where the caller pauses.
PAUSED = [
    "My phone number is five five five | one two three, four five six seven.",
    "My account number is four two seven | nine eight one.",
    "I'd like to book a table for | four people on Friday.",
    "The address is twelve Oak Street | apartment four.",
    "I want to order two pizzas | a salad and a lemonade.",
    "My date of birth is the third of | March nineteen eighty.",
    "Can you send it to | my office instead?",
    "I need to change | the delivery date of my order.",
]
COMPLETE = [
    "What time do you close on Saturday?",
    "Can you tell me my balance please?",
    "I would like to cancel my subscription.",
    "Where is my parcel?",
    "How much does the premium plan cost?",
    "My name is Maria Lopez.",
    "Is there a branch near the station?",
    "Thank you, that's all.",
]
PAUSES_S = (0.5, 1.0, 1.5)
SNR_DB = 10.0
TAIL_S = 4.0  # silence after the last word: longer than any turn policy waits


@dataclass
class Dialogue:
    kind: str  # "paused" or "complete"
    text: str
    pcm: bytes  # 8 kHz PCM16, G.711 round trip
    speech_end_s: float  # where the caller's last word ends, from the start of `pcm`
    pause_s: float = 0.0
    cut_by: str = ""  # "timestamps" or "energy": how the pause was placed


def g711(pcm16k: bytes) -> bytes:
    return ulaw_decode(ulaw_encode(resample(pcm16k, 16000, RATE)))


def last_speech_end(pcm: bytes, rate: int, floor_dbfs: float = -45.0) -> float:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
    window = rate // 100
    loud = [i for i in range(len(samples) // window)
            if 10 * np.log10(np.mean(samples[i * window:(i + 1) * window] ** 2) / 32768**2 + 1e-12) > floor_dbfs]
    return (loud[-1] + 1) * window / rate if loud else 0.0


def spoken_words(word: str) -> int:
    """How many words a caller said for one of Whisper's: "555-1234" is seven, "12" is one."""
    count = 0
    for group in re.findall(r"[a-z']+|\d+", word.lower()):
        count += len(group) if group.isdigit() and len(group) >= 3 else 1
    return count


def aligned_cut(words: list[Any], before: int, rate: int) -> int | None:
    """A byte offset between the `before`-th and the next spoken word, from Whisper's word timestamps."""
    said = 0
    for index, word in enumerate(words[:-1]):
        said += spoken_words(word.word)
        if said == before:
            return int((word.end + words[index + 1].start) / 2 * rate) * 2
        if said > before:
            return None  # the mark falls inside one of Whisper's words ("555-123-4567")
    return None


def cut_point(pcm: bytes, rate: int, fraction: float) -> int:
    """A byte offset between two words near `fraction` of the speech: the quietest 30 ms within 0.3 s
    (the fallback when the word timestamps cannot place the mark)."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    window = rate * 30 // 1000
    energy = np.array([np.mean(samples[i:i + window] ** 2) for i in range(0, len(samples) - window, window // 3)])
    loud = np.nonzero(energy > energy.max() * 1e-3)[0]
    first, last = (loud[0], loud[-1]) if loud.size else (0, len(energy) - 1)
    guess = int(first + fraction * (last - first))
    reach = int(0.3 * rate / (window // 3))
    low, high = max(first + 1, guess - reach), min(last - 1, guess + reach)
    best = low + int(np.argmin(energy[low:high])) if high > low else guess
    return (best * (window // 3) + window // 2) * 2


async def build_dialogues() -> list[Dialogue]:
    from faster_whisper import WhisperModel

    from internal.stt.whisper_models import resolve_model
    from internal.tts.piper import PiperTextToSpeech

    piper = PiperTextToSpeech(PiperConfig(workers=1))
    with tempfile.TemporaryDirectory() as work:
        aligner = WhisperModel(str(resolve_model("tiny.en", Path(work)).path), device="cpu", compute_type="int8")
    dialogues: list[Dialogue] = []
    lead = bytes(RATE * 2 // 2)  # 0.5 s before the caller speaks
    tail = bytes(int(RATE * TAIL_S) * 2)
    try:
        texts = PAUSED + COMPLETE
        for index, marked in enumerate(texts):
            text = marked.replace(" | ", " ")
            pcm = b"".join([chunk async for chunk in piper.synthesize(text, 16000)])
            if "|" not in marked:
                audio = g711(pcm)
                dialogues.append(Dialogue("complete", text, lead + audio + tail,
                                          0.5 + last_speech_end(audio, RATE)))
            else:
                audio16 = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
                segments, _ = aligner.transcribe(audio16, language="en", word_timestamps=True, beam_size=5)
                words = [w for segment in segments for w in (segment.words or [])]
                cut, cut_by = aligned_cut(words, len(marked.split(" | ")[0].split()), 16000), "timestamps"
                if cut is None:
                    cut, cut_by = cut_point(pcm, 16000, len(marked.split(" | ")[0]) / len(text)), "energy"
                for pause in PAUSES_S:
                    spliced = pcm[:cut] + bytes(int(16000 * pause) * 2) + pcm[cut:]
                    audio = g711(spliced)
                    dialogues.append(Dialogue("paused", text, lead + audio + tail,
                                              0.5 + last_speech_end(audio, RATE), pause, cut_by))
            progress("dialogues", index + 1, len(texts))
    finally:
        await piper.aclose()
    return dialogues


def with_noise(pcm: bytes, seed: int) -> bytes:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    speech = samples[np.abs(samples) > 300]
    rms = float(np.sqrt(np.mean(speech**2))) if speech.size else 1000.0
    noise = np.random.default_rng(seed).normal(0.0, rms / 10 ** (SNR_DB / 20), samples.size)
    return np.clip(samples + noise, -32768, 32767).astype(np.int16).tobytes()


class TimedSink:
    def __init__(self) -> None:
        self.released: list[float] = []
        self.heard: list[str] = []

    def emit(self, event: Any) -> None:
        if event.type == "state" and event.state == "thinking":
            self.released.append(time.monotonic())
        elif event.type == "transcript" and event.role == "user" and event.final:
            self.heard.append(event.text)


async def run_dialogue(config: Any, services: Any, dialogue: Dialogue, pcm: bytes) -> dict[str, Any]:
    from internal.identity import CallerIdentity
    from internal.pipeline.localcall import LocalCall
    from internal.pipeline.pipeline import VoicePipeline
    from internal.pipeline.rolling_summary import RollingSummary
    from internal.session import Conversation, Session

    session = Session(CallerIdentity.anonymous("bench"), "talk", Conversation(RollingSummary(None, 1.0)))
    sink = TimedSink()
    pipeline = VoicePipeline(session, services, RATE, sink)
    async with LocalCall(pipeline) as call:
        await call.ticks_later(1)
        started = time.monotonic()
        call.say(pcm)
        await call.wait_caller_done()
        await call.wait_agent_quiet(300, timeout_s=30)
    speech_end = started + dialogue.speech_end_s
    first = sink.released[0] - speech_end if sink.released else float("nan")
    return {"turns": len(sink.released), "released_after_s": first, "heard": sink.heard}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stt", default="whisper", choices=["whisper", "pocketsphinx"])
    parser.add_argument("--vad", default="energy")
    parser.add_argument("--noise", default="none,white")
    args = parser.parse_args()
    from server.providers import build_model, build_services, build_stt

    dialogues = await build_dialogues()
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-turns-") as work:
        config = load_config(None)
        config.server.data_dir = work
        config.stt.provider = args.stt
        config.tts.provider = "espeak"  # the agent's voice does not matter here; espeak-ng is the cheapest
        config.pipeline.sample_rate = 8000
        config.pipeline.greeting = ""
        config.pipeline.vad = args.vad
        from server.providers import build_tts

        stt, tts, model = build_stt(config), build_tts(config), build_model(config)
        warm_up = getattr(stt, "warm_up", None)
        if warm_up is not None:
            await warm_up()
        services = build_services(config, stt, tts, model)
        results: dict[str, Any] = {}
        try:
            for noise in args.noise.split(","):
                rows: list[dict[str, Any]] = []
                for index, dialogue in enumerate(dialogues):
                    pcm = dialogue.pcm if noise == "none" else with_noise(dialogue.pcm, index)
                    outcome = await run_dialogue(config, services, dialogue, pcm)
                    rows.append({"kind": dialogue.kind, "pause_s": dialogue.pause_s, "text": dialogue.text,
                                 "cut_by": dialogue.cut_by, **outcome})
                    progress(f"noise {noise}", index + 1, len(dialogues))
                paused = [r for r in rows if r["kind"] == "paused"]
                complete = [r for r in rows if r["kind"] == "complete" and r["turns"] >= 1]
                by_pause = {str(p): round(100 * sum(r["turns"] > 1 for r in paused if r["pause_s"] == p)
                                          / max(1, sum(r["pause_s"] == p for r in paused)), 1) for p in PAUSES_S}
                waits = [r["released_after_s"] for r in complete]
                results[noise] = {
                    "premature_pct": round(100 * sum(r["turns"] > 1 for r in paused) / len(paused), 1),
                    "premature_pct_by_pause": by_pause,
                    "released_ms": {k: round(v * 1000) for k, v in percentiles(waits, (50, 95)).items()},
                    "unanswered": sum(r["turns"] == 0 for r in rows),
                    "dialogues": rows,
                }
        finally:
            await asyncio.gather(stt.aclose(), tts.aclose(), model.aclose(), return_exceptions=True)
    print(table([[noise, f"{r['premature_pct']} %", " / ".join(f"{v} %" for v in r["premature_pct_by_pause"].values()),
                  str(r["released_ms"]["p50"]), str(r["released_ms"]["p95"]), str(r["unanswered"])]
                 for noise, r in results.items()],
                ["noise", "premature", "by pause 0.5/1.0/1.5 s", "released p50 ms", "p95 ms", "unanswered"]))
    label = f"turns-{args.stt}-{args.vad}"
    print(f"\nresults: {save(label, {'stt': args.stt, 'vad': args.vad, 'results': results})}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
