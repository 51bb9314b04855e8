"""Noisy lines: Whisper (tiny.en, real worker process) hears a caller through street noise and hiss at
15 dB on an 8 kHz G.711 line with the defaults, the line's SNR is estimated from the utterance itself,
and a noisy utterance gets the wider beam. The noise is bench/common/noises.py's (what the benchmark measures).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from bench.common.figures import word_errors
from bench.common.noises import add_noise
from bench.turns.cases import channel
from tests.speech import neural, silence
from voicegate.internal.audio.line_noise import MAX_SNR_DB, estimate_snr_db
from voicegate.internal.config import Config
from voicegate.internal.config.loader import ConfigError
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.stt.whisper import WhisperSpeechToText
from voicegate.internal.stt.whisper_decode import DecodeSettings, to_model_audio

pytestmark = pytest.mark.slow
shared_loop = pytest.mark.asyncio(loop_scope="module")

# None of these is in bench/speech/recognition.py's or the turn benchmark's sets.
SENTENCES = [
    "I would like to change the date of my delivery.",
    "The engineer never turned up this morning.",
    "Can you tell me how much I still owe on the loan?",
]


def noisy_line(pcm16k: bytes, condition: str, index: int) -> bytes:
    padded = silence(300, 16000) + pcm16k + silence(300, 16000)
    return channel(add_noise(padded, condition, index, "tuning"), 8000)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def whisper(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WhisperSpeechToText]:
    engine = WhisperSpeechToText(WhisperConfig(workers=1, download=False),
                                 tmp_path_factory.mktemp("models"))
    await engine.warm_up()
    yield engine
    await engine.aclose()


@shared_loop
@pytest.mark.parametrize("condition", ["street15", "white15"])
async def test_a_caller_on_a_noisy_phone_line_is_understood(whisper: WhisperSpeechToText, condition: str) -> None:
    errors = words = 0
    heard = []
    for index, (text, clip) in enumerate(zip(SENTENCES, neural(SENTENCES), strict=True)):
        decoded = await whisper.decode(noisy_line(clip, condition, index), 8000)
        edits, count = word_errors(text, decoded.text)
        errors, words = errors + edits, words + count
        heard.append(decoded.text)
        assert decoded.snr_db is not None and 10.0 <= decoded.snr_db <= 21.0, (condition, decoded.snr_db)
    assert errors / words <= 0.12, heard


def test_the_snr_of_an_utterance_is_read_from_its_own_noise() -> None:
    clip = neural([SENTENCES[0]])[0]
    clean = to_model_audio(silence(300, 16000) + clip + silence(300, 16000), 16000)
    assert estimate_snr_db(clean) == MAX_SNR_DB  # silence between the words: a clean line
    # As the VAD cuts a turn from a clean line: its pre-roll is the only silence, too little for the
    # percentile, which would land on the caller's quietest sounds; the quietest stretch is the noise.
    tight = to_model_audio(silence(120, 16000) + clip + clip + silence(60, 16000), 16000)
    assert estimate_snr_db(tight) == MAX_SNR_DB
    for condition, low, high in (("white20", 17.0, 24.0), ("pink10", 7.0, 14.0), ("street15", 11.0, 18.0)):
        noisy = to_model_audio(noisy_line(clip, condition, 0), 8000)
        assert low <= estimate_snr_db(noisy) <= high, condition
    assert estimate_snr_db(np.zeros(100, dtype=np.float32)) == MAX_SNR_DB  # too short to tell


def test_a_noisy_utterance_gets_the_wider_beam() -> None:
    settings = DecodeSettings("m", "int8", 1, 1, "en", True, True, "", noisy_snr_db=20.0, noisy_beam_size=5)
    assert settings.beam_for(14.0) == 5
    assert settings.beam_for(25.0) == 1
    assert DecodeSettings("m", "int8", 1, 2, "en", True, True, "", noisy_snr_db=20.0).beam_for(5.0) == 2
    assert DecodeSettings("m", "int8", 1, 1, "en", True, True, "", noisy_beam_size=5).beam_for(5.0) == 1


@pytest.mark.parametrize(("key", "value"), [("noisy_beam_size", 11), ("noisy_beam_size", -1),
                                            ("noisy_snr_db", -3), ("noisy_snr_db", 61)])
def test_a_bad_noisy_line_setting_names_its_key(tmp_path: Path, key: str, value: float) -> None:
    from voicegate.internal.config import load_config

    path = tmp_path / "config.toml"
    path.write_text(f"[whisper]\n{key} = {value}\n")
    with pytest.raises(ConfigError, match=rf"whisper\.{key}"):
        load_config(path)
    assert Config().whisper.noisy_beam_size == 5
