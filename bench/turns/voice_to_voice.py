"""Benchmark: the wait a caller hears, on the wire, between the end of a question and the first sound of
the answer, over real SIP (not a test).

A real `voicegate serve` process takes the calls: free ports, a temporary config file (memory off, the
local agent, no greeting, `pipeline.debug` on so that it logs each turn's "sip call timing"), and
whatever `--set` adds. sipp is the caller, with the SIP tests' scenario (tests/sip_calls/scenarios/
uac_talk.xml and its fragments). Each call streams, once, a few complete questions spoken by Piper's
neural voice through 8 kHz G.711 mu-law, each followed by `--gap` seconds of silence so that the reply
can finish before the next question.

Both directions are read on the wire by a tap between the two, on 127.0.0.1, with no root and no packet
capture. The caller's SDP names the tap's media port, so voicegate sends its RTP there; the INVITE goes
through the tap (rport in Via brings the answers back through it), which rewrites the m= port of
voicegate's SDP answer to the same media port, so sipp streams its RTP to the tap too, and the tap passes
it on. Every packet's time is the kernel's receive time on the tap's socket (SO_TIMESTAMPNS, wall clock).

For each caller turn, the wait is from the caller's last speech packet (the last packet of a question
whose decoded audio is louder than -45 dBFS; a question's packets less than 1.5 s apart belong to it) to
voicegate's first reply speech packet (the first packet it sent after that moment louder than -45 dBFS,
before the caller speaks again). A turn the agent was still speaking at (it had not finished the previous
reply) has no clean wait and is counted apart, as is a question nobody answered. The table gives p50, p95
and the maximum of the waits, and the p50 of every stage voicegate logged for its turns (stt, end_of_turn,
llm_first_token, tts_first_audio, first_audio, ...), with the words it heard against the words said.

    .venv/bin/python -m bench.turns.voice_to_voice [--stt pocketsphinx|whisper] [--turns 12] [--calls 3]
        [--tts piper|espeak] [--set pipeline.vad=webrtc --set pipeline.vad_offset_ms=200] [--gap 6]
        [--kinds question,greeting,...] [--transport sip|webrtc] [--reference pipecat]

Without --stt it measures pocketsphinx, then Whisper. Figures go to bench/results/voice_to_voice*.json.

The turns: the 12 questions above and 32 short finished turns (greetings, thanks, yes/no, short questions,
short statements), each tagged with its kind, interleaved (without --turns: each said once); the report
gives p50 / p95 per kind. `--transport webrtc` calls the server over WHIP with an aiortc caller instead
(bench/turns/voice_to_voice_webrtc.py: the same wait, read on the caller's RTP packets), and `--reference
pipecat` runs the same turns over WebRTC to voicegate and to Pipecat 1.14's bot
(bench/turns/pipecat_reference.py, installed into bench/.pipecat-venv on first use) and reports both in one table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import percentiles, progress, save, table, word_errors
from bench.common.wire_tap import Address, Heard, WireTap
from tests.sip_calls.conftest import caller_bye, free_port, render, run_sipp, stream
from tests.speech import neural
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.audio.rtp import RtpError, RtpPacket
from voicegate.internal.evals.replies import transcript_line

REPO = Path(__file__).resolve().parents[2]
RATE = 8000
SPEECH_DBFS = -45.0  # a 20 ms packet louder than this is speech (comfort silence is digital zero)
SAME_TURN_S = 1.5  # loud caller packets closer than this are one question (a comma's pause is shorter)
TALKING_OVER_S = 0.3  # agent speech this close before the caller's end: it had not finished its last reply
LEAD_S = 1.0  # silence before the first question: the call's media settles first
READY = "voicegate is ready."  # the banner `serve` prints once it listens
STAGE_ORDER = ["stt", "end_of_turn", "llm_first_token", "tts_first_audio", "first_audio",
               # Pipecat's bot (--reference pipecat), in the order they happen
               "pipecat_vad_stop", "pipecat_transcript", "pipecat_turn_end", "pipecat_released",
               "pipecat_bot_speaking"]

# Questions the local agent answers in a sentence ("who are you" or an unknown request would get a speech
# that runs into the next question), none of them ending the call.
QUESTIONS = [
    "What time is it?",
    "Please repeat after me, the parcel arrived on Monday.",
    "What is the date today?",
    "Thank you very much.",
    "Hello, can you hear me?",
    "Can you tell me the time please?",
    "Repeat after me, the meeting starts at noon.",
    "What day is it today?",
    "Good morning.",
    "What is my name?",
    "Say the blue car is parked outside.",
    "Thanks a lot.",
]
# Short finished turns, the commonest on a phone line and the ones an end-of-turn model is least sure of
# (before answering early, "Hello." and "What is my name?" waited the whole hold). Each is answered by the
# local agent in a few words, none ends the call (tests/test_bench_voice_to_voice.py asks the agent itself).
SHORT_TURNS: dict[str, list[str]] = {
    "greeting": ["Hello.", "Hi there.", "Hey.", "Hi.", "Good afternoon.", "Good evening.", "Hello again."],
    "thanks": ["Thanks.", "Thank you.", "Thanks so much.", "Thank you, that helps.", "Great, thanks.",
               "Okay, thank you."],
    "yes/no": ["Yes, thanks.", "No, thank you.", "Yes, thank you.", "No thanks.", "Yes, my name is Tom.",
               "No, my name is Sara."],
    "short question": ["What's the time?", "What day is it?", "What's the date?", "What's my name?",
                       "What time is it now?", "What's the date today?", "What is the time?"],
    "short statement": ["My name is Anna.", "My name's Ben.", "My name is Priya.", "Call me Sam.",
                        "Repeat after me, it is raining.", "Say the shop is closed."],
}


@dataclass(frozen=True)
class Said:
    text: str
    kind: str  # "question" (QUESTIONS) or a kind of SHORT_TURNS


KINDS = ("question", *SHORT_TURNS)


def all_turns(kinds: Sequence[str] = KINDS) -> list[Said]:
    """Every turn of `kinds`, the kinds taken in turn (question, greeting, thanks, ...), so that the first
    few of a short run already cover every kind."""
    queues = [[Said(q, "question") for q in QUESTIONS] if "question" in kinds else [],
              *([Said(t, kind) for t in texts] for kind, texts in SHORT_TURNS.items() if kind in kinds)]
    out: list[Said] = []
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop(0))
    return out



# ---- what the caller says ------------------------------------------------------------------------------


def caller_stream(path: Path, texts: list[str], gap_s: float | Sequence[float]) -> float:
    """Write the questions, each followed by `gap_s` of silence (one figure for all, or one per question),
    as RAW mu-law for sipp's rtp_stream; returns how many seconds it lasts."""
    gaps = [gap_s] * len(texts) if isinstance(gap_s, int | float) else list(gap_s)
    pauses = [bytes(int(RATE * gap) * 2) for gap in gaps]
    pcm = bytes(int(RATE * LEAD_S) * 2) + b"".join(clip + pause
                                                    for clip, pause in zip(neural(texts, RATE), pauses, strict=True))
    path.write_bytes(ulaw_encode(pcm))
    return len(pcm) / 2 / RATE


