"""Which preferences reconciliation may save: only those the caller stated, in their own words (seed 004).

Preferences (the `user` document: how to address the caller, what to call the assistant, how to reply)
outrank the assistant profile, so nothing inferred may land there. After a call whose model did not use
the memory tool when the caller said "call me Sam" or "call yourself Skiff from now on", reconciliation
may recover it, and only with its evidence: the model quotes the caller, and the edit is kept only when

- the quote is in one of the caller's own lines of the transcript (not the agent's, not made up);
- the quote is a directive about address or reply style ("call me", "call yourself", "keep your
  answers short", "from now on", "I prefer"), not a fact or a mood ("I'm in a hurry" infers nothing);
- the quote does not limit itself to now ("just this once", "for this answer"): that was for the turn;
- the edit is one short list line.

Everything else proposed for `user` is dropped (logged without its text). The assistant profile
(ASSISTANT.md, the deployer's) is never a document reconciliation can name.
"""

from __future__ import annotations

import re

PREFERENCE_LINE_CHARS = 200  # one preference line at most

# Directives about how the caller is addressed, what the assistant calls itself, or how it replies.
_DIRECTIVE = re.compile(
    r"\b(call me|call yourself|name yourself|your name (is|should be|will be)|address me|i go by|"
    r"refer to me as|introduce yourself as|from now on|going forward|in future|in the future|"
    r"(always|never) (call|answer|reply|speak|talk|say|use|be)|"
    r"(keep|make) (your |the )?(answers|replies|responses|it|them) |"
    r"(answer|reply|respond|speak|talk) (to me )?(more )?(briefly|shortly|slowly|faster|quickly|formally|"
    r"informally|in)|"
    r"i (would |'d )?prefer|i'd like you to|i would like you to|i want you to|please (always|don't|do not))",
    re.IGNORECASE)
# Requests limited to now: they apply to the current turn only and are never saved.
_TEMPORARY = re.compile(r"\b(just )?(this once|for now|right now|for this (answer|question|call|one)|"
                        r"this time|today only|just today)\b", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def _normal(text: str) -> str:
    return _SPACES.sub(" ", text.replace("\u2019", "'")).strip(" .,!?;:\"'\u201c\u201d").casefold()


def caller_lines(transcript: str) -> list[str]:
    """What the caller said, one line per turn, from a "Caller:/Agent:" script."""
    return [line.split(":", 1)[1] for line in transcript.splitlines() if line.startswith("Caller:")]


def is_stated_preference(quote: str, transcript: str) -> bool:
    """Whether `quote` is the caller's own, lasting directive about address or reply style, found in
    their lines of `transcript`."""
    said = _normal(quote)
    if len(said) < 4 or not _DIRECTIVE.search(said) or _TEMPORARY.search(said):
        return False
    return any(said in _normal(line) for line in caller_lines(transcript))


def preference_edit(edit: dict[str, object], transcript: str) -> dict[str, str] | None:
    """A proposed `user` edit as reconciliation may apply it (append or replace, one short line, with
    the caller's quote as evidence), or None."""
    quote = edit.get("quote")
    if not isinstance(quote, str) or not is_stated_preference(quote, transcript):
        return None
    if edit.get("action") == "append":
        content = edit.get("content")
        if isinstance(content, str) and _one_short_line(content):
            return {"document": "user", "action": "append", "content": content.strip()}
    elif edit.get("action") == "replace":
        old, new = edit.get("old_text"), edit.get("new_text")
        if isinstance(old, str) and old and isinstance(new, str) and new.strip() and _one_short_line(new):
            return {"document": "user", "action": "replace", "old_text": old, "new_text": new.strip()}
    return None


def _one_short_line(text: str) -> bool:
    text = text.strip()
    return bool(text) and "\n" not in text and len(text) <= PREFERENCE_LINE_CHARS
