"""Every expectation of docs/evals.md as a pure function of what was recorded: passed, failed (saying what
was expected and what was found instead) or skipped (saying why it could not be judged).

A check that cannot be judged because something it needs is missing (the server's call events, its
memory API) fails and says what is missing: an eval that quietly passes what it never looked at would
make a green CI run mean nothing. The one exception is the LLM rubric without an LLM, which the issue
and the docs promise to skip with a visible reason.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from voicegate.internal.evals.conversation import TurnRecord
from voicegate.internal.evals.replies import TurnView
from voicegate.internal.evals.scenario import Call, Pattern, ToolExpectation, Turn

Status = Literal["passed", "failed", "skipped"]
QUOTE_CHARS = 240


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def passed(name: str, detail: str = "") -> Check:
    return Check(name, "passed", detail)


def failed(name: str, detail: str) -> Check:
    return Check(name, "failed", detail)


def normalised(text: str) -> str:
    """Lower case, punctuation gone (apostrophes kept), single spaces: "Nice to meet you, Sam." and a
    recogniser's "nice to meet you sam" read the same."""
    return " ".join(re.findall(r"[\w']+", text.lower()))


def matches(pattern: Pattern, text: str) -> bool:
    return bool(pattern.regex.search(text) or pattern.regex.search(normalised(text)))


def quote(text: str) -> str:
    text = " ".join(text.split())
    if not text:
        return "nothing"
    return f"“{text[:QUOTE_CHARS]}{'…' if len(text) > QUOTE_CHARS else ''}”"


@dataclass
class CallFacts:
    """What the runner learned about a call beyond its turns."""

    setup_error: str = ""
    ended_by: str = ""  # agent or caller
    end_reason: str = ""
    transferred_to: str = ""  # the URI the REFER named
    caller_kind: str | None = None  # the server's verdict: sip, jwt, anonymous (None: not known)
    events_problem: str = ""  # why the server's transcript is missing
    tools_problem: str = ""  # why its tool calls are missing
    memory: str | None = None  # the caller's memory after the call
    memory_problem: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)  # every tool call of the call


def said_checks(patterns: tuple[Pattern, ...], negated: bool, view: TurnView, events_problem: str,
                label: str) -> list[Check]:
    """`said`: the agent's own transcript matches, and the wire carried that reply (matches too, or is heard
    close to the transcript); `not_said`: neither matches."""
    out = []
    for pattern in patterns:
        name = f"{label} /{pattern.source}/"
        sources = {"heard on the wire": view.heard}
        if not events_problem:
            sources = {"said (its transcript)": view.said, **sources}
        found = {where: matches(pattern, text) for where, text in sources.items()}
        if not negated and not events_problem and found["said (its transcript)"]:
            # The words are the transcript's; the wire must carry that reply, as a small recogniser hears
            # it ("cutting you through" for "putting you through"): close enough to the transcript counts.
            found["heard on the wire"] = found["heard on the wire"] or heard_as(view.heard, view.said)
        wrong = [where for where, hit in found.items() if hit == negated]
        summary = "; ".join(f"{where}: {quote(text)}" for where, text in sources.items())
        if events_problem:
            summary += f" (no server transcript: {events_problem})"
        if wrong:
            verb = "found" if negated else "not found"
            out.append(failed(name, f"{verb} in what the agent {' and '.join(wrong)}: {summary}"))
        else:
            out.append(passed(name, summary))
    return out


# How alike (difflib's ratio over the normalised texts) Whisper's hearing of the wire and the agent's
# transcript must be for the wire to count as carrying that reply. tiny.en's slips on the agent's voice
# ("Okay, I forgot." for "Okay, I've forgotten that.": 0.65) stay above it; a reply cut to a word, another
# reply, or silence fall well below.
HEARD_AS_RATIO = 0.6
DIGIT_WORDS = "zero one two three four five six seven eight nine".split()


