"""Silero VAD and Smart Turn on real speech (Piper's neural voice), and where their weights come from."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.speech import neural, silence, tone
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.audio.resample import resample
from voicegate.internal.turn.silero import SileroClassifier, shared_silero
from voicegate.internal.turn.smart_turn import shared_smart_turn
from voicegate.internal.turn.weights import (
    SMART_TURN_FILE,
    SMART_TURN_MEMBER,
    TurnModelError,
    extract_model,
    fetch_smart_turn,
    setup_models_dir,
    smart_turn_path,
)

pytestmark = pytest.mark.slow
FRAME = {8000: 320, 16000: 640}


def frames(pcm: bytes, rate: int) -> list[bytes]:
    size = FRAME[rate]
    pcm += bytes(-len(pcm) % size)
    return [pcm[i:i + size] for i in range(0, len(pcm), size)]


def phone(pcm16k: bytes) -> bytes:
    return ulaw_decode(ulaw_encode(resample(pcm16k, 16000, 8000)))


def voiced_fraction(pcm: bytes, rate: int) -> float:
    classifier = SileroClassifier(rate, shared_silero())
    decisions = [classifier.is_speech(frame) for frame in frames(pcm, rate)]
    return sum(decisions) / len(decisions)


@pytest.mark.parametrize("rate", [16000, 8000])
def test_silero_hears_a_voice_and_not_a_tone_or_silence(rate: int) -> None:
    (speech,) = neural(["I would like to change the delivery address of my order."])
    speech = speech if rate == 16000 else phone(speech)
    assert voiced_fraction(speech, rate) > 0.6
    assert voiced_fraction(silence(2000, rate), rate) == 0.0
    # A loud steady tone is "speech" to an energy detector; to Silero it is not a voice.
    assert voiced_fraction(tone(2000, rate, level_dbfs=-12.0), rate) < 0.1


def test_silero_calls_share_one_model_but_not_their_state() -> None:
    speech, other = neural(["Where is my parcel?", "Thank you, that's all."])
    model = shared_silero()
    alone = SileroClassifier(16000, model)
    expected = [alone.is_speech(frame) for frame in frames(speech, 16000)]
    first, second = SileroClassifier(16000, model), SileroClassifier(16000, model)
    together = []
    for frame, noise in zip(frames(speech, 16000), frames(other, 16000) * 2, strict=False):
        together.append(first.is_speech(frame))
        second.is_speech(noise)
    assert together == expected
    with pytest.raises(ValueError, match="8000 or 16000"):
        SileroClassifier(48000, model)


def fragment_before_comma(pcm: bytes, rate: int = 16000) -> bytes:
    """The speech up to the first pause inside the sentence (where the voice paused at a comma)."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    hop = rate // 100
    levels = np.array([np.sqrt(np.mean(samples[i:i + hop] ** 2)) for i in range(0, samples.size - hop, hop)])
    quiet = levels < 0.02 * levels.max()
    start = int(np.argmax(~quiet))
    run = 0
    for index in range(start, quiet.size):
        run = run + 1 if quiet[index] else 0
        if run == 12:  # 120 ms of quiet after speech: the comma
            return pcm[:(index - 11) * hop * 2]
    raise AssertionError("no pause in the sentence")


@pytest.mark.parametrize("rate", [16000, 8000])
def test_smart_turn_hears_a_finished_question_and_an_unfinished_sentence(rate: int) -> None:
    # The half sentence stops on a word that cannot end one ("my"): the model is sure of it (0.01-0.03
    # over six renders of the voice, both rates). A half sentence that could be whole, such as "my phone
    # number is five five five", scored anywhere from 0.01 to 0.76 depending on the voice's prosody.
    question, sentence = neural(["Where is my parcel?", "I want to change my, delivery address."])
    trail = silence(100, 16000)  # what the pipeline gives the model after the caller's last word
    finished = question + trail
    unfinished = fragment_before_comma(sentence) + trail
    if rate == 8000:
        finished, unfinished = phone(finished), phone(unfinished)
    model = shared_smart_turn()
    complete, incomplete = model.probability(finished, rate), model.probability(unfinished, rate)
    assert complete >= 0.5 > incomplete, (complete, incomplete)


