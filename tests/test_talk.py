"""`voicegate talk` on espeak-generated WAV files: the whole local pipeline from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.speech import silence, speak, write_wav

pytestmark = pytest.mark.slow


def test_talk_runs_a_conversation_from_wav_files(tmp_path: Path) -> None:
    hello = write_wav(tmp_path / "hello.wav", silence(200, 16000) + speak("say hello world"), 16000)
    bye = write_wav(tmp_path / "bye.wav", speak("goodbye", 22050), 22050)
    out = tmp_path / "agent.wav"
    env = {
        "VOICEGATE_POCKETSPHINX__PHRASES": json.dumps(["say hello world", "goodbye", "what time is it"]),
        "VOICEGATE_POCKETSPHINX__WORKERS": "1",
        "VOICEGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
    }
    result = run_cli("talk", str(hello), str(bye), "--out", str(out), "--speed", "2", env=env, cwd=tmp_path,
                     timeout=180)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "caller: say hello world" in lines
    assert "agent : Hello world." in lines
    assert any(line.startswith("agent : Goodbye") for line in lines)
    assert "(the agent ended the call)" in lines
    assert any("first_audio" in line for line in lines)  # per-turn timings are printed
    assert out.stat().st_size > 20000


def test_talk_rejects_a_missing_or_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"not a wav at all")
    missing = run_cli("talk", str(tmp_path / "absent.wav"), cwd=tmp_path)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    bad = run_cli("talk", str(broken), cwd=tmp_path)
    assert bad.returncode == 2 and "not a WAV file" in bad.stderr