# ---- the tap between sipp and voicegate ----------------------------------------------------------------


def levels(packets: list[Heard]) -> list[tuple[float, float]]:
    """(arrival, dBFS of the decoded audio) of every PCMU packet."""
    out = []
    for heard in packets:
        try:
            packet = RtpPacket.parse(heard.data)
        except RtpError:
            continue
        if packet.payload_type != 0 or not packet.payload:
            continue
        samples = np.frombuffer(ulaw_decode(packet.payload), dtype=np.int16).astype(np.float64)
        power = float(np.mean(samples**2)) / 32768**2
        out.append((heard.at, 10 * math.log10(power) if power > 0 else -120.0))
    return out


def spoken(caller: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(first, last) speech packet of each question the caller asked."""
    runs: list[tuple[float, float]] = []
    for at, level in caller:
        if level < SPEECH_DBFS:
            continue
        if runs and at - runs[-1][1] < SAME_TURN_S:
            runs[-1] = (runs[-1][0], at)
        else:
            runs.append((at, at))
    return runs


@dataclass
class TurnWait:
    question: str
    spoke_until: float  # the caller's last speech packet
    wait_ms: float | None  # to the first reply speech packet; None: no reply before the caller spoke again
    reply_ms: float  # from that packet to the reply's last speech packet
    talked_over: bool  # the agent was still speaking when the caller finished: no clean wait
    server: dict[str, float] = field(default_factory=dict)  # this turn's logged stages, ms
    kind: str = "question"  # what kind of turn the caller said (Said.kind)


def measure(caller: list[tuple[float, float]], reply: list[tuple[float, float]], texts: list[str],
            kinds: list[str] | None = None) -> list[TurnWait]:
    runs = spoken(caller)
    loud = [at for at, level in reply if level >= SPEECH_DBFS]
    turns = []
    for index, (_, end) in enumerate(runs):
        horizon = runs[index + 1][0] if index + 1 < len(runs) else math.inf
        answer = [at for at in loud if end < at < horizon]
        over = any(end - TALKING_OVER_S <= at <= end for at in loud)
        turns.append(TurnWait(texts[index] if index < len(texts) else "?", end,
                              (answer[0] - end) * 1000 if answer else None,
                              (answer[-1] - answer[0]) * 1000 if answer else 0.0, over,
                              kind=kinds[index] if kinds and index < len(kinds) else "question"))
    return turns


def by_kind(turns: list[TurnWait]) -> dict[str, dict[str, float]]:
    """p50 / p95 of the clean waits per kind of turn, with how many there were (n) of how many asked."""
    out: dict[str, dict[str, float]] = {}
    for kind in dict.fromkeys(t.kind for t in turns):
        mine = [t for t in turns if t.kind == kind]
        clean = [t.wait_ms for t in mine if t.wait_ms is not None and not t.talked_over]
        out[kind] = {**percentiles(clean, (50, 95)), "n": len(clean), "asked": len(mine)}
    return out


# ---- the server ----------------------------------------------------------------------------------------


def parse_setting(text: str) -> tuple[str, str, Any]:
    """`section.key=value` (`sip.auth.enabled=true`: the section is everything before the last dot); the
    value is read as TOML when it is TOML (200, true, ["a"]) and taken as a string otherwise (silero)."""
    dotted, equals, raw = text.partition("=")
    section, dot, key = dotted.strip().rpartition(".")
    if not equals or not dot or not section:
        raise argparse.ArgumentTypeError(f"expected SECTION.KEY=VALUE, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, key, value


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value))  # a JSON string is a TOML basic string


def server_settings(data_dir: Path, stt: str, tts: str | None,
                    overrides: list[tuple[str, str, Any]]) -> dict[str, dict[str, Any]]:
    settings: dict[str, dict[str, Any]] = {
        "server": {"host": "127.0.0.1", "port": free_port(), "data_dir": str(data_dir)},
        "sip": {"bind": f"127.0.0.1:{free_port()}", "transports": ["udp"], "invite_rate_per_min": 0},
        "webrtc": {"enabled": False},
        "memory": {"enabled": False},
        "llm": {"provider": "local"},
        "stt": {"provider": stt},
        # The wait measured is for the answer: a thinking cue ("One moment.") would be the first sound
        # on the wire and hide a slow answer (its own figures: docs/performance.md, "Thinking cues"),
        # and no caller here is silent long enough to be asked whether they are still there.
        "pipeline": {"debug": True, "greeting": "", "thinking_cue": "off", "idle_prompt_s": 0},
        "telemetry": {"log_content": True},  # what the server heard and said, to judge the recogniser
    }
    if tts:
        settings["tts"] = {"provider": tts}
    for section, key, value in overrides:
        settings.setdefault(section, {})[key] = value
    return settings


def config_toml(settings: dict[str, dict[str, Any]]) -> str:
    return "".join(f"[{section}]\n" + "".join(f"{key} = {toml_value(value)}\n" for key, value in values.items())
                   for section, values in settings.items())


@dataclass
class Voicegate:
    process: subprocess.Popen[bytes]
    sip: Address
    log: Path  # its stdout: JSON lines
    errors: Path


@contextlib.contextmanager
def voicegate(work: Path, settings: dict[str, dict[str, Any]]) -> Iterator[Voicegate]:
    config = work / "config.toml"
    config.write_text(config_toml(settings))
    log, errors = work / "voicegate.log", work / "voicegate.err"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VOICEGATE_") and k not in ("OPENAI_API_KEY", "DEEPGRAM_API_KEY")}
    host, port = settings["sip"]["bind"].rsplit(":", 1)
    with log.open("wb") as out, errors.open("wb") as err:
        process = subprocess.Popen([sys.executable, "-m", "voicegate", "--config", str(config), "serve"],
                                   cwd=REPO, env=env, stdout=out, stderr=err)
    server = Voicegate(process, (host, int(port)), log, errors)
    try:
        wait_ready(server)
        yield server
    finally:
        stop(process)


def wait_ready(server: Voicegate, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while READY not in server.errors.read_text(errors="replace"):
        if server.process.poll() is not None or time.monotonic() > deadline:
            tail = server.errors.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"voicegate did not start (rc {server.process.poll()}):\n{tail}")
        time.sleep(0.2)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def server_log(path: Path, whole_turns: bool = False
               ) -> tuple[dict[str, dict[int, dict[str, float]]], dict[str, list[list[str]]]]:
    """Per call: each turn's logged stages (ms), and the transcript ([role, text], in order). With
    `whole_turns`, a user line that `replaces` (Whisper hearing the whole turn again after the caller went
    on) takes the place of the last user line, which held part of the same turn (transcript_line)."""
    stages: dict[str, dict[int, dict[str, float]]] = {}
    said: dict[str, list[list[str]]] = {}
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        call = str(entry.get("call_id", ""))
        if entry.get("message") == "sip call timing":
            turn = stages.setdefault(call, {}).setdefault(int(entry.get("turn", 0)), {})
            turn.setdefault(str(entry["stage"]), float(entry["ms"]))
        elif entry.get("message") == "sip call transcript":
            said_line = [str(entry.get("role", "")), str(entry.get("text", ""))]
            transcript_line(said.setdefault(call, []), said_line, whole_turns and bool(entry.get("replaces")))
    return stages, said


# ---- one configuration ---------------------------------------------------------------------------------


class Dialled(Protocol):
    sip: Address  # where the caller's INVITE goes: a node, or a proxy in front of nodes


async def place_call(server: Dialled, texts: list[str], work: Path,
                     gap_s: float | Sequence[float]) -> tuple[WireTap, int]:
    audio = work / "caller.pcmu"
    seconds = caller_stream(audio, texts, gap_s)
    with WireTap(server.sip) as tap:
        scenario = render(work, media=stream(audio), ending=caller_bye(int((seconds + 1.5) * 1000)),
                          media_port=tap.media_port)
        through_tap(scenario)
        result = await run_sipp(work, scenario, f"127.0.0.1:{tap.sip_port}", timeout=seconds + 45)
        await asyncio.sleep(0.5)  # the reply to the last question may still be arriving
    if result.returncode != 0:
        print(f"sipp failed (rc {result.returncode}): {result.output[-1500:]}", file=sys.stderr)
    return tap, result.returncode


def through_tap(scenario: Path) -> None:
    """rport in every Via (RFC 3581): voicegate then answers the INVITE to where it came from, the tap,
    not to sipp's own port, so the tap sees the SDP answer it has to rewrite. And the route set on the
    in-dialog requests (ACK, BYE): empty when the node is dialled directly (sipp drops the empty line),
    Kamailio's Record-Route when it is in front (bench/capacity/conversations.py --nodes 2)."""
    text = scenario.read_text()
    if ";branch=[branch]" not in text:
        raise RuntimeError(f"{scenario.name}: no Via with ;branch=[branch] to add rport to")
    text = text.replace(";branch=[branch]", ";branch=[branch];rport")
    scenario.write_text(text.replace("[peer_tag_param]\n", "[peer_tag_param]\n      [routes]\n"))


def call_plan(turns: int, calls: int, kinds: Sequence[str] = KINDS) -> list[list[Said]]:
    """The turns of each call: `turns` of them (0: every one once) over `calls` calls, as evenly as they go."""
    every = all_turns(kinds)
    turns = turns or len(every)
    chosen = [every[i % len(every)] for i in range(turns)]
    calls = max(1, min(calls, turns))
    size, extra = divmod(turns, calls)
    bounds = [i * size + min(i, extra) for i in range(calls + 1)]
    return [chosen[bounds[i]:bounds[i + 1]] for i in range(calls)]


def run_configuration(stt: str, args: argparse.Namespace) -> dict[str, Any]:
    if args.transport == "webrtc":
        return run_webrtc(stt, args)
    plan = call_plan(args.turns, args.calls, args.kinds)
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-v2v-") as tmp:
        work = Path(tmp)
        settings = server_settings(work / "data", stt, args.tts, args.set)
        calls: list[dict[str, Any]] = []
        with voicegate(work, settings) as server:
            for index, said in enumerate(plan):
                texts = [s.text for s in said]
                call_dir = work / f"call-{index}"
                call_dir.mkdir()
                tap, rc = asyncio.run(place_call(server, texts, call_dir, args.gap))
                turns = measure(levels(tap.caller), levels(tap.reply), texts, [s.kind for s in said])
                calls.append({"call_id": tap.call_id, "sipp_rc": rc, "questions": texts, "turns": turns,
                              "caller_packets": len(tap.caller), "reply_packets": len(tap.reply)})
                progress(f"{stt}: calls", index + 1, len(plan))
                print(f"  call {index + 1}: waits {', '.join(ms(t.wait_ms) for t in turns)} ms", flush=True)
        # Words wrong are counted on whole turns: an early part of a turn that the whole turn's decode later
        # replaced is not a word the caller did not say (the WebRTC run and the capacity bench count so too).
        # Counted on every line as well, as the figure once was: the difference is how often a
        # turn was released early and then continued.
        stages, heard = server_log(server.log, whole_turns=True)
        _, every_line = server_log(server.log)
    for call in calls:
        attach_server(call, stages.get(call["call_id"], {}), heard.get(call["call_id"], []))
        lines = every_line.get(call["call_id"], [])
        call["word_errors_every_line"] = word_errors(" ".join(call["questions"]),
                                                     " ".join(text for role, text in lines if role == "user"))
        call["user_lines_every_line"] = sum(role == "user" for role, _ in lines)
    return summarise(stt, settings, calls, label=f"voicegate sip {stt}")


# ---- WebRTC: voicegate over WHIP, and Pipecat as the reference ---------------------------------------


def webrtc_settings(data_dir: Path, stt: str, tts: str | None,
                    overrides: list[tuple[str, str, Any]]) -> dict[str, dict[str, Any]]:
    """The SIP run's settings with WebRTC on (loopback ICE, no WHIP rate limit) and SIP off."""
    settings = server_settings(data_dir, stt, tts, [])
    settings["server"]["whip_rate_per_min"] = 0
    settings["sip"]["enabled"] = False
    settings["webrtc"] = {"enabled": True, "ice_hosts": ["127.0.0.1"]}
    for section, key, value in overrides:
        settings.setdefault(section, {})[key] = value
    return settings


def channel_log(events: list[dict[str, Any]]) -> tuple[dict[int, dict[str, float]], list[list[str]]]:
    """A WebRTC call's DataChannel events as server_log reads a SIP call's log: each turn's timing stages
    (pipeline.debug), and the transcript (final lines; a `replaces` line takes the place of the last)."""
    stages: dict[int, dict[str, float]] = {}
    said: list[list[str]] = []
    for event in events:
        if event.get("type") == "timing":
            stages.setdefault(int(event.get("turn", 0)), {}).setdefault(str(event["stage"]), float(event["ms"]))
        elif event.get("type") == "transcript" and event.get("final"):
            transcript_line(said, [str(event.get("role", "")), str(event.get("text", ""))],
                            bool(event.get("replaces")))
    return stages, said


def webrtc_calls(base_url: str, plan: list[list[Said]], gap_s: float, signalling: str,
                 label: str) -> list[dict[str, Any]]:
    from bench.turns.voice_to_voice_webrtc import place_webrtc_call

    calls: list[dict[str, Any]] = []
    for index, said in enumerate(plan):
        texts = [s.text for s in said]
        started = time.monotonic()
        call = asyncio.run(place_webrtc_call(base_url, neural(texts, 16000), gap_s, signalling))
        if call.problem:
            print(f"  call {index + 1}: {call.problem}", file=sys.stderr, flush=True)
        turns = measure(call.caller, call.reply, texts, [s.kind for s in said])
        calls.append({"call_id": call.session_id, "problem": call.problem, "questions": texts, "turns": turns,
                      "caller_packets": len(call.caller), "reply_packets": len(call.reply),
                      "events": call.events, "window": (started, time.monotonic()),
                      "frames_timed_by_packet": call.frames_timed[0], "frames_timed_otherwise": call.frames_timed[1]})
        progress(f"{label}: calls", index + 1, len(plan))
        print(f"  call {index + 1}: waits {', '.join(ms(t.wait_ms) for t in turns)} ms", flush=True)
    return calls


def run_webrtc(stt: str, args: argparse.Namespace) -> dict[str, Any]:
    plan = call_plan(args.turns, args.calls, args.kinds)
    neural([s.text for call in plan for s in call], 16000)  # rendered (or found cached) before any server starts
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-v2v-") as tmp:
        work = Path(tmp)
        settings = webrtc_settings(work / "data", stt, args.tts, args.set)
        base_url = f"http://127.0.0.1:{settings['server']['port']}"
        with voicegate(work, settings):
            calls = webrtc_calls(base_url, plan, args.gap, "whip", f"voicegate webrtc {stt}")
    for call in calls:
        stages, said = channel_log(call.pop("events"))
        attach_server(call, stages, said)
    return summarise(stt, settings, calls, label=f"voicegate webrtc {stt}")


# What Pipecat's bot printed, as stages from the caller's last speech on the wire (the bot and the caller
# share time.monotonic()): its VAD's stop, its transcript, the user turn's end, the turn handed to the agent,
# its first audio out.
BOT_STAGES = {"vad_stopped": "pipecat_vad_stop", "transcript": "pipecat_transcript",
              "user_turn_ended": "pipecat_turn_end", "turn_released": "pipecat_released",
              "bot_started": "pipecat_bot_speaking"}


def bot_stages(turns: list[TurnWait], events: list[dict[str, Any]], gap_s: float) -> dict[int, dict[str, float]]:
    """Each turn's first bot event of each kind within `gap_s` after the caller's last speech (turn 1 is
    the first), in ms from that moment."""
    out: dict[int, dict[str, float]] = {}
    for number, turn in enumerate(turns, start=1):
        for event in events:
            stage = BOT_STAGES.get(str(event.get("event")))
            delay = float(event.get("t", 0)) - turn.spoke_until
            if stage and -0.3 <= delay <= gap_s:
                out.setdefault(number, {}).setdefault(stage, delay * 1000)
    return out


def run_pipecat(args: argparse.Namespace) -> dict[str, Any]:
    """The same turns through Pipecat 1.14's bot (bench/turns/pipecat_reference.py), over WebRTC."""
    from bench.turns.pipecat_reference import ANSWER, VERSION, pipecat_bot

    plan = call_plan(args.turns, args.calls, args.kinds)
    neural([s.text for call in plan for s in call], 16000)
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-pipecat-") as tmp:
        with pipecat_bot(Path(tmp), free_port(), lambda line: print(line, flush=True)) as bot:
            calls = webrtc_calls(bot.base_url, plan, args.gap, "smallwebrtc", f"pipecat {VERSION}")
            events = bot.events()
    for call in calls:
        call.pop("events")
        start, end = call["window"]
        mine = [e for e in events if start <= float(e.get("t", 0)) <= end]
        said = [["user", str(e["text"])] for e in mine if e["event"] == "transcript"]
        attach_server(call, bot_stages(call["turns"], mine, args.gap), said)
        call["server_turns"] = sum(e["event"] == "turn_released" for e in mine)
    return summarise("whisper", {"pipecat": {"version": VERSION, "answer": ANSWER}}, calls,
                     label=f"pipecat {VERSION} webrtc whisper")


def attach_server(call: dict[str, Any], stages: dict[int, dict[str, float]], said: list[list[str]]) -> None:
    """The server's numbered turns onto the caller's questions, in order (turn 1 is the first question)."""
    for number, turn in enumerate(call["turns"], start=1):
        turn.server = stages.get(number, {})
    call["server_turns"] = len([n for n in stages if n > 0])
    call["transcript"] = said
    heard = " ".join(text for role, text in said if role == "user")
    call["word_errors"] = word_errors(" ".join(call["questions"]), heard)


def summarise(stt: str, settings: dict[str, dict[str, Any]], calls: list[dict[str, Any]],
              label: str = "") -> dict[str, Any]:
    turns: list[TurnWait] = [t for c in calls for t in c["turns"]]
    clean = [t.wait_ms for t in turns if t.wait_ms is not None and not t.talked_over]
    by_stage: dict[str, list[float]] = {}
    for turn in turns:
        for stage, value in turn.server.items():
            by_stage.setdefault(stage, []).append(value)
    edits, words = (sum(c["word_errors"][i] for c in calls) for i in (0, 1))
    return {
        "stt": stt,
        "label": label or stt,
        "config": settings,
        "questions": sum(len(c["questions"]) for c in calls),
        "turns_on_wire": len(turns),
        "clean_turns": len(clean),
        "talked_over": sum(t.talked_over for t in turns),
        "unanswered": sum(t.wait_ms is None for t in turns),
        "wait_ms": {**percentiles(clean, (50, 95)), "max": max(clean, default=math.nan)},
        "by_kind": by_kind(turns),
        "stage_p50_ms": {stage: percentiles(values, (50,))["p50"] for stage, values in by_stage.items()},
        "word_error_pct": 100 * edits / max(words, 1),
        **({"word_error_pct_every_line": 100 * sum(c["word_errors_every_line"][0] for c in calls) / max(words, 1),
            "user_lines_every_line": sum(c["user_lines_every_line"] for c in calls)}
           if all("word_errors_every_line" in c for c in calls) and calls else {}),
        "calls": [{**c, "turns": [asdict(t) for t in c["turns"]]} for c in calls],
    }


# ---- report --------------------------------------------------------------------------------------------


def ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0f}"