def spoken(text: str) -> str:
    """`normalised`, as it sounds: digits spelled one by one and abbreviation dots dropped, so the agent's
    "It's 4:03 PM." and a recogniser's "four zero three p.m." compare as words, not as symbols."""
    text = re.sub(r"\d", lambda digit: f" {DIGIT_WORDS[int(digit.group())]} ", text.replace(".", ""))
    return normalised(text)


def heard_as(heard: str, said: str) -> bool:
    a, b = spoken(heard), spoken(said)
    return bool(a and b) and difflib.SequenceMatcher(None, a, b).ratio() >= HEARD_AS_RATIO


def tool_check_name(expected: ToolExpectation) -> str:
    shown = ", ".join(f"{key}=/{value.source}/" for key, value in expected.args.items())
    return f"tool {expected.name}" + (f"({shown})" if shown else "")


def tool_check(expected: ToolExpectation, view: TurnView) -> Check:
    name = tool_check_name(expected)
    calls = [tool for tool in view.tools if tool.get("name") == expected.name]
    for tool in calls:
        arguments = tool.get("arguments") or {}
        if all(key in arguments and matches(pattern, _as_text(arguments[key]))
               for key, pattern in expected.args.items()):
            return passed(name, _tool_text(tool))
    if calls:
        return failed(name, "called with other arguments: " + "; ".join(_tool_text(tool) for tool in calls))
    others = "; ".join(_tool_text(tool) for tool in view.tools) or "none"
    return failed(name, f"not called in this turn (tools called: {others})")


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _tool_text(tool: dict[str, Any]) -> str:
    arguments = json.dumps(tool.get("arguments") or {}, ensure_ascii=False)
    outcome = "" if tool.get("ok", True) else f" -> error: {tool.get('error', '')}"
    return f"{tool.get('name')}({arguments}){outcome}"


def turn_checks(record: TurnRecord, view: TurnView, facts: CallFacts) -> list[Check]:
    turn, expect = record.turn, record.turn.expect
    if record.skipped:
        return [failed("played", record.skipped)]
    out: list[Check] = []
    if record.barge_in_missed:
        out.append(failed(f"barge in after {turn.barge_in_ms} ms", record.barge_in_missed))
    out += said_checks(expect.said, False, view, facts.events_problem, "said")
    out += said_checks(expect.not_said, True, view, facts.events_problem, "not said")
    for pattern in expect.understood:
        name = f"understood /{pattern.source}/"
        heard = " / ".join(view.understood)
        if facts.events_problem:
            out.append(failed(name, f"cannot tell what the server heard: {facts.events_problem}"))
        else:
            out.append(passed(name, quote(heard)) if matches(pattern, heard)
                       else failed(name, f"the server heard the caller say {quote(heard)}"))
    for tool in expect.tools:
        out.append(failed(tool_check_name(tool), f"cannot see the server's tool calls: {facts.tools_problem}")
                   if facts.tools_problem else tool_check(tool, view))
    for name in expect.no_tools:
        calls = [tool for tool in view.tools if tool.get("name") == name]
        out.append(failed(f"no tool {name}", f"cannot see the server's tool calls: {facts.tools_problem}")
                   if facts.tools_problem else
                   failed(f"no tool {name}", "called: " + "; ".join(_tool_text(t) for t in calls)) if calls
                   else passed(f"no tool {name}"))
    if expect.voice_to_voice_ms is not None:
        out.append(latency_check(view, expect.voice_to_voice_ms))
    if expect.replies is not None:
        out.append(replies_check(view, expect.replies, facts.events_problem))
    if expect.stopped_within_ms is not None:
        out.append(stopped_check(view, expect.stopped_within_ms))
    return out


def latency_check(view: TurnView, bound_ms: int) -> Check:
    name = f"voice to voice <= {bound_ms} ms"
    if view.voice_to_voice_ms is None:
        why = "the agent was still talking when the caller finished" if view.talked_over \
            else "no reply was heard after the caller finished"
        return failed(name, why)
    shown = f"{view.voice_to_voice_ms:.0f} ms"
    return passed(name, shown) if view.voice_to_voice_ms <= bound_ms else failed(name, f"took {shown}")


