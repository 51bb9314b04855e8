"""Which preferences reconciliation may save: only those the caller stated, in their own words (seed 004).

Preferences (the `user` document: how to address the caller, what to call the assistant, how to reply)
outrank the assistant profile, so nothing inferred may land there. After a call whose model did not use
the memory tool when the caller said "call me Sam" or "call yourself Skiff from now on", reconciliation
may recover it, and only with its evidence: the model quotes the caller, and the edit is kept only when

- the quote is in one of the caller's own lines of the transcript (not the agent's, not made up);
- the quote is a directive about address or reply style ("call me", "call yourself", "keep your
  answers short", "from now on", "I prefer"), not a fact or a mood ("I'm in a hurry" infers nothing);
- the quote does not limit itself to now ("just this once", "for this answer"): that was for the turn;
- the quote was not cut out of a larger sentence that says the opposite ("call me Bob" out of "please
  don't call me Bob"), and is not a request that only sounds like one ("call me back tomorrow" is a
  callback, "I prefer tea" a taste, "I want you to book a table" a task);
- the edit is one short list line that says what the quote says and no more: the same polarity ("don't
  call me Bob" is not saved as "Call the caller Bob"), the same name, and no words of its own beyond
  the few any preference line is written with ("call", "the caller", "keep", "answers").

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
    r"i (would |'d )?prefer (to be (called|addressed|known)|being (called|addressed)|you |"
    r"(short|shorter|brief|briefer|long|longer|detailed|concise|simple|plain|formal|informal|slow|slower)\b|"
    r"(answers|replies|responses)\b|it (short|brief))|"
    r"(i'd like|i would like|i want) you to (call|address|answer|reply|respond|speak|talk|keep|be|use|refer|"
    r"introduce|stop|always|never)\b|please (always|don't|do not))",
    re.IGNORECASE)
# "call me" about when, not what: a callback request ("call me back tomorrow", "call me after five").
_CALLBACK = re.compile(r"\bcall me (back|later|again|tomorrow|tonight|today|at|on|in|when|after|before|"
                       r"anytime|any time|if|around|between|this|next|first|up|soon|whenever)\b", re.IGNORECASE)
_NEGATION = re.compile(r"\b(don't|dont|do not|never|no longer|not|stop|rather not|avoid|won't|wouldn't)\b")
# Words any preference line is written with, whatever the caller said ("- Call the caller Sam.").
_LINE_WORDS = set("""a an the as to be by in of for and is it its call calls called calling caller caller's
callers them they their him her his address addressed refer referred name named yourself your you assistant
agent always never not don't do keep make use reply replies answer answers respond response responses speak
talk say prefer prefers preferred wants want please from now on going forward future""".split())
_NAME_TARGET = re.compile(r"\b(?:call me|called|i go by|address me as|refer to me as|call yourself|name yourself|"
                          r"introduce yourself as|your name (?:is|should be|will be))\s+([a-z][\w'-]*)")
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
    their lines of `transcript` as they meant it."""
    said = _normal(quote)
    if len(said) < 4 or not _DIRECTIVE.search(said) or _TEMPORARY.search(said) or _CALLBACK.search(said):
        return False
    return any(_said_as_meant(said, _normal(line)) for line in caller_lines(transcript))


def _said_as_meant(said: str, line: str) -> bool:
    """`said` is in `line`, and the few words before it do not turn it round ("please don't" before
    "call me Bob")."""
    start = line.find(said)
    while start >= 0:
        before = line[:start].rsplit(".", 1)[-1].split()[-3:]
        if not _NEGATION.search(" ".join(before)) or _NEGATION.search(said):
            return True
        start = line.find(said, start + 1)
    return False


def _words(text: str) -> set[str]:
    return {word.strip("'").removesuffix("'s") for word in re.findall(r"[\w']+", text.casefold())}


def _stem(word: str) -> str:
    return word.removesuffix("s").removesuffix("er")


def says_what_was_said(line: str, quote: str) -> bool:
    """Whether a preference line states what the caller's quote states and no more: the same polarity,
    the name the caller gave (when they gave one), and no word of its own beyond _LINE_WORDS."""
    line_text, said = _normal(line).lstrip("- "), _normal(quote)
    if bool(_NEGATION.search(line_text)) != bool(_NEGATION.search(said)):
        return False
    target = _NAME_TARGET.search(said)
    if target and target.group(1) not in _words(line_text):
        return False
    quoted = {_stem(word) for word in _words(said)}
    extra = {word for word in _words(line_text) - _LINE_WORDS if _stem(word) not in quoted}
    return not extra and bool({_stem(word) for word in _words(line_text) - _LINE_WORDS} or target)


def preference_edit(edit: dict[str, object], transcript: str) -> dict[str, str] | None:
    """A proposed `user` edit as reconciliation may apply it (append or replace, one short line, with
    the caller's quote as evidence), or None."""
    quote = edit.get("quote")
    if not isinstance(quote, str) or not is_stated_preference(quote, transcript):
        return None
    if edit.get("action") == "append":
        content = edit.get("content")
        if isinstance(content, str) and _one_short_line(content) and says_what_was_said(content, quote):
            return {"document": "user", "action": "append", "content": content.strip()}
    elif edit.get("action") == "replace":
        old, new = edit.get("old_text"), edit.get("new_text")
        if isinstance(old, str) and old and isinstance(new, str) and new.strip() and _one_short_line(new) \
                and says_what_was_said(new, quote):
            return {"document": "user", "action": "replace", "old_text": old, "new_text": new.strip()}
    return None


def _one_short_line(text: str) -> bool:
    text = text.strip()
    return bool(text) and "\n" not in text and len(text) <= PREFERENCE_LINE_CHARS
