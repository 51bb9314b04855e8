"""Turn-taking: is a caller who pauses mid-sentence answered half-way, how long does a caller who has
finished wait, and does the agent stop for a real interruption but not for "mm-hm"?

    .venv/bin/python bench/turns.py [--stt whisper|pocketsphinx] [--configs energy,silero,smart_turn,rnnoise]
                                    [--noise none,white,babble] [--parallel 3] [--set pipeline.key=value]

It builds its own dialogues, spoken by Piper's neural voice and delivered as a phone delivers them (8 kHz
through G.711):
- paused: support-line sentences with a pause of 0.5, 1.0 or 1.5 s spliced in where a person would pause
  (inside a phone number, an address, a list). The pause is cut into the whole sentence between two words
  (Whisper's word timestamps; the quietest point near the mark where they cannot place it), so the words
  before it keep the prosody of a sentence that goes on (synthesising the first half on its own gives it a
  final fall, which no caller's half-sentence has);
- complete: whole questions and statements;
- backchannel: a question, then while the agent's (long) reply plays, "mm-hm", "yeah", "okay" ...;
- interruption: the same, with "wait, stop, ..." or "sorry, I need to change the date".
Each dialogue runs through the real pipeline (VAD, recogniser, end-of-turn model, turn buffer) on a 20 ms
clock, clean, with white noise and with babble (six other Piper sentences on top of each other) at 10 dB
SNR. The agent is a stub that answers at once (what it says is not measured), spoken by espeak-ng.

Per configuration (energy VAD; Silero VAD; Silero + Smart Turn; the same with RNNoise):
- premature end of turn: a paused sentence answered as more than one turn;
- turn released: from the end of the caller's speech to the turn's release (the agent starts thinking),
  for complete questions (p50/p95);
- false barge-in: the agent's reply interrupted by a backchannel (or by the noise);
- missed barge-in: a real interruption that did not stop the agent within 2.5 s.
Known weakness: where the timestamps cannot place the mark, the quietest point near it is sometimes inside
a word (a stop consonant).
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

from bench.common import percentiles, pipeline_settings, progress, save, table
from internal.audio.g711 import ulaw_decode, ulaw_encode
from internal.audio.resample import resample
from internal.config import load_config
from internal.config.providers import PiperConfig
from tests.fakes.models import RecordingModel

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
BACKCHANNELS = ["Mm-hm.", "Yeah.", "Okay.", "Right.", "Uh-huh.", "I see."]
INTERRUPTIONS = [
    "Wait, stop, that is not what I asked.",
    "Sorry, I need to change the date.",
    "No, I meant the other account.",
    "Hold on, can you repeat the price?",
    "Actually, cancel that order please.",
    "Stop, I want to speak to a person.",
]
BARGE_QUESTION = "Can you tell me about your opening hours?"
BABBLE = [
    "The weather was lovely on the coast this weekend.",
    "We should pick up some bread and milk on the way home.",
    "Did you see the match last night, it went to penalties.",
    "The meeting moved to Thursday afternoon at three.",
    "My sister is visiting from Canada next month.",
    "They are painting the kitchen a pale shade of green.",
]
LONG_REPLY = ("Our opening hours are nine in the morning to six in the evening on weekdays, and ten to four on "
              "Saturdays. On Sundays and public holidays we are closed, but the phone line stays open for "
              "urgent questions, and you can always write to us through the website, where most answers "
              "come back within one working day.")
PAUSES_S = (0.5, 1.0, 1.5)
SNR_DB = 10.0
TAIL_S = 4.0  # silence after the last word: longer than any turn policy waits
BARGE_AT_S = 3.0  # the backchannel / interruption starts this long after the question ends
BARGE_WINDOW_S = 2.5  # an interruption must stop the agent within this long
CONFIGS: dict[str, dict[str, Any]] = {
    "energy": {"vad": "energy", "end_of_turn": "off"},
    "silero": {"vad": "silero", "end_of_turn": "off"},
    "smart_turn": {"vad": "silero", "end_of_turn": "smart_turn"},
    "energy_smart_turn": {"vad": "energy", "end_of_turn": "smart_turn"},
    "rnnoise": {"vad": "silero", "end_of_turn": "smart_turn", "noise_suppression": "rnnoise"},
}


@dataclass
class Dialogue:
    kind: str  # "paused" or "complete"
    text: str
    pcm: bytes  # 8 kHz PCM16, G.711 round trip
    speech_end_s: float  # where the caller's last word ends, from the start of `pcm`
    pause_s: float = 0.0
    cut_by: str = ""  # "timestamps" or "energy": how the pause was placed
    barge_s: float = 0.0  # backchannel / interruption: where it starts in `pcm`


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


async def build_dialogues() -> tuple[list[Dialogue], bytes]:
    """The dialogues, and a babble track (8 kHz) to mix under them."""
    from faster_whisper import WhisperModel

    from internal.stt.whisper_models import resolve_model
    from internal.tts.piper import PiperTextToSpeech

    piper = PiperTextToSpeech(PiperConfig(workers=1))
    with tempfile.TemporaryDirectory() as work:
        aligner = WhisperModel(str(resolve_model("tiny.en", Path(work)).path), device="cpu", compute_type="int8")
    dialogues: list[Dialogue] = []
    lead = bytes(RATE * 2 // 2)  # 0.5 s before the caller speaks
    tail = bytes(int(RATE * TAIL_S) * 2)

    async def speak(text: str) -> bytes:
        return b"".join([chunk async for chunk in piper.synthesize(text, 16000)])

    try:
        texts = PAUSED + COMPLETE
        steps = len(texts) + len(BACKCHANNELS) + len(INTERRUPTIONS) + len(BABBLE)
        done = 0
        for marked in texts:
            text = marked.replace(" | ", " ")
            pcm = await speak(text)
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
            done += 1
            progress("dialogues", done, steps)
        question = g711(await speak(BARGE_QUESTION))
        question_end = 0.5 + last_speech_end(question, RATE)
        gap = bytes(int(RATE * (question_end + BARGE_AT_S)) * 2 - len(lead) - len(question))
        for kind, lines in (("backchannel", BACKCHANNELS), ("interruption", INTERRUPTIONS)):
            for line in lines:
                said = g711(await speak(line))
                start = question_end + BARGE_AT_S
                dialogues.append(Dialogue(kind, line, lead + question + gap + said + tail + tail,
                                          start + last_speech_end(said, RATE), barge_s=start))
                done += 1
                progress("dialogues", done, steps)
        voices = []
        for line in BABBLE:
            voices.append(np.frombuffer(g711(await speak(line)), dtype=np.int16).astype(np.float64))
            done += 1
            progress("dialogues", done, steps)
    finally:
        await piper.aclose()
    return dialogues, babble_track(voices)


async def cached_dialogues() -> tuple[list[Dialogue], bytes]:
    """build_dialogues(), kept in the temp directory between runs (keyed on every text and the rate)."""
    import hashlib
    import pickle

    key = hashlib.sha256(repr((PAUSED, COMPLETE, BACKCHANNELS, INTERRUPTIONS, BARGE_QUESTION, BABBLE, PAUSES_S,
                               TAIL_S, BARGE_AT_S, RATE)).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"voicegate-bench-turns-{key}.pickle"
    if path.is_file():
        with path.open("rb") as handle:
            cached: tuple[list[Dialogue], bytes] = pickle.load(handle)
        return cached
    built = await build_dialogues()
    with path.open("wb") as handle:
        pickle.dump(built, handle)
    return built


def babble_track(voices: list[np.ndarray], seconds: float = 40.0) -> bytes:
    """Several talkers at once: each sentence looped from its own offset, summed, at a common level."""
    length = int(RATE * seconds)
    mix = np.zeros(length)
    for index, voice in enumerate(voices):
        looped = np.resize(np.concatenate((voice, np.zeros(RATE // 4))), length + index * RATE)
        mix += looped[index * RATE // 2: index * RATE // 2 + length]
    mix *= 8000.0 / max(1.0, float(np.sqrt(np.mean(mix**2))))
    return np.clip(mix, -32768, 32767).astype(np.int16).tobytes()


def speech_rms(samples: np.ndarray) -> float:
    speech = samples[np.abs(samples) > 300]
    return float(np.sqrt(np.mean(speech**2))) if speech.size else 1000.0


def with_noise(pcm: bytes, kind: str, seed: int, babble: bytes) -> bytes:
    """The caller's audio with white noise or babble at SNR_DB under the caller's speech level."""
    if kind == "none":
        return pcm
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    rng = np.random.default_rng(seed)
    if kind == "white":
        noise = rng.normal(0.0, 1.0, samples.size)
    else:
        track = np.frombuffer(babble, dtype=np.int16).astype(np.float64)
        start = int(rng.integers(0, max(1, track.size - samples.size)))
        noise = np.resize(track[start:], samples.size)
    noise *= speech_rms(samples) / 10 ** (SNR_DB / 20) / max(1e-9, float(np.sqrt(np.mean(noise**2))))
    return np.clip(samples + noise, -32768, 32767).astype(np.int16).tobytes()


class TimedSink:
    def __init__(self) -> None:
        self.released: list[float] = []
        self.speaking: list[float] = []
        self.interrupted: list[float] = []
        self.heard: list[str] = []

    def emit(self, event: Any) -> None:
        now = time.monotonic()
        if event.type == "state" and event.state == "thinking":
            self.released.append(now)
        elif event.type == "state" and event.state == "speaking":
            self.speaking.append(now)
        elif event.type == "response" and getattr(event, "interrupted", False):
            self.interrupted.append(now)
        elif event.type == "transcript" and event.role == "user" and event.final:
            self.heard.append(event.text)


async def run_dialogue(services: Any, dialogue: Dialogue, pcm: bytes) -> dict[str, Any]:
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
        await call.wait_agent_quiet(300, timeout_s=40)
    outcome: dict[str, Any] = {"turns": len(sink.released), "heard": sink.heard}
    if dialogue.kind in ("paused", "complete"):
        speech_end = started + dialogue.speech_end_s
        outcome["released_after_s"] = sink.released[0] - speech_end if sink.released else float("nan")
    else:
        barge = started + dialogue.barge_s
        outcome["agent_speaking"] = bool(sink.speaking) and sink.speaking[0] < barge
        outcome["interrupted"] = any(barge - BARGE_AT_S < t < barge + BARGE_WINDOW_S for t in sink.interrupted)
    return outcome


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    paused = [r for r in rows if r["kind"] == "paused"]
    complete = [r for r in rows if r["kind"] == "complete" and r["turns"] >= 1]
    by_pause = {str(p): round(100 * sum(r["turns"] > 1 for r in paused if r["pause_s"] == p)
                              / max(1, sum(r["pause_s"] == p for r in paused)), 1) for p in PAUSES_S}
    waits = [r["released_after_s"] for r in complete]
    backchannels = [r for r in rows if r["kind"] == "backchannel" and r["agent_speaking"]]
    interruptions = [r for r in rows if r["kind"] == "interruption" and r["agent_speaking"]]
    return {
        "premature_pct": round(100 * sum(r["turns"] > 1 for r in paused) / max(1, len(paused)), 1),
        "premature_pct_by_pause": by_pause,
        "released_ms": {k: round(v * 1000) for k, v in percentiles(waits, (50, 95)).items()},
        "false_barge_in_pct": round(100 * sum(r["interrupted"] for r in backchannels) / max(1, len(backchannels)), 1),
        "missed_barge_in_pct": round(100 * sum(not r["interrupted"] for r in interruptions)
                                     / max(1, len(interruptions)), 1),
        "barge_cases": len(backchannels) + len(interruptions),
        "unanswered": sum(r["turns"] == 0 for r in rows if r["kind"] in ("paused", "complete")),
        "dialogues": rows,
    }


async def run_config(name: str, args: argparse.Namespace, dialogues: list[Dialogue], babble: bytes,
                     extra: dict[str, Any]) -> dict[str, Any]:
    from server.providers import build_services, build_stt, build_tts

    with tempfile.TemporaryDirectory(prefix="voicegate-bench-turns-") as work:
        config = load_config(None)
        config.server.data_dir = work
        config.stt.provider = args.stt
        config.tts.provider = "espeak"  # the agent's voice does not matter here; espeak-ng is the cheapest
        config.pipeline.sample_rate = 8000  # RATE
        config.pipeline.greeting = ""
        for key, value in {**CONFIGS[name], **extra}.items():
            setattr(config.pipeline, key, value)
        stt, tts = build_stt(config), build_tts(config)
        warm_up = getattr(stt, "warm_up", None)
        if warm_up is not None:
            await warm_up()
        short = build_services(config, stt, tts, RecordingModel("Okay."))  # type: ignore[arg-type]
        long = build_services(config, stt, tts, RecordingModel(LONG_REPLY))  # type: ignore[arg-type]
        results: dict[str, Any] = {}
        gate = asyncio.Semaphore(args.parallel)
        try:
            for noise in args.noise.split(","):
                done = 0

                async def one(index: int, dialogue: Dialogue, noise: str = noise) -> dict[str, Any]:
                    nonlocal done
                    async with gate:
                        services = long if dialogue.kind in ("backchannel", "interruption") else short
                        outcome = await run_dialogue(services, dialogue, with_noise(dialogue.pcm, noise, index, babble))
                    done += 1
                    progress(f"{name} / {noise}", done, len(dialogues))
                    return {"kind": dialogue.kind, "pause_s": dialogue.pause_s, "text": dialogue.text,
                            "cut_by": dialogue.cut_by, **outcome}

                rows = await asyncio.gather(*(one(i, d) for i, d in enumerate(dialogues)))
                results[noise] = summarise(list(rows))
        finally:
            await asyncio.gather(stt.aclose(), tts.aclose(), return_exceptions=True)
        return {"pipeline": {**CONFIGS[name], **extra}, "results": results}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stt", default="whisper", choices=["whisper", "pocketsphinx"])
    parser.add_argument("--configs", default="energy,silero,smart_turn,rnnoise")
    parser.add_argument("--noise", default="none,white,babble")
    parser.add_argument("--parallel", type=int, default=3, help="dialogues run at once (as concurrent calls)")
    parser.add_argument("--set", action="append", default=[], metavar="pipeline.KEY=VALUE")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    extra = pipeline_settings(args.set)
    names = [n for n in args.configs.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"--configs: unknown {unknown}; choose from {sorted(CONFIGS)}")
    if "rnnoise" in names:
        from internal.audio.denoise import rnnoise_available

        reason = rnnoise_available()
        if reason:
            print(f"rnnoise skipped: {reason}", file=sys.stderr)
            names.remove("rnnoise")
    dialogues, babble = await cached_dialogues()
    report: dict[str, Any] = {}
    for name in names:
        report[name] = await run_config(name, args, dialogues, babble, extra)
    rows = []
    for name, outcome in report.items():
        for noise, r in outcome["results"].items():
            by_pause = " / ".join(f"{v} %" for v in r["premature_pct_by_pause"].values())
            rows.append([name, noise, f"{r['premature_pct']} %", by_pause,
                         str(r["released_ms"]["p50"]), str(r["released_ms"]["p95"]), f"{r['false_barge_in_pct']} %",
                         f"{r['missed_barge_in_pct']} %", str(r["unanswered"])])
    print(table(rows, ["config", "noise", "premature", "by pause 0.5/1.0/1.5 s", "released p50 ms", "p95 ms",
                       "false barge-in", "missed barge-in", "unanswered"]))
    label = args.label or f"turns-{args.stt}"
    print(f"\nresults: {save(label, {'stt': args.stt, 'set': extra, 'configs': report})}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
