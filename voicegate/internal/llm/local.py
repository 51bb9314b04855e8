"""The offline local agent: useful with no keys at all, honest that it is not a language model.

It greets, tells the time, repeats what it is asked to, ends the call on "goodbye", and handles
"my name is ...", "I'm on the ... plan", "call me ...", "keep your answers short", "remember that ...",
"forget ..." and "what do you remember about me" through the same tools a language model would call
(`memory`, `end_call`, and on a phone call `transfer_call`: "put me through to sales"): several memory
calls in one turn, then one spoken reply. "What did we talk about / what did you do for me last time"
is answered from `recall` when it is offered (session digests kept). Deterministic: the same
request always gets the same answer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from voicegate.internal.conversation.past_calls import DIGEST_HEADINGS
from voicegate.internal.llm.base import ChatMessage, ChatRequest, ReplyDelta, ToolCall, ToolSpec
from voicegate.internal.llm.local_capabilities import Capability, local_capabilities

WHO_I_AM = ("I'm the simple offline assistant built into voicegate, not a full language model. I can tell you "
            "the time, repeat what you say, and remember things you ask me to.")

_NAME = r"([a-z][a-z'-]{1,30})"
_NOT_NAMES = {"the", "a", "an", "not", "on", "in", "calling", "here", "fine", "good", "okay", "sorry", "and", "i"}

_SHORT = re.compile(r"\b(?:keep (?:your |it |the )?(?:answers?|replies|reply|it) (?:short|shorter|brief)|"
                    r"be brief|shorter answers)\b")
# Intents that write memory; several can appear in one utterance ("my name is sam i'm on the pro plan").
_WRITES: list[tuple[str, re.Pattern[str]]] = [
    ("name", re.compile(r"\bmy name(?: is|'s) " + _NAME)),
    ("plan", re.compile(r"\b(?:i'm|i am|we're|we are) on the ([a-z]+) plan\b")),
    ("call_me", re.compile(r"\bcall me " + _NAME)),
    ("assistant_name", re.compile(r"\bcall yourself " + _NAME)),
    ("short", _SHORT),
    ("remember", re.compile(r"(?<!you )(?<!you not )\bremember (?:that )?(?!about me|me\b)(?P<what>.+)")),
]
# A request the caller limits to now ("just this once", "for this answer") is for this turn only: it is
# honoured in the reply and never saved as a preference (seed 000: a temporary request applies to the
# current turn only).
_TEMPORARY = re.compile(r"\b(?:this once|just (?:for )?now|for now|this time|for this (?:answer|question|reply|"
                        r"one|call)|just for (?:today|this call))\b")
# "transfer me to sales", "put me through to the front desk", "can I speak to support".
_TRANSFER = re.compile(r"\b(?:(?:transfer|put|connect|forward) me (?:through |over )?to|(?:talk|speak) (?:to|with))"
                       r" (?:the |your |someone (?:in|from) |somebody (?:in|from) )?(?P<what>.+)")
_QUESTIONS: list[tuple[str, re.Pattern[str]]] = [
    ("goodbye", re.compile(r"\b(good ?bye|bye|hang up|that's all|that is all)\b")),
    ("forget", re.compile(r"\bforget (?:that |about |my )?(?P<what>.+)")),
    ("last_call", re.compile(r"\bwhat did (?P<who>you do|we do|we (?:talk|speak|chat) about|we discuss)\b")),
    ("recall", re.compile(r"\bwhat do you (?:remember|know) about me\b|\bdo you remember me\b")),
    ("my_name", re.compile(r"\bwhat(?:'s| is) my name\b")),
    ("time", re.compile(r"\bwhat(?:'s| is)? (?:the )?time\b|\bwhat time\b|\btell me the time\b")),
    ("date", re.compile(r"\bwhat(?:'s| is)? (?:the )?(?:date|day)\b")),
    ("repeat", re.compile(r"\b(?:repeat after me|say) (?P<what>.+)")),
    ("who", re.compile(r"\b(who are you|what are you|are you a robot|what can you do|help)\b")),
    ("greeting", re.compile(r"^(hello|hi|hey|good (morning|afternoon|evening))\b")),
    ("thanks", re.compile(r"\b(thank you|thanks)\b")),
]


_QUESTIONS_BY_INTENT = dict(_QUESTIONS)


def normalise(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9'-]+", text.lower()))


def _title(word: str) -> str:
    return word[:1].upper() + word[1:]


@dataclass(frozen=True, slots=True)
class Write:
    intent: str
    document: str
    content: str
    confirmation: str


def is_temporary(text: str) -> bool:
    return bool(_TEMPORARY.search(normalise(text)))


def memory_writes(text: str) -> list[Write]:
    """Every memory-writing intent in the utterance, in the order spoken (a preference the caller
    limits to now is not one: it is for this turn only)."""
    lowered = normalise(text)
    temporary = is_temporary(text)
    found: list[tuple[int, Write]] = []
    for intent, pattern in _WRITES:
        for match in pattern.finditer(lowered):
            write = _write_for(intent, match)
            if write is not None and not (temporary and write.document == "user"):
                found.append((match.start(), write))
    found.sort(key=lambda item: item[0])
    # "remember that my name is sam" is one thing, not two: drop a remember that covers another write.
    if len(found) > 1:
        found = [(pos, w) for pos, w in found if w.intent != "remember"]
    return [write for _, write in found]


def _write_for(intent: str, match: re.Match[str]) -> Write | None:
    if intent == "name":
        if match.group(1) in _NOT_NAMES:
            return None
        name = _title(match.group(1))
        return Write(intent, "memory", f"- The caller's name is {name}.", f"Nice to meet you, {name}.")
    if intent == "plan":
        plan = match.group(1)
        return Write(intent, "memory", f"- The caller is on the {plan} plan.", f"You're on the {plan} plan.")
    if intent == "call_me":
        name = _title(match.group(1))
        return Write(intent, "user", f"- Call the caller {name}.", f"I'll call you {name}.")
    if intent == "assistant_name":
        name = _title(match.group(1))
        return Write(intent, "user", f"- Call yourself {name}.", f"From now on I'm {name}.")
    if intent == "short":
        return Write(intent, "user", "- Keep replies short.", "I'll keep my answers short.")
    what = match.group("what").strip()
    return Write(intent, "memory", f"- {what[:1].upper()}{what[1:]}.", "I'll remember that.")


def classify(text: str) -> tuple[str, re.Match[str] | None]:
    lowered = normalise(text)
    for intent, pattern in _QUESTIONS:
        match = pattern.search(lowered)
        if match:
            return intent, match
    return "unknown", None


def transfer_names(tools: list[ToolSpec]) -> list[str]:
    """The names `transfer_call` accepts (its `target` enum), when the tool is offered on this call."""
    for spec in tools:
        if spec.name == "transfer_call":
            return [str(n) for n in spec.parameters.get("properties", {}).get("target", {}).get("enum", [])]
    return []


def transfer_request(text: str, names: list[str]) -> str | None:
    """The target of "put me through to <name>": "" when asked for someone not in `names`, None when
    the caller asked for no transfer at all."""
    match = _TRANSFER.search(normalise(text))
    if match is None:
        return None
    wanted = f" {match.group('what')} "
    found = [name for name in names if f" {normalise(name)} " in wanted]
    if found:
        return max(found, key=len)
    # "I want to talk to you about my bill" is no transfer request; "put me through to Bob" is one.
    return None if match.group(0).startswith(("talk", "speak")) else ""


def name_in_memory(memory: str) -> str:
    match = re.search(r"(?:caller's name is|call the caller) ([A-Z][\w'-]*)", memory, re.IGNORECASE)
    return _title(match.group(1)) if match else ""


def memory_lines(result: dict[str, Any], *, facts_only: bool = False) -> list[str]:
    """The bullet lines of a memory read's documents; with `facts_only`, not the digest of past calls
    (the lines under "## Recent calls"), which are notes about calls, not things the caller told us."""
    documents = result.get("documents", {}) if isinstance(result, dict) else {}
    lines = []
    for scope in ("memory", "user"):
        for line in str((documents.get(scope) or {}).get("content", "")).splitlines():
            if facts_only and line.strip() in DIGEST_HEADINGS.values():
                break
            if line.strip().startswith("- "):
                lines.append(line.strip())
    return lines


def _spoken_date(date: str) -> str:
    try:
        return time.strftime("%B %-d", time.strptime(date, "%Y-%m-%d"))
    except ValueError:
        return date


def _done(action: dict[str, Any]) -> str:
    """One action of the recall tool's ledger, as the agent says it ("put you through to sales"). Its
    status is the task ledger's now; "dispatched" claims none (internal/memory/tasks.py)."""
    status = action.get("status")
    if action.get("action") == "transfer":
        target = action.get("target", "")
        if status == "succeeded":
            return f"put you through to {target}"
        if status == "failed":
            return f"tried to put you through to {target}, but it didn't go through"
        if status == "dispatched":
            return f"asked to put you through to {target}"
        return f"started putting you through to {target}"
    name = str(action.get("name", "")).replace("_", " ")
    if status in ("ok", "succeeded"):
        return f"ran {name}" if status == "ok" else f"ran {name}, and it has finished"
    if status in ("started", "running"):
        return f"started {name}, and it is still in progress"
    if status == "dispatched":
        return f"ran {name}"
    if status == "cancelled":
        return f"started {name}, but it was cancelled"
    return f"tried {name}, but it failed"


