"""What caller memory adds to the model's system context: one function builds it and bounds it.

Two sections, each under a short heading and inside a fence of its own:

    ## Caller preferences                  ## Long-term memory
    <caller_preferences>                   <caller_memory>
    - Keep replies short.                  - The caller's name is Sam.
    </caller_preferences>                  </caller_memory>

What each section's authority is (preferences override the assistant profile, memory is evidence) is
policy, not memory: the pipeline states it with the policy (internal/pipeline/context.py,
MEMORY_POLICY), outside this budget.

`memory.max_chars` is the ceiling on all of it, counted in characters: headings, fences, separators,
notices, preferences and memory (or, in retrieval mode, the retrieved lines). Each non-empty section
gets a fair share of what the headings and fences leave (a section that needs less gives the rest to
the other); a body keeps whole lines only, in order, never a line cut in the middle, and says when
something was left out; a section that cannot show one whole line is left out and its share goes to
the other. The same bounded bodies are what a bring-your-own agent gets as its `memory` field
(`memory_text`).

Observed preferences rank below stated ones (seed 000 keeps an "observed-preference priority notice" in
the model's view). voicegate itself never infers a preference (seed 004: reconciliation keeps only what
the caller stated, quoted), but a provider that learns on its own, or a USER.md carried over from the
seeds' assistant, may keep a section headed "Observed preferences". Its heading line gets the notice
(`OBSERVED_NOTICE`) on the same line, so the two are kept or left out together; and when that line cannot
be shown, nothing after it is (an observed preference never appears without the notice that ranks it).

Stored text can never forge a fence: every angle bracket in it becomes a single guillemet (`<` -> `‹`,
`>` -> `›`), so nothing inside a section can close it or open another; whatever it says (a heading, a
role marker, "ignore previous instructions") stays inside, as data the policy says is not to be
obeyed. On write, fence-shaped tags are defused the same way (`neutralise_for_storage`), so a stored
document never holds one either.
"""

from __future__ import annotations

import re

from voicegate.internal.conversation.text import neutralise

PREFERENCES_HEADING = "## Caller preferences"
MEMORY_HEADING = "## Long-term memory"
OMITTED_NOTICE = "[more not shown]"  # a section that could not show all its lines says so
FENCES = {"user": ("<caller_preferences>", "</caller_preferences>"), "memory": ("<caller_memory>", "</caller_memory>")}
HEADINGS = {"user": PREFERENCES_HEADING, "memory": MEMORY_HEADING}
SEPARATOR = "\n\n"
# The priority notice added to an "Observed preferences" heading (Markdown `## ...` or a plain `...:` line).
OBSERVED_NOTICE = ("(observed from past conversations, not stated by the caller: the caller's stated "
                   "preferences and current request take priority over them)")
_OBSERVED_HEADING = re.compile(r"^\s*(?:#{1,6}\s*)?observed preferences\b[^\n]{0,60}$", re.IGNORECASE)
# Anything shaped like one of our fences, or the older `<memory>` tag, in any case and spacing.
_FENCE_LIKE = re.compile(r"<\s*/?\s*(?:caller[_\s-]*(?:preferences|memory)|memory|system|policy)\b[^<>]{0,40}>",
                         re.IGNORECASE)


def neutralise_for_storage(text: str) -> str:
    """What a write stores: fence-shaped tags defused (the rest of the text is kept as written, so exact
    edits can still quote it)."""
    return _FENCE_LIKE.sub(lambda m: m.group().replace("<", "\u2039").replace(">", "\u203a"), text)


def with_priority_notice(preferences: str) -> str:
    """`preferences` with OBSERVED_NOTICE on every "Observed preferences" heading line (once)."""
    return "\n".join(f"{line.rstrip()} {OBSERVED_NOTICE}"
                     if _OBSERVED_HEADING.match(line) and OBSERVED_NOTICE not in line else line
                     for line in preferences.splitlines())


def _observed_heading(line: str) -> bool:
    return OBSERVED_NOTICE in line and _OBSERVED_HEADING.match(line.replace(OBSERVED_NOTICE, "")) is not None


def _section(scope: str, body: str) -> str:
    opening, closing = FENCES[scope]
    return f"{HEADINGS[scope]}\n{opening}\n{body}\n{closing}"


def _fit(body: str, budget: int) -> str:
    """`body` within `budget` characters, whole lines only, in order: the lines that fit (a line too
    long for the room is left out whole, never cut) and a notice when anything was left out; "" when
    not one line fits beside the notice."""
    if len(body) <= budget:
        return body
    room = budget - len(OMITTED_NOTICE) - 1
    kept: list[str] = []
    used = 0
    for line in body.splitlines():
        if line.strip() and used + len(line) + (1 if kept else 0) <= room:
            used += len(line) + (1 if kept else 0)
            kept.append(line)
        elif _observed_heading(line):
            break  # what follows it would read as stated preferences without it
    return "\n".join([*kept, OMITTED_NOTICE]) if kept else ""


def _shares(needs: dict[str, int], available: int) -> dict[str, int]:
    """Each section's share of `available`: equal shares, and what a section does not need goes to the
    others (a section never gets more than it needs)."""
    shares: dict[str, int] = {}
    pending = dict(needs)
    while pending:
        share = max(0, available) // len(pending)
        modest = {scope: need for scope, need in pending.items() if need <= share}
        if not modest:
            shares.update({scope: share for scope in pending})
            break
        for scope, need in modest.items():
            shares[scope] = need
            available -= need
            del pending[scope]
    return shares


def bounded_bodies(preferences: str, memory: str, max_chars: int) -> dict[str, str]:
    """The preferences and memory that fit in `max_chars` with their headings and fences, neutralised,
    as whole lines: {"user": ..., "memory": ...}, a section left out when not one line of it fits."""
    bodies = {scope: neutralise(text.strip())
              for scope, text in (("user", with_priority_notice(preferences)), ("memory", memory))}
    sections = [scope for scope, body in bodies.items() if body]
    while sections:
        overhead = sum(len(_section(scope, "")) for scope in sections) + len(SEPARATOR) * (len(sections) - 1)
        shares = _shares({scope: len(bodies[scope]) for scope in sections}, max_chars - overhead)
        fitted = {scope: _fit(bodies[scope], shares[scope]) for scope in sections}
        empty = [scope for scope in sections if not fitted[scope]]
        if not empty:
            return {scope: fitted.get(scope, "") for scope in bodies}
        sections.remove(empty[-1])  # the share of a section that cannot show a line goes to the other
    return {scope: "" for scope in bodies}


def memory_context(preferences: str, memory: str, max_chars: int) -> str:
    """The bounded, fenced text memory adds to the system context ("" when there is nothing).

    `preferences` and `memory` are the projected documents (comments stripped) or, in retrieval mode,
    the retrieved lines. The result is never longer than `max_chars`.
    """
    bodies = bounded_bodies(preferences, memory, max_chars)
    return SEPARATOR.join(_section(scope, body) for scope, body in bodies.items() if body)


def memory_text(preferences: str, memory: str, max_chars: int) -> str:
    """The same memory as plain text for a bring-your-own agent's `memory` field, bounded the same way
    (never longer than `max_chars`, never longer than what the prompt would hold)."""
    bodies = bounded_bodies(preferences, memory, max_chars)
    return "\n".join(body for body in bodies.values() if body)
