"""Warm transfer, the rules: what the target is told, when to tell them, what the caller hears on failure.

The flow (internal/sip/voice/warm_transfer.py runs it): the caller hears the hold message, then hold
music; voicegate calls the target; when they answer and have said their "hello", they hear a briefing
made from the call's rolling summary (or, in a call too short for one, the caller's own recent words);
then the two legs are bridged and the agent leaves. A target that is busy, declines, does not answer or
hangs up during the briefing sends the caller back to the agent, who says why.
"""

from __future__ import annotations

import re
from typing import Literal

from voicegate.internal.conversation.rolling_summary import extractive_summary
from voicegate.internal.conversation.transcript import TranscriptEntry

WarmPhase = Literal["holding", "dialling", "briefing", "connected", "failed", "ended"]
# After the target's voice stops for this long, their greeting is over and the briefing may start.
GREETING_PAUSE_MS = 600
RECENT_CALLER_LINES = 2  # the fallback summary: the caller's last few lines


def call_summary(rolling: str, entries: list[TranscriptEntry], max_chars: int) -> str:
    """What the call was about, in a few spoken sentences: the rolling summary when the call is long
    enough to have one, else the caller's fact-like sentences, else their last lines."""
    text = rolling.strip()
    if not text:
        facts = [line.removeprefix("- Caller said: ") for line in extractive_summary(entries).splitlines()]
        lines = facts or [e.text.strip() for e in entries if e.role == "user" and e.text.strip()][-RECENT_CALLER_LINES:]
        text = " ".join(_sentence(line) for line in lines)
        text = f"The caller said: {text}" if text else ""
    text = " ".join(re.sub(r"^\s*[-*]\s*", "", line) for line in text.splitlines() if line.strip())
    return shorten(text, max_chars)


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def shorten(text: str, max_chars: int) -> str:
    """At most `max_chars`, cut at a sentence end when one is near, else at a word."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    stop = max(head.rfind(". "), head.rfind("! "), head.rfind("? "))
    if stop >= max_chars // 2:
        return head[: stop + 1]
    return head.rsplit(" ", 1)[0].rstrip(",;:") + "." if " " in head else head


def briefing(template: str, target: str, summary: str) -> str:
    text = template.replace("{target}", target).replace("{summary}", summary)
    return " ".join(text.split())


def greeting_over(first_speech_ms: int | None, last_speech_ms: int | None, now_ms: int, wait_ms: int) -> bool:
    """May the briefing start? Once the target's "hello" has ended, or after `wait_ms` whatever they do
    (some people wait silently for the caller to speak first)."""
    if now_ms >= wait_ms:
        return True
    return first_speech_ms is not None and last_speech_ms is not None and now_ms - last_speech_ms >= GREETING_PAUSE_MS


def why_not(status: int) -> str:
    """The {why} of the return message, from how the call to the target ended."""
    if status in (486, 600):
        return "is busy right now"
    if status in (403, 603):
        return "can't take the call right now"
    if status in (408, 480, 487):
        return "didn't answer"
    if status == 0:
        return "had to hang up"
    return "couldn't be reached"


def return_message(template: str, target: str, status: int) -> str:
    return " ".join(template.replace("{target}", target).replace("{why}", why_not(status)).split())
