"""What a call leg hears while no agent drives it: hold music, a briefing, the other leg."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from tests.speech import speak, tone
from voicegate.internal.telephony.beep import FilterBank
from voicegate.internal.telephony.leg_media import (
    BRIDGE_DEPTH_FRAMES,
    CHIME_PERIOD_S,
    BriefingPort,
    HoldPort,
    bridge,
    chime,
    load_hold_music,
)

FRAME = 320


def test_the_bridge_passes_each_legs_frames_and_keys_to_the_other_with_bounded_delay() -> None:
    keys: list[tuple[str, str]] = []
    a, b = bridge(lambda d: keys.append(("to b", d)), lambda d: keys.append(("to a", d)))
    frames = [bytes([i]) * FRAME for i in range(BRIDGE_DEPTH_FRAMES + 3)]
    for frame in frames:
        a.push_audio(frame)
    # Only the newest frames wait: a leg that fell behind catches up rather than lagging for good.
    assert [b.pull_audio() for _ in range(BRIDGE_DEPTH_FRAMES)] == frames[-BRIDGE_DEPTH_FRAMES:]
    assert b.pull_audio() is None and a.pull_audio() is None
    b.push_audio(frames[0])
    assert a.pull_audio() == frames[0]
    a.push_dtmf("5")
    b.push_dtmf("#")
    assert keys == [("to b", "5"), ("to a", "#")]


def test_hold_music_loops_and_the_default_chime_is_two_soft_notes() -> None:
    sound = chime(8000)
    assert len(sound) == int(8000 * CHIME_PERIOD_S) * 2
    port = HoldPort(sound, 8000)
    frames = [port.pull_audio() for _ in range(int(CHIME_PERIOD_S * 50) + 2)]
    assert frames[0] == frames[int(CHIME_PERIOD_S * 50)]  # it loops
    bank = FilterBank(8000)
    pitches = {round(float(bank.frequencies[bank.strongest(f)[0]])) for f in frames[:20] if f and any(f)}
    assert {650, 675} & pitches and {875, 900} & pitches  # 660 Hz, then 880 Hz
    level = 20 * np.log10(np.abs(np.frombuffer(sound, dtype=np.int16)).max() / 32768)
    assert -30 < level < -20


def test_a_wav_file_becomes_8_khz_mono_hold_music(tmp_path: Path) -> None:
    path = tmp_path / "music.wav"
    stereo = np.repeat(np.frombuffer(tone(500, 16000, -12.0, 440.0), dtype=np.int16), 2)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(stereo.tobytes())
    pcm = load_hold_music(str(path), 8000)
    assert abs(len(pcm) - 8000) <= 64  # 500 ms at 8 kHz, 2 bytes a sample
    with pytest.raises(FileNotFoundError):
        load_hold_music(str(tmp_path / "missing.wav"), 8000)


def test_the_briefing_port_hears_the_targets_hello_and_speaks_what_it_is_given() -> None:
    port = BriefingPort(8000)
    for _ in range(10):
        port.push_audio(bytes(FRAME))
    hello = speak("hello, sales", 8000)
    for index in range(len(hello) // FRAME):
        port.push_audio(hello[index * FRAME:(index + 1) * FRAME])
    for _ in range(40):
        port.push_audio(bytes(FRAME))
    assert port.first_speech_ms is not None and port.last_speech_ms is not None
    assert 200 <= port.first_speech_ms <= 400 and port.last_speech_ms <= 200 + len(hello) // 16 + 60
    port.say(bytes(FRAME * 2 + 10))
    assert port.speaking
    assert [len(port.pull_audio() or b"") for _ in range(4)] == [FRAME, FRAME, FRAME, 0]
    assert not port.speaking


def test_unusable_hold_music_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    from voicegate.internal.config import ConfigError, load_config
    from voicegate.server.providers import check_providers

    config = load_config(None)
    config.sip.transfer_targets = {"sales": "sip:sales@pbx.example"}
    config.warm_transfer.hold_music = str(tmp_path / "nope.wav")
    with pytest.raises(ConfigError) as failure:
        check_providers(config)
    assert any(problem.startswith("warm_transfer.hold_music: cannot use") for problem in failure.value.problems)
    (tmp_path / "text.wav").write_text("not a wav")
    config.warm_transfer.hold_music = str(tmp_path / "text.wav")
    with pytest.raises(ConfigError, match=r"warm_transfer\.hold_music"):
        check_providers(config)