def last_call_answer(result: dict[str, Any], *, asked_about_actions: bool) -> str:
    """"What did we talk about / what did you do for me last time", from the recall tool's latest call:
    its date, topics and gist, and what the agent did."""
    calls = result.get("calls") if isinstance(result, dict) else None
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
        return "I don't have notes of an earlier call with you."
    last = calls[0]
    topics = [str(t) for t in last.get("topics") or [] if str(t).strip()]
    answer = f"Last time, on {_spoken_date(str(last.get('date', '')))}, "
    answer += f"we talked about {', '.join(topics)}." if topics else "we spoke."
    if str(last.get("gist") or "").strip():
        answer += f" My note says: {str(last['gist']).strip().rstrip('.')}."
    actions = [a for a in last.get("actions") or [] if isinstance(a, dict)]
    if actions:
        answer += " I " + ", then ".join(_done(a) for a in actions) + "."
    elif asked_about_actions:
        answer += " I didn't do anything for you beyond talking."
    return answer


class LocalAgent:
    name = "local"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    def understands(self, *, memory_enabled: bool, transfer_targets: Sequence[str]) -> list[Capability]:
        """What a caller can ask this agent, with an example each (shown on the page; see
        local_capabilities.py)."""
        return local_capabilities(memory_enabled=memory_enabled, transfer_targets=transfer_targets)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        tools = {spec.name for spec in request.tools}
        results = _tool_results_this_turn(request.messages)
        if results:
            step = self._after_tools(request, results)
        else:
            step = self._answer(request, tools)
        if isinstance(step, list):
            for call in step:
                yield call
            return
        for word in re.findall(r"\S+\s*", step):
            yield ReplyDelta(word)

    def _answer(self, request: ChatRequest, tools: set[str]) -> str | list[ToolCall]:
        turn = request.turn
        if turn.dtmf:
            return f"You pressed {' '.join(turn.dtmf)}."
        if "low transcription confidence" in turn.note or "unclear" in turn.note:
            return "Sorry, I didn't quite catch that. Could you say it once more?"
        base = f"local-{len(request.messages)}"
        writes = memory_writes(turn.text)
        if is_temporary(turn.text) and _SHORT.search(normalise(turn.text)) and not writes:
            return "Okay, short it is, just this time."
        if writes and "memory" in tools:
            return [ToolCall(f"{base}-{i}", "memory", {"action": "append", "document": w.document,
                                                        "content": w.content}) for i, w in enumerate(writes)]
        names = transfer_names(request.tools)
        if names and (target := transfer_request(turn.text, names)) is not None:
            if target:
                return [ToolCall(base, "transfer_call", {"target": target})]
            return f"I can put you through to {' or '.join(names)}."
        intent, match = classify(turn.text)
        if intent == "goodbye":
            return [ToolCall(base, "end_call", {})] if "end_call" in tools else "Goodbye, thanks for calling."
        if intent in ("recall", "forget") and "memory" in tools:
            return [ToolCall(base, "memory", {"action": "read"})]
        if intent == "last_call":
            return [ToolCall(base, "recall", {})] if "recall" in tools else "I don't keep notes of our earlier calls."
        if writes:  # no memory on this call: acknowledge without pretending to remember
            return " ".join(w.confirmation for w in writes if w.intent in ("name",)) or \
                "I can't keep memories on this call, but I'll keep that in mind for now."
        return self._reply(request, intent, match)

    def _reply(self, request: ChatRequest, intent: str, match: re.Match[str] | None) -> str:
        turn = request.turn
        short = "keep replies short" in request.system.lower() or (
            is_temporary(turn.text) and bool(_SHORT.search(normalise(turn.text))))
        if intent == "my_name":
            name = name_in_memory(turn.memory + "\n" + request.system)
            return f"Your name is {name}." if name else "I don't know your name yet."
        if intent == "time":
            return time.strftime("It's %-I:%M %p.", time.localtime(self._clock()))
        if intent == "date":
            return time.strftime("Today is %A, %B %-d.", time.localtime(self._clock()))
        if intent == "repeat" and match:
            return match.group("what").strip().capitalize() + "."
        if intent == "who":
            return "I'm voicegate's offline assistant." if short else WHO_I_AM
        if intent == "greeting":
            name = name_in_memory(turn.memory + "\n" + request.system)
            return f"Hello {name}! How can I help?" if name else "Hello! How can I help?"
        if intent == "thanks":
            return "You're welcome."
        if not turn.text.strip():
            return "Sorry, I didn't catch that."
        if short:
            return f"I heard: {turn.text.strip()}."
        return f"You said: {turn.text.strip()}. {WHO_I_AM}"

    def _after_tools(self, request: ChatRequest,
                     results: list[tuple[ToolCall, dict[str, Any]]]) -> str | list[ToolCall]:
        errors = [r.get("error") for _, r in results if r.get("error")]
        if errors:
            return f"Sorry, I couldn't do that: {errors[0]}"
        text = request.turn.text
        if results[-1][0].name == "transfer_call":
            return f"Putting you through to {results[-1][0].arguments.get('target')}."
        if results[-1][0].name == "recall":
            match = _QUESTIONS_BY_INTENT["last_call"].search(normalise(text))
            return last_call_answer(results[-1][1], asked_about_actions=bool(match and "do" in match.group("who")))
        writes = memory_writes(text)
        if writes and all(call.arguments.get("action") == "append" for call, _ in results):
            return " ".join(w.confirmation for w in writes)
        intent, match = classify(text)
        last_call, last = results[-1]
        if intent == "goodbye":
            name = name_in_memory(request.turn.memory)
            return f"Goodbye{', ' + name if name else ''}. Thanks for calling."
        if intent == "recall":
            lines = [line[2:].rstrip(".") for line in memory_lines(last, facts_only=True)]
            if not lines:
                return "I don't remember anything about you yet."
            return "Here's what I remember: " + ". ".join(lines) + "."
        if intent == "forget" and match and last_call.arguments.get("action") == "read":
            target = _line_about(memory_lines(last), match.group("what"))
            if target is None:
                return "I don't have anything about that."
            document = "user" if target in str(last.get("documents", {}).get("user", {}).get("content", "")) \
                else "memory"
            return [ToolCall(f"local-forget-{len(request.messages)}", "memory",
                             {"action": "replace", "document": document, "old_text": target, "new_text": ""})]
        if intent == "forget":
            return "Okay, I've forgotten that."
        return "Done."

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        """Without a model there is no summariser; callers fall back to their extractive one."""
        return ""

    async def aclose(self) -> None:
        return None


