"""What one exact edit does to a document: the capacity policy of caller memory, as a pure function.

In `memory`, facts live above the call digests (internal/memory/digest.py): an append goes to the
facts wherever it comes from (tool, API, CLI, reconciliation), call lines make room oldest first, a fact
is refused only when the facts alone exceed `max_chars`, and removing a fact removes the call lines
that state it. `user` (preferences) is a plain document. A document in plain-text format gets no
Markdown (its digest section is headed by a plain line, internal/conversation/past_calls.py DIGEST_HEADINGS).
"""

from __future__ import annotations

from typing import Literal

from voicegate.internal.memory import digest
from voicegate.internal.memory import documents as edits
from voicegate.internal.memory.provider import DocumentFormat, Scope

Action = Literal["append", "replace"]


def resolve_edit(scope: Scope, current: str, action: str, *, content: str, old_text: str, new_text: str,
                 max_chars: int, fmt: DocumentFormat = "markdown") -> str:
    """The document after the edit; raises documents.EditError with a stable code when it cannot be."""
    if action not in ("append", "replace"):
        raise edits.EditError("unknown_action", f"unknown action {action!r}; use append or replace")
    if scope != "memory":
        if action == "append":
            return edits.append(current, content, max_chars)
        return edits.replace(current, old_text, new_text, max_chars)
    try:
        if action == "append":
            edits.append("", content, max_chars)  # the same checks of the addition (empty, too long)
            return digest.append_fact(current, content, max_chars, fmt)
        replaced = edits.replace(current, old_text, new_text, 1 << 62)
        head, lines = digest.split_document(replaced, fmt)
        return digest.forget_in_digests(current, digest.fit_document(head, lines, max_chars, fmt), fmt)
    except digest.FactsTooLong as exc:
        raise edits.EditError("too_long", str(exc)) from None
