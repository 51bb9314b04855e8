"""The noisy lines the speech and turn-taking benchmarks hear: white, pink, street and babble, at an SNR.

A condition is a name like `white15`, `pink20`, `street10` or `babble15` (the kind, then the SNR in dB),
or `none`. Noise is added to the caller's 16 kHz speech before the line: the microphone hears the
street, then the phone network carries both (8 kHz through G.711, or 16 kHz for WebRTC).

**SNR** here is the caller's *speech-active* level over the noise's level, both in dB:
- the speech-active level is the mean power of the clean speech's 20 ms frames that are no more than
  `ACTIVE_RANGE_DB` below its loudest frame (the pauses between words and the silence around the
  sentence do not count, so a sentence's level does not depend on how much silence surrounds it; close
  in spirit to ITU-T P.56's active speech level);
- the noise level is the mean power of the noise over the whole clip (noise is there all the time).

Kinds:
- `white`: Gaussian white noise (a hiss: a cheap line, a fan).
- `pink`: 1/f noise (more energy low down: wind, a distant crowd's murmur, air conditioning).
- `street`: a car or street: brown noise (1/f^2) low-passed, its level swelling and falling slowly
  (+-4 dB over a few seconds, as traffic passes), with an engine's hum (a fundamental around 30-45 Hz
  and its harmonics, drifting with the revs).
- `babble`: other people talking behind the caller: several talkers, each a stream of sentences none of
  which is in the speech sets, summed at equal levels. Talkers are Piper renders with different seeds
  and speaking rates and espeak-ng voices of both sexes.

Held out: the tuning set (`TUNING`) and the evaluation set (`EVALUATION`) share no babble sentence, no
babble talker and no noise seed. The product's defaults were chosen on the tuning set; the figures in
docs/performance.md are the evaluation set's.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import wave
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from voicegate.internal.audio.resample import resample

RATE = 16000
FRAME = RATE // 50  # 20 ms
ACTIVE_RANGE_DB = 30.0
KINDS = ("white", "pink", "street", "babble")
SNRS_DB = (20, 15, 10)
BABBLE_TALKERS = 5


@dataclass(frozen=True, slots=True)
class Talker:
    """A background voice: a Piper seed and speaking rate (length scale), or an espeak-ng voice."""

    engine: str  # "piper" or "espeak"
    seed: int = 0
    length_scale: float = 1.0
    espeak_voice: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NoiseSet:
    name: str
    seed_base: int  # noise seeds are seed_base + the clip's index
    babble_texts: tuple[str, ...]
    talkers: tuple[Talker, ...]


TUNING = NoiseSet("tuning", 1000, (
    "The weather turned cold again this afternoon.",
    "She said the meeting had been moved to the other room.",
    "We should have taken the earlier train home.",
    "My brother bought a new bicycle last spring.",
    "They were laughing about something on the radio.",
    "The children played in the garden until dark.",
    "He never finished reading that long novel.",
    "I think the restaurant on the corner has closed.",
), (
    Talker("piper", 11, 0.9), Talker("piper", 12, 1.15),
    Talker("espeak", espeak_voice=("-v", "en-us+m3", "-s", "165")),
    Talker("espeak", espeak_voice=("-v", "en-gb+f2", "-s", "150")),
    Talker("espeak", espeak_voice=("-v", "en-us+f1", "-s", "175")),
))
EVALUATION = NoiseSet("evaluation", 0, (
    "Did you see the football match on Sunday night?",
    "The bakery down the road makes wonderful bread.",
    "Our neighbours are painting their kitchen yellow.",
    "It rained all week during our holiday in the hills.",
    "The museum was full of school groups this morning.",
    "Grandma always tells the same story at dinner.",
    "The new film was much longer than I expected.",
    "They are planning a party for her fortieth birthday.",
), (
    Talker("piper", 31, 0.85), Talker("piper", 32, 1.0), Talker("piper", 33, 1.2),
    Talker("espeak", espeak_voice=("-v", "en-gb+m1", "-s", "160")),
    Talker("espeak", espeak_voice=("-v", "en-us+f4", "-s", "170")),
    Talker("espeak", espeak_voice=("-v", "en-us+m7", "-s", "150")),
))
SETS = {s.name: s for s in (TUNING, EVALUATION)}


def parse(condition: str) -> tuple[str, float]:
    """("white", 15.0) for "white15"; ("none", inf) for "none"."""
    if condition == "none":
        return "none", float("inf")
    match = re.fullmatch(r"([a-z]+)(\d+(?:\.\d+)?)", condition)
    if not match or match.group(1) not in KINDS:
        raise ValueError(f"unknown noise condition {condition!r}: none, or one of {KINDS} then an SNR in dB")
    return match.group(1), float(match.group(2))


def all_conditions() -> list[str]:
    return [f"{kind}{snr}" for kind in KINDS for snr in SNRS_DB]


# ---- levels ----------------------------------------------------------------------------------------


def frame_powers(samples: np.ndarray) -> np.ndarray:
    frames = samples.size // FRAME
    return (samples[: frames * FRAME].reshape(frames, FRAME).astype(np.float64) ** 2).mean(axis=1)


def active_level_db(samples: np.ndarray) -> float:
    """The speech-active level (dB re one sample step squared): frames within ACTIVE_RANGE_DB of the loudest."""
    powers = frame_powers(samples)
    if not powers.size or powers.max() <= 0:
        return -120.0
    active = powers[powers >= powers.max() * 10 ** (-ACTIVE_RANGE_DB / 10)]
    return float(10 * np.log10(active.mean()))


def mean_level_db(samples: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(samples.astype(np.float64) ** 2) + 1e-12))


# ---- stationary noises -------------------------------------------------------------------------------


def shaped(size: int, rng: np.random.Generator, exponent: float) -> np.ndarray:
    """Gaussian noise with power falling as 1/f**exponent (0 white, 1 pink, 2 brown), above 20 Hz."""
    spectrum = np.fft.rfft(rng.standard_normal(size))
    freqs = np.fft.rfftfreq(size, 1 / RATE)
    gain = np.where(freqs < 20.0, 0.0, 1.0 / np.maximum(freqs, 20.0) ** (exponent / 2))
    out = np.fft.irfft(spectrum * gain, size)
    return out / (out.std() + 1e-12)


def street(size: int, rng: np.random.Generator) -> np.ndarray:
    """Traffic: low-passed brown noise swelling and falling, plus a drifting engine hum."""
    t = np.arange(size) / RATE
    rumble = shaped(size, rng, 2.0)
    hiss = shaped(size, rng, 1.0)
    body = rumble + 0.35 * hiss
    # Passing traffic: the level swells and falls by up to +-4 dB over 3-8 s.
    swell = np.zeros(size)
    for _ in range(3):
        period = rng.uniform(3.0, 8.0)
        swell += np.sin(2 * np.pi * t / period + rng.uniform(0, 2 * np.pi))
    body *= 10 ** (4.0 * swell / 3.0 / 20)
    # The engine: a fundamental of 30-45 Hz drifting with the revs, and its first harmonics.
    revs = rng.uniform(30.0, 45.0) * (1 + 0.08 * np.sin(2 * np.pi * t / rng.uniform(4.0, 9.0)))
    phase = 2 * np.pi * np.cumsum(revs) / RATE
    hum = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 7))
    out = body / body.std() + 0.5 * hum / (np.std(hum) + 1e-12)
    return out / out.std()


# ---- babble ------------------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def talker_streams(set_name: str) -> tuple[np.ndarray, ...]:
    """Each talker of the set saying every babble sentence of the set, one after another (16 kHz floats)."""
    noise_set = SETS[set_name]
    streams = []
    for talker in noise_set.talkers:
        clips = [speech_of(talker, text) for text in noise_set.babble_texts]
        gap = np.zeros(RATE // 4)
        stream = np.concatenate([part for clip in clips for part in (clip, gap)])
        streams.append(stream / (10 ** (active_level_db(stream) / 20)))
    return tuple(streams)


def speech_of(talker: Talker, text: str) -> np.ndarray:
    cache = Path(tempfile.gettempdir()) / "voicegate-bench-babble"
    cache.mkdir(parents=True, exist_ok=True)
    import hashlib

    key = cache / (hashlib.sha256(repr((talker, text)).encode()).hexdigest()[:24] + ".pcm")
    if not key.is_file():
        if talker.engine == "piper":
            pcm = _piper(text, talker.seed, talker.length_scale)
        else:
            wav = subprocess.run(["espeak-ng", *talker.espeak_voice, "--stdout", text], capture_output=True,
                                 check=True).stdout
            from voicegate.internal.tts.espeak import parse_wav_header

            pcm = resample(wav[44:], parse_wav_header(wav[:44]), RATE)
        key.write_bytes(pcm)
    return np.frombuffer(key.read_bytes(), dtype=np.int16).astype(np.float64)


def _piper(text: str, seed: int, length_scale: float) -> bytes:
    from tests.speech import neural_voice
    from voicegate.internal.evals.voice import RENDER_SCRIPT as script

    with tempfile.TemporaryDirectory() as work:
        subprocess.run([sys.executable, str(script), str(neural_voice()), work, str(seed), str(length_scale)],
                       input=text, text=True, capture_output=True, timeout=300, check=True)
        with wave.open(str(Path(work) / "0.wav")) as clip:
            return resample(clip.readframes(clip.getnframes()), clip.getframerate(), RATE)


def babble(size: int, rng: np.random.Generator, set_name: str) -> np.ndarray:
    """BABBLE_TALKERS of the set's talkers, each from a random point of its stream, summed at equal levels."""
    streams = talker_streams(set_name)
    chosen = rng.choice(len(streams), size=min(BABBLE_TALKERS, len(streams)), replace=False)
    out = np.zeros(size)
    for index in chosen:
        stream = streams[index]
        start = int(rng.integers(0, stream.size))
        looped = np.tile(stream, size // stream.size + 2)
        out += looped[start:start + size]
    return out / (out.std() + 1e-12)


# ---- mixing ------------------------------------------------------------------------------------------


def noise(kind: str, size: int, seed: int, set_name: str) -> np.ndarray:
    """Unit-power noise of `kind`, `size` samples at 16 kHz, the same for the same seed."""
    rng = np.random.default_rng(seed)
    if kind == "white":
        return rng.standard_normal(size)
    if kind == "pink":
        return shaped(size, rng, 1.0)
    if kind == "street":
        return street(size, rng)
    if kind == "babble":
        return babble(size, rng, set_name)
    raise ValueError(f"unknown noise kind {kind!r}")


def add_noise(pcm16k: bytes, condition: str, index: int, set_name: str = "evaluation") -> bytes:
    """`pcm16k` (clean speech with its silences) with the condition's noise at its SNR over the speech's
    active level; `index` picks the clip's seed within the set."""
    kind, snr_db = parse(condition)
    if kind == "none":
        return pcm16k
    speech = np.frombuffer(pcm16k, dtype=np.int16).astype(np.float64)
    level = active_level_db(speech)
    background = noise(kind, speech.size, SETS[set_name].seed_base + index, set_name)
    background *= 10 ** ((level - snr_db) / 20) / np.sqrt(np.mean(background ** 2))
    return np.clip(np.rint(speech + background), -32768, 32767).astype(np.int16).tobytes()
