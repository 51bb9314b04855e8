"""Chat models: OpenAI-compatible, Ollama, bring-your-own agent, and the offline local agent."""

from voicegate.internal.llm.base import (
    ChatMessage,
    ChatModel,
    ChatRequest,
    LlmError,
    ReplyDelta,
    ToolCall,
    ToolSpec,
    Turn,
)

__all__ = ["ChatMessage", "ChatModel", "ChatRequest", "LlmError", "ReplyDelta", "ToolCall", "ToolSpec", "Turn"]
