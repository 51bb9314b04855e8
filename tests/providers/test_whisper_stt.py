"""Whisper (faster-whisper, tiny.en from its pinned package) on real speech, in real worker processes.

The speech comes from Piper's neural voice and from espeak-ng, through G.711 where a phone would put
it; the sentences are not the ones bench/speech/recognition.py measured the defaults on.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common.figures import word_errors
from tests.speech import neural, neural_telephone, silence, speak, tone
from voicegate.internal.config import Config
from voicegate.internal.config.loader import ConfigError
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.devices import cuda_devices_ctranslate2
from voicegate.internal.stt.whisper import WhisperSpeechToText, vocabulary_prompt
from voicegate.internal.stt.whisper_decode import FULL_WINDOW_FRAMES, repeats_itself, window_frames
from voicegate.internal.stt.whisper_models import (
    PINNED,
    PackagePart,
    PinnedModel,
    VerifiedFiles,
    WhisperModelError,
    assemble,
    resolve_model,
    sha256_of,
    verify,
)
from voicegate.server.providers import build_stt

pytestmark = pytest.mark.slow
CUDA_DEVICES = cuda_devices_ctranslate2()
shared_loop = pytest.mark.asyncio(loop_scope="module")

SENTENCES = [
    "I would like to report a problem with my last bill.",
    "Can you move my appointment to next Tuesday morning?",
    "My order number is seven three one, four eight two.",
    "Please send the receipt to my email address.",
    "Why was I charged twice this month?",
    "I am calling about the job advertised on your website.",
]


def padded(pcm: bytes, rate: int) -> bytes:
    return silence(300, rate) + pcm + silence(300, rate)


async def error_rate(engine: WhisperSpeechToText, clips: list[bytes], rate: int) -> tuple[float, list[str]]:
    heard = [await engine.transcribe(padded(clip, rate), rate) for clip in clips]
    errors = [word_errors(ref, text) for ref, text in zip(SENTENCES, heard, strict=True)]
    return sum(e for e, _ in errors) / sum(n for _, n in errors), heard


@shared_loop
async def test_a_neural_voice_on_the_phone_is_understood(whisper: WhisperSpeechToText) -> None:
    rate, heard = await error_rate(whisper, [neural_telephone(s) for s in SENTENCES], 8000)
    assert rate <= 0.10, heard
    assert whisper.model.source == "package" and whisper.model.name == "tiny.en"


@shared_loop
async def test_a_neural_voice_at_16_khz_is_understood(whisper: WhisperSpeechToText) -> None:
    rate, heard = await error_rate(whisper, neural(SENTENCES, 16000), 16000)
    assert rate <= 0.10, heard


@shared_loop
async def test_a_robotic_voice_is_mostly_understood(whisper: WhisperSpeechToText) -> None:
    # espeak-ng is a much harder voice for every engine (../shared/TESTING.md); a loose bound.
    rate, heard = await error_rate(whisper, [speak(s, 16000) for s in SENTENCES], 16000)
    assert rate <= 0.35, heard


@shared_loop
async def test_silence_and_a_tone_are_not_turned_into_words(whisper: WhisperSpeechToText) -> None:
    assert await whisper.transcribe(silence(2000, 8000), 8000) == ""
    assert await whisper.transcribe(tone(1500, 8000, level_dbfs=-25.0), 8000) == ""


@shared_loop
async def test_a_stream_hears_each_utterance_with_the_rest_of_its_turn_in_order(whisper: WhisperSpeechToText) -> None:
    stream = whisper.open(8000)
    first, second = neural_telephone("Good morning."), neural_telephone("I need some help with my account.")

    def say(clip: bytes) -> None:
        for start in range(0, len(clip), 320):
            stream.push(clip[start:start + 320])
        stream.end_of_speech()

    say(first)
    say(second)
    stream.push(silence(60, 8000))
    stream.end_of_speech()  # a click: too short to decode, the turn's text as it stands
    stream.new_turn()
    say(second)
    results = stream.results()
    finals = [await anext(results) for _ in range(4)]
    await stream.aclose()
    assert all(f.whole_turn and f.final for f in finals)
    assert "morning" in finals[0].text.lower() and "account" not in finals[0].text.lower()
    # The second utterance is heard with the first: the final is the whole turn so far.
    assert "morning" in finals[1].text.lower() and "account" in finals[1].text.lower()
    assert finals[2].text == finals[1].text
    # A new turn forgets the old one.
    assert "account" in finals[3].text.lower() and "morning" not in finals[3].text.lower()


async def test_a_killed_worker_is_replaced_and_its_utterance_still_transcribed(tmp_path: Path) -> None:
    engine = WhisperSpeechToText(WhisperConfig(workers=1), tmp_path / "models")
    try:
        await engine.warm_up()
        (pid,) = engine.pool.worker_pids()
        os.kill(pid, signal.SIGKILL)
        text = await engine.transcribe(padded(neural_telephone("Please cancel my order."), 8000), 8000)
        assert "cancel" in text.lower()
        assert engine.pool.replaced == 1
        (new_pid,) = engine.pool.worker_pids()
        assert new_pid != pid
        # killed in the middle of a decode: that decode is retried in the new worker
        pending = asyncio.create_task(engine.transcribe(padded(neural_telephone("Where is my parcel?"), 8000), 8000))
        while engine.pool.running == 0:  # handed to the worker: a decode takes far longer than this wait
            await asyncio.sleep(0)
        os.kill(new_pid, signal.SIGKILL)
        assert "parcel" in (await asyncio.wait_for(pending, 120)).lower()
        assert engine.pool.replaced == 2
    finally:
        await engine.aclose()


def test_the_feature_window_fits_the_utterance_with_a_margin() -> None:
    assert window_frames(1.0, True) == 1000
    assert window_frames(8.0, True) == 1400
    assert window_frames(29.0, True) == FULL_WINDOW_FRAMES
    assert window_frames(1.0, False) == FULL_WINDOW_FRAMES


def test_the_deployers_vocabulary_becomes_one_prompt() -> None:
    config = WhisperConfig(initial_prompt="Acme Telecom support line.", hotwords=["FibreMax", " Zentro "])
    assert vocabulary_prompt(config) == "Acme Telecom support line. FibreMax, Zentro."
    assert vocabulary_prompt(WhisperConfig()) == ""


@shared_loop
@pytest.mark.skipif(CUDA_DEVICES > 0, reason="this machine has a CUDA device: whisper.device auto chooses it")
async def test_auto_on_a_machine_without_a_gpu_decodes_on_the_cpu_in_int8(whisper: WhisperSpeechToText) -> None:
    assert whisper.settings.device == "cpu" and whisper.settings.compute_type == "int8"
    assert whisper.describe()["device"] == "cpu" and whisper.describe()["compute_type"] == "int8"
    text = await whisper.transcribe(padded(neural_telephone("Please cancel my order."), 8000), 8000)
    assert "cancel" in text.lower(), text


@pytest.mark.skipif(CUDA_DEVICES == 0, reason="no CUDA device on this machine: CTranslate2 counts none, so a "
                    'decode with whisper.device = "cuda" cannot run (test_devices.py checks that it is refused)')
async def test_a_decode_on_cuda_runs_in_float16_and_hears_the_words(tmp_path: Path) -> None:
    engine = WhisperSpeechToText(WhisperConfig(workers=1, device="cuda"), tmp_path / "models")
    try:
        assert (engine.settings.device, engine.settings.compute_type) == ("cuda", "float16")
        await engine.warm_up()
        rate, heard = await error_rate(engine, [neural_telephone(s) for s in SENTENCES], 8000)
        assert rate <= 0.10, heard
    finally:
        await engine.aclose()


async def test_hotwords_steer_an_unusual_name(tmp_path: Path) -> None:
    clip = padded(neural_telephone("I want to upgrade to Zentrolux."), 8000)
    engine = WhisperSpeechToText(WhisperConfig(workers=1, hotwords=["Zentrolux"]), tmp_path / "models")
    try:
        assert "zentrolux" in (await engine.transcribe(clip, 8000)).lower()
    finally:
        await engine.aclose()


# ---- where the model comes from ---------------------------------------------------------------


def test_an_unknown_model_with_no_download_names_everything_it_tried(tmp_path: Path) -> None:
    with pytest.raises(WhisperModelError) as caught:
        resolve_model("large-v9", tmp_path, download=False)
    message = str(caught.value)
    assert '"large-v9"' in message
    assert "none is known for 'large-v9'" in message and "tiny.en" in message
    assert "download = false" in message
    assert "CTranslate2 model directory" in message


def test_a_hub_that_cannot_be_reached_is_reported_not_hung_on(tmp_path: Path) -> None:
    # A real process pointed at a hub address where nothing listens: the same on a networked machine.
    script = ("import sys; from pathlib import Path; from voicegate.internal.stt.whisper_models import resolve_model\n"
              "try:\n    resolve_model('small.en', Path(sys.argv[1]))\nexcept Exception as exc:\n"
              "    print(exc)\n    sys.exit(1)\n")
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "5"}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "model hub could not provide it" in done.stdout
    assert "none is known for 'small.en'" in done.stdout


def test_a_directory_without_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WhisperModelError, match=r"no model\.bin there"):
        resolve_model(str(tmp_path / "nothing"), tmp_path)


def test_a_model_directory_is_used_as_given(tmp_path: Path) -> None:
    resolved = resolve_model("tiny.en", tmp_path / "models")
    own = tmp_path / "my-model"
    shutil.copytree(resolved.path, own)
    assert resolve_model(str(own), tmp_path).source == "directory"


def test_a_missing_or_different_package_is_named_with_the_install_command(tmp_path: Path) -> None:
    absent = PinnedModel("x", (PackagePart("voicegate-no-such-model", "1.0", "voicegate_no_such_model", "d"),),
                         {"model.bin": "0" * 64})
    PINNED["test-absent"] = absent
    try:
        with pytest.raises(WhisperModelError) as caught:
            resolve_model("test-absent", tmp_path, download=False)
    finally:
        del PINNED["test-absent"]
    assert "voicegate-no-such-model is not installed" in str(caught.value)
    assert "pip install voicegate-no-such-model==1.0" in str(caught.value)


def test_a_tampered_model_file_is_refused_and_a_changed_file_is_hashed_again(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(resolve_model("tiny.en", tmp_path / "models").path, copy)
    pinned = PINNED["tiny.en"]
    verified = VerifiedFiles(tmp_path / "verified.json")
    assert verify(copy, pinned, verified) == ""
    with (copy / "config.json").open("r+b") as handle:  # same size; the cache must still notice
        first = handle.read(1)
        handle.seek(0)
        handle.write(b" " if first != b" " else b"\t")
    problem = verify(copy, pinned, VerifiedFiles(tmp_path / "verified.json"))
    assert "config.json does not have the pinned SHA-256" in problem
    shutil.copy(resolve_model("tiny.en", tmp_path / "models").path / "config.json", copy / "config.json")
    assert verify(copy, pinned, verified) == ""
    (copy / "vocabulary.txt").unlink()
    assert "vocabulary.txt is missing" in verify(copy, pinned, verified)


def test_a_model_split_across_packages_is_joined_and_checked(tmp_path: Path) -> None:
    part1, part2 = tmp_path / "p1", tmp_path / "p2"
    part1.mkdir()
    part2.mkdir()
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        (part1 / name).write_text(name)
    (part1 / "model.bin.part1").write_bytes(b"first half|")
    (part2 / "model.bin.part2").write_bytes(b"second half")
    target = tmp_path / "joined"
    assemble(PinnedModel("split", (), {}, split=("model.bin.part1", "model.bin.part2")), [part1, part2], target,
             lambda _m: None)
    assert (target / "model.bin").read_bytes() == b"first half|second half"
    expected = {name: sha256_of(target / name) for name in ("model.bin", "config.json")}
    assert verify(target, PinnedModel("split", (), expected), VerifiedFiles(tmp_path / "v.json")) == ""


def test_the_server_names_the_key_when_the_model_cannot_be_found(tmp_path: Path) -> None:
    config = Config()
    config.server.data_dir = str(tmp_path / "data")
    config.whisper.model = "medium.en"
    config.whisper.download = False
    with pytest.raises(ConfigError, match=r'whisper\.model: no Whisper model "medium.en"'):
        build_stt(config)


def test_a_phrase_that_repeats_itself_is_not_trusted() -> None:
    assert repeats_itself("Repeat after me. Repeat after me. Repeat after me. Repeat after me")
    assert repeats_itself("I need to change the address on my account. I need to change the address on my")
    assert repeats_itself("Okay. Okay.")
    assert not repeats_itself("Repeat after me, the parcel arrived.")
    assert not repeats_itself("Yes.")
    assert not repeats_itself("")
    assert not repeats_itself("I need to change the address on my account. I need")


@shared_loop
async def test_a_short_phrase_is_not_repeated_back(whisper: WhisperSpeechToText) -> None:
    retried = whisper.retried
    text = await whisper.transcribe(padded(neural_telephone("Repeat after me."), 8000), 8000)
    assert text.lower().count("repeat") == 1, text
    assert whisper.retried == retried + 1  # the short window repeated itself; the full window did not


@shared_loop
async def test_callers_waiting_together_are_decoded_as_one_batch_and_still_understood(
        whisper: WhisperSpeechToText) -> None:
    clips = [padded(clip, 8000) for clip in neural(SENTENCES[:4], 8000)]
    batches = whisper.pool.batches
    busy = asyncio.create_task(whisper.transcribe(clips[0], 8000, caller="first"))
    await asyncio.sleep(0.05)  # the one worker is busy: the next three callers queue up together
    queued = [asyncio.create_task(whisper.transcribe(clip, 8000, caller=f"caller-{i}"))
              for i, clip in enumerate(clips[1:], start=1)]
    heard = [await busy, *[await task for task in queued]]
    assert whisper.pool.batches == batches + 1, "the three queued utterances went to the worker as one batch"
    errors = [word_errors(ref, text) for ref, text in zip(SENTENCES[:4], heard, strict=True)]
    assert sum(e for e, _ in errors) / sum(n for _, n in errors) <= 0.1, heard
    assert whisper.describe()["batch_size"] == 4


LONG_SENTENCES = [
    "I would like to change the delivery address for my order to my office, which is at twelve Oak Street, "
    "and it should arrive before Friday please.",
    "Please cancel my subscription at the end of the month and send me a confirmation by email to the "
    "address on my account.",
]


@shared_loop
async def test_a_long_turn_is_decoded_while_the_caller_speaks_and_only_its_tail_at_the_end(
        whisper: WhisperSpeechToText) -> None:
    """Decoding during speech (whisper.early_decode_s): the first seconds are heard while the caller still
    talks, the end of speech decodes only the rest with those words as its prompt, and the words
    understood are as good as one decode of the whole turn."""
    clips = [neural_telephone(s) for s in LONG_SENTENCES]
    whole = [await whisper.transcribe(padded(clip, 8000), 8000) for clip in clips]
    parted = []
    for clip in clips:
        stream = whisper.open(8000)
        audio = padded(clip, 8000)
        for start in range(0, len(audio), 320):
            stream.push(audio[start:start + 320])
            if start % 16000 == 0:
                await asyncio.sleep(0.2)  # a second of speech: the early decode runs as it would live
        stream.end_of_speech()
        parted.append((await anext(stream.results())).text)
        assert stream.early_decodes >= 1 and stream.tail_decodes == 1, parted[-1]
        await stream.aclose()
    errors_whole = [word_errors(ref, text) for ref, text in zip(LONG_SENTENCES, whole, strict=True)]
    errors_parted = [word_errors(ref, text) for ref, text in zip(LONG_SENTENCES, parted, strict=True)]
    rate_whole = sum(e for e, _ in errors_whole) / sum(n for _, n in errors_whole)
    rate_parted = sum(e for e, _ in errors_parted) / sum(n for _, n in errors_parted)
    print(f"whole turn {rate_whole:.1%}: {whole}\nparted {rate_parted:.1%}: {parted}")
    assert rate_parted <= max(0.12, rate_whole + 0.05), (parted, whole)


def test_the_early_cut_goes_at_the_quietest_frame_and_a_carried_full_stop_is_dropped() -> None:
    from voicegate.internal.stt.workers import join_words, quietest_cut

    loud, quiet = tone(400, 8000, level_dbfs=-20.0), silence(100, 8000)
    audio = loud + quiet + loud + loud
    cut = quietest_cut(audio, 8000, len(audio) - 300 * 16, search_ms=800)
    assert cut == len(loud) + 2 * 320  # two frames into the 100 ms gap
    joined = join_words("I need to cancel my order.", "and get a refund.")
    assert joined == "I need to cancel my order and get a refund."
    assert join_words("I need to cancel my order.", "Thanks.") == "I need to cancel my order. Thanks."
    assert join_words("", "Hello.") == "Hello."


@pytest.mark.parametrize(("earlier", "later", "joined"), [
    # Whisper wrote its prompt out again before the new words (noise): the copy goes.
    ("I'd like to move my appointment.", "I'd like to move my appointment to Friday.",
     "I'd like to move my appointment to Friday."),
    ("The parcel arrived broken and the box was wet.", "The box was wet, so I need a new one.",
     "The parcel arrived broken and the box was wet so I need a new one."),
    ("Please call me back.", "Please call me back.", "Please call me back."),
    # Not an echo: fewer than three words again, or a group of a number read twice.
    ("Yes.", "Yes, please.", "Yes. Yes, please."),
    ("My number is five five five.", "five five five one two three.",
     "My number is five five five five five five one two three."),
    ("I need to cancel my order.", "and get a refund.", "I need to cancel my order and get a refund."),
])
def test_a_later_part_that_echoes_the_earlier_parts_words_loses_the_echo(earlier: str, later: str,
                                                                        joined: str) -> None:
    from voicegate.internal.stt.workers import join_words

    assert join_words(earlier, later) == joined
