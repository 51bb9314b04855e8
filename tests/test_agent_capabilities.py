"""The offline agent says what it understands: every example it lists is one its own patterns act on, and
GET /api/agent (which the page reads) carries the list only when the local agent is the model."""

from __future__ import annotations

import re
from pathlib import Path

from tests.webrtc.harness import live_server, webrtc_config
from voicegate.internal.llm.base import ChatMessage, ChatRequest, ReplyDelta, ToolCall, ToolSpec, Turn
from voicegate.internal.llm.local import WHO_I_AM, LocalAgent

TARGETS = {"sales": "sip:sales@pbx.example", "front desk": "tel:+15550001111"}
TOOLS = [
    ToolSpec("memory", "read or edit the caller's memory", {"type": "object", "properties": {}}),
    ToolSpec("end_call", "hang up", {"type": "object", "properties": {}}),
    ToolSpec("transfer_call", "transfer the call", {
        "type": "object", "properties": {"target": {"type": "string", "enum": list(TARGETS)}}}),
]


async def what_the_agent_does(said: str) -> str | ToolCall:
    """The agent's answer to `said` on a phone call with every tool: its first tool call, else its reply."""
    request = ChatRequest("s", "tel:+15550002222", "", [ChatMessage("user", said)], Turn(text=said), tools=TOOLS)
    out = [item async for item in LocalAgent(clock=lambda: 0.0).stream(request)]
    calls = [item for item in out if isinstance(item, ToolCall)]
    return calls[0] if calls else "".join(item.text for item in out if isinstance(item, ReplyDelta))


def memory_append(content: str) -> ToolCall:
    return ToolCall("", "memory", {"action": "append", "content": content})


def is_like(done: str | ToolCall, expected: str | ToolCall) -> bool:
    if isinstance(expected, str):
        return isinstance(done, str) and re.fullmatch(expected, done) is not None
    return isinstance(done, ToolCall) and done.name == expected.name and all(
        done.arguments.get(key) == value for key, value in expected.arguments.items())


# What each listed intent must make the agent do. A new intent in the list without a line here fails
# the first test: the page may only promise what is checked.
EXPECTED: dict[str, str | ToolCall] = {
    "time": r"It's \d{1,2}:\d\d [AP]M\.",
    "date": r"Today is \w+, \w+ \d{1,2}\.",
    "repeat": r"The parcel arrived on monday\.",
    "who": re.escape(WHO_I_AM),
    "greeting": r"Hello! How can I help\?",
    "name": memory_append("- The caller's name is Sam."),
    "remember": memory_append("- I like green tea."),
    "short": memory_append("- Keep replies short."),
    "recall": ToolCall("", "memory", {"action": "read"}),
    "forget": ToolCall("", "memory", {"action": "read"}),  # read first, then replace the matching line
    "transfer": ToolCall("", "transfer_call", {"target": "sales"}),
    "goodbye": ToolCall("", "end_call", {}),
}


async def test_every_example_the_local_agent_lists_makes_it_do_that_intent() -> None:
    listed = LocalAgent().understands(memory_enabled=True, transfer_targets=list(TARGETS))
    assert [c.intent for c in listed if c.intent not in EXPECTED] == []
    assert {c.intent for c in listed} == set(EXPECTED)
    for capability in listed:
        done = await what_the_agent_does(capability.example)
        assert is_like(done, EXPECTED[capability.intent]), (capability, done)


def test_memory_intents_are_marked_unavailable_with_memory_off_and_transfer_needs_targets() -> None:
    listed = {c.intent: c for c in LocalAgent().understands(memory_enabled=False, transfer_targets=[])}
    assert "transfer" not in listed
    assert {i for i, c in listed.items() if not c.available} == {"name", "remember", "short", "recall", "forget"}
    assert all(c.needs == "memory" for c in listed.values() if not c.available)
    assert listed["time"].available and listed["time"].needs == ""


async def test_api_agent_lists_what_the_local_agent_understands(tmp_path: Path) -> None:
    config = webrtc_config(tmp_path)
    config.llm.provider = "local"
    config.sip.transfer_targets = TARGETS
    async with live_server(config) as server, server.http() as http:
        response = await http.get("/api/agent")
    assert response.status_code == 200 and response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["llm"] == "local"
    by_intent = {item["intent"]: item for item in body["understands"]}
    assert set(by_intent) == set(EXPECTED)
    assert by_intent["time"] == {"intent": "time", "example": "What time is it?", "needs": "", "available": True}
    assert by_intent["transfer"]["example"] == "Put me through to sales." and by_intent["transfer"]["needs"] == "phone"
    assert by_intent["recall"]["available"] is False  # memory is off in this config


async def test_api_agent_has_no_list_when_another_model_answers(tmp_path: Path) -> None:
    config = webrtc_config(tmp_path)
    config.llm.provider = "openai"
    config.openai.api_key = "sk-not-a-real-key-for-this-test"
    async with live_server(config) as server, server.http() as http:
        response = await http.get("/api/agent")
    assert response.status_code == 200
    assert response.json() == {"llm": "openai"}
    assert "sk-not-a-real-key" not in response.text
