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
import unicodedata
from collections.abc import Collection, Iterable

from voicegate.internal.conversation.past_calls import DIGEST_HEADINGS
from voicegate.internal.conversation.rolling_summary import extractive_summary
from voicegate.internal.conversation.transcript import TranscriptEntry
from voicegate.internal.memory.injection import neutralise_for_storage
from voicegate.internal.memory.provider import DocumentFormat

CALL_LINE_CHARS = 240  # one call's line at most
QUOTED_PREFIX = "the caller said "  # a short call's line without a summary: the caller's words, quoted


def bounded_line(text: str) -> str:
    """One digest line: fence-shaped tags defused, whitespace collapsed, at most CALL_LINE_CHARS."""
    text = " ".join(neutralise_for_storage(text).split())
    if len(text) > CALL_LINE_CHARS:
        text = text[: CALL_LINE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return text


# A speaker's label at the start of a line or sentence ("Agent: Hello", "... plan. Caller: I'm"): text
# with one is the call's script, not a summary of it.
_SPEAKER_LABEL = re.compile(r"(?:^|[\s.;,\"\u201c(])(?:caller|agent|assistant|user|customer)\s*:", re.IGNORECASE)


def usable_summary(text: str) -> bool:
    """Whether a model's text can be a call's digest line. A model that echoes the script back ("The
    caller said: Agent: Hello, ... Caller: ...") wrote no summary, and filing it would put the agent's
    words in the caller's mouth: the caller's own quoted lines stand in for it."""
    return bool(text.strip()) and not _SPEAKER_LABEL.search(text)


def call_summary(entries: list[TranscriptEntry], rolling_summary: str) -> str:
    """What one call was about: the rolling summary when the call had one (and it is a summary, not the
    script echoed), else the caller's own words, quoted and labelled "the caller said", never the
    agent's (a model's summary, when one is configured, replaces this at hang-up)."""
    text = rolling_summary.strip()
    if usable_summary(text):
        return bounded_line(text)
    lines = extractive_summary(entries, max_chars=CALL_LINE_CHARS * 2)
    said = [line for line in re.sub(r"^- Caller said: ", "", lines, flags=re.MULTILINE).splitlines() if line.strip()]
    if not said:
        said = [e.text.strip() for e in entries if e.role == "user" and e.text.strip()]
    if not said:
        return ""
    quotes = "; ".join("\u201c" + " ".join(line.replace("\u201c", "").replace("\u201d", "").split()) + "\u201d"
                       for line in said)
    return bounded_line(QUOTED_PREFIX + quotes)


def split_document(content: str, fmt: DocumentFormat = "markdown") -> tuple[str, list[str]]:
    """(everything above the digest section, the digest's call lines)."""
    head, heading, tail = content.partition(DIGEST_HEADINGS[fmt])
    if not heading:
        return content.rstrip(), []
    lines = [line.strip() for line in tail.splitlines() if line.strip().startswith("- ")]
    return head.rstrip(), lines


def render_document(head: str, lines: list[str], fmt: DocumentFormat = "markdown") -> str:
    parts = [head.rstrip()] if head.strip() else []
    if lines:
        parts.append(DIGEST_HEADINGS[fmt] + "\n" + "\n".join(lines))
    return ("\n\n".join(parts) + "\n") if parts else ""


def merge_digest(content: str, summary: str, max_chars: int, when: float | None = None,
                 fmt: DocumentFormat = "markdown") -> str:
    """The `memory` document with this call's line added, bounded to `max_chars` (deterministic)."""
    if not summary.strip():
        return content
    head, lines = split_document(content, fmt)
    date = time.strftime("%Y-%m-%d", time.localtime(when if when is not None else time.time()))
    lines = [f"- {date}: {summary.strip()}", *lines]
    while lines:
        document = render_document(head, lines, fmt)
        if len(document) <= max_chars:
            return document
        lines.pop()  # the oldest call goes first
    return render_document(head, [], fmt) if len(render_document(head, [], fmt)) <= max_chars else content


# Words that say nothing about what a fact is about: a forgotten fact's other words find the digest
# lines that state it too.
_PLAIN_WORDS = set("""the a an and or but of to in on at for with from by about as is are was were be been am
i me my mine you your caller caller's callers their they them he she his her it its this that these those
has have had having do does did not no yes name named called call calls said says say told tell asked ask
wants want wanted would will can could should on off up down out over under again also just very really
one two some any all more most other such than then there here when where what which who whom why how
plan plans go if oh ok so us we i'm i've i'd yeah""".split())


class FactsTooLong(ValueError):
    """The facts alone (without any call digest) are longer than memory.max_chars."""

    def __init__(self, length: int, max_chars: int) -> None:
        super().__init__(f"the remembered facts alone would be {length} characters; the limit is {max_chars}. "
                         "Remove or shorten a fact first (call digests already make room by themselves)")
        self.length = length
        self.max_chars = max_chars


def fit_document(head: str, lines: list[str], max_chars: int, fmt: DocumentFormat = "markdown") -> str:
    """The document with as many recent call lines as fit beside the facts (oldest dropped first); the
    facts are never dropped: when they alone exceed `max_chars`, FactsTooLong."""
    facts_only = render_document(head, [], fmt)
    if len(facts_only) > max_chars:
        raise FactsTooLong(len(facts_only), max_chars)
    kept = list(lines)
    while kept and len(render_document(head, kept, fmt)) > max_chars:
        kept.pop()
    return render_document(head, kept, fmt) if kept else head.rstrip()


def append_fact(content: str, addition: str, max_chars: int, fmt: DocumentFormat = "markdown") -> str:
    """`addition` added at the end of the facts, above the call digests, wherever it comes from (tool,
    API, reconciliation); digests make room oldest first."""
    head, lines = split_document(content, fmt)
    cleaned = addition.strip("\n")
    new_head = f"{head}\n{cleaned}" if head.strip() else cleaned
    return fit_document(new_head, lines, max_chars, fmt)


# Scripts written without spaces between words: a run of them is read as overlapping character pairs
# (the usual way to match such text without a dictionary), so "我有糖尿病" yields 糖尿 and 尿病.
_UNSPACED = re.compile("[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf"
                       "\u4e00-\u9fff\uf900-\ufaff]+")
# Characters that are grammar, not subject, in those scripts: a pair holding one says nothing alone.
_PLAIN_CHARACTERS = set("的了是我你他她它们在有和就不也都这那个说要会对吗呢吧啊很把被给让从到过着"
                        "はがをにでとのもへやねよかな")
_WORD = re.compile(r"[\w']+")


def words_of(text: str) -> list[str]:
    """The words of `text`, in any script: Unicode word characters, lower-cased (casefolded, NFKC),
    possessives cut ("caller's" -> "caller"), runs of unspaced scripts as character pairs. Numbers are
    words of their own, however short."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    words: list[str] = []
    for run in _WORD.findall(text):
        run = run.strip("'_").removesuffix("'s")
        position = 0
        for unspaced in _UNSPACED.finditer(run):
            words.extend(_WORD.findall(run[position:unspaced.start()]))
            chars = unspaced.group()
            pairs = [chars[i:i + 2] for i in range(len(chars) - 1)] or [chars]
            words.extend(pair for pair in pairs if not _PLAIN_CHARACTERS & set(pair))
            position = unspaced.end()
        words.extend(_WORD.findall(run[position:]))
    return [word.strip("'_") for word in words if word.strip("'_")]


def fact_words(line: str) -> set[str]:
    """The words of a fact that say what it is about: plain words dropped, and single letters (a
    number is kept at any length: "42" is what "I turned 42" is about)."""
    return {w for w in words_of(line) if w not in _PLAIN_WORDS and (len(w) > 1 or w.isdigit() or not w.isascii())}


def mentions(line: str, words: set[str]) -> bool:
    """Whether `line` uses any of `words` (a plural matches its singular and back)."""
    return any(said in words or said.removesuffix("s") in words or f"{said}s" in words for said in words_of(line))


def forgotten_words(before: str, after: str, fmt: DocumentFormat = "markdown") -> set[str]:
    """What an edit of the `memory` document made it forget: the distinctive words of the fact lines
    that were there before and are gone after ("- The caller has a dog." -> {"dog"}), less those of the
    fact lines it added (a corrected fact keeps what it still says: "diabetes and a dog" -> "a dog"
    forgets "diabetes" only). Every place that must not restate a removed fact (the call lines, the
    session digests, the call's own digest, reconciliation) matches against these words."""
    old_facts = {line.strip() for line in split_document(before, fmt)[0].splitlines() if line.strip()}
    new_facts = {line.strip() for line in split_document(after, fmt)[0].splitlines() if line.strip()}
    removed: set[str] = set()
    for line in old_facts - new_facts:
        removed |= fact_words(line)
    added: set[str] = set()
    for line in new_facts - old_facts:
        added |= fact_words(line)
    return removed - added


def fact_lines(content: str, fmt: DocumentFormat = "markdown") -> list[str]:
    """The fact lines of a `memory` document (everything above its digest section), stripped."""
    return [line.strip() for line in split_document(content, fmt)[0].splitlines() if line.strip()]


def stated_lines(content: str, fmt: DocumentFormat = "markdown") -> list[str]:
    """Every line of a `memory` document that states something about the caller: its facts and its
    call lines. A call must honour the removal of either (an operator removing the "Recent calls" line
    that mentions the caller's plan means the plan, as much as removing a fact does)."""
    return fact_lines(content, fmt) + split_document(content, fmt)[1]


_CALL_DATE = re.compile(r"^-\s*\d{4}-\d{2}-\d{2}:\s*")


def statement_words(line: str) -> set[str]:
    """fact_words of a fact or a call line; a call line's date is when, not what it is about."""
    return fact_words(_CALL_DATE.sub("", line))


def no_longer_stated(seen: Iterable[str], current: str, fmt: DocumentFormat = "markdown") -> set[str]:
    """What a call must not restate at hang-up although nobody told it: the distinctive words of the
    lines it saw (`seen`: facts and call lines) that the `memory` document no longer holds, less the
    words its facts still state. However a line went (the API, the page, the CLI, another call, another
    node, before or after the hang-up), the call's digest line, session digest and reconciliation leave
    it out. A call line that aged out of the bounded digest section reads as removed too (forgetting
    more, never less); the digest step stops counting the ones its own line pushed out
    (`still_seen`)."""
    gone = set(seen) - set(stated_lines(current, fmt))
    if not gone:
        return set()
    removed: set[str] = set()
    for line in gone:
        removed |= statement_words(line)
    for line in fact_lines(current, fmt):
        removed -= fact_words(line)
    return removed


def still_seen(seen: Iterable[str], current: str, fmt: DocumentFormat = "markdown") -> list[str]:
    """The lines of `seen` the document `current` still states, in order."""
    now = set(stated_lines(current, fmt))
    return [line for line in seen if line in now]


def without_mentions(text: str, words: Collection[str]) -> str:
    """`text` without the lines that mention any of `words`."""
    if not words:
        return text
    forgotten = set(words)
    return "\n".join(line for line in text.splitlines() if not mentions(line, forgotten))


def forget_in_digests(before: str, after: str, fmt: DocumentFormat = "markdown") -> str:
    """After an edit of the `memory` document: the call lines that state a fact the edit removed go too.

    An exact-word pass (no model): every call line that mentions any of the edit's `forgotten_words`
    is removed. It errs toward forgetting more, never less: a call line that shares a word with a
    forgotten fact goes, even if it said something else too.
    """
    new_head, lines = split_document(after, fmt)
    words = forgotten_words(before, after, fmt)
    if not words:
        return after
    remaining = [line for line in lines if not mentions(line.split(":", 1)[-1], words)]
    if remaining == lines:
        return after
    return render_document(new_head, remaining, fmt)


def scrub_summary(summary: str, forgotten: set[str]) -> str:
    """A call's digest line without what the caller asked, during that call, to forget: quoted lines
    that mention a forgotten fact's words go; any other summary that mentions one goes whole."""
    if not forgotten or not summary:
        return summary
    if summary.startswith(QUOTED_PREFIX):
        quotes = summary[len(QUOTED_PREFIX):].split("; ")
        kept = [quote for quote in quotes if not mentions(quote, forgotten)]
        return QUOTED_PREFIX + "; ".join(kept) if kept else ""
    return "" if mentions(summary, forgotten) else summary
