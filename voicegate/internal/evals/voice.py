"""The scripted caller's voice: the pinned Piper voice speaking each line, the same samples every run.

Rendering happens in a separate program (piper_render.py: Piper is GPL and never runs in this process),
seeded so that a sentence always sounds the same: an eval that passes today and fails tomorrow must
have met a different agent, not a different caller. Clips are cached on disk by voice and text (a
first run renders, later ones read); the tests use the same renders (tests/speech.py).

A turn's parts become `Sound`s for the phone's mouth: PCM at the phone's rate, or keys to press.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from voicegate.internal.audio.resample import resample
from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.evals.scenario import Keys, Part, Pause, Speech, WavFile
from voicegate.internal.tts.piper_voice import PINNED_VOICE_SHA256, resolve_voice, verify_voice
from voicegate.internal.tts.wav import wav_to_pcm

RENDER_SCRIPT = Path(__file__).with_name("piper_render.py")
# Part of each clip's cache key: a change in how clips are made makes new ones.
PIPER_RENDER = "seeded-1"
RENDER_TIMEOUT_S = 600.0


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voicegate" / "caller-speech"


class VoiceError(Exception):
    """The caller's voice cannot speak (no voice, Piper failed): an eval that cannot run, not a failure."""


@dataclass(frozen=True)
class Sound:
    """What the caller's mouth sends next: PCM16 mono at the phone's rate, or keypad keys."""

    pcm: bytes = b""
    keys: str = ""


class CallerVoice:
    def __init__(self, cache_dir: Path, voice: Path | None = None) -> None:
        self.cache_dir = cache_dir
        self._voice = voice

    @property
    def voice(self) -> Path:
        """The pinned voice, checked by SHA-256 (the same one the server speaks with by default)."""
        if self._voice is None:
            try:
                # The caller is the original voice, never the server's int8 copy: the renders stay the same.
                model = resolve_voice(PiperConfig(voice_variant="original"))
                verify_voice(model, PINNED_VOICE_SHA256)
            except Exception as exc:
                raise VoiceError(f"no caller voice: {exc}") from exc
            self._voice = model
        return self._voice

    def _clip(self, text: str) -> Path:
        # The pinned voice keeps the key the tests' renders have always had, so both share one cache.
        default = self._voice is None or self._voice.name == "en_US-joe-medium.onnx"
        key = f"{PIPER_RENDER}:{text}" if default else f"{PIPER_RENDER}:{self._voice}:{text}"
        return self.cache_dir / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".wav")

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The texts not rendered yet (each once)."""
        return [text for text in dict.fromkeys(texts) if not self._clip(text).is_file()]

    def render(self, texts: Sequence[str], rate: int) -> list[bytes]:
        """PCM16 mono of the voice saying each text, at `rate` (blocking: run it in a thread)."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        missing = self.missing(texts)
        if missing:
            self._render_missing(missing)
        clips = []
        for text in texts:
            with wave.open(str(self._clip(text))) as clip:
                clips.append(resample(clip.readframes(clip.getnframes()), clip.getframerate(), rate))
        return clips

    def _render_missing(self, texts: list[str]) -> None:
        with tempfile.TemporaryDirectory(dir=self.cache_dir) as out:
            try:
                done = subprocess.run([sys.executable, str(RENDER_SCRIPT), str(self.voice), out],
                                      input="\n".join(" ".join(text.split()) for text in texts), text=True,
                                      capture_output=True, timeout=RENDER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise VoiceError(f"Piper took over {RENDER_TIMEOUT_S:.0f} s to render {len(texts)} line(s)") from None
            if done.returncode != 0:
                raise VoiceError(f"Piper failed (exit {done.returncode}): {done.stderr.strip()[-600:]}")
            for index, text in enumerate(texts):
                os.replace(Path(out) / f"{index}.wav", self._clip(text))  # atomic: another process may race us


def load_wav(path: Path, rate: int) -> bytes:
    """A caller's WAV file (16-bit, any rate, stereo mixed down) as PCM16 mono at `rate`."""
    try:
        pcm, source_rate = wav_to_pcm(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise VoiceError(f"{path}: {exc}") from exc
    return resample(pcm, source_rate, rate)


def sounds(parts: Sequence[Part], voice: CallerVoice, rate: int) -> list[Sound]:
    """A turn's parts as what the mouth sends (blocking: renders missing clips)."""
    spoken = iter(voice.render([part.text for part in parts if isinstance(part, Speech)], rate))
    out: list[Sound] = []
    for part in parts:
        if isinstance(part, Speech):
            out.append(Sound(pcm=next(spoken)))
        elif isinstance(part, Pause):
            out.append(Sound(pcm=bytes(rate * part.ms // 1000 * 2)))
        elif isinstance(part, WavFile):
            out.append(Sound(pcm=load_wav(part.path, rate)))
        elif isinstance(part, Keys):
            out.append(Sound(keys=part.digits))
    return out