def replies_check(view: TurnView, wanted: int, events_problem: str) -> Check:
    """How many replies answered the turn: the agent's lines when the server tells them, else the
    stretches of speech the caller heard."""
    count = len(view.agent) if not events_problem else len(view.runs)
    what = "; ".join(quote(line.text) + (" (interrupted)" if line.interrupted else "") for line in view.agent)
    detail = f"{count} repl{'y' if count == 1 else 'ies'}" + (f": {what}" if what else "")
    return passed(f"replies = {wanted}", detail) if count == wanted else failed(f"replies = {wanted}", detail)


def stopped_check(view: TurnView, bound_ms: int) -> Check:
    name = f"agent stopped within {bound_ms} ms"
    if view.stopped_ms is None:
        return failed(name, "the agent was not speaking when the caller cut in")
    shown = f"stopped {view.stopped_ms:.0f} ms after the caller began"
    return passed(name, shown) if view.stopped_ms <= bound_ms else failed(name, shown)


def call_checks(call: Call, greeting: TurnView, views: list[TurnView], facts: CallFacts) -> list[Check]:
    """The call's own expectations (the rubric is judged apart: it may need an LLM)."""
    expect = call.expect
    if facts.setup_error:
        return [failed("call connected", facts.setup_error)]
    out = said_checks(expect.greeted, False, greeting, facts.events_problem, "greeted")
    if expect.ended_by is not None:
        name = f"ended by the {expect.ended_by}"
        shown = f"ended by the {facts.ended_by or 'nobody'} ({facts.end_reason or 'no reason given'})"
        out.append(passed(name, shown) if facts.ended_by == expect.ended_by else failed(name, shown))
    if expect.transferred_to is not None:
        out.append(transfer_check(expect.transferred_to, facts))
    if expect.memory:
        out += memory_checks(call, facts)
    if expect.voice_to_voice_ms is not None:
        for turn_view, turn in zip(views, call.turns, strict=True):
            check = latency_check(turn_view, expect.voice_to_voice_ms)
            out.append(Check(f"{check.name} (turn {turn_view.index + 1})", check.status,
                             check.detail + f": {turn_label(turn)}"))
    if expect.recognised is not None:
        name = "caller recognised" if expect.recognised else "caller anonymous"
        if facts.caller_kind is None:
            out.append(failed(name, f"cannot tell who the server took the caller for: {facts.tools_problem}"))
        else:
            recognised = facts.caller_kind != "anonymous"
            shown = f"the server took the caller for: {facts.caller_kind}"
            out.append(passed(name, shown) if recognised == expect.recognised else failed(name, shown))
    return out


def transfer_check(target: Pattern, facts: CallFacts) -> Check:
    name = f"transferred to /{target.source}/"
    names = [str((tool.get("arguments") or {}).get("target", "")) for tool in facts.tools
             if tool.get("name") == "transfer_call"]
    found = [value for value in [facts.transferred_to, *names] if value]
    shown = f"REFER to {facts.transferred_to or 'nobody'}" + (f", transfer_call({', '.join(names)})" if names else "")
    if not facts.transferred_to:
        return failed(name, f"the phone was never asked to transfer ({shown})")
    return passed(name, shown) if any(matches(target, value) for value in found) else failed(name, shown)


def memory_checks(call: Call, facts: CallFacts) -> list[Check]:
    expect = call.expect.memory
    names = [f"memory contains /{p.source}/" for p in expect.contains] + \
        [f"memory lacks /{p.source}/" for p in expect.not_contains]
    if facts.memory is None:
        return [failed(name, f"cannot read the caller's memory: {facts.memory_problem}") for name in names]
    shown = f"memory: {quote(facts.memory)}"
    out = [passed(name, shown) if matches(pattern, facts.memory) else failed(name, shown)
           for name, pattern in zip(names, expect.contains, strict=False)]
    out += [failed(name, shown) if matches(pattern, facts.memory) else passed(name, shown)
            for name, pattern in zip(names[len(expect.contains):], expect.not_contains, strict=True)]
    return out


def turn_label(turn: Turn) -> str:
    return turn.label if len(turn.label) <= 80 else turn.label[:79] + "…"
