"""The offline local agent: useful with no keys at all, honest that it is not a language model.

It greets, tells the time, repeats what it is asked to, ends the call on "goodbye", and handles
"remember that ...", "my name is ...", "call me ...", "keep your answers short", "forget ..." and
"what do you remember about me" through the same tools an LLM would call (`memory`, `end_call`), so
memory works identically whichever agent runs. Deterministic: the same request gets the same reply.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from internal.llm.base import ChatRequest, ReplyDelta, ToolCall

WHO_I_AM = ("I'm the simple offline assistant built into voicegate, not a full language model. I can tell you "
            "the time, repeat what you say, and remember things you ask me to.")

_NAME = r"([a-z][a-z'-]{1,30})"
_INTENTS: list[tuple[str, re.Pattern[str]]] = [
    ("goodbye", re.compile(r"\b(good ?bye|bye|hang up|that's all|that is all)\b")),
    ("forget", re.compile(r"\bforget (?:that |about |my )?(?P<what>.+)")),
    ("recall", re.compile(r"\bwhat do you (?:remember|know) about me\b|\bdo you remember me\b")),
    ("my_name", re.compile(r"\bwhat(?:'s| is) my name\b")),
    ("remember", re.compile(r"\bremember (?:that )?(?P<what>.+)")),
    ("short", re.compile(r"\b(keep (?:your |it |the )?(?:answers?|replies|repl(?:y|ies)|it) (?:short|shorter|brief)|"
                         r"be brief|shorter answers)\b")),
    ("assistant_name", re.compile(r"\bcall yourself " + _NAME)),
    ("call_me", re.compile(r"\bcall me " + _NAME)),
    ("name", re.compile(r"\b(?:my name is|my name's) " + _NAME)),
    ("time", re.compile(r"\bwhat(?:'s| is)? (?:the )?time\b|\bwhat time\b|\btell me the time\b")),
    ("date", re.compile(r"\bwhat(?:'s| is)? (?:the )?(?:date|day)\b")),
    ("repeat", re.compile(r"\b(?:repeat after me|say) (?P<what>.+)")),
    ("who", re.compile(r"\b(who are you|what are you|are you a robot|what can you do|help)\b")),
    ("greeting", re.compile(r"^(hello|hi|hey|good (morning|afternoon|evening))\b")),
    ("thanks", re.compile(r"\b(thank you|thanks)\b")),
]
_NOT_NAMES = {"the", "a", "an", "not", "on", "in", "calling", "here", "fine", "good", "okay", "sorry"}


def classify(text: str) -> tuple[str, re.Match[str] | None]:
    lowered = " ".join(re.findall(r"[a-z0-9'-]+", text.lower()))
    for intent, pattern in _INTENTS:
        match = pattern.search(lowered)
        if match:
            return intent, match
    return "unknown", None


def name_in_memory(memory: str) -> str:
    """The caller's name as recorded by the memory tool ("The caller's name is Sam.")."""
    match = re.search(r"caller's name is ([A-Z][\w'-]*)", memory) or re.search(r"call the caller ([A-Z][\w'-]*)",
                                                                                  memory, re.IGNORECASE)
    return match.group(1) if match else ""


def _title(word: str) -> str:
    return word[:1].upper() + word[1:]


