"""The digest of past calls kept in the caller's `memory` document, and how a new call is merged in.

The document keeps durable facts at the top and a "## Recent calls" section at the end, newest first,
one line per call. A call's line is a summary (the rolling summary of a long call, or a model's one
sentence when a model is configured); without one, the caller's own lines are kept only as quotations,
defused of anything shaped like a fence and bounded, so what a caller said is evidence of what they
said, never a sentence that reads as an instruction. A new call adds its line; the oldest lines go
when the whole document would exceed `memory.max_chars`. Facts are never dropped to make room for the digest.
"""

from __future__ import annotations

import re
import time

from internal.memory.injection import neutralise_for_storage
from internal.pipeline.rolling_summary import extractive_summary
from internal.pipeline.transcript import TranscriptEntry

DIGEST_HEADING = "## Recent calls"
CALL_LINE_CHARS = 240  # one call's line at most


def bounded_line(text: str) -> str:
    """One digest line: fence-shaped tags defused, whitespace collapsed, at most CALL_LINE_CHARS."""
    text = " ".join(neutralise_for_storage(text).split())
    if len(text) > CALL_LINE_CHARS:
        text = text[: CALL_LINE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return text


def call_summary(entries: list[TranscriptEntry], rolling_summary: str) -> str:
    """What one call was about: the rolling summary when the call had one, else the caller's own words,
    quoted (a model's summary, when one is configured, replaces this at hang-up)."""
    text = rolling_summary.strip()
    if text:
        return bounded_line(text)
    lines = extractive_summary(entries, max_chars=CALL_LINE_CHARS * 2)
    said = [line for line in re.sub(r"^- Caller said: ", "", lines, flags=re.MULTILINE).splitlines() if line.strip()]
    if not said:
        said = [e.text.strip() for e in entries if e.role == "user" and e.text.strip()]
    if not said:
        return ""
    quotes = "; ".join("\u201c" + " ".join(line.replace("\u201c", "").replace("\u201d", "").split()) + "\u201d"
                       for line in said)
    return bounded_line("the caller said " + quotes)


def split_document(content: str) -> tuple[str, list[str]]:
    """(everything above the digest section, the digest's call lines)."""
    head, heading, tail = content.partition(DIGEST_HEADING)
    if not heading:
        return content.rstrip(), []
    lines = [line.strip() for line in tail.splitlines() if line.strip().startswith("- ")]
    return head.rstrip(), lines


def render_document(head: str, lines: list[str]) -> str:
    parts = [head.rstrip()] if head.strip() else []
    if lines:
        parts.append(DIGEST_HEADING + "\n" + "\n".join(lines))
    return ("\n\n".join(parts) + "\n") if parts else ""


def merge_digest(content: str, summary: str, max_chars: int, when: float | None = None) -> str:
    """The `memory` document with this call's line added, bounded to `max_chars` (deterministic)."""
    if not summary.strip():
        return content
    head, lines = split_document(content)
    date = time.strftime("%Y-%m-%d", time.localtime(when if when is not None else time.time()))
    lines = [f"- {date}: {summary.strip()}", *lines]
    while lines:
        document = render_document(head, lines)
        if len(document) <= max_chars:
            return document
        lines.pop()  # the oldest call goes first
    return render_document(head, []) if len(render_document(head, [])) <= max_chars else content


def replace_digest_section(content: str, section_lines: list[str], max_chars: int) -> str:
    """Install a digest section written by a model, still bounded (oldest lines dropped)."""
    head, _ = split_document(content)
    lines = [line if line.startswith("- ") else f"- {line}" for line in section_lines if line.strip()]
    while lines and len(render_document(head, lines)) > max_chars:
        lines.pop()
    return render_document(head, lines)