def turn_rows(result: dict[str, Any], stages: list[str]) -> list[list[str]]:
    rows = []
    for n, call in enumerate(result["calls"], start=1):
        # A server that made more (or fewer) turns than there were questions: stages matched by number.
        label = f"{n}" if call["server_turns"] == len(call["questions"]) else f"{n}*"
        for i, turn in enumerate(call["turns"], start=1):
            wait = ms(turn["wait_ms"]) + (" over" if turn["talked_over"] else "")
            rows.append([label, str(i), turn["kind"], turn["question"][:34], wait, ms(turn["reply_ms"]),
                         *(ms(turn["server"].get(s)) for s in stages)])
    return rows


def kind_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """One row per kind of turn, p50 / p95 of the clean waits (and how many) for each system measured."""
    kinds = list(dict.fromkeys(k for r in results for k in r["by_kind"]))
    rows = []
    for kind in kinds:
        row = [kind]
        for result in results:
            figures = result["by_kind"].get(kind)
            row.append("-" if not figures else
                       f"{ms(figures['p50'])} / {ms(figures['p95'])} ({figures['n']}/{figures['asked']})")
        rows.append(row)
    return rows


def report(results: list[dict[str, Any]]) -> None:
    found = {stage for r in results for stage in r["stage_p50_ms"]}
    stages = [s for s in STAGE_ORDER if s in found] + sorted(found - set(STAGE_ORDER))
    for result in results:
        print(f"\n{result['label']}: every turn (ms)")
        own = [s for s in stages if s in result["stage_p50_ms"]]  # voicegate's stages, or Pipecat's
        rows = turn_rows(result, own)
        print(table(rows, ["call", "turn", "kind", "question", "wait", "reply", *own]))
        if any(row[0].endswith("*") for row in rows):
            print("* the server counted another number of turns than questions: stages matched by turn number")
    print("\nwait on the wire per kind of turn, p50 / p95 ms (clean turns / asked)")
    print(table(kind_rows(results), ["kind", *(r["label"] for r in results)]))
    rows = [[r["label"], f"{r['clean_turns']}/{r['questions']}", str(r["unanswered"]), str(r["talked_over"]),
             ms(r["wait_ms"]["p50"]), ms(r["wait_ms"]["p95"]), ms(r["wait_ms"]["max"]),
             *(ms(r["stage_p50_ms"].get(s)) for s in stages), f"{r['word_error_pct']:.0f} %"] for r in results]
    print("\nvoice-to-voice wait on the wire (ms), and the p50 of the server's logged stages (ms)")
    print(table(rows, ["system", "clean/asked", "unanswered", "talked over", "wait p50", "p95", "max",
                       *(f"{s} p50" for s in stages), "word errors"]))
    for r in results:
        if "word_error_pct_every_line" in r:
            print(f"{r['label']}: word errors {r['word_error_pct']:.1f} % on whole turns; "
                  f"{r['word_error_pct_every_line']:.1f} % counting each early part a whole turn replaced "
                  f"({r['user_lines_every_line']} user lines for {r['questions']} questions)")


