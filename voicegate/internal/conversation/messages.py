"""The messages a conversation is made of, as a chat model reads them: who spoke, what, and the tool calls.

They belong to the conversation, not to a model: the call keeps them in its history across reconnects
(state.py), and every model (internal/llm) is sent them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]

    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(slots=True)
class ChatMessage:
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)  # assistant messages that called tools
    tool_call_id: str = ""  # tool messages: which call this answers
