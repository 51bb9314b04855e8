"""Which speech engines a config gets: the offline defaults, and what happens when Piper cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from voicegate.internal.config import Config, ConfigError
from voicegate.internal.tts.espeak import EspeakTextToSpeech
from voicegate.server.providers import build_tts, check_providers, effective_tts_provider


def config_in(tmp_path: Path) -> Config:
    config = Config()
    config.server.data_dir = str(tmp_path / "data")
    return config


def test_the_defaults_are_whisper_and_piper(tmp_path: Path) -> None:
    config = config_in(tmp_path)
    assert config.stt.provider == "whisper"
    assert effective_tts_provider(config) == "piper"


def test_auto_falls_back_to_espeak_and_says_why_when_the_voice_is_missing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = config_in(tmp_path)
    config.piper.voice = str(tmp_path / "no-such-voice.onnx")
    caplog.set_level("INFO")
    assert effective_tts_provider(config) == "espeak"
    assert isinstance(build_tts(config), EspeakTextToSpeech)
    assert "no-such-voice.onnx" in caplog.text and "espeak-ng" in caplog.text


def test_auto_falls_back_when_the_piper_program_is_not_there(tmp_path: Path) -> None:
    config = config_in(tmp_path)
    config.piper.command = ["/nonexistent/piper"]
    assert effective_tts_provider(config) == "espeak"


def test_piper_chosen_explicitly_refuses_to_start_and_names_the_key(tmp_path: Path) -> None:
    config = config_in(tmp_path)
    config.tts.provider = "piper"
    config.piper.voice = str(tmp_path / "no-such-voice.onnx")
    with pytest.raises(ConfigError, match=r'tts\.provider: "piper" cannot run: .*no-such-voice\.onnx'):
        check_providers(config)
