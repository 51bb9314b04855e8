"""A scenario: one conversation (one or more calls) a scripted caller has with the agent, and what must
hold. The file format is docs/evals.md; `load_scenario` turns a file into these objects or raises
ScenarioError naming the file, line and key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from voicegate.internal.evals.yaml_nodes import Mapping, Value, read_document

Transport = Literal["sip", "webrtc"]
TRANSPORTS: tuple[Transport, ...] = ("sip", "webrtc")
DTMF_KEYS = "0123456789*#ABCD"
DEFAULT_REPLY_TIMEOUT_S = 20.0
# "I'd like a table for [pause 1200ms] four people": a pause inside what the caller says.
PAUSE_MARK = re.compile(r"\[pause\s+(\d+(?:\.\d+)?)\s*(ms|s)\]", re.IGNORECASE)
_SENTENCE_END = (".", ",", "!", "?", ";", ":")


@dataclass(frozen=True)
class Pattern:
    """A regular expression from the file (matched case-insensitively), and the text the file gave."""

    source: str
    regex: re.Pattern[str]


@dataclass(frozen=True)
class Speech:
    text: str  # exactly what the voice renders


@dataclass(frozen=True)
class Pause:
    ms: int


@dataclass(frozen=True)
class WavFile:
    path: Path


@dataclass(frozen=True)
class Keys:
    digits: str


Part = Speech | Pause | WavFile | Keys


@dataclass(frozen=True)
class ToolExpectation:
    name: str
    args: dict[str, Pattern] = field(default_factory=dict)  # each named argument, as text, must match


@dataclass(frozen=True)
class TurnExpectations:
    said: tuple[Pattern, ...] = ()
    not_said: tuple[Pattern, ...] = ()
    understood: tuple[Pattern, ...] = ()
    tools: tuple[ToolExpectation, ...] = ()
    no_tools: tuple[str, ...] = ()
    voice_to_voice_ms: int | None = None
    replies: int | None = None
    stopped_within_ms: int | None = None


@dataclass(frozen=True)
class Turn:
    parts: tuple[Part, ...]
    label: str  # how reports name the turn: what the caller says or does
    line: int
    barge_in_ms: int | None = None  # speak this long after the agent began answering the turn before
    timeout_s: float = DEFAULT_REPLY_TIMEOUT_S
    expect: TurnExpectations = TurnExpectations()


@dataclass(frozen=True)
class Caller:
    number: str = ""  # SIP: the From number
    trusted: bool = True  # SIP: phoned from an address in the server's sip.trusted_peers
    subject: str = ""  # WebRTC: the subject of the caller's token ("" = anonymous)

    def memory_owner(self, transport: Transport) -> str:
        """Whose memory a memory expectation reads: the number's (trusted or not: an untrusted caller who
        claims a number must leave its owner's memory alone) or the token subject's; "" for nobody."""
        if transport == "sip":
            return f"sip:{self.number}" if self.number else ""
        return f"jwt:{self.subject}" if self.subject else ""


@dataclass(frozen=True)
class MemoryExpectations:
    contains: tuple[Pattern, ...] = ()
    not_contains: tuple[Pattern, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.contains or self.not_contains)


@dataclass(frozen=True)
class CallExpectations:
    greeted: tuple[Pattern, ...] = ()
    ended_by: Literal["agent", "caller"] | None = None
    transferred_to: Pattern | None = None
    memory: MemoryExpectations = MemoryExpectations()
    voice_to_voice_ms: int | None = None
    recognised: bool | None = None
    rubric: str = ""


@dataclass(frozen=True)
class Call:
    name: str
    caller: Caller
    turns: tuple[Turn, ...]
    line: int
    expect: CallExpectations = CallExpectations()


@dataclass(frozen=True)
class Scenario:
    name: str
    file: Path
    transports: tuple[Transport, ...]
    calls: tuple[Call, ...]
    description: str = ""
    reset_memory: bool = True

    def needs_memory(self) -> bool:
        return any(call.expect.memory for call in self.calls)

    def memory_owners(self, transport: Transport) -> list[str]:
        return sorted({owner for call in self.calls if (owner := call.caller.memory_owner(transport))})


def load_scenario(path: Path) -> Scenario:
    document = read_document(path).mapping(
        ("name", "description", "transport", "caller", "reset_memory", "reply_timeout_s", "calls"))
    name = document.require("name").text() if "name" in document else path.stem
    transports = _transports(document.get("transport"))
    caller = _caller(document.get("caller"), Caller())
    timeout = document.require("reply_timeout_s").number(minimum=1) if "reply_timeout_s" in document \
        else DEFAULT_REPLY_TIMEOUT_S
    calls_value = document.require("calls")
    calls = tuple(_call(item, caller, timeout, path.parent) for item in calls_value.items())
    if not calls:
        raise calls_value.error("a scenario needs at least one call")
    scenario = Scenario(name=name, file=path, transports=transports, calls=calls,
                        description=document.require("description").text() if "description" in document else "",
                        reset_memory=document.require("reset_memory").boolean() if "reset_memory" in document
                        else True)
    _check_transports(scenario, calls_value)
    return scenario


def _transports(value: Value | None) -> tuple[Transport, ...]:
    if value is None:
        return ("sip",)
    found: list[Transport] = []
    for item in value.items():
        chosen = item.choice(TRANSPORTS)
        if chosen in found:
            raise item.error(f"{chosen} is listed twice")
        found.append(chosen)  # type: ignore[arg-type]
    if not found:
        raise value.error("name at least one transport: sip, webrtc")
    return tuple(found)


def _caller(value: Value | None, base: Caller) -> Caller:
    if value is None:
        return base
    entries = value.mapping(("number", "trusted", "subject"))
    number = entries.require("number").text() if "number" in entries else base.number
    if "number" in entries and not re.fullmatch(r"\+?[0-9][0-9 ().-]{2,30}", number):
        raise entries.require("number").error(f"{number!r} is not a phone number")
    return Caller(number=number.replace(" ", ""),
                  trusted=entries.require("trusted").boolean() if "trusted" in entries else base.trusted,
                  subject=entries.require("subject").text() if "subject" in entries else base.subject)


def _call(value: Value, caller: Caller, timeout_s: float, directory: Path) -> Call:
    entries = value.mapping(("name", "caller", "turns", "expect"))
    turns_value = entries.require("turns")
    turns = tuple(_turn(item, timeout_s, directory) for item in turns_value.items())
    if not turns:
        raise turns_value.error("a call needs at least one turn")
    return Call(name=entries.require("name").text() if "name" in entries else "",
                caller=_caller(entries.get("caller"), caller), turns=turns, line=value.line,
                expect=_call_expectations(entries.get("expect")))


TURN_ACTIONS = ("say", "parts", "wav", "dtmf", "silence_ms")


def _turn(value: Value, timeout_s: float, directory: Path) -> Turn:
    entries = value.mapping((*TURN_ACTIONS, "barge_in_ms", "timeout_s", "expect"))
    actions = [name for name in TURN_ACTIONS if name in entries]
    if len(actions) != 1:
        raise value.error(f"a turn does exactly one of {', '.join(TURN_ACTIONS)}"
                          + (f" (this one has {', '.join(actions)})" if actions else ""))
    action = entries.require(actions[0])
    if actions[0] == "parts":
        parts = tuple(part for item in action.items() for part in _part(item, directory))
        if not parts:
            raise action.error("list at least one part")
        label = " ".join(_part_label(part) for part in parts)
    elif actions[0] == "silence_ms":
        parts, label = (Pause(action.integer(minimum=20)),), f"(silent {action.integer(minimum=20)} ms)"
    else:
        parts = _part_from(actions[0], action, directory)
        label = " ".join(_part_label(part) for part in parts)
    return Turn(parts=parts, label=label, line=value.line,
                barge_in_ms=entries.require("barge_in_ms").integer() if "barge_in_ms" in entries else None,
                timeout_s=entries.require("timeout_s").number(minimum=1) if "timeout_s" in entries else timeout_s,
                expect=_turn_expectations(entries.get("expect")))


def _part(value: Value, directory: Path) -> tuple[Part, ...]:
    entries = value.mapping(("say", "pause_ms", "wav", "dtmf"))
    if len(entries.entries) != 1:
        raise value.error("a part is exactly one of say, pause_ms, wav, dtmf")
    (name,) = entries.entries
    if name == "pause_ms":
        return (Pause(entries.require(name).integer(minimum=20, maximum=60_000)),)
    return _part_from(name, entries.require(name), directory)


def _part_from(name: str, value: Value, directory: Path) -> tuple[Part, ...]:
    if name == "say":
        return spoken_parts(value)
    if name == "wav":
        path = (directory / value.text()).resolve()
        if not path.is_file():
            raise value.error(f"no such file: {path}")
        return (WavFile(path),)
    digits = value.text().upper()
    bad = sorted({key for key in digits if key not in DTMF_KEYS})
    if bad:
        raise value.error(f"not keypad keys: {''.join(bad)} (use {DTMF_KEYS})")
    return (Keys(digits),)


def spoken_parts(value: Value) -> tuple[Part, ...]:
    """`say` text, split at its `[pause 1200ms]` marks. Each stretch before a pause ends in a comma when it
    has no punctuation of its own, so the voice's intonation carries on as a person's would."""
    text = value.text()
    parts: list[Part] = []
    position = 0
    for match in PAUSE_MARK.finditer(text):
        before = text[position:match.start()].strip()
        if before:
            parts.append(Speech(before if before.endswith(_SENTENCE_END) else before + ","))
        amount = float(match.group(1)) * (1000 if match.group(2).lower() == "s" else 1)
        if not 20 <= amount <= 60_000:
            raise value.error(f"a pause lasts 20 ms to 60 s (got {match.group(0)})")
        parts.append(Pause(int(amount)))
        position = match.end()
    rest = text[position:].strip()
    if rest:
        parts.append(Speech(rest))
    if not any(isinstance(part, Speech) for part in parts):
        raise value.error("says nothing but pauses")
    return tuple(parts)


def _part_label(part: Part) -> str:
    if isinstance(part, Speech):
        return f"“{part.text}”"
    if isinstance(part, Pause):
        return f"(pause {part.ms} ms)"
    if isinstance(part, WavFile):
        return f"[{part.path.name}]"
    return f"[keys {part.digits}]"


def _patterns(value: Value | None) -> tuple[Pattern, ...]:
    return tuple(pattern(item) for item in value.items()) if value is not None else ()


def pattern(value: Value) -> Pattern:
    source = value.text()
    try:
        return Pattern(source, re.compile(source, re.IGNORECASE))
    except re.error as exc:
        raise value.error(f"not a regular expression: {exc}") from None


def _turn_expectations(value: Value | None) -> TurnExpectations:
    if value is None:
        return TurnExpectations()
    entries = value.mapping(("said", "not_said", "understood", "tool", "no_tool", "voice_to_voice_ms", "replies",
                             "stopped_within_ms"))
    return TurnExpectations(
        said=_patterns(entries.get("said")), not_said=_patterns(entries.get("not_said")),
        understood=_patterns(entries.get("understood")),
        tools=tuple(_tool(item) for item in entries.require("tool").items()) if "tool" in entries else (),
        no_tools=tuple(entries.require("no_tool").texts()) if "no_tool" in entries else (),
        voice_to_voice_ms=_optional_int(entries, "voice_to_voice_ms", 1),
        replies=_optional_int(entries, "replies", 0),
        stopped_within_ms=_optional_int(entries, "stopped_within_ms", 1))


def _optional_int(entries: Mapping, key: str, minimum: int) -> int | None:
    return entries.require(key).integer(minimum=minimum) if key in entries else None


def _tool(value: Value) -> ToolExpectation:
    if not value.is_mapping():
        return ToolExpectation(value.text())  # `tool: end_call`: called, whatever the arguments
    entries = value.mapping(("name", "args"))
    args: dict[str, Pattern] = {}
    if "args" in entries:
        for key, item in entries.require("args").mapping(None).entries.items():
            args[key] = pattern(item)
    return ToolExpectation(entries.require("name").text(), args)


def _call_expectations(value: Value | None) -> CallExpectations:
    if value is None:
        return CallExpectations()
    entries = value.mapping(("greeted", "ended_by", "transferred_to", "memory", "voice_to_voice_ms", "recognised",
                             "rubric"))
    memory = MemoryExpectations()
    if "memory" in entries:
        inner = entries.require("memory").mapping(("contains", "not_contains"))
        memory = MemoryExpectations(_patterns(inner.get("contains")), _patterns(inner.get("not_contains")))
    ended_by = entries.require("ended_by").choice(("agent", "caller")) if "ended_by" in entries else None
    return CallExpectations(
        greeted=_patterns(entries.get("greeted")), ended_by=ended_by,  # type: ignore[arg-type]
        transferred_to=pattern(entries.require("transferred_to")) if "transferred_to" in entries else None,
        memory=memory, voice_to_voice_ms=_optional_int(entries, "voice_to_voice_ms", 1),
        recognised=entries.require("recognised").boolean() if "recognised" in entries else None,
        rubric=entries.require("rubric").text() if "rubric" in entries else "")


def _check_transports(scenario: Scenario, calls: Value) -> None:
    """What the chosen transports cannot do, said at the key that asks for it."""
    for call_value, call in zip(calls.items(), scenario.calls, strict=True):
        turn_values = call_value.mapping(("name", "caller", "turns", "expect")).require("turns").items()
        for turn_value, turn in zip(turn_values, call.turns, strict=True):
            if "webrtc" in scenario.transports and any(isinstance(part, Keys) for part in turn.parts):
                raise turn_value.error("keypad keys (dtmf) travel only on a phone call, and this scenario runs "
                                       "over webrtc (transport)")
        for transport in scenario.transports:
            if call.expect.memory and not call.caller.memory_owner(transport):
                who = "caller.number" if transport == "sip" else "caller.subject"
                raise call_value.error(f"expect.memory needs a caller whose memory to read over {transport}: "
                                       f"set {who}")
            if transport == "webrtc" and call.expect.transferred_to is not None:
                raise call_value.error("expect.transferred_to: only a phone call can be transferred, and this "
                                       "scenario runs over webrtc (transport)")
