"""Judging what a call recorded: which words and sounds answer which turn, each expectation, the rubric
(against a local server speaking OpenAI's protocol), and the JUnit and HTML reports."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.fakes.openai_fake import FakeOpenAI
from voicegate.internal.config import load_config
from voicegate.internal.evals.checks import CallFacts, Check, call_checks, said_checks, turn_checks
from voicegate.internal.evals.conversation import TurnRecord
from voicegate.internal.evals.html_report import write_html
from voicegate.internal.evals.judge import NO_LLM, judge
from voicegate.internal.evals.junit import junit_xml
from voicegate.internal.evals.replies import GREETING, AgentLine, TurnView, attribute
from voicegate.internal.evals.results import CallResult, Clip, ScenarioResult, TurnResult
from voicegate.internal.evals.scenario import Pattern, Turn, load_scenario
from voicegate.internal.evals.server_api import Observed
from voicegate.internal.evals.voice import Sound
from voicegate.internal.evals.wire import Frame, Mouth, Run, Track, speech_runs, stereo_clip
from voicegate.internal.llm.openai import OpenAIChatModel

SCENARIO = """
name: judged
caller: {number: "+15550100099"}
calls:
  - turns:
      - say: "What can you do?"
        expect:
          said: "offline assistant"
          not_said: "voicegate"
          tool: {name: memory, args: {action: append, content: "Sam"}}
          voice_to_voice_ms: 1500
      - say: "Stop, what time is it?"
        barge_in_ms: 1000
        expect:
          stopped_within_ms: 1000
          understood: "what time is it"
          replies: 1
    expect:
      ended_by: agent
      transferred_to: sales
      memory: {contains: "name is Sam", not_contains: "tea"}
      recognised: true
      rubric: "The agent answers both questions."