def result_name(args: argparse.Namespace) -> str:
    """voice_to_voice, plus what differs from the default run, so that one run does not overwrite another."""
    parts = [*([args.transport] if args.transport != "sip" else []),
             *(["kinds-" + "_".join(args.kinds)] if list(args.kinds) != list(KINDS) else []),
             *([f"vs-{args.reference}"] if args.reference else []),
             *(args.stt or []), *([f"tts-{args.tts}"] if args.tts else []), *(f"{k}-{v}" for _, k, v in args.set)]
    return "-".join(["voice_to_voice", *(re.sub(r"[^A-Za-z0-9.]+", "_", str(part)) for part in parts)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stt", action="append", choices=["pocketsphinx", "whisper"],
                        help="recogniser to measure (repeatable; default: pocketsphinx, then whisper)")
    parser.add_argument("--transport", choices=["sip", "webrtc"], default="sip",
                        help="sip: sipp through the wire tap (G.711); webrtc: an aiortc caller over WHIP (Opus)")
    parser.add_argument("--reference", choices=["pipecat"],
                        help="also run Pipecat 1.14's bot (bench/turns/pipecat_reference.py) on the same turns over "
                             "WebRTC and report both (implies --transport webrtc and --stt whisper)")
    parser.add_argument("--turns", type=int, default=0,
                        help="caller turns per recogniser (default: every turn once, the kinds interleaved)")
    parser.add_argument("--kinds", type=lambda text: [k.strip() for k in text.split(",")], default=list(KINDS),
                        help=f"the kinds of turn said, comma-separated (default: all; --kinds question: the 12 "
                             f"questions of the earliest runs); kinds: {', '.join(KINDS)}")
    parser.add_argument("--calls", type=int, default=3, help="calls the turns are spread over")
    parser.add_argument("--tts", help="tts.provider for the server (default: the pipeline's, auto)")
    parser.add_argument("--set", action="append", type=parse_setting, default=[], metavar="SECTION.KEY=VALUE",
                        help="any config key for the server, e.g. pipeline.vad_offset_ms=200 (repeatable)")
    parser.add_argument("--gap", type=float, default=6.0, help="seconds of caller silence after each question")
    args = parser.parse_args()
    if args.reference:
        args.transport = "webrtc"
    stts = args.stt or (["whisper"] if args.reference else ["pocketsphinx", "whisper"])
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        parser.error(f"--kinds: no such kind {', '.join(sorted(unknown))} (kinds: {', '.join(KINDS)})")
    turns = args.turns or len(all_turns(args.kinds))
    print(f"voice-to-voice over {args.transport.upper() if args.transport == 'sip' else 'WebRTC'}: {turns} turns "
          f"over {args.calls} calls per recogniser, {args.gap:g} s after each question"
          f"{'; reference: ' + args.reference if args.reference else ''}; load average before: {load}", flush=True)
    started = time.monotonic()
    results = [run_configuration(stt, args) for stt in stts]
    if args.reference == "pipecat":
        try:
            results.append(run_pipecat(args))
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # the venv or the bot: say what, keep ours
            print(f"\nthe Pipecat reference did not run: {exc}", file=sys.stderr, flush=True)
    report(results)
    settings = {"transport": args.transport, "reference": args.reference, "turns": turns, "calls": args.calls,
                "gap_s": args.gap, "tts": args.tts,
                "overrides": [f"{s}.{k}={v!r}" for s, k, v in args.set], "speech_dbfs": SPEECH_DBFS,
                "seconds": round(time.monotonic() - started)}
    path = save(result_name(args), {"settings": settings, "results": results})
    print(f"\nwrote {path} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
