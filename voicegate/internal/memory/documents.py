"""Exact edits on memory documents, and the projection of a document into the model's context.

Edits are pure string operations, so a test can state their meaning in one line each:
- append(text): the text becomes the document's last line(s) (a newline is added between when needed);
- replace(old, new): `old` must occur exactly once; it is replaced by `new`. When `new` is empty and
  `old` is a whole line, the line's newline goes too, so deleting a fact leaves no blank line.
A failed edit changes nothing and says why, in words a model (or a person) can act on.
"""

from __future__ import annotations

import re

from voicegate.internal.memory.provider import DocumentFormat

TRUNCATION_NOTICE = "[Memory truncated: older lines are not shown.]"
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


class EditError(Exception):
    """An edit that cannot be applied; `code` is stable for APIs (edit_not_found, ambiguous_edit, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def append(content: str, text: str, max_chars: int) -> str:
    addition = text.strip("\n")
    if not addition.strip():
        raise EditError("empty_edit", "there is nothing to append")
    if not content:
        result = addition
    elif content.endswith("\n"):
        result = content + addition
    else:
        result = content + "\n" + addition
    return _bounded(result, max_chars)


def replace(content: str, old_text: str, new_text: str, max_chars: int) -> str:
    if not old_text:
        raise EditError("empty_edit", "old_text is empty; quote the exact text to change")
    count = content.count(old_text)
    if count == 0:
        raise EditError("edit_not_found", "old_text does not occur in the document; read it and quote exactly")
    if count > 1:
        raise EditError("ambiguous_edit",
                        f"old_text occurs {count} times; quote more of the surrounding text so it is unique")
    start = content.index(old_text)
    end = start + len(old_text)
    if not new_text and _is_whole_line(content, start, end):
        end += 1  # the line's own newline
    return _bounded(content[:start] + new_text + content[end:], max_chars)


def _is_whole_line(content: str, start: int, end: int) -> bool:
    starts_line = start == 0 or content[start - 1] == "\n"
    return starts_line and end < len(content) and content[end] == "\n"


def _bounded(result: str, max_chars: int) -> str:
    if len(result) > max_chars:
        raise EditError("too_long", f"the document would be {len(result)} characters; the limit is {max_chars}. "
                                    "Replace or remove something first.")
    return result


def project_for_model(content: str, fmt: DocumentFormat, max_chars: int) -> tuple[str, bool]:
    """What the model sees: template comments stripped (Markdown only), bounded, truncation marked.

    Returns (text, truncated). Reads through the API and the tool keep the original text instead, so
    exact edits can quote it.
    """
    text = content
    if fmt == "markdown":
        text = _COMMENT.sub("", text)
        text = re.sub(r"\n{3,}", "\n\n", text)
    text = text.strip()
    if len(text) <= max_chars:
        return text, False
    budget = max(0, max_chars - len(TRUNCATION_NOTICE) - 1)
    cut = text[:budget]
    if "\n" in cut:
        cut = cut[: cut.rindex("\n")]  # whole lines only
    return f"{cut}\n{TRUNCATION_NOTICE}".strip(), True
