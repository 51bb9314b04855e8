"""The heading under which a caller's document keeps one line per past call.

Memory writes that section (internal/memory/digest.py merges each call in); the offline agent
(internal/llm/local.py) reads a memory result and must tell the facts above it from those notes about
calls. Both stand on this, below them, so neither imports the other.
"""

from __future__ import annotations

DIGEST_HEADING = "## Recent calls"
# A plain-text document gets no Markdown: its digest section is headed by a plain line.
DIGEST_HEADINGS: dict[str, str] = {"markdown": DIGEST_HEADING, "text": "Recent calls:"}