class LocalAgent:
    name = "local"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        tools = {spec.name for spec in request.tools}
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "tool":
            reply = self._after_tool(request, last.content)
        else:
            reply, call = self._answer(request, tools)
            if call is not None:
                yield call
                return
        for word in re.findall(r"\S+\s*", reply):
            yield ReplyDelta(word)

    def _answer(self, request: ChatRequest, tools: set[str]) -> tuple[str, ToolCall | None]:
        turn = request.turn
        if turn.dtmf:
            return f"You pressed {' '.join(turn.dtmf)}.", None
        if "low transcription confidence" in turn.note or "unclear" in turn.note:
            return "Sorry, I didn't quite catch that. Could you say it once more?", None
        intent, match = classify(turn.text)
        memory = "memory" in tools
        call_id = f"local-{len(request.messages)}"

        def memory_call(arguments: dict[str, Any]) -> tuple[str, ToolCall]:
            return "", ToolCall(call_id, "memory", arguments)

        if intent == "goodbye":
            if "end_call" in tools:
                return "", ToolCall(call_id, "end_call", {})
            return "Goodbye, thanks for calling.", None
        if intent == "name" and match and match.group(1) not in _NOT_NAMES:
            name = _title(match.group(1))
            if memory:
                return memory_call({"action": "append", "document": "memory",
                                    "content": f"- The caller's name is {name}."})
            return f"Nice to meet you, {name}.", None
        if intent == "call_me" and match and memory:
            return memory_call({"action": "append", "document": "user",
                                "content": f"- Call the caller {_title(match.group(1))}."})
        if intent == "assistant_name" and match and memory:
            return memory_call({"action": "append", "document": "user",
                                "content": f"- Call yourself {_title(match.group(1))}."})
        if intent == "short" and memory:
            return memory_call({"action": "append", "document": "user", "content": "- Keep replies short."})
        if intent == "remember" and match:
            if memory:
                return memory_call({"action": "append", "document": "memory",
                                    "content": f"- {match.group('what').strip().capitalize()}."})
            return "I can't keep memories on this server, but I'll keep that in mind for this call.", None
        if intent in ("recall", "forget") and memory:
            return memory_call({"action": "read"})
        if intent == "my_name":
            name = name_in_memory(turn.memory)
            return (f"Your name is {name}." if name else "I don't know your name yet."), None
        if intent == "time":
            return time.strftime("It's %-I:%M %p.", time.localtime(self._clock())), None
        if intent == "date":
            return time.strftime("Today is %A, %B %-d.", time.localtime(self._clock())), None
        if intent == "repeat" and match:
            return match.group("what").strip().capitalize() + ".", None
        if intent == "who":
            return WHO_I_AM, None
        if intent == "greeting":
            name = name_in_memory(turn.memory)
            return (f"Hello {name}! How can I help?" if name else "Hello! How can I help?"), None
        if intent == "thanks":
            return "You're welcome.", None
        if not turn.text.strip():
            return "Sorry, I didn't catch that.", None
        short = "short" in request.system.lower() and "keep replies short" in request.system.lower()
        if short:
            return f"I heard: {turn.text.strip()}. I can only do simple things.", None
        return f"You said: {turn.text.strip()}. {WHO_I_AM}", None

    def _after_tool(self, request: ChatRequest, result: str) -> str:
        try:
            data = json.loads(result)
        except ValueError:
            data = {}
        if isinstance(data, dict) and data.get("error"):
            return f"Sorry, I couldn't do that: {data['error']}"
        intent, match = classify(request.turn.text)
        if intent == "goodbye":
            name = name_in_memory(request.turn.memory)
            return f"Goodbye{', ' + name if name else ''}. Thanks for calling."
        if intent == "name" and match:
            return f"Nice to meet you, {_title(match.group(1))}. I'll remember that."
        if intent == "call_me" and match:
            return f"Okay, I'll call you {_title(match.group(1))}."
        if intent == "assistant_name" and match:
            return f"Okay, from now on I'm {_title(match.group(1))}."
        if intent == "short":
            return "Okay, I'll keep it short."
        if intent == "remember":
            return "Okay, I'll remember that."
        if intent == "recall":
            documents = data.get("documents", {}) if isinstance(data, dict) else {}
            lines = [line.strip("- ").strip() for doc in ("memory", "user")
                     for line in str((documents.get(doc) or {}).get("content", "")).splitlines()
                     if line.strip().startswith("-")]
            if not lines:
                return "I don't remember anything about you yet."
            return "Here's what I remember: " + " ".join(lines)
        return "Done."

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        """Without a model the best summary is an extract; callers fall back to their own."""
        return ""

    async def aclose(self) -> None:
        return None
