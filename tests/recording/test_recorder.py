"""The stereo recorder with real writer threads and real files: channels, the call's clock, sidecars,
file modes, opt-out, an erasure while the call is being recorded, and a disk that cannot keep up."""

from __future__ import annotations

import json
import stat
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest

from voicegate.internal.recording.recorder import CHUNK_FRAMES, CallRecorder, new_info
from voicegate.internal.recording.store import RecordingStore
from voicegate.internal.recording.writers import RecordingWriters

RATE = 8000
FRAME = RATE // 50 * 2


def frame(value: int) -> bytes:
    return np.full(FRAME // 2, value, dtype="<i2").tobytes()


@pytest.fixture
def writers() -> Iterator[RecordingWriters]:
    pool = RecordingWriters(2, 10 * RATE * 4)
    yield pool
    pool.close()


def recorder(store: RecordingStore, writers: RecordingWriters, kind: str = "wav",
             session: str = "a1b2c3") -> CallRecorder:
    info = new_info(session, kind, RATE, transport="sip", owner_key="f" * 64, identity_kind="sip",  # type: ignore[arg-type]
                    consent="granted", call_id="call-1@example")
    return CallRecorder(store, writers, info, kind)  # type: ignore[arg-type]


def wait_for(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def read_wav(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with wave.open(str(path)) as wav:
        assert wav.getnchannels() == 2 and wav.getframerate() == RATE and wav.getsampwidth() == 2
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    return samples[:, 0], samples[:, 1]


def test_caller_left_agent_right_on_the_tick_clock_with_silence_where_either_was_quiet(
        tmp_path: Path, writers: RecordingWriters) -> None:
    store = RecordingStore(tmp_path / "recordings")
    rec = recorder(store, writers)
    # Ticks 0-4: the agent speaks (100) before the caller's first packet; ticks 5-9 both; tick 10-11 the
    # agent is quiet (None); a caller burst of two frames in tick 12.
    for _ in range(5):
        rec.said(frame(100))
    for _ in range(5):
        rec.heard(frame(7))
        rec.said(frame(100))
    rec.heard(frame(7))
    rec.said(None)
    rec.heard(frame(7))
    rec.said(None)
    rec.heard(frame(9))
    rec.heard(frame(9))
    rec.said(frame(100))
    rec.said(frame(100))
    rec.finish("granted")
    path = store.directory / "a1b2c3.wav"
    wait_for(lambda: (info := store.read("a1b2c3")) is not None and info.ended_at is not None)
    left, right = read_wav(path)
    per = FRAME // 2
    assert len(left) == 14 * per  # one frame per tick, nothing more
    assert (left[:5 * per] == 0).all() and (right[:5 * per] == 100).all()
    assert (left[5 * per:12 * per] == 7).all() and (right[5 * per:10 * per] == 100).all()
    assert (right[10 * per:12 * per] == 0).all()
    assert (left[12 * per:14 * per] == 9).all() and (right[12 * per:] == 100).all()
    info = store.read("a1b2c3")
    assert info is not None and info.duration_s == pytest.approx(0.28) and info.bytes == path.stat().st_size
    assert info.owner_key == "f" * 64 and info.call_id == "call-1@example" and info.consent == "granted"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((store.directory / "a1b2c3.json").stat().st_mode) == 0o600
    assert "+1555" not in (store.directory / "a1b2c3.json").read_text()


def test_a_browser_running_ahead_of_the_clock_is_cut_so_the_channels_never_drift(
        tmp_path: Path, writers: RecordingWriters) -> None:
    store = RecordingStore(tmp_path / "recordings")
    rec = recorder(store, writers)
    for _ in range(3 * CHUNK_FRAMES):  # the caller's clock runs 5 % fast for three seconds
        rec.heard(frame(1))
        rec.said(frame(2))
        if _ % 20 == 0:
            rec.heard(frame(1))
    rec.finish("granted")
    wait_for(lambda: (info := store.read("a1b2c3")) is not None and info.ended_at is not None)
    left, right = read_wav(store.directory / "a1b2c3.wav")
    assert len(left) == len(right) == 3 * CHUNK_FRAMES * FRAME // 2
    assert rec.dropped_lead == 0  # 8 frames ahead at most: within MAX_LEAD


def test_opus_recording_decodes_to_two_channels_with_the_right_content(
        tmp_path: Path, writers: RecordingWriters) -> None:
    store = RecordingStore(tmp_path / "recordings")
    rec = recorder(store, writers, "opus")
    tone = (np.sin(np.arange(FRAME // 2) * 2 * np.pi * 400 / RATE) * 8000).astype("<i2").tobytes()
    for _ in range(2 * CHUNK_FRAMES):
        rec.heard(tone)
        rec.said(None)
    rec.finish("announced")
    wait_for(lambda: (info := store.read("a1b2c3")) is not None and info.ended_at is not None)
    with av.open(str(store.directory / "a1b2c3.ogg")) as container:
        chunks = [f.to_ndarray() for f in container.decode(audio=0)]
    audio = np.concatenate(chunks, axis=1)
    assert audio.shape[0] == 2 and abs(audio.shape[1] / 48000 - 2.0) < 0.05
    left, right = np.abs(audio[0]).mean(), np.abs(audio[1]).mean()
    assert left > 0.1 and right < 0.01, (left, right)


def test_opting_out_deletes_the_file_and_its_sidecar(tmp_path: Path, writers: RecordingWriters) -> None:
    store = RecordingStore(tmp_path / "recordings")
    rec = recorder(store, writers)
    for _ in range(2 * CHUNK_FRAMES):
        rec.heard(frame(5))
        rec.said(frame(5))
    wait_for(lambda: store.read("a1b2c3") is not None)
    rec.finish("opted_out", keep=False)
    wait_for(lambda: not any(store.directory.iterdir()))


def test_an_erasure_during_the_call_stops_the_writer_and_nothing_comes_back(
        tmp_path: Path, writers: RecordingWriters) -> None:
    store = RecordingStore(tmp_path / "recordings")
    rec = recorder(store, writers)
    for _ in range(CHUNK_FRAMES):
        rec.heard(frame(5))
        rec.said(frame(5))
    wait_for(lambda: (store.directory / "a1b2c3.wav").exists() and store.read("a1b2c3") is not None)
    assert store.delete_owner("f" * 64) == ["a1b2c3.wav"]  # what `voicegate memory delete` does
    for _ in range(3 * CHUNK_FRAMES):  # the call goes on
        rec.heard(frame(5))
        rec.said(frame(5))
    rec.finish("granted")
    time.sleep(0.5)
    writers.close()
    assert list(store.directory.iterdir()) == []


def test_a_disk_that_cannot_keep_up_costs_audio_never_memory_and_the_length_is_kept(tmp_path: Path) -> None:
    store = RecordingStore(tmp_path / "recordings")
    pool = RecordingWriters(1, 2 * RATE * 4)  # two seconds of audio may wait, no more
    stall = threading.Event()
    pool.control(0, lambda: stall.wait(30))  # the disk stalls
    rec = recorder(store, pool)
    for _ in range(6 * CHUNK_FRAMES):
        rec.heard(frame(3))
        rec.said(frame(4))
    assert pool.pending_bytes <= 2 * RATE * 4 and pool.refused >= 3
    rec.finish("granted")
    stall.set()
    pool.close()
    info = store.read("a1b2c3")
    assert info is not None and info.gaps_s >= 3.0 and info.duration_s == 6.0
    left, right = read_wav(store.directory / "a1b2c3.wav")
    assert len(left) == 6 * RATE  # gaps are silence of the same length: the clock holds
    assert (left == 0).sum() >= 3 * RATE and (right == 4).sum() >= 2 * RATE


def test_sweep_removes_what_retention_passed_and_orphans(tmp_path: Path, writers: RecordingWriters) -> None:
    store = RecordingStore(tmp_path / "recordings")
    rec = recorder(store, writers)
    rec.said(frame(1))
    rec.finish("granted")
    wait_for(lambda: (info := store.read("a1b2c3")) is not None and info.ended_at is not None)
    orphan = store.directory / "deadbeef.wav"
    orphan.write_bytes(b"x")
    assert store.sweep(30, now=time.time()) == 0
    assert store.sweep(30, now=time.time() + 31 * 86400) == 2
    assert list(store.directory.iterdir()) == []
    assert json.dumps(store.totals()) == "[0, 0]"
