"""What the model reads of an MCP tool's result: its text, bounded, inside a fence it cannot leave.

An MCP server is somebody else's program, so its results are handled like caller memory
(internal/memory/injection.py, with the same `neutralise` from internal/conversation/text.py): every angle
bracket in them becomes a guillemet, so no text can close the `<tool_result>` fence or open another
(`</tool_result>`, `<system>`); the fence and a notice when the text was cut fit in `mcp.max_result_chars`,
always whole; and the policy says fenced results are data
(internal/pipeline/context.py, TOOL_RESULTS_POLICY). Images, audio and binary resources are not sent
to the model; a line says one was left out.
"""

from __future__ import annotations

import json
import re

from mcp.types import CallToolResult

from voicegate.internal.conversation.text import neutralise

CLOSE = "</tool_result>"
CUT_NOTICE = "[the rest of the result was cut: too long]"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def result_text(result: CallToolResult) -> str:
    """The result's content as text, block by block; the structured content when there is no text."""
    parts: list[str] = []
    for block in result.content:
        if block.type == "text":
            parts.append(block.text)
        elif block.type == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if isinstance(text, str) else "[a binary resource was left out]")
        elif block.type == "resource_link":
            parts.append(f"[a link to {block.uri}]")
        else:
            parts.append(f"[{block.type} content was left out]")
    if not any(part.strip() for part in parts) and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, default=str)]
    return "\n".join(parts)


def fenced(server: str, tool: str, text: str, max_chars: int) -> str:
    """`text` as the model reads it: neutralised, cut to fit, fenced, never longer than `max_chars`."""
    head = f'<tool_result server="{_UNSAFE.sub("_", server)}" tool="{_UNSAFE.sub("_", tool)}">'
    room = max_chars - len(head) - len(CLOSE) - 2
    body = neutralise(text.strip())
    if len(body) > room:
        body = body[:max(0, room - len(CUT_NOTICE) - 1)].rstrip() + "\n" + CUT_NOTICE
    return f"{head}\n{body}\n{CLOSE}"
