"""Answering-machine detection on generated answers: accuracy, decision time, and when a message would start.

    .venv/bin/python -m bench.sip.amd [--no-words] [--split train|heldout|all]

Builds its own answers, as a phone line delivers them (8 kHz through G.711 mu-law, a little line noise,
the callee's level varied): people picking up ("Hello?", "This is Sam", "Hi, this is Sam speaking, how
can I help?"), voicemail greetings with and without a beep, and silence. The speech comes from two
engines, Piper's neural voice and espeak-ng, so the detector is not tuned to one voice. The answers are
split: `train` is what internal/telephony/amd.py's thresholds were tuned on; `heldout` has other
sentences, other voices (another Piper seed, espeak-ng's en-us and en-gb), other beeps and other
onsets, and was only measured.

Each answer runs through the product's classifier frame by frame (AnsweringMachineClassifier), with
time counted in audio. With words (the default), the recogniser's transcripts arrive as they would in a
call: each utterance is cut where 300 ms of quiet follows it (the pipeline's VAD), transcribed by
Whisper tiny.en on this machine, and handed to the classifier at the utterance's end plus the measured
transcription time. `--no-words` measures the audio-only classifier (a server without a recogniser).

Reports accuracy (decision == label), decision time p50/p95 (from the answer), per class; and for the
machines, whether a leave-a-message outcome would have started after the beep (or, with no beep, after
the greeting), never over the greeting.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import percentiles, progress, save, table
from bench.turns.cases import render
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.audio.resample import resample
from voicegate.internal.telephony.amd import (
    AmdDecision,
    AmdResult,
    AmdSettings,
    AnsweringMachineClassifier,
    MessageTiming,
    message_may_start,
)

RATE = 8000
FRAME = RATE // 50 * 2  # bytes in 20 ms
CLIP_S = 12.0  # each answer runs this long (long enough for the slowest greeting and its beep)
UTTERANCE_GAP_MS = 300  # the pipeline's VAD closes an utterance after this much quiet

HUMANS = {
    "train": ["Hello?", "Hello.", "Hi, this is Sam.", "Yes?", "Sam speaking.",
              "Hi, this is Sam speaking, how can I help?", "Hello, Sam here.", "Yeah, hello?"],
    "heldout": ["Hello, who's this?", "Good morning, this is Sam.", "Hi there.",
                "Hello, Sam speaking, how can I help you?", "Yes, hello?", "This is Sam."],
}
MACHINES = {
    "train": ["Hi, you've reached Sam. I can't take your call right now. Please leave a message after the tone.",
              "The person you are calling is not available. Please record your message after the beep.",
              "Hello, this is Sam. Sorry I missed your call. Leave your name and number and I'll call you back.",
              "You have reached the voicemail of Sam Jones. Please leave a message."],
    "heldout": ["Hi, it's Sam. I'm away from the phone at the moment, so leave a message and I'll get back to "
                "you soon.",
                "Thank you for calling. Nobody is available to take your call. Please leave a message after the tone.",
                "Hey, this is Sam, leave me a message.",
                "The number you have dialed is not available. Please leave a message after the beep."],
}
VOICES = {"train": ["piper-b", "espeak-f"], "heldout": ["piper", "espeak", "espeak-gb"]}
BEEPS_HZ = {"train": [1000.0, 1400.0], "heldout": [2000.0, 850.0, 1000.0]}
SILENCES = {"train": 4, "heldout": 4}


@dataclass(frozen=True)
class Answer:
    split: str
    label: AmdResult
    kind: str  # human, machine+beep, machine, silence
    voice: str
    text: str
    pcm: bytes  # 8 kHz, as received
    beep_end_ms: int | None = None  # where the beep ends (machines with a beep)
    greeting_end_ms: int | None = None  # where the machine's greeting ends


def tone(ms: int, hz: float, dbfs: float) -> np.ndarray:
    t = np.arange(RATE * ms // 1000) / RATE
    ramp = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.005)  # 5 ms edges, no click
    return (32768 * np.sqrt(2) * 10 ** (dbfs / 20) * np.sin(2 * np.pi * hz * t) * ramp)


def line(speech: list[tuple[int, np.ndarray]], rng: random.Random, seed: int) -> bytes:
    """CLIP_S of line: each (start ms, samples) placed, noise added, through G.711 and back."""
    out = np.zeros(int(RATE * CLIP_S))
    for start, samples in speech:
        begin = RATE * start // 1000
        end = min(len(out), begin + len(samples))
        out[begin:end] += samples[: end - begin]
    noise_dbfs = rng.uniform(-62.0, -50.0)
    out += np.random.default_rng(seed).normal(0.0, 32768 * 10 ** (noise_dbfs / 20), out.size)
    pcm = np.clip(out, -32768, 32767).astype(np.int16).tobytes()
    return ulaw_decode(ulaw_encode(pcm))


def voice_8k(pcm16k: bytes, gain_db: float) -> np.ndarray:
    samples = np.frombuffer(resample(pcm16k, 16000, RATE), dtype=np.int16).astype(np.float64)
    return samples * 10 ** (gain_db / 20)


def trimmed(pcm16k: bytes) -> bytes:
    """The rendering without the synthesiser's own leading and trailing silence."""
    samples = np.frombuffer(pcm16k, dtype=np.int16)
    loud = np.flatnonzero(np.abs(samples) > 300)
    return pcm16k if loud.size == 0 else samples[loud[0]:loud[-1] + 1].tobytes()


