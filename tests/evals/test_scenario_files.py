"""Scenario files: what they mean, and every mistake in one named by file, line and key (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.speech import silence, write_wav
from voicegate.internal.evals.scenario import Keys, Pause, Speech, WavFile, load_scenario
from voicegate.internal.evals.yaml_nodes import ScenarioError


def scenario(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_full_scenario_reads_as_written(tmp_path: Path) -> None:
    write_wav(tmp_path / "hello.wav", silence(300, 8000), 8000)
    path = scenario(tmp_path, """
name: books a table
transport: [sip, webrtc]
caller: {number: "+1 555 010 0001", subject: sam}
reply_timeout_s: 12
calls:
  - name: first
    turns:
      - say: "I'd like a table for [pause 1.2s] four people."
        expect:
          said: ["table", "four"]
          tool: {name: memory, args: {action: append}}
          voice_to_voice_ms: 3000
      - parts: [{wav: hello.wav}, {pause_ms: 300}, {say: "Thanks."}]
        barge_in_ms: 800
        timeout_s: 5
    expect:
      ended_by: agent
      memory: {contains: "Sam", not_contains: ["card"]}
      rubric: "Polite."
""")
    loaded = load_scenario(path)
    assert loaded.name == "books a table" and loaded.transports == ("sip", "webrtc")
    call = loaded.calls[0]
    assert call.caller.number == "+15550100001" and call.caller.subject == "sam" and call.caller.trusted
    first, second = call.turns
    # A stretch before a pause ends in a comma, so the voice carries on as a person's would.
    assert first.parts == (Speech("I'd like a table for,"), Pause(1200), Speech("four people."))
    assert first.timeout_s == 12 and first.expect.voice_to_voice_ms == 3000
    assert [p.source for p in first.expect.said] == ["table", "four"]
    assert first.expect.tools[0].name == "memory" and first.expect.tools[0].args["action"].regex.search("APPEND")
    assert second.parts == (WavFile((tmp_path / "hello.wav").resolve()), Pause(300), Speech("Thanks."))
    assert second.barge_in_ms == 800 and second.timeout_s == 5
    assert call.expect.ended_by == "agent" and call.expect.rubric == "Polite."
    assert loaded.memory_owners("sip") == ["sip:+15550100001"] and loaded.memory_owners("webrtc") == ["jwt:sam"]
    assert loaded.needs_memory()


def test_keys_and_defaults(tmp_path: Path) -> None:
    loaded = load_scenario(scenario(tmp_path, "calls:\n  - turns:\n      - dtmf: '12#'\n"))
    assert loaded.name == "s" and loaded.transports == ("sip",) and loaded.reset_memory
    assert loaded.calls[0].turns[0].parts == (Keys("12#"),)


@pytest.mark.parametrize(("text", "line", "key", "reason"), [
    ("calls:\n  - turns:\n      - say: hi\n        expect:\n          sayd: x\n", 5, "calls[0].turns[0].expect.sayd",
     "unknown key"),
    ("calls:\n  - turns:\n      - say: hi\n        expect: {said: '(unclosed'}\n", 4,
     "calls[0].turns[0].expect.said", "not a regular expression"),
    ("name: a\nname: b\ncalls: []\n", 2, "name", "given twice (first on line 1)"),
    ("calls:\n  - turns:\n      - say: hi\n        dtmf: '1'\n", 3, "calls[0].turns[0]", "exactly one of"),
    ("transport: webrtc\ncalls:\n  - turns:\n      - dtmf: '1'\n", 4, "calls[0].turns[0]",
     "keypad keys (dtmf) travel only on a phone call"),
    ("transport: webrtc\ncalls:\n  - turns: [{say: hi}]\n    expect: {memory: {contains: x}}\n", 3, "calls[0]",
     "set caller.subject"),
    ("calls:\n  - turns:\n      - wav: missing.wav\n", 3, "calls[0].turns[0].wav", "no such file"),
    ("calls:\n  - turns:\n      - dtmf: '12x'\n", 3, "calls[0].turns[0].dtmf", "not keypad keys: X"),
    ("calls:\n  - turns:\n      - say: '[pause 90s]'\n", 3, "calls[0].turns[0].say", "a pause lasts 20 ms to 60 s"),
    ("transport: phone\ncalls: []\n", 1, "transport", "expected one of sip, webrtc"),
    ("calls:\n  - turns:\n      - silence_ms: yes\n", 3, "calls[0].turns[0].silence_ms", "expected a whole number"),
    ("calls:\n  - turns: [{say: hi}]\n    expect: {ended_by: nobody}\n", 3, "calls[0].expect.ended_by",
     "expected one of agent, caller"),
    ("calls: [\n", 2, "", "not valid YAML"),
    ("turns: []\n", 1, "turns", "unknown key"),
    ("description: x\n", 1, "calls", "is required"),
])
def test_every_mistake_is_named_by_file_line_and_key(tmp_path: Path, text: str, line: int, key: str,
                                                      reason: str) -> None:
    path = scenario(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    error = caught.value
    assert (error.file, error.line, error.key) == (path, line, key), str(error)
    assert reason in error.message, str(error)
    assert str(error).startswith(f"{path}:{line}: ")


def test_the_command_exits_2_naming_the_file_line_and_key_and_runs_nothing(tmp_path: Path) -> None:
    good = scenario(tmp_path, "calls:\n  - turns: [{say: hi}]\n", "good.yaml")
    bad = scenario(tmp_path, "calls:\n  - turns:\n      - say: hi\n        expect: {voice_to_voice: 3}\n", "bad.yaml")
    done = run_cli("eval", str(good), str(bad), "--target", "sip:agent@127.0.0.1:9")
    assert done.returncode == 2, done.stderr
    assert f"{bad}:4: calls[0].turns[0].expect.voice_to_voice: unknown key" in done.stderr
    assert "voice_to_voice_ms" in done.stderr  # the keys it could have been
    assert "started" not in done.stdout  # nothing was run


def test_the_command_exits_2_when_there_is_nothing_to_run_or_a_bad_target(tmp_path: Path) -> None:
    assert run_cli("eval", str(tmp_path)).returncode == 2
    good = scenario(tmp_path, "calls:\n  - turns: [{say: hi}]\n")
    done = run_cli("eval", str(good), "--target", "ftp://x")
    assert done.returncode == 2 and "give sip:agent@host:port or http://host:port" in done.stderr
