"""The int8 copy of the Piper voice (internal/tts/voice_variant.py): two builds in two processes give the
pinned SHA-256; real Piper speaks with it; Whisper hears it about as well as the original; and
`piper.voice_variant` picks the file."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from bench.common.figures import word_errors
from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.stt.whisper_models import resolve_model
from voicegate.internal.tts.piper import PiperTextToSpeech
from voicegate.internal.tts.piper_voice import (
    INT8_VOICE_FILE,
    PINNED_VOICE_SHA256,
    file_sha256,
    packaged_choice,
    packaged_voice,
    variant_dir,
    voice_config_path,
)

BUILD = """
import sys
from pathlib import Path
from voicegate.internal.tts.piper_voice import packaged_voice
from voicegate.internal.tts.voice_variant import build_int8_voice
build_int8_voice(packaged_voice(), Path(sys.argv[1]), expected=None)
"""
# Held-out support-line sentences without digits (Whisper writes numbers as figures, which says nothing here).
HEARD = [
    "Thanks for calling Northwind Energy.",
    "Please hold while I transfer you to the billing team.",
    "Could you spell your surname for me, please?",
    "Is there anything else I can help you with today?",
]
SLACK_WORDS = 2  # Piper's noise alone moves Whisper's words wrong by a word or two between renders


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The int8 voice built twice, each by a process of its own, into directories of different names. The two
    run at once: each build is one process's own work, so they share nothing but the machine, and the pair
    takes the time of one build where a core is free (the quantiser runs one thread at a time for much of it)."""
    directories = [tmp_path_factory.mktemp(f"int8-{n}") for n in (1, 2)]
    processes = [subprocess.Popen([sys.executable, "-c", BUILD, str(directory)]) for directory in directories]
    try:
        codes = [process.wait(timeout=900) for process in processes]
    finally:
        for process in processes:
            process.kill()  # (no-op for a process that has exited)
            process.wait()
    assert codes == [0, 0], f"the builds exited with {codes}"
    return [directory / INT8_VOICE_FILE for directory in directories]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engines(builds: list[Path]) -> AsyncIterator[dict[str, PiperTextToSpeech]]:
    made = {"int8": PiperTextToSpeech(PiperConfig(voice=str(builds[0]), workers=1, threads=1),
                                      voice_sha256=PINNED_VOICE_SHA256),
            "original": PiperTextToSpeech(PiperConfig(voice_variant="original", workers=1, threads=1))}
    yield made
    for engine in made.values():
        await engine.aclose()


def test_the_int8_voice_is_the_same_bytes_on_every_build_and_those_pinned(builds: list[Path]) -> None:
    digests = [file_sha256(path) for path in builds]
    # Two builds here give the same bytes, and they are the build pinned for this kind of machine.
    assert digests[0] == digests[1] and digests[0] in PINNED_VOICE_SHA256[INT8_VOICE_FILE], digests
    # Its settings are the original's, byte for byte.
    assert file_sha256(voice_config_path(builds[0])) == file_sha256(voice_config_path(packaged_voice()))


@pytest.mark.asyncio(loop_scope="module")
async def test_piper_speaks_the_int8_voice_and_whisper_hears_it_as_well_as_the_original(
        engines: dict[str, PiperTextToSpeech]) -> None:
    from faster_whisper import WhisperModel

    with tempfile.TemporaryDirectory() as work:
        recogniser = WhisperModel(str(resolve_model("tiny.en", Path(work), download=False).path), device="cpu",
                                  compute_type="int8", cpu_threads=1)
    errors = {}
    for name, engine in engines.items():
        wrong = 0
        for text in HEARD:
            pcm = b"".join([chunk async for chunk in engine.synthesize(text, 16000)])
            assert len(pcm) > 16000  # over half a second of speech at 16 kHz
            samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
            segments, _ = recogniser.transcribe(samples, language="en", beam_size=1)
            wrong += word_errors(text, " ".join(s.text for s in segments))[0]
        errors[name] = wrong
    words = sum(word_errors(text, text)[1] for text in HEARD)
    # The phrase caches key on the voice's files: nothing rendered by one voice is said with the other.
    assert await engines["int8"].voice_identity() != await engines["original"].voice_identity()
    assert errors["int8"] <= errors["original"] + SLACK_WORDS, (errors, words)
    assert errors["int8"] <= words // 10, (errors, words)  # and plainly intelligible on its own


def test_voice_variant_picks_the_file() -> None:
    assert packaged_choice(PiperConfig(voice_variant="original"))[0] == packaged_voice()
    # "int8" insists on the set-up's copy (verify_voice refuses it when it is not the pinned one).
    assert packaged_choice(PiperConfig(voice_variant="int8"))[0] == variant_dir() / INT8_VOICE_FILE
    installed = variant_dir() / INT8_VOICE_FILE
    pinned = installed.is_file() and file_sha256(installed) in PINNED_VOICE_SHA256[INT8_VOICE_FILE]
    assert packaged_choice(PiperConfig())[0] == (installed if pinned else packaged_voice())
