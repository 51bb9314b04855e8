"""Cut a streamed reply into sentences the moment each one is certainly finished.

Text-to-speech is fed sentence by sentence so the caller hears the first words while the model is
still writing the rest. Cutting too early splits "Dr. Smith" or "3.14" into two utterances with an
audible pause between; cutting too late delays the first audio. So a chunk is only emitted when the
text that follows it proves the boundary, and every decision depends on the text alone, never on
how it was split into deltas: feeding "Hello. World" in one piece or one character at a time gives
the same chunks.

The rules:

- `.`, `!`, `?`, `;` and `…` (with any run of them, and closing quotes or brackets after them) end a
  chunk once whitespace follows. A dot followed by anything else ("3.14", "example.com") never does.
- A lone dot after a known abbreviation ("Mr.", "Dr.", "e.g.", "i.e."), a single capital initial
  ("J. R. R. Tolkien"), or a list number at the start of a chunk ("1. Open the app") does not end one.
- An ellipsis ends a chunk only when the next word does not start in lower case: "Well... maybe" is
  one thought, "Wait... What?" two.
- A newline always ends a chunk (list items, paragraphs).
- Early cut for latency: while nothing has been emitted yet, a comma followed by whitespace ends the
  first chunk once that chunk is at least `EARLY_COMMA_CHARS` long, so synthesis of a long opening
  sentence starts before its full stop arrives. A run-on chunk longer than `LONG_CLAUSE_CHARS` may
  likewise be cut at its next comma, so a reply without full stops still streams.
- Early cut without a comma: while nothing has been emitted yet, the first chunk is cut before a word
  that opens a new clause ("because", "which", "although", "unless", or "and" / "but" / "so" followed
  by a subject: "and I", "but it's", "so we") once the chunk is at least `EARLY_CLAUSE_CHARS` long and
  at least `CLAUSE_REST_CHARS` more follow with no sentence end or comma among them (the sentence goes on
  long enough for the cut to pay; a shorter one is said whole).
- `flush()` returns whatever is left when the reply ends.

Chunks are returned stripped of surrounding whitespace; joined, they are the input minus whitespace
at the cuts.
"""

from __future__ import annotations

import re

# The shortest opening clause worth sending on its own ("Good afternoon,", "Sure, I can,"): the first
# audio waits for the whole first chunk to be synthesised (Piper: ~100 ms plus ~130 ms per second of
# speech on a loaded 2-core node), so a reply opening with "Good afternoon, how can I help you today?"
# is heard after ~220 ms instead of ~450 ms. Shorter openings ("Yes,") sound clipped on their own.
EARLY_COMMA_CHARS = 12
# Beyond this a clause without a full stop is cut at a comma, so a run-on reply still streams.
LONG_CLAUSE_CHARS = 200
# A long opening sentence with no comma: Piper renders a sentence whole, so its first audio waits for all
# of it. Measured (joe voice, one call, a loaded 2-core node): "I have looked up your account
# and I can see that ... yet." (5.4 s of speech) took 1025 ms to render, "I have looked up your account"
# alone 257 ms. Cut only before a word that opens a clause, after ~4 words, and only when the sentence
# certainly goes on for ~2 s more: a pause at a clause boundary is natural, and a short sentence said
# whole costs little. Only the first chunk: later ones are rendered while earlier ones play.
EARLY_CLAUSE_CHARS = 20
CLAUSE_REST_CHARS = 30
_CLAUSE_OPENERS = frozenset({"because", "which", "although", "unless"})
_JOINERS = frozenset({"and", "but", "so"})  # open a clause only with a subject after them
_SUBJECTS = frozenset({"i", "we", "you", "it", "they", "he", "she", "there", "that", "this"})

_TERMINATORS = frozenset(".!?;…")
_CLOSERS = frozenset("\"')]}”’»")
_OPENERS = "\"'([{“‘«"
# Lower case, without the final dot. Kept to words that almost never end a sentence: wrongly merging
# two sentences costs a little latency, wrongly splitting one costs an audible pause mid-phrase.
ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "e.g", "i.e", "approx", "dept", "fig"}
)


