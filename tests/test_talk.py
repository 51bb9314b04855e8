"""`voicegate talk` on WAV files in a neural voice: the offline defaults (Whisper, Piper) from the command line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.speech import neural, silence, write_wav
from voicegate.internal.audio.resample import resample
from voicegate.internal.llm.local import normalise

pytestmark = pytest.mark.slow


def test_talk_runs_a_conversation_from_wav_files(tmp_path: Path) -> None:
    hello_pcm, bye_pcm = neural(["Say hello world.", "Goodbye."], 16000)
    hello = write_wav(tmp_path / "hello.wav", silence(200, 16000) + hello_pcm, 16000)
    bye = write_wav(tmp_path / "bye.wav", resample(bye_pcm, 16000, 22050), 22050)
    out = tmp_path / "agent.wav"
    env = {"VOICEGATE_WHISPER__WORKERS": "1", "VOICEGATE_PIPER__WORKERS": "1",
           "VOICEGATE_SERVER__DATA_DIR": str(tmp_path / "data")}
    result = run_cli("talk", str(hello), str(bye), "--out", str(out), "--speed", "2", env=env, cwd=tmp_path,
                     timeout=180)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(normalise(line) == "caller say hello world" for line in lines), lines
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


def test_the_talk_example_in_the_docs_runs_as_written(tmp_path: Path) -> None:
    doc = (REPO / "docs" / "agent-runtime.md").read_text()
    block = doc.split("## Trying it: `voicegate talk`", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    (tmp_path / ".venv").symlink_to(REPO / ".venv")  # the commands are written for the repository root
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
    env["VOICEGATE_SERVER__DATA_DIR"] = str(tmp_path / "data")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "agent : Hello world." in done.stdout.splitlines(), done.stdout
    assert (tmp_path / "agent.wav").stat().st_size > 20000


def test_a_one_second_pause_inside_a_phone_number_is_one_turn(tmp_path: Path) -> None:
    """The end-of-turn model hears that "my phone number is five five five ..." goes on."""
    from tests.turn.test_turn_models import fragment_before_comma

    (number,) = neural(["My phone number is five five five, one two three, four five six seven."], 16000)
    first = fragment_before_comma(number)
    paused = write_wav(tmp_path / "number.wav", first + silence(1000, 16000) + number[len(first):], 16000)
    env = {"VOICEGATE_WHISPER__WORKERS": "1", "VOICEGATE_PIPER__WORKERS": "1",
           "VOICEGATE_SERVER__DATA_DIR": str(tmp_path / "data"), "VOICEGATE_PIPELINE__GREETING": ""}
    result = run_cli("talk", str(paused), env=env, cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    heard = [line for line in lines if line.startswith("caller:")]
    replies = [line for line in lines if line.startswith("agent :")]
    assert len(replies) == 1, lines  # one answer, to the whole number
    assert len(heard) == 1, lines  # the caller line the agent answered, not the fragment before the pause too
    assert any("7" in line or "seven" in line for line in heard), heard  # the end of the number was heard
    assert sum(1 for line in lines if "end_of_turn" in line) == 1, lines  # one turn's timings


def test_the_printed_caller_line_is_the_turn_the_agent_answered(capsys: pytest.CaptureFixture[str]) -> None:
    """A fragment the whole turn's transcript replaced is not a caller line of its own."""
    from voicegate.internal.pipeline.events import ReleaseEvent, TranscriptEvent
    from voicegate.server.talk import PrintingSink

    sink = PrintingSink()
    sink.emit(TranscriptEvent(role="user", text="How do I reset my path?", final=True))
    sink.emit(TranscriptEvent(role="user", text="How do I reset my password?", final=True, replaces=True))
    sink.emit(ReleaseEvent(reason="verdict", probability=0.9, silence_ms=300))
    sink.emit(TranscriptEvent(role="agent", text="Use the link on the sign-in page.", final=True))
    sink.emit(TranscriptEvent(role="user", text="Thanks.", final=True))
    sink.emit(ReleaseEvent(reason="verdict"))
    assert capsys.readouterr().out.splitlines() == [
        "caller: How do I reset my password?", "agent : Use the link on the sign-in page.", "caller: Thanks."]