async def test_smart_turn_predicts_off_the_event_loop() -> None:
    (question,) = neural(["Can you tell me my balance please?"])
    model = shared_smart_turn()
    before = model.inferences
    probability = await model.predict(question + silence(200, 16000), 16000)
    assert 0.0 <= probability <= 1.0 and model.inferences == before + 1
    assert model.features(np.zeros(100, dtype=np.float32)).shape == (1, 80, 800)


def test_a_configured_model_file_must_be_the_pinned_one(tmp_path: Path) -> None:
    with pytest.raises(TurnModelError, match=r"pipeline\.end_of_turn_model: .*absent.onnx"):
        smart_turn_path(str(tmp_path / "absent.onnx"))
    tampered = tmp_path / "tampered.onnx"
    shutil.copyfile(smart_turn_path(), tampered)
    with tampered.open("r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x00\x01\x02")
    with pytest.raises(TurnModelError, match=r"not Smart Turn v3\.2"):
        smart_turn_path(str(tampered))


def test_without_a_copy_or_a_download_the_error_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(TurnModelError) as error:
        smart_turn_path(download=False, directories=(tmp_path / "a", tmp_path / "b"))
    message = str(error.value)
    assert "pipeline.end_of_turn" in message and str(tmp_path / "a" / SMART_TURN_FILE) in message
    assert "python -m voicegate.internal.turn.weights" in message and 'end_of_turn = "off"' in message


def test_a_wheel_without_the_model_or_with_another_one_leaves_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("pipecat/__init__.py", "")
    with pytest.raises(TurnModelError, match="has no"):
        extract_model(empty, tmp_path / "out")
    wrong = tmp_path / "wrong.whl"
    with zipfile.ZipFile(wrong, "w") as archive:
        archive.writestr(SMART_TURN_MEMBER, b"not the model")
    with pytest.raises(TurnModelError, match="not the pinned model"):
        extract_model(wrong, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def offline_pip_env(tmp_path: Path) -> dict[str, str]:
    """pip with no index it can reach, no links, no cache: as on a machine without a network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VOICEGATE_"))}
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_CACHE_DIR": "1",
                "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "XDG_CACHE_HOME": str(tmp_path / "cache"),
                "HF_HUB_OFFLINE": "1"})
    return env


def test_an_unreachable_index_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in offline_pip_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(TurnModelError, match=r"pip download pipecat-ai==1\.14\.0 failed"):
        fetch_smart_turn(tmp_path / "models")
    assert not (tmp_path / "models" / SMART_TURN_FILE).exists()


def test_the_set_up_fetches_the_pinned_model_from_the_package_index(tmp_path: Path) -> None:
    path = fetch_smart_turn(tmp_path / "models")
    assert path == tmp_path / "models" / SMART_TURN_FILE
    assert smart_turn_path(download=False, directories=(tmp_path / "models",)) == path


def test_the_models_load_from_the_set_ups_files_with_no_network(tmp_path: Path) -> None:
    """A fresh process, no index and no hub reachable: the VAD and the end-of-turn model still load."""
    script = (
        "from voicegate.internal.config import load_config\n"
        "from voicegate.server.providers import build_services\n"
        "from voicegate.internal.llm.local import LocalAgent\n"
        "from voicegate.internal.tts.espeak import EspeakTextToSpeech\n"
        "config = load_config(None)\n"
        "services = build_services(config, None, EspeakTextToSpeech(config.espeak), LocalAgent())\n"
        "print(services.describe_turn_taking())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=offline_pip_env(tmp_path), capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'vad': 'silero'" in done.stdout and "'end_of_turn': 'smart_turn'" in done.stdout
    assert str(setup_models_dir() / SMART_TURN_FILE) in done.stdout


async def test_a_full_model_pool_answers_none_at_once_and_counts_it() -> None:
    """Under load the text rules decide instead of a queue of 90 ms inferences growing behind the callers."""
    (question,) = neural(["Where is my parcel?"])
    model = shared_smart_turn()
    before, waiting = model.skipped, [model.predict(question, 16000) for _ in range(6)]
    results = await asyncio.gather(*waiting)
    assert results.count(None) >= 6 - 2 and model.skipped - before == results.count(None)
    assert all(r is None or 0.0 <= r <= 1.0 for r in results)
