"""Offline recognition: word errors, cost, the caller's wait, and callers per core, per installed engine.

    .venv/bin/python -m bench.speech.recognition [--engines pocketsphinx,tiny.en,tiny.en@2,base] [--level-seconds 20]
    (noisy lines: bench/speech/noisy_lines.py, its own runner)

It builds its own speech set: support-line sentences spoken by Piper's neural voice and by espeak-ng,
each at 16 kHz and at 8 kHz through G.711 mu-law (what a phone call delivers), with 300 ms of silence
either side as the VAD would cut them. Each engine runs as the server runs it, in one worker process
(one core), on the product's default settings.

- WER: word errors over reference words (case, punctuation ignored; digits spelled out).
- RTF: decode time over utterance length, one utterance at a time.
- End of speech -> transcript: from the stream's end_of_speech() (the VAD closing the utterance) to
  its final transcript, on an idle engine. The VAD's offset (300 ms of quiet) comes before it; the
  pipeline's quiet window (600 ms) runs at the same time as it.
- Utterances per second with the worker full: 16 callers' utterances waiting at once (batched when the
  engine batches: `tiny.en/b1` decodes each alone), best of 3.
- Callers per core: N simulated callers, each talking 30 % of the time (an utterance from the set,
  then 2.3x its length of silence, jittered), all on the one worker; the largest N whose p95 wait
  stays within 1.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import percentiles, progress, save, table, word_errors
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.config.providers import EspeakConfig, PiperConfig, PocketsphinxConfig, WhisperConfig

SENTENCES = [
    "I would like to check the balance on my account please.",
    "My phone number is five five five, one two three, four five six seven.",
    "Can you tell me when my order will arrive?",
    "I need to change the address on my account.",
    "What time do you close on Saturday?",
    "I'd like to book a table for four people on Friday.",
    "My card was declined at the store yesterday.",
    "Please cancel my subscription at the end of the month.",
    "Could you send me a copy of my last invoice?",
    "The internet has been down since this morning.",
    "I want to speak to someone about a refund.",
    "How much does the premium plan cost per month?",
    "My package arrived damaged and I want a replacement.",
    "Can I pay my bill by bank transfer?",
    "I forgot my password and cannot log in.",
    "Is there a branch near the train station?",
    "My account number is four two seven nine eight one.",
    "I moved to a new apartment last week.",
    "Please call me back tomorrow afternoon.",
    "The app keeps crashing when I open it.",
    "Yes, that's right.",
    "No thanks, that's all.",
    "Hello, is anyone there?",
    "I'd like to talk to a person.",
    "Can you repeat that please?",
    "My name is Maria Lopez.",
    "I was charged for something I didn't buy.",
    "When is my next payment due?",
    "Do you have any appointments on Thursday?",
    "Thank you, goodbye.",
]
PAD_MS = 300
TALK_SHARE = 0.3
WAIT_LIMIT_S = 1.5
LEVELS = [4, 8, 12, 16, 24, 32, 48, 64]
NOT_MEASURED: dict[str, Any] = {**{f"wer_{v}": "-" for v in ("piper_8k", "piper_16k", "espeak_8k", "espeak_16k")},
                                "rtf": "-", "eos_to_transcript_ms": {"p50": "-", "p95": "-"}}


async def synthesise(engine: Any, rate: int, timing: dict[str, Any]) -> list[bytes]:
    """The speech set in one voice at one rate, timing the engine's first audio and its RTF on the way."""
    clips: list[bytes] = []
    first: list[float] = []
    busy = audio = 0.0
    for index, text in enumerate(SENTENCES):
        began = time.perf_counter()
        chunks: list[bytes] = []
        async for chunk in engine.synthesize(text, rate):
            if not chunks:
                first.append(time.perf_counter() - began)
            chunks.append(chunk)
        busy += time.perf_counter() - began
        pcm = b"".join(chunks)
        audio += len(pcm) / (2 * rate)
        pad = bytes(rate * PAD_MS // 1000 * 2)
        clips.append(pad + (ulaw_decode(ulaw_encode(pcm)) if rate == 8000 else pcm) + pad)
        progress(f"speech set: {engine.name} at {rate} Hz", index + 1, len(SENTENCES))
    timing[f"{engine.name}_{rate // 1000}k"] = {
        "first_audio_ms": {k: round(v * 1000) for k, v in percentiles(first, (50, 95)).items()},
        "rtf": round(busy / audio, 3)}
    return clips


async def speech_set(timing: dict[str, Any]) -> dict[tuple[str, int], list[bytes]]:
    from voicegate.internal.tts.espeak import EspeakTextToSpeech
    from voicegate.internal.tts.piper import PiperTextToSpeech

    piper = PiperTextToSpeech(PiperConfig(workers=1))
    espeak = EspeakTextToSpeech(EspeakConfig())
    try:
        await piper.warm_up()
        return {(engine.name, rate): await synthesise(engine, rate, timing)
                for engine in (piper, espeak) for rate in (16000, 8000)}
    finally:
        await piper.aclose()


def build_engine(name: str, work: Path) -> Any:
    """`pocketsphinx`, a Whisper model name, `<model>@<threads>` (one worker with that many threads), and
    `/b<N>` after either for a batch size other than the default (`tiny.en/b1`: every utterance alone)."""
    if name == "pocketsphinx":
        from voicegate.internal.stt.pocketsphinx import PocketsphinxSpeechToText

        return PocketsphinxSpeechToText(PocketsphinxConfig(workers=1), work / "pocketsphinx")
    from voicegate.internal.stt.whisper import WhisperSpeechToText

    name, _, batch = name.partition("/b")
    model, _, threads = name.partition("@")
    config = WhisperConfig(model=model, workers=1, cpu_threads=int(threads or 1), download=False,
                           batch_size=int(batch or WhisperConfig().batch_size), shed_after_ms=0)
    return WhisperSpeechToText(config, work / "models")


async def one_utterance(engine: Any, clip: bytes, rate: int) -> tuple[str, float]:
    """Push the clip as 20 ms frames, end the utterance, and time the wait for its transcript."""
    stream = engine.open(rate)
    frame = rate // 50 * 2
    for start in range(0, len(clip), frame):
        stream.push(clip[start:start + frame])
    results = stream.results()
    began = time.perf_counter()
    stream.end_of_speech()
    transcript = await anext(results)
    waited = time.perf_counter() - began
    await stream.aclose()
    return transcript.text, waited


async def accuracy(engine: Any, clips: dict[tuple[str, int], list[bytes]], label: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    waits: list[float] = []
    audio_s = busy_s = 0.0
    done, total = 0, sum(len(v) for v in clips.values())
    for (voice, rate), items in clips.items():
        errors = words = 0
        for reference, clip in zip(SENTENCES, items, strict=True):
            heard, waited = await one_utterance(engine, clip, rate)
            edits, count = word_errors(reference, heard)
            errors, words = errors + edits, words + count
            waits.append(waited)
            audio_s += len(clip) / (2 * rate)
            busy_s += waited
            done += 1
            progress(f"{label}: accuracy", done, total)
        out[f"wer_{voice}_{rate // 1000}k"] = round(100 * errors / words, 1)
    out["rtf"] = round(busy_s / audio_s, 3)
    out["eos_to_transcript_ms"] = {k: round(v * 1000) for k, v in percentiles(waits, (50, 95)).items()}
    return out


async def caller(engine: Any, clips: list[bytes], rate: int, until: float, waits: list[float], seed: int) -> None:
    rng = random.Random(seed)
    await asyncio.sleep(rng.uniform(0, 3))
    while time.perf_counter() < until:
        clip = rng.choice(clips)
        talk_s = len(clip) / (2 * rate)
        stream = engine.open(rate)
        frame = rate // 50 * 2
        for start in range(0, len(clip), frame):  # the caller talks in real time
            stream.push(clip[start:start + frame])
            await asyncio.sleep(0.02)
        results = stream.results()
        began = time.perf_counter()
        stream.end_of_speech()
        await anext(results)
        waits.append(time.perf_counter() - began)
        await stream.aclose()
        await asyncio.sleep(talk_s * (1 - TALK_SHARE) / TALK_SHARE * rng.uniform(0.6, 1.4))


async def saturated(engine: Any, clips: list[bytes], rate: int, rounds: int = 3) -> dict[str, Any]:
    """Utterances per second of one worker kept full: 16 callers' utterances all waiting at once (what
    batching is for), best of `rounds`."""
    best = 0.0
    for _ in range(rounds):
        began = time.perf_counter()
        await asyncio.gather(*(engine.transcribe(clip, rate, caller=f"caller-{i}")
                               for i, clip in enumerate((clips * 2)[:16])))
        best = max(best, 16 / (time.perf_counter() - began))
    return {"saturated_utterances_per_s": round(best, 2)}


async def capacity(engine: Any, clips: list[bytes], rate: int, seconds: float, label: str) -> dict[str, Any]:
    levels: list[dict[str, Any]] = []
    best = 0
    for index, callers in enumerate(LEVELS):
        waits: list[float] = []
        until = time.perf_counter() + seconds
        await asyncio.gather(*(caller(engine, clips, rate, until, waits, seed) for seed in range(callers)))
        p = percentiles(waits, (50, 95))
        levels.append({"callers": callers, "utterances": len(waits), "p50_ms": round(p["p50"] * 1000),
                       "p95_ms": round(p["p95"] * 1000)})
        progress(f"{label}: callers per core", index + 1, len(LEVELS))
        if p["p95"] > WAIT_LIMIT_S:
            break
        best = callers
    return {"callers_per_core": best, "levels": levels}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="pocketsphinx,tiny.en,tiny.en@2,base")
    parser.add_argument("--level-seconds", type=float, default=20.0)
    parser.add_argument("--capacity-only", action="store_true", help="skip the accuracy pass (callers per core only)")
    args = parser.parse_args()
    tts: dict[str, Any] = {}
    clips = await speech_set(tts)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-speech-") as work:
        for name in args.engines.split(","):
            try:
                engine = build_engine(name, Path(work))
            except Exception as exc:  # an engine that is not installed is reported, not fatal
                print(f"{name}: not measured ({exc})", file=sys.stderr)
                continue
            try:
                await engine.warm_up()
                results[name] = dict(NOT_MEASURED) if args.capacity_only else await accuracy(engine, clips, name)
                if "@" not in name:  # a many-threaded worker is for an idle machine's latency, not capacity
                    results[name].update(await saturated(engine, clips[("piper", 8000)], 8000))
                    results[name].update(await capacity(engine, clips[("piper", 8000)], 8000, args.level_seconds,
                                                        name))
            finally:
                await engine.aclose()
    rows = [[name, f"{r['wer_piper_8k']} %", f"{r['wer_piper_16k']} %", f"{r['wer_espeak_8k']} %",
             f"{r['wer_espeak_16k']} %", str(r["rtf"]), str(r["eos_to_transcript_ms"]["p50"]),
             str(r["eos_to_transcript_ms"]["p95"]), str(r.get("saturated_utterances_per_s", "-")),
             str(r.get("callers_per_core", "-"))] for name, r in results.items()]
    print(table(rows, ["engine", "WER piper 8k", "piper 16k", "espeak 8k", "espeak 16k", "RTF", "EoS->text p50 ms",
                       "p95 ms", "utterances/s full", "callers/core"]))
    print()
    print(table([[name, str(t["first_audio_ms"]["p50"]), str(t["first_audio_ms"]["p95"]), str(t["rtf"])]
                 for name, t in tts.items()], ["voice", "first audio p50 ms", "p95 ms", "RTF"]))
    print(f"\nresults: {save('speech', {'sentences': len(SENTENCES), 'engines': results, 'tts': tts})}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