class SentenceChunker:
    """Accumulates text deltas of one reply and hands back finished chunks (see module doc)."""

    def __init__(
        self, *, early_comma_chars: int = EARLY_COMMA_CHARS, long_clause_chars: int = LONG_CLAUSE_CHARS
    ) -> None:
        self._early_comma_chars = early_comma_chars
        self._long_clause_chars = long_clause_chars
        self._buf = ""
        self._scan = 0  # everything before this index of _buf is known to hold no boundary
        self._emitted_any = False

    def push(self, delta: str) -> list[str]:
        """Add a delta; return the chunks it completed (often none)."""
        self._buf += delta
        out: list[str] = []
        while (cut := self._next_cut()) is not None:
            chunk = self._buf[:cut].strip()
            self._buf = self._buf[cut:]
            self._scan = 0
            if chunk:
                out.append(chunk)
                self._emitted_any = True
        return out

    def flush(self) -> list[str]:
        """The end of the reply: the remainder as a last chunk (if any), and a fresh start."""
        rest = self._buf.strip()
        self._buf, self._scan, self._emitted_any = "", 0, False
        return [rest] if rest else []

    def _next_cut(self) -> int | None:
        """Index just past the next certain boundary, or None when more text is needed to decide."""
        buf, i = self._buf, self._scan
        while i < len(buf):
            ch = buf[i]
            if ch == "\n":
                return i + 1
            if ch in _TERMINATORS:
                end = i
                while end < len(buf) and buf[end] in _TERMINATORS:
                    end += 1
                after = end
                while after < len(buf) and buf[after] in _CLOSERS:
                    after += 1
                if after == len(buf):
                    break  # the next character decides
                if buf[after].isspace():
                    verdict = self._terminator_ends_chunk(buf, i, end, after)
                    if verdict is None:
                        break
                    if verdict:
                        return after
                i = after
                continue
            if ch.isspace() and not self._emitted_any:
                clause = self._clause_may_cut(i)
                if clause is None:
                    break
                if clause:
                    return i
            if ch == "," and self._comma_may_cut(i):
                if i + 1 == len(buf):
                    break
                if buf[i + 1].isspace():
                    return i + 1
            i += 1
        self._scan = i
        return None

    def _terminator_ends_chunk(self, buf: str, start: int, end: int, after: int) -> bool | None:
        """Whether the run buf[start:end], followed by whitespace at `after`, ends a chunk (None: wait)."""
        run = buf[start:end]
        if run.startswith("..") or run.startswith("…"):
            nxt = after
            while nxt < len(buf) and buf[nxt].isspace() and buf[nxt] != "\n":
                nxt += 1
            if nxt == len(buf):
                return None
            return not buf[nxt].islower()
        if run != ".":
            return True
        word_start = start
        while word_start > 0 and not buf[word_start - 1].isspace():
            word_start -= 1
        word = buf[word_start:start].lstrip(_OPENERS)
        if word.lower() in ABBREVIATIONS:
            return False
        if len(word) == 1 and word.isupper():
            return False  # an initial
        return not (word.isdigit() and not buf[:word_start].strip())  # "1." opening a list item

    def _clause_may_cut(self, index: int) -> bool | None:
        """Whether the first chunk is cut at the whitespace at `index`, before a clause (None: wait)."""
        if len(self._buf[:index].strip()) < EARLY_CLAUSE_CHARS:
            return False
        window = self._buf[index : index + CLAUSE_REST_CHARS + 1]
        if any(ch in _TERMINATORS or ch in ",\n" for ch in window):
            return False  # the sentence ends (or a comma cuts it) soon: said whole
        if len(window) <= CLAUSE_REST_CHARS:
            return None
        words = [re.split("['’]", word)[0].lower() for word in window.split()[:2]]
        if words[0] in _CLAUSE_OPENERS:
            return True
        return words[0] in _JOINERS and len(words) > 1 and words[1] in _SUBJECTS

    def _comma_may_cut(self, index: int) -> bool:
        length = len(self._buf[:index].strip())
        if not self._emitted_any and length >= self._early_comma_chars:
            return True
        return length >= self._long_clause_chars
