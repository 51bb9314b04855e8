"""The phone-band end-of-turn head: its pinned weights, and its verdict through the real Whisper decode.

Real models throughout: Whisper tiny.en (the recogniser's decode, whose encoder states the head reads),
espeak-ng speaking sentences none of the head's training turns use, through 8 kHz G.711 mu-law.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from bench.turns.cases import channel
from voicegate.internal.audio.resample import resample
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.stt.phone_turn import (
    POOL_SPANS,
    WEIGHTS_SHA256,
    PhoneTurnWeightsError,
    load_head,
    parse_weights,
    pool_states,
    shared_head,
    weights_path,
)
from voicegate.internal.stt.whisper import decode_settings
from voicegate.internal.stt.whisper_decode import WhisperDecoder, to_model_audio, window_frames
from voicegate.internal.stt.whisper_models import resolve_model
from voicegate.internal.tts.espeak import parse_wav_header

# "|": where the caller pauses. None of these is in scripts/train_phone_turn.py's training sentences.
SENTENCES = [
    "I would like to order | a large pizza with mushrooms.",
    "Can you tell me the way to | the nearest train station?",
    "My brother will pick up | the keys on Tuesday.",
]
OFFSET_MS = 120  # the pipeline's VAD offset: the silence the decode hears after the last word
PAUSE_MS = 900


@lru_cache(maxsize=1)
def decoder() -> WhisperDecoder:
    with tempfile.TemporaryDirectory() as work:
        model = resolve_model("tiny.en", Path(work))
    return WhisperDecoder(decode_settings(WhisperConfig(), model))


def espeak_pause(marked: str) -> tuple[bytes, int]:
    """16 kHz PCM16 of espeak-ng saying the sentence with a pause at "|" (SSML), and where the pause starts."""
    ssml = "<speak>" + marked.replace("|", f'<break time="{PAUSE_MS}ms"/>') + "</speak>"
    wav = subprocess.run(["espeak-ng", "-m", "-v", "en-us", "-s", "160", "--stdout", ssml], capture_output=True,
                         check=True).stdout
    pcm = resample(wav[44:], parse_wav_header(wav[:44]), 16000)
    samples = np.frombuffer(pcm, dtype=np.int16)
    loud = np.abs(samples[: len(samples) // 160 * 160].reshape(-1, 160)).max(axis=1) > 300  # 10 ms frames
    quiet_runs, start = [], None
    for index, is_loud in enumerate(loud):
        if not is_loud and start is None:
            start = index
        elif is_loud and start is not None:
            quiet_runs.append((index - start, start))
            start = None
    length, first = max(quiet_runs)  # the longest quiet stretch inside the speech: the pause
    assert length * 10 >= PAUSE_MS * 0.8, "espeak-ng left no pause at the mark"
    return pcm, first * 160 * 2


def as_phone_turn(pcm16k: bytes) -> np.ndarray:
    """What the decode hears: through 8 kHz G.711, a VAD offset of silence after the last word."""
    samples = np.frombuffer(pcm16k, dtype=np.int16)
    voiced = np.nonzero(np.abs(samples) > 300)[0]
    end = int(voiced[-1]) + 1 if voiced.size else samples.size
    heard = samples[:end].tobytes() + bytes(16 * OFFSET_MS * 2)
    return to_model_audio(channel(heard, 8000), 8000)


def test_the_weights_load_and_their_hash_is_pinned() -> None:
    head = shared_head()
    assert head.weights.shape == head.mean.shape == head.scale.shape
    assert head.weights.size == 384 * len(POOL_SPANS)  # tiny.en's state width, per pooled span
    assert load_head(weights_path()) is not None


def test_a_changed_weights_file_is_refused(tmp_path: Path) -> None:
    data = json.loads(weights_path().read_text())
    data["bias"] = data["bias"] + 1.0
    tampered = tmp_path / "phone_turn_weights.json"
    tampered.write_text(json.dumps(data) + "\n")
    with pytest.raises(PhoneTurnWeightsError, match="not the pinned"):
        load_head(tampered)
    with pytest.raises(PhoneTurnWeightsError, match="missing"):
        load_head(tmp_path / "absent.json")
    data["pool_spans"] = [[-10, 0]]
    with pytest.raises(PhoneTurnWeightsError, match="pooling"):
        parse_weights(data)
    assert WEIGHTS_SHA256 != "unset"


def test_a_decoder_without_the_head_leaves_the_field_empty() -> None:
    plain = WhisperDecoder(replace(decoder().settings, end_of_turn_head=False))
    audio = as_phone_turn(espeak_pause(SENTENCES[0])[0])
    assert plain.decode(audio).end_of_turn is None


@pytest.mark.parametrize("marked", SENTENCES)
def test_a_finished_sentence_scores_above_the_same_sentence_cut_at_its_pause(marked: str) -> None:
    pcm, pause_at = espeak_pause(marked)
    finished = decoder().decode(as_phone_turn(pcm))
    cut = decoder().decode(as_phone_turn(pcm[:pause_at]))
    assert finished.end_of_turn is not None and cut.end_of_turn is not None
    assert finished.end_of_turn > cut.end_of_turn, (finished, cut)


def test_the_pooled_states_are_deterministic() -> None:
    audio = as_phone_turn(espeak_pause(SENTENCES[1])[0])
    whisper = decoder()
    frames = window_frames(audio.size / 16000, True)
    first = pool_states(np.asarray(whisper.encode([audio], frames))[0], audio.size)
    second = pool_states(np.asarray(whisper.encode([audio], frames))[0], audio.size)
    assert first.shape == (384 * len(POOL_SPANS),)
    assert np.array_equal(first, second)
    assert whisper.decode(audio).end_of_turn == whisper.decode(audio).end_of_turn