def _tool_results_this_turn(messages: list[ChatMessage]) -> list[tuple[ToolCall, dict[str, Any]]]:
    """The tool calls made since the caller's last message, with their parsed results."""
    calls: dict[str, ToolCall] = {}
    results: list[tuple[ToolCall, dict[str, Any]]] = []
    for message in reversed(messages):
        if message.role == "user":
            break
        if message.role == "assistant":
            calls.update({call.id: call for call in message.tool_calls})
    for message in messages[len(messages) - _since_user(messages):]:
        if message.role == "tool" and message.tool_call_id in calls:
            try:
                data = json.loads(message.content)
            except ValueError:
                data = {"error": message.content}
            results.append((calls[message.tool_call_id], data if isinstance(data, dict) else {}))
    return results


def _since_user(messages: list[ChatMessage]) -> int:
    count = 0
    for message in reversed(messages):
        if message.role == "user":
            break
        count += 1
    return count


def _line_about(lines: list[str], what: str) -> str | None:
    """The stored line that best matches "forget <what>" (most shared words; None without any)."""
    wanted = {w for w in normalise(what).split() if len(w) > 2 and w not in {"that", "the", "about", "my"}}
    best, best_score = None, 0
    for line in lines:
        score = len(wanted & set(normalise(line).split()))
        if score > best_score:
            best, best_score = line, score
    return best