"""


def transcript(at: float, role: str, text: str, replaces: bool = False) -> Observed:
    return Observed(at, {"type": "transcript", "role": role, "text": text, "final": True, "replaces": replaces})


def played(turns: list[tuple[float, float]], scenario_turns: list[Turn]) -> list[TurnRecord]:
    records = []
    for (start, end), turn in zip(turns, scenario_turns, strict=True):
        record = TurnRecord(turn)
        mouth = Mouth(8000)
        record.utterance = mouth.say([Sound(pcm=b"")])
        record.utterance.started_at = record.utterance.first_loud_at = start
        record.utterance.last_loud_at = end
        records.append(record)
    return records


def test_each_line_and_sound_goes_to_the_turn_it_answers(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    call = load_scenario(path).calls[0]
    # Greeting 0.2-2.0; turn 1 spoken 3.0-4.0, answered 5.0-9.0 until the caller cuts in at 6.0 (turn 2,
    # 6.0-7.5) and the agent falls silent at 6.8; the answer to turn 2 runs 8.6-9.5.
    records = played([(3.0, 4.0), (6.0, 7.5)], list(call.turns))
    runs = [Run(0.2, 2.0), Run(5.0, 6.8), Run(8.6, 9.5)]
    events = [
        transcript(2.1, "agent", "Hello, this is voicegate."),
        transcript(4.6, "user", "What can"),
        transcript(4.7, "user", "What can you do?", replaces=True),
        Observed(4.8, {"type": "tool", "name": "memory", "arguments": {"action": "append", "content": "- Sam."},
                       "ok": True}),
        # The cut reply's line arrives after the caller began turn 2: it still answers turn 1.
        Observed(7.0, {"type": "response", "text": "I'm the offline assistant", "interrupted": True}),
        transcript(7.0, "agent", "I'm the offline assistant"),
        transcript(8.1, "user", "Stop, what time is it?"),
        transcript(9.7, "agent", "It's noon."),
    ]
    greeting, first, second = attribute(records, runs, events)
    assert greeting.index == GREETING and greeting.said == "Hello, this is voicegate."
    assert first.said == "I'm the offline assistant" and first.agent[0].interrupted
    assert first.understood == ["What can you do?"]  # the replacing line took the partial's place
    assert [tool["name"] for tool in first.tools] == ["memory"]
    assert first.voice_to_voice_ms == 1000.0 and not first.talked_over
    assert second.said == "It's noon." and second.understood == ["Stop, what time is it?"]
    assert second.stopped_ms is not None and round(second.stopped_ms) == 800
    assert round(second.voice_to_voice_ms or 0) == 1100

    first.heard, second.heard = "I'm the offline assistant", "It's noon."
    facts = CallFacts(ended_by="agent", end_reason="transferred", transferred_to="sip:sales@pbx.invalid",
                      caller_kind="sip", memory="- The caller's name is Sam.", tools=list(first.tools))
    one = {check.name: check for check in turn_checks(records[0], first, facts)}
    assert all(check.status == "passed" for check in one.values()), one
    two = {check.name: check for check in turn_checks(records[1], second, facts)}
    assert two["agent stopped within 1000 ms"].status == "passed"
    assert two["understood /what time is it/"].status == "passed" and two["replies = 1"].status == "passed"
    whole = {check.name: check for check in call_checks(call, greeting, [first, second], facts)}
    assert all(check.status == "passed" for check in whole.values()), whole


def test_said_needs_the_transcript_and_the_wire_to_agree_and_says_what_each_had() -> None:
    view = TurnView(0, agent=[AgentLine("Nice to meet you, Sam.")], heard="Goodbye.")
    pattern = load_pattern("nice to meet you,? sam")
    (check,) = said_checks((pattern,), False, view, "", "said")
    assert check.status == "failed"
    assert check.detail.startswith("not found in what the agent heard on the wire")
    assert "“Nice to meet you, Sam.”" in check.detail and "“Goodbye.”" in check.detail
    view.heard = "Nice to meet you, Tom."  # a small recogniser's slip on the agent's voice: the same reply
    assert said_checks((pattern,), False, view, "", "said")[0].status == "passed"
    view.heard = "nice to meet you sam"  # punctuation and case do not matter
    assert said_checks((pattern,), False, view, "", "said")[0].status == "passed"
    # Numbers are compared as they sound (a CI run at 4:03 PM: tiny.en heard the time, not "It's").
    clock = TurnView(0, agent=[AgentLine("It's 4:03 PM.")], heard="or zero three p.m.")
    assert said_checks((load_pattern(r"it's \d"),), False, clock, "", "said")[0].status == "passed"
    clock.heard = "Thanks for calling."  # another reply
    assert said_checks((load_pattern(r"it's \d"),), False, clock, "", "said")[0].status == "failed"
    (negated,) = said_checks((load_pattern("sam"),), True, view, "", "not said")
    assert negated.status == "failed" and "found in what the agent said (its transcript) and heard" in negated.detail
    # Without the server's events the wire alone is judged, and the reason is given.
    (wire_only,) = said_checks((pattern,), False, view, "call events are off", "said")
    assert wire_only.status == "passed" and "no server transcript: call events are off" in wire_only.detail


def test_missing_evidence_fails_and_says_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    call = load_scenario(path).calls[0]
    records = played([(3.0, 4.0), (6.0, 7.5)], list(call.turns))
    facts = CallFacts(ended_by="caller", end_reason="client hung up", events_problem="off", tools_problem="off",
                      memory=None, memory_problem="GET /api/admin/memory/sip:+15550100099: 404 memory_disabled")
    views = [TurnView(0), TurnView(1)]
    first = {check.name: check for check in turn_checks(records[0], views[0], facts)}
    assert first["tool memory(action=/append/, content=/Sam/)"].detail == "cannot see the server's tool calls: off"
    assert first["voice to voice <= 1500 ms"].detail == "no reply was heard after the caller finished"
    second = {check.name: check for check in turn_checks(records[1], views[1], facts)}
    assert second["agent stopped within 1000 ms"].detail == "the agent was not speaking when the caller cut in"
    whole = {check.name: check for check in call_checks(call, TurnView(GREETING), views, facts)}
    assert whole["ended by the agent"].detail == "ended by the caller (client hung up)"
    assert whole["memory contains /name is Sam/"].detail.endswith("404 memory_disabled")
    assert whole["transferred to /sales/"].status == "failed"
    assert "cannot tell who the server took the caller for" in whole["caller recognised"].detail
    assert not any(check.status == "passed" for check in whole.values())


def load_pattern(text: str) -> Pattern:
    return Pattern(text, re.compile(text, re.IGNORECASE))


async def test_the_rubric_is_judged_by_the_configured_model_and_skipped_without_one() -> None:
    lines = [["user", "What time is it?"], ["agent", "It's noon."]]
    skipped = await judge("Answers the question.", lines, None)
    assert skipped.status == "skipped" and skipped.detail.startswith("skipped: no LLM configured")
    async with FakeOpenAI() as fake:
        model = OpenAIChatModel(load_config(None).openai, base_url=fake.url + "/v1", api_key="test")
        fake.script_reply("PASS\nIt answered with the time.")
        fake.script_reply("FAIL\nIt never said goodbye.")
        fake.script_reply("It was a nice call.")
        verdicts = [await judge("Answers the question.", lines, model) for _ in range(3)]
        await model.aclose()
    assert [v.status for v in verdicts] == ["passed", "failed", "failed"]
    assert verdicts[0].detail == "It answered with the time." and verdicts[1].detail == "It never said goodbye."
    assert verdicts[2].detail.startswith("the judge gave no verdict")
    sent = fake.requests[0]["messages"][1]["content"]
    assert "Answers the question." in sent and "Caller: What time is it?" in sent and "Agent: It's noon." in sent


def test_audio_is_placed_by_time_and_runs_are_stretches_of_speech() -> None:
    track = Track(8000)
    loud, quiet = (b"\x00\x10" * 160), bytes(320)
    for index in range(20):
        track.add(loud if 5 <= index < 10 or index == 18 else quiet, at=10.0 + index * 0.02)
    assert speech_runs(track.frames, same_run_s=0.1) == [Run(10.1, 10.18), Run(10.36, 10.36)]
    pcm = track.between(10.08, 10.2)
    assert len(pcm) == round(0.12 * 8000) * 2 and pcm[320:640] == loud
    both = stereo_clip(Track(8000), track, 10.0, 10.4)
    assert len(both) == round(0.4 * 8000) * 4
    assert Frame(0.0, loud, -10.0).loud and not Frame(0.0, quiet, -120.0).loud


def test_the_mouth_sends_a_turn_frame_by_frame_and_presses_keys_in_place() -> None:
    pressed: list[str] = []
    mouth = Mouth(8000, press=pressed.append)
    utterance = mouth.say([Sound(pcm=b"\x00\x10" * 400), Sound(keys="12"), Sound(pcm=bytes(320))])
    frames = []
    while mouth.busy:
        frames.append(mouth.frame())
    assert pressed == ["12"] and utterance.done.is_set()
    assert len(frames) == 3 + 20 + 1  # 50 ms of speech in 3 frames, two key presses (200 ms each), a frame of quiet
    assert utterance.first_loud_at is not None and utterance.last_loud_at is not None
    assert mouth.frame() is None  # nothing to say: the transport sends its own silence
    keyless = Mouth(8000)
    keyless.say([Sound(keys="1")])
    while keyless.busy:
        keyless.frame()
    assert keyless.problems == ["keys 1 not sent: this phone has no keypad"]


def test_the_reports_show_every_check_a_player_per_turn_and_the_latency(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    view = TurnView(0, runs=[Run(1.0, 2.0)], agent=[AgentLine("It's noon.")], heard="It's noon.",
                    voice_to_voice_ms=1840.0)
    checks = said_checks((load_pattern("noon"),), False, view, "", "said")
    failing = said_checks((load_pattern("midnight"),), False, view, "", "said")
    call = CallResult(0, "first", [skipped_rubric()], [TurnResult(0, "“What time is it?”", checks + failing, view,
                                                      Clip(bytes(8000 * 4), 8000))],
                      TurnView(GREETING), None, [["user", "What time is it?"], ["agent", "It's noon."]],
                      CallFacts(), 3.0)
    results = [ScenarioResult(scenario, "sip", [call], seconds=3.0)]
    root = ET.fromstring(junit_xml(results))
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("3", "1", "1")
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and "said /midnight/" in (failure.get("message") or "")
    report = tmp_path / "out" / "report.html"
    write_html(results, report)
    html = report.read_text()
    assert "<audio controls" in html and "report_audio/s1-sip-c1-t1.wav" in html
    assert (tmp_path / "out" / "report_audio" / "s1-sip-c1-t1.wav").stat().st_size > 8000 * 4
    assert "1840 ms" in html and "said /midnight/" in html and "skipped: no LLM configured" in html


def skipped_rubric() -> Check:
    return Check("rubric", "skipped", f"skipped: {NO_LLM}")
