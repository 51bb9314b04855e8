"""What a provider answers, normalised before the runtime believes it.

A provider is code the deployer may have written, in a hurry or against an older protocol, so its
answers are data to check, not facts: `list()` and `apply()` results pass through here before the
prompt, a tool, an API client or a change notice sees them (seed 000: returned documents are bounded,
normalised, invalid or duplicate ones discarded).

- A document counts only with a known scope, text content and a whole revision >= 0; anything else is
  dropped (a broken revision would defeat compare-and-set). The first valid document of a scope wins.
- Content is bounded by CEILING_FACTOR x `max_chars`: longer is legitimate only when `max_chars` was
  lowered after a document was written, and no document this runtime wrote comes near that ceiling.
- An `apply()` counts as a change only when it says it changed something and returns a valid document
  for the scope it was asked to write; otherwise it is a no-op (nothing announced, nothing refreshed).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import Any

from voicegate.internal.memory.provider import SCOPES, MemoryDocument, Scope

log = logging.getLogger(__name__)

CEILING_FACTOR = 4
MAX_ITEMS = 16  # items of one answer looked at: two scopes, with room for a sloppy provider's repeats
FORMATS = ("markdown", "text")


def content_ceiling(max_chars: int) -> int:
    return max_chars * CEILING_FACTOR


def _field(raw: Any, name: str) -> Any:
    """A field of a returned document: providers written against the protocol's shape by hand may
    answer with plain mappings instead of MemoryDocument."""
    if isinstance(raw, Mapping):
        return raw.get(name)
    return getattr(raw, name, None)


def bounded(content: str, ceiling: int) -> str:
    """`content` cut to `ceiling` characters, at the last line end when there is one."""
    if len(content) <= ceiling:
        return content
    cut = content[:ceiling]
    line_end = cut.rfind("\n")
    return cut[:line_end] if line_end > 0 else cut


def valid_document(raw: Any, ceiling: int) -> MemoryDocument | None:
    """The document `raw` describes, normalised; None when it is not one."""
    scope, content, revision = _field(raw, "scope"), _field(raw, "content"), _field(raw, "revision")
    if scope not in SCOPES or not isinstance(content, str):
        return None
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 0:
        return None
    document_format = _field(raw, "format")
    updated_at = _field(raw, "updated_at")
    if not isinstance(updated_at, int | float) or isinstance(updated_at, bool):
        updated_at = None
    return MemoryDocument(scope, bounded(content, ceiling), revision,
                          document_format if document_format in FORMATS else "markdown",
                          float(updated_at) if updated_at is not None else None)


def valid_documents(raw: Any, max_chars: int) -> dict[Scope, MemoryDocument]:
    """The usable documents of a provider's answer, by scope (empty when the answer is not a list)."""
    if raw is None or isinstance(raw, str | bytes | Mapping):
        return {}
    found: dict[Scope, MemoryDocument] = {}
    dropped = 0
    try:
        items = list(itertools.islice(iter(raw), MAX_ITEMS))
    except Exception as exc:  # not iterable, or a generator that failed half-way
        log.warning("a memory provider returned something that is not a list of documents: %s",
                    type(exc).__name__)
        return {}
    for item in items:
        document = valid_document(item, content_ceiling(max_chars))
        if document is None or document.scope in found:
            dropped += 1
            continue
        found[document.scope] = document
    if dropped:
        log.warning("a memory provider returned invalid or duplicate documents; they were dropped",
                    extra={"dropped": dropped})
    return found


def changed_count(result: Any) -> int:
    """How many documents an apply() result says it changed (0 for anything but a whole number)."""
    changed = getattr(result, "changed", 0)
    if not isinstance(changed, int) or isinstance(changed, bool):
        return 0
    return max(changed, 0)


def applied_documents(result: Any, scope: Scope, max_chars: int) -> dict[Scope, MemoryDocument] | None:
    """The documents an apply() of `scope` wrote, normalised; None when the result is not a change."""
    if changed_count(result) == 0:
        return None
    documents = valid_documents(getattr(result, "documents", None), max_chars)
    if scope not in documents:
        log.warning("a memory provider reported a change without the document it changed; treated as none")
        return None
    return documents