def answers(splits: list[str]) -> list[Answer]:
    out: list[Answer] = []
    for split in splits:
        rng = random.Random(f"amd-{split}")
        for voice in VOICES[split]:
            for text, pcm in zip(HUMANS[split], render(voice, HUMANS[split]), strict=True):
                onset = rng.randint(200, 900)
                said = voice_8k(trimmed(pcm), rng.uniform(-8, 0))
                parts = [(onset, said)]
                if rng.random() < 0.4:  # nobody answered them: "Hello?" again
                    again = voice_8k(trimmed(render(voice, ["Hello?"])[0]), rng.uniform(-8, 0))
                    parts.append((onset + len(said) * 1000 // RATE + rng.randint(2500, 3500), again))
                out.append(Answer(split, "human", "human", voice, text, line(parts, rng, len(out))))
            for index, (text, pcm) in enumerate(zip(MACHINES[split], render(voice, MACHINES[split]), strict=True)):
                for with_beep in (True, False):
                    onset = rng.randint(200, 1000)
                    said = voice_8k(trimmed(pcm), rng.uniform(-8, 0))
                    end = onset + len(said) * 1000 // RATE
                    parts = [(onset, said)]
                    beep_end = None
                    if with_beep:
                        hz = BEEPS_HZ[split][(index + len(out)) % len(BEEPS_HZ[split])]
                        start, length = end + rng.randint(300, 800), rng.randint(250, 900)
                        parts.append((start, tone(length, hz, rng.uniform(-22, -12))))
                        beep_end = start + length
                    kind = "machine+beep" if with_beep else "machine"
                    out.append(Answer(split, "machine", kind, voice, text, line(parts, rng, len(out)), beep_end, end))
        for _ in range(SILENCES[split]):
            parts = []
            if rng.random() < 0.5:  # a click as the handset lifts
                parts.append((rng.randint(50, 400), tone(15, 200.0, -20)))
            out.append(Answer(split, "unknown", "silence", "-", "", line(parts, rng, len(out))))
    return out


def utterances(pcm: bytes) -> list[tuple[int, int]]:
    """(start ms, end ms) of each utterance, as an energy VAD with a 300 ms offset cuts them."""
    from voicegate.internal.turn.vad import AdaptiveEnergyClassifier

    energy = AdaptiveEnergyClassifier(9.0)
    found: list[tuple[int, int]] = []
    start, last, run = None, 0, 0
    for index in range(len(pcm) // FRAME):
        voiced = energy.is_speech(pcm[index * FRAME:(index + 1) * FRAME])
        now = (index + 1) * 20
        run = run + 1 if voiced else 0
        if run >= 3:
            start = now - 60 if start is None else start
            last = now
        elif start is not None and now - last >= UTTERANCE_GAP_MS:
            found.append((start, last))
            start = None
    if start is not None:
        found.append((start, last))
    return found


async def transcripts(answer: Answer, whisper: object) -> list[tuple[int, str]]:
    """(arrival ms, text) of each utterance's transcript: its end, the VAD's offset, then Whisper's time."""
    out = []
    for start, end in utterances(answer.pcm):
        pcm = answer.pcm[start * 16:min(len(answer.pcm), (end + 200) * 16)]
        began = time.monotonic()
        text = await whisper.transcribe(pcm, RATE)  # type: ignore[attr-defined]
        spent = int((time.monotonic() - began) * 1000)
        out.append((end + UTTERANCE_GAP_MS + spent, text))
    return out


@dataclass
class Outcome:
    decision: AmdDecision
    message_ms: int | None  # when a leave-a-message outcome would start speaking (machines)
    probe_ms: list[int] | None = None  # how long each probe's transcription took


PRE_ROLL_MS = 300  # a probe transcribes the greeting from a little before its onset


async def run(answer: Answer, words: list[tuple[int, str]] | None, whisper: object | None, settings: AmdSettings,
              timing: MessageTiming) -> Outcome:
    """The classifier over one answer, frame by frame in audio time; with `whisper`, probes of the greeting
    so far are transcribed when the classifier asks, and their text arrives after the time they took."""
    classifier = AnsweringMachineClassifier(settings, RATE, words_expected=words is not None)
    pending = sorted(words or [])
    ended = [end + UTTERANCE_GAP_MS for _, end in utterances(answer.pcm)] if words is not None else []
    decision: AmdDecision | None = None
    message_ms = None
    probes: list[int] = []
    for index in range(len(answer.pcm) // FRAME):
        now = (index + 1) * 20
        while ended and ended[0] <= now:
            ended.pop(0)
            classifier.utterance_ended()
        while pending and pending[0][0] <= now:
            classifier.transcript(pending.pop(0)[1])
        classifier.feed(answer.pcm[index * FRAME:(index + 1) * FRAME], now)
        if whisper is not None and classifier.probe_due():
            onset = classifier.heard.onset_ms or 0
            began = time.monotonic()
            text = await whisper.transcribe(answer.pcm[max(0, onset - PRE_ROLL_MS) * 16:now * 16], RATE)  # type: ignore[attr-defined]
            classifier.probe_started()
            probes.append(int((time.monotonic() - began) * 1000))
            pending.append((now + probes[-1], text))
            pending.sort()
        decision = decision or classifier.decision
        if decision is not None and decision.result == "machine" and message_ms is None and message_may_start(
                classifier.heard, classifier.beep, classifier.in_tone, decision.at_ms, timing):
            message_ms = now
        if decision is not None and (decision.result != "machine" or message_ms is not None):
            break
    if decision is None:
        decision = classifier.tick(int(CLIP_S * 1000)) or AmdDecision("unknown", "undecided", int(CLIP_S * 1000), 0)
    return Outcome(decision, message_ms, probes)


def summary(rows: list[tuple[Answer, Outcome]]) -> dict[str, object]:
    right = [a.label == o.decision.result for a, o in rows]
    times = [o.decision.at_ms / 1000 for _, o in rows]
    per_kind = {}
    for kind in ("human", "machine+beep", "machine", "silence"):
        picked = [(a, o) for a, o in rows if a.kind == kind]
        if picked:
            per_kind[kind] = {"n": len(picked), "accuracy": sum(a.label == o.decision.result for a, o in picked)
                              / len(picked), **{k: v for k, v in percentiles(
                                  [o.decision.at_ms / 1000 for _, o in picked], (50, 95)).items()}}
    machines = [(a, o) for a, o in rows if a.label == "machine" and o.decision.result == "machine"]
    after_beep = [o.message_ms is not None and a.beep_end_ms is not None and o.message_ms >= a.beep_end_ms
                  for a, o in machines if a.beep_end_ms is not None]
    after_greeting = [o.message_ms is not None and a.greeting_end_ms is not None
                      and o.message_ms >= a.greeting_end_ms for a, o in machines]
    probes = [ms for _, o in rows for ms in o.probe_ms or []]
    return {"n": len(rows), "accuracy": sum(right) / len(rows), **percentiles(times, (50, 95)), "kinds": per_kind,
            "probes_per_answer": len(probes) / len(rows), "probe_ms": percentiles([float(p) for p in probes], (50, 95)),
            "message_after_beep": f"{sum(after_beep)}/{len(after_beep)}",
            "message_after_greeting": f"{sum(after_greeting)}/{len(after_greeting)}"}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-words", action="store_true", help="audio only: no recogniser")
    parser.add_argument("--split", choices=("train", "heldout", "all"), default="all")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="try another threshold (an AmdSettings field in ms), e.g. --set probe_every_ms=500")
    args = parser.parse_args()
    splits = ["train", "heldout"] if args.split == "all" else [args.split]
    print("rendering the answers (Piper and espeak-ng; cached after the first run) ...", file=sys.stderr)
    cases = answers(splits)
    overrides = {key: int(value) for key, _, value in (item.partition("=") for item in args.set)}
    settings, timing = replace(AmdSettings(), **overrides), MessageTiming()
    modes: dict[str, list[list[tuple[int, str]] | None]] = {"audio": [None] * len(cases)}
    whisper = None
    if not args.no_words:
        from voicegate.internal.config.providers import WhisperConfig
        from voicegate.internal.stt.whisper import WhisperSpeechToText

        whisper = WhisperSpeechToText(WhisperConfig(workers=1), Path(tempfile.gettempdir()) / "voicegate-models")
        await whisper.warm_up()
        heard: list[list[tuple[int, str]] | None] = []
        for index, case in enumerate(cases):
            heard.append(await transcripts(case, whisper))
            progress("transcribing", index + 1, len(cases))
        modes["words"] = heard
    results: dict[str, object] = {"settings": asdict(settings), "message_timing": asdict(timing)}
    rows_out = []
    for mode, words in modes.items():
        for split in splits:
            rows = [(case, await run(case, w, whisper if mode == "words" else None, settings, timing))
                    for case, w in zip(cases, words, strict=True) if case.split == split]
            stats = summary(rows)
            results[f"{mode}/{split}"] = stats
            probe_ms = stats["probe_ms"]
            assert isinstance(probe_ms, dict)
            rows_out.append([mode, split, str(stats["n"]), f"{stats['accuracy']:.0%}", f"{stats['p50']:.2f}",
                             f"{stats['p95']:.2f}", str(stats["message_after_beep"]),
                             str(stats["message_after_greeting"]), f"{stats['probes_per_answer']:.1f}",
                             "-" if stats["probes_per_answer"] == 0 else f"{probe_ms['p50']:.0f}"])
            for case, outcome in rows:
                if case.label != outcome.decision.result:
                    print(f"  miss [{mode}/{split}] {case.kind:12} {case.voice:9} -> {outcome.decision.result} "
                          f"({outcome.decision.reason}, {outcome.decision.at_ms} ms, greeting "
                          f"{outcome.decision.greeting_ms} ms): {case.text[:60]}", file=sys.stderr)
    print(table(rows_out, ["mode", "split", "answers", "accuracy", "p50 s", "p95 s", "msg after beep",
                           "msg after greeting", "probes/answer", "probe ms p50"]))
    if whisper is not None:
        await whisper.aclose()
    path = save("amd", results)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
