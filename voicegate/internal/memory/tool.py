"""The `memory` and `recall` tools: how the model (or the offline agent) reads and edits caller memory.

One atomic operation per call. `read` returns the documents exactly as stored (so a later `replace` can
quote them), both or only the one `document` names; with a `query` it also returns the most relevant
lines when the provider supports semantic recall. `append` adds to `user` (preferences: how to address
the caller, reply style) or `memory` (durable facts). `replace` needs `old_text` to occur exactly
once; an empty `new_text` deletes it. Failures come back as errors the model can act on and change
nothing. Offered only to verified callers. A write carries the trace id of the turn that made it.

`recall` (with `memory.session_digests`) returns the caller's latest session digests: per call its
date, topics, gist and what the agent did (tool names and transfer targets, never arguments or results:
internal/conversation/actions.py), each with its status read from the task ledger at the time of the
question, or "dispatched" when the ledger no longer knows it (internal/memory/tasks.py).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from voicegate.internal.conversation.actions import call_actions
from voicegate.internal.memory.provider import ChangeContext, MemoryDocument, Scope
from voicegate.internal.memory.runtime import UNKNOWN_EPOCH, FrontendMemoryRuntime, MemoryRuntimeError
from voicegate.internal.memory.sessions import OWNER, SessionMemory
from voicegate.internal.memory.tasks import live_actions
from voicegate.internal.telemetry.otel import current_trace_id
from voicegate.internal.tools.registry import ToolContext, ToolError, ToolRegistry

MEMORY_TOOL_DESCRIPTION = (
    "Read or change what you remember about the caller. One operation per call; several calls per turn "
    "are fine. Documents: 'user' holds the caller's explicit long-term preferences: how to address them "
    "('call me Sam'), what to call yourself ('call yourself Skiff from now on': that is this caller's "
    "preference, saved in 'user', never a change to your profile) and how you should reply ('keep your "
    "answers short'); save such a stated preference to 'user' in the same turn, even when the caller does not "
    "say 'remember'. 'memory' holds durable facts and decisions about them. Save only what the "
    "caller asked you to remember or change, or what they stated; never guesses, and never a "
    "request the caller limits to now ('just this once', 'for this answer'): that applies to the current "
    "turn only. Actions: "
    "read (optional query), append (document, content as a Markdown list line '- ...'), replace (document, "
    "old_text quoted exactly from a read, new_text; empty new_text deletes the line)."
)
MEMORY_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["read", "append", "replace"]},
        "document": {"type": "string", "enum": ["user", "memory"]},
        "content": {"type": "string", "description": "append: the text to add"},
        "old_text": {"type": "string", "description": "replace: the exact text to change, occurring once"},
        "new_text": {"type": "string", "description": "replace: the new text; empty deletes"},
        "query": {"type": "string", "description": "read: what to look for (semantic recall)"},
    },
    "required": ["action"],
    "additionalProperties": False,
}
RECALL_TOOL_DESCRIPTION = ("What you and the caller talked about in earlier calls and what you did for them, "
                           "newest call first: its date, topics, a short gist, and its actions (each a tool that "
                           "ran or a transfer), each with its status as it is now: ok or error; started, running, "
                           "succeeded, failed or cancelled; requested or ended; or 'dispatched' when it was done "
                           "or asked for but its status is no longer known (never claim one then). Use for 'what "
                           "did we discuss last time' or 'what did you do for me last time'. Returns no calls "
                           "when none are kept.")


def documents_json(documents: dict[Scope, MemoryDocument]) -> dict[str, Any]:
    return {scope: {"content": doc.content, "revision": doc.revision} for scope, doc in documents.items()}


def _owner(context: ToolContext) -> str:
    owner = context.call.slots.get(OWNER) if context.call is not None else None
    if owner is None:
        raise ToolError("memory is not available on this call")
    return owner


def _epoch(context: ToolContext, sessions: SessionMemory) -> int:
    """The erasure epoch of the call this tool runs in: its writes never outlive an erasure."""
    return sessions.epoch(context.call) if context.call is not None else UNKNOWN_EPOCH


def _has_owner(context: ToolContext) -> bool:
    return context.call is not None and context.call.slots.get(OWNER) is not None


def register_memory_tools(registry: ToolRegistry, runtime: FrontendMemoryRuntime, sessions: SessionMemory,
                          *, session_digests: bool) -> None:
    async def memory(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        owner = _owner(context)
        action = arguments.get("action")
        if action == "read":
            query = str(arguments.get("query") or "").strip()
            documents = runtime.documents(owner)
            wanted = arguments.get("document")
            if wanted not in (None, "", *documents):
                raise ToolError("document must be 'user' (preferences) or 'memory' (facts), or left out for both")
            if wanted:
                documents = {wanted: documents[wanted]}
            result: dict[str, Any] = {"documents": documents_json(documents)}
            if query and runtime.capabilities.semantic_query:
                result["matches"] = await runtime.query(owner, query)
            return result
        document = arguments.get("document")
        if document not in ("user", "memory"):
            raise ToolError("say which document: 'user' (preferences) or 'memory' (facts)")
        if action not in ("append", "replace"):
            raise ToolError("action must be read, append or replace")
        try:
            outcome = await runtime.edit(owner, document, action, content=str(arguments.get("content") or ""),
                                         old_text=str(arguments.get("old_text") or ""),
                                         new_text=str(arguments.get("new_text") or ""),
                                         context=ChangeContext("tool", context.session_id, context.turn,
                                                               trace_id=current_trace_id(),
                                                               erasure_epoch=_epoch(context, sessions)))
        except MemoryRuntimeError as exc:
            raise ToolError(exc.message) from None
        sessions.forgotten(context.extras.get("session"), outcome.forgotten)
        return {"ok": True, "changed": outcome.changed, "documents": documents_json(outcome.documents)}

    registry.register("memory", MEMORY_TOOL_DESCRIPTION, MEMORY_TOOL_PARAMETERS, memory, available=_has_owner,
                      side_effects=lambda arguments: arguments.get("action") != "read",
                      ledger=False)  # memory writes are audited; they are not actions to recall

    if not session_digests:
        return

    async def recall(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        owner = _owner(context)
        try:
            items = await runtime.session_digests(owner, 5)
            # Status is read from the task ledger now, never the digest's copy (seed 004).
            calls = [{"date": time.strftime("%Y-%m-%d", time.localtime(d.created_at)), "topics": d.topics,
                      "gist": d.gist, "actions": await live_actions(runtime, owner, call_actions(d.actions),
                                                                    partial(registry.task_status, context=context),
                                                                    _epoch(context, sessions))}
                     for d in items]
        except MemoryRuntimeError as exc:
            raise ToolError(exc.message) from None
        return {"calls": calls}

    registry.register("recall", RECALL_TOOL_DESCRIPTION, {"type": "object", "properties": {},
                                                          "additionalProperties": False},
                      recall, available=_has_owner, side_effects=False)
