"""RollingSummary: a compact digest of a long call, refreshed in the background.

The model only sees the recent history, so facts from the start of a long call (the caller's name,
what they want) would fall out of context. Once the transcript is long, a summary of its durable facts
is generated off the turn path and injected into the system context. The live turn never waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

from voicegate.internal.conversation.transcript import TranscriptEntry

log = logging.getLogger(__name__)

# Entries count both caller and agent turns, so an exchange is ~2 entries. The model keeps about 30
# messages of history; starting a few exchanges earlier has a summary ready before anything is lost.
SUMMARY_ACTIVATE_ENTRIES = 24
# ~6 exchanges between refreshes keeps it current without a model call every turn.
SUMMARY_REFRESH_ENTRIES = 12
# Bound the summariser's input so a very long call cannot balloon the request; keep the most recent.
SUMMARY_MAX_INPUT_CHARS = 8000
# The extractive fallback keeps at most this much.
EXTRACTIVE_MAX_CHARS = 600

SUMMARY_SYSTEM_PROMPT = (
    "You maintain a running memory of a live phone call between an AI voice agent and a caller. "
    "Summarise ONLY the durable facts the agent must not forget for the rest of the call: the caller's "
    "name and contact details, what they want, decisions or commitments made, and specifics already "
    "discussed (dates, times, items, prices, addresses). Omit pleasantries. At most a few short lines. "
    "Output only the summary text."
)

Summariser = Callable[[str, str], Awaitable[str]]  # (system, transcript script) -> summary


def should_refresh_summary(entries: int, last_at: int, generating: bool, have_summary: bool) -> bool:
    """Start a background refresh this turn? Never two at once; first at 24 entries, then every 12."""
    if generating or entries < SUMMARY_ACTIVATE_ENTRIES:
        return False
    if not have_summary:
        return True
    return entries - last_at >= SUMMARY_REFRESH_ENTRIES


def format_transcript_for_summary(entries: list[TranscriptEntry]) -> str:
    """A plain "Caller:/Agent:" script of the call, keeping at most the last 8000 characters."""
    lines = [
        f"{'Caller' if entry.role == 'user' else 'Agent'}: {entry.text.strip()}"
        for entry in entries
        if entry.text.strip()
    ]
    script = "\n".join(lines) + ("\n" if lines else "")
    return script[-SUMMARY_MAX_INPUT_CHARS:]


def summary_context_block(summary: str) -> str:
    """The summary as it is injected into the system context ("" when there is none)."""
    summary = summary.strip()
    if not summary:
        return ""
    return f"[Conversation so far (durable facts; do not re-ask what is already known):\n{summary}]"


_FACT_HINTS = re.compile(
    r"\b(my name is|i am|i'm|call me|my (?:number|email|address|account|order)|i (?:want|need|would like)|"
    r"plan|prefer|book|cancel|order|appointment|tomorrow|today|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday|\d)",
    re.IGNORECASE,
)


def extractive_summary(entries: list[TranscriptEntry], max_chars: int = EXTRACTIVE_MAX_CHARS) -> str:
    """Without a model: the caller's sentences that look like durable facts, newest kept when over budget."""
    picked: list[str] = []
    for entry in entries:
        if entry.role != "user":
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", entry.text.strip()):
            if sentence and _FACT_HINTS.search(sentence) and sentence not in picked:
                picked.append(sentence)
    lines: list[str] = []
    total = 0
    for sentence in reversed(picked):
        line = f"- Caller said: {sentence}"
        if total + len(line) + 1 > max_chars:
            break
        lines.append(line)
        total += len(line) + 1
    return "\n".join(reversed(lines))


class RollingSummary:
    """Holds the current summary of one conversation and refreshes it in the background."""

    def __init__(self, summariser: Summariser | None, timeout_s: float) -> None:
        self._summariser = summariser
        self._timeout_s = timeout_s
        self.text = ""
        self.last_at = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def generating(self) -> bool:
        return self._task is not None and not self._task.done()

    def maybe_refresh(self, entries: list[TranscriptEntry]) -> bool:
        """Start a refresh when the policy says so. Returns at once; never blocks a turn."""
        if not should_refresh_summary(len(entries), self.last_at, self.generating, bool(self.text)):
            return False
        if self._summariser is None:
            self.text = extractive_summary(entries)
            self.last_at = len(entries)
            return True
        self._task = asyncio.create_task(self._refresh(format_transcript_for_summary(entries), len(entries)))
        return True

    async def _refresh(self, script: str, at_entries: int) -> None:
        assert self._summariser is not None
        try:
            async with asyncio.timeout(self._timeout_s):
                summary = (await self._summariser(SUMMARY_SYSTEM_PROMPT, script)).strip()
        except TimeoutError:
            log.warning("rolling summary timed out; will retry on a later turn")
            return
        except Exception as exc:  # a failed summary must never disturb the call
            log.warning("rolling summary failed: %s", type(exc).__name__)
            return
        if summary:
            self.text = summary
            self.last_at = at_entries
            log.info("rolling summary refreshed", extra={"entries": at_entries, "chars": len(summary)})

    async def wait(self) -> None:
        """For shutdown and tests: let a refresh in flight finish."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
