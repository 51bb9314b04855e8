"""Barge-in predicates: pure text functions, no pipeline state.

The turn-shape predicates (does this text end a sentence?) are in internal/turn/text_cues.py.
Ported from StreamCore's behaviour: a backchannel ("mm-hm", "yeah okay") means "I'm listening" and
never cuts the agent off; a command word ("stop", "wait") always does; anything else interrupts
when it carries at least one content word.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from voicegate.internal.turn.text_cues import words

BACKCHANNEL_TOKENS = frozenset(
    "mm mhm mmhm mmhmm mhmm hmm hm uh huh uhhuh um umm yep yup yeah yea yes ya okay ok kay right sure alright "
    "cool nice wow oh ah aha gotcha got it i see true totally exactly thats that's".split()
)
# Acknowledgements whose words mean something else alone ("thing", "sense", "problem", "ahead"): only the
# whole phrase is acknowledgement vocabulary. Common ones in customer-service calls, British and American;
# the overlap bench's unseen set found "Sure thing.", "I get it." and "Yeah, that's fine." missing.
ACKNOWLEDGEMENT_PHRASES = tuple(tuple(phrase.split()) for phrase in (
    "sure thing", "fair enough", "makes sense", "that makes sense", "of course", "no problem", "no worries",
    "not a problem", "go ahead", "go on", "carry on", "i get it", "i get you", "got you", "i follow",
    "i understand", "understood", "sounds good", "that's fine", "thats fine", "that's great", "that's right",
    "all good", "very good", "will do", "i know", "fine by me", "works for me",
))
# Single words that acknowledge and nothing more, beside those above.
ACKNOWLEDGEMENT_WORDS = frozenset(
    "fine good great perfect lovely brilliant excellent super noted absolutely definitely certainly indeed "
    "agreed cheers wonderful marvellous grand splendid".split()
)
COMMAND_TOKENS = frozenset("stop wait pause cancel actually no hang hold repeat transfer operator human help".split())
# Whisper's spelling of "alright" ("all" alone is no backchannel).
ALL_RIGHT = re.compile(r"\ball right\b", re.IGNORECASE)
WEAK_TOKENS = frozenset(
    "i im i'm me my you your we it this that the a an and or but so to of for with on in at from about is are "
    "was were be can could would should will do does did need want um uh uhh umm hmm okay ok yeah yes yep "
    "right sure then".split()  # "then": "okay then" is an acknowledgement
)


# A hum as the recogniser spells it when it is drawn out or said again: "Mmm", "Hmmm", "Mm-hmm-mm-hmm",
# "Mm-mm-mm-mm-mm-mm-mm." (Whisper's decodes of "Mm-hm, mm-hm." over the agent; `words` drops the hyphens,
# so these are one token such as "mmmmmmmmmmmmmm"). Only the letters m and h, at least one m: no English
# word is spelled so, so such a token is a sound, never content. "Mm-mm" can be a "no" said with the voice's
# tune, which the words cannot tell; over the agent the hums that came back were "mm-hm"s said again.
HUM = re.compile(r"h*m[mh]*")


def listens_for_barge_in(agent_audible: bool, barge_in: bool) -> bool:
    """Does the VAD use the barge-in profile (`barge_in_onset_ms`, a faster onset) for this frame? While the
    caller can hear the agent and barge-in is on: an interruption must silence it at once, every frame of
    onset is agent talking over them. Otherwise the normal onset: with barge-in off the caller's speech never
    stops the agent, and a fast onset would only cut their turn into more utterances on clicks and breaths."""
    return agent_audible and barge_in


def is_backchannel(text: str, extra: frozenset[str] = frozenset()) -> bool:
    """Every word is acknowledgement vocabulary: a word of it, or part of an acknowledgement phrase
    ("sure thing", "makes sense"); configured phrases included, word by word. Said more than once is the same
    acknowledgement: separate words already are ("Yeah, yeah.", "Okay, okay, okay.", and a mix, "Yeah,
    okay."); so is one word the recogniser wrote joined to itself ("Yeah-yeah.", "Uh-huh-uh-huh.", any
    number of times) and any hum ("Mmm, mmm.", "Mm-mm-mm-mm.")."""
    tokens = _without_phrases(words(ALL_RIGHT.sub("alright", text)))
    vocabulary = BACKCHANNEL_TOKENS | ACKNOWLEDGEMENT_WORDS | {w for phrase in extra for w in words(phrase)}
    return bool(words(text)) and all(_acknowledges(token, vocabulary) for token in tokens)


# The shortest word whose joined repetition is still that word said again. Two-letter ones are not: "uh-uh"
# ("uhuh") is a "no", "oh-oh" and "uh-oh" an alarm, not "uh" or "oh" twice.
MIN_REPEATED_WORD = 3


def _acknowledges(token: str, vocabulary: frozenset[str] | set[str]) -> bool:
    """A word of `vocabulary`, a hum, or one vocabulary word repeated without a break ("yeahyeah")."""
    if token in vocabulary or HUM.fullmatch(token):
        return True
    return any(len(token) % times == 0 and token[:len(token) // times] * times == token
               and token[:len(token) // times] in vocabulary
               for times in range(2, len(token) // MIN_REPEATED_WORD + 1))


def _without_phrases(tokens: list[str]) -> list[str]:
    """`tokens` less every acknowledgement phrase in them (longest first at each place)."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        found = max((len(phrase) for phrase in ACKNOWLEDGEMENT_PHRASES
                     if tuple(tokens[i:i + len(phrase)]) == phrase), default=0)
        if found:
            i += found
        else:
            out.append(tokens[i])
            i += 1
    return out


def is_meaningful_interruption(text: str, extra_backchannels: frozenset[str] = frozenset()) -> bool:
    """Is this (partial) transcript worth cutting the agent off for?"""
    tokens = words(text)
    if not tokens:
        return False
    if is_backchannel(text, extra_backchannels):  # before the commands: "no problem" is no "no"
        return False
    if any(token in COMMAND_TOKENS for token in tokens):
        return True
    # A hum is no content, however Whisper spells it ("And mmmmmmmmmmmmmmm" for "Mm-hmm, mm-hmm.").
    content = sum(1 for token in tokens if len(token) >= 3 and token not in WEAK_TOKENS and not HUM.fullmatch(token))
    return content >= 1


# ---- sound over the agent ------------------------------------------------------------------------
#
# A caller who makes a sound while the agent speaks does one of three things: acknowledges ("mm-hm",
# "yeah, go on": the agent plays on), makes a noise that is not speech (a cough, a laugh, a door, line
# noise: the agent plays on, or picks its sentence up again), or takes the turn (a question, a command,
# a correction: the agent stops and answers). The sound alone cannot tell the three apart (a cough and
# "stop" are both 300 ms of energy), so the VAD only ducks and pauses the agent; the words decide.


class OverlapKind(StrEnum):
    BACKCHANNEL = "backchannel"
    NON_SPEECH = "non_speech"
    INTERRUPTION = "interruption"


@dataclass(frozen=True, slots=True)
class Overlap:
    kind: OverlapKind
    reason: str

    @property
    def takes_turn(self) -> bool:
        return self.kind is OverlapKind.INTERRUPTION


# Less voice than any word takes (a click, a tap on the handset): whatever the recogniser made of it is
# not the caller's. "Stop" alone holds ~250 ms of voice.
MIN_WORD_VOICED_MS = 100
# Whisper's scores for a fragment it made up from a short sound. Its own "no words" rule (no_speech_prob >
# 0.6 and avg_logprob < -1.0, internal/stt/whisper_decode.py) blanks the worst; what passes it is still
# unsure of its words. Measured (tiny.en, Piper's voice, 16 kHz): "Mm-hm." heard as "and the make chain."
# at avg_logprob -0.99, "Mhm, okay." as "And make him okay." at -0.95, "Uh-huh." as "Oh." at -0.96; the
# real "Sorry, what time is it?", "Wait, how much?", "Yeah, go on." at -0.15, -0.35, -0.21.
# Through WebRTC's Opus the same "Mm-hm." came back as "And then make some." at -0.75. So a statement is
# doubted below -0.6; a question or a command, which must never be dropped, only below Whisper's own -1.0.
LOGPROB_SUSPECT = -0.6
LOGPROB_SUSPECT_ASKING = -1.0
NO_SPEECH_SUSPECT = 0.6
# Only for a short voice: what a breath, a cough or a murmur gives the VAD. Past it the caller surely
# spoke, and a poor decode of a real sentence over the agent (an 8 kHz line, a fast talker: "That's not my
# address anymore." came back as "I'm not gonna have to spend more.", avg_logprob -1.39, 1.3 s voiced)
# still takes the turn.
DOUBT_MAX_VOICED_MS = 1000
# A sound the recogniser doubts (by its words' scores, not by its "no speech" probability) is more than an
# acknowledgement when it held this many syllables (internal/audio/syllables.py): the caller said something
# it could not make out, and the turn is theirs. Acknowledgements counted 1 to 4 ("okay, okay", "I see,
# okay" 4; held-out phrases in Piper and espeak-ng through G.711); espeak-ng's "Sorry, what was that?", 5,
# came back as "I'll read what was that." at -1.28.
TURN_SYLLABLES = 5
# ... or when one stretch of it without a pause held this much voice: what pauses the agent
# (`barge_in_confirm_ms`' default), more than an acknowledgement says in one breath. No acknowledgement in
# either phrase set of the overlap bench (100, Piper and espeak-ng) held 700 ms in one stretch; espeak-ng's
# "Is that today?" did (heard as "It's not to me.", -1.06), and so did "What's the address?" ("What the
# hell?", -1.81), which the syllable count puts at 3 (it undercounts fast speech).
FLOOR_HELD_MS = 700
# ... or when it ended on a rise of the voice's pitch (internal/audio/pitch.py, `end_rise`), this many
# semitones above its median: a question the recogniser could not make out, where a person stops and
# listens. espeak-ng's questions that tiny.en garbled at 8 kHz ("Sorry, when?" as "Power me.", "How late?"
# as "Hallelujah.") ended 1.1 to 2.8 above; its acknowledgements -4.3 to -0.2, Piper's mostly below 0 (two
# of 30 above 1, both decoded clearly, so never doubted).
QUESTION_RISE_ST = 1.0
# More words than even a fast voice says in the voiced time (with the VAD's onset it did not count):
# only for statements with no question or command in them, so a real question is never dropped by it.
MAX_WORDS_PER_VOICED_S = 8.0
UNCOUNTED_ONSET_MS = 60
# What Whisper says to silence, breath and noise (its subtitle training data), normalised as `words`.
HALLUCINATIONS = tuple(tuple(phrase.split()) for phrase in (
    "make sure to hit the bell icon", "hit the bell icon", "thanks for watching", "thank you for watching",
    "please subscribe", "subscribe to my channel", "like and subscribe", "see you in the next video",
    "see you next time", "i'll see you next time", "thank you so much for watching", "bye bye",
    "subtitles by", "transcription by", "thank you", "thanks", "you",
))
# Words for a sound, not speech: a laugh as Whisper writes it, a caption of a noise ("(coughs)").
SOUND_TOKENS = frozenset(
    "ha haha hahaha hah heh hehe hehehe laughs laughter laughing cough coughs coughing sigh sighs breath "
    "breathing sniff sniffs music applause noise knocking knock clicking static".split()
)
QUESTION_STARTS = frozenset(
    "what when where which who whom whose why how is are was were do does did can could would will should "
    "may might shall have has had am isn't aren't wasn't don't doesn't didn't can't couldn't won't "
    "wouldn't shouldn't".split()
)
LEAD_INS = frozenset("sorry excuse me pardon wait so and but um uh oh hey hi hello hang on hold just actually".split())


def is_question(text: str) -> bool:
    """A question mark, or a question word once the lead-ins ("sorry", "excuse me", "wait") are past."""
    if text.rstrip().endswith("?"):
        return True
    tokens = words(text)
    rest = [token for token in tokens if token not in LEAD_INS]
    return bool(rest) and rest[0] in QUESTION_STARTS


def made_up_phrase(text: str) -> bool:
    """The text is (or is mostly) one of Whisper's stock phrases for noise."""
    tokens = tuple(words(text))
    for phrase in HALLUCINATIONS:
        if tokens == phrase:
            return True
        if len(phrase) >= 3 and any(tokens[i:i + len(phrase)] == phrase for i in range(len(tokens))):
            return len(phrase) * 2 >= len(tokens)
    return False


Syllables = int | Callable[[], int] | None  # a count, or how to count them when asked (it costs a little CPU)
Rise = float | Callable[[], float | None] | None  # semitones, or how to measure them when asked; None: unknown


def more_than_an_acknowledgement(text: str, syllables: Syllables, longest_ms: float | None,
                                 no_speech_prob: float | None, backchannels: frozenset[str],
                                 rise: Rise = None) -> bool:
    """A doubted decode of a sound that held more than an acknowledgement does: TURN_SYLLABLES syllables, or
    a stretch of FLOOR_HELD_MS, or that ended like a question (its pitch QUESTION_RISE_ST above its median);
    not when the recogniser said there was no speech, nor when its words are acknowledgement words."""
    if no_speech_prob is not None and no_speech_prob > NO_SPEECH_SUSPECT:
        return False
    if is_backchannel(text, backchannels):
        return False
    if longest_ms is not None and longest_ms >= FLOOR_HELD_MS:
        return True
    count = syllables() if callable(syllables) else syllables
    if count is not None and count >= TURN_SYLLABLES:
        return True
    semitones = rise() if callable(rise) else rise
    return semitones is not None and semitones >= QUESTION_RISE_ST


def classify_overlap(text: str, voiced_ms: float, *, no_speech_prob: float | None = None,
                     avg_logprob: float | None = None,
                     backchannels: frozenset[str] = frozenset(), syllables: Syllables = None,
                     longest_ms: float | None = None, rise: Rise = None) -> Overlap:
    """What a sound the caller made over the agent was, from its words and the evidence they were spoken.

    `voiced_ms`: the VAD's voiced time of it; `no_speech_prob`/`avg_logprob`: the recogniser's scores
    for the decode (None: not given, e.g. a cloud recogniser's partial); `syllables`: how many the sound
    held, `longest_ms` the voice of its longest stretch without a pause, `rise` how far its end's pitch
    stood above its median in semitones (None: not counted or measured). Checked in
    this order: no words, too little voice for a word, a sound's caption or a laugh, a stock phrase
    (non-speech: nothing said; a stock phrase over DOUBT_MAX_VOICED_MS of voice, or TURN_SYLLABLES, is
    real words misheard: an interruption); unsure scores over a short voice
    (non-speech, unless the sound held more than an acknowledgement, `more_than_an_acknowledgement`: then
    words the recogniser could not make out, an interruption); acknowledgement vocabulary only
    (backchannel); a command, a question, a content word (interruption); filler only ("um", "I": a
    backchannel). A
    question or a command is never judged by its word count, so "sorry, what time?" said fast is an
    interruption.
    """
    tokens = words(text)
    if not tokens:
        return Overlap(OverlapKind.NON_SPEECH, "nothing recognised")
    if voiced_ms < MIN_WORD_VOICED_MS:
        return Overlap(OverlapKind.NON_SPEECH, "too little voice for a word")
    if all(token in SOUND_TOKENS for token in tokens):
        return Overlap(OverlapKind.NON_SPEECH, "a sound written as words")
    if made_up_phrase(text):
        if voiced_ms >= DOUBT_MAX_VOICED_MS or more_than_an_acknowledgement(text, syllables, None, no_speech_prob,
                                                                           backchannels, rise):
            # Noise does not hold this much voice, nor a sentence's syllables: the recogniser failed on real
            # words ("Excuse me, that's too expensive.", 1.6 s of espeak-ng through G.711, came back as "Thank
            # you for watching!"). One long stretch alone is not enough here: a coughing fit can be one.
            return Overlap(OverlapKind.INTERRUPTION, "more voice than noise gives, words unclear")
        return Overlap(OverlapKind.NON_SPEECH, "a phrase the recogniser makes up from noise")
    command = any(token in COMMAND_TOKENS for token in tokens)
    question = not command and is_question(text)
    floor = LOGPROB_SUSPECT_ASKING if command or question else LOGPROB_SUSPECT
    if voiced_ms < DOUBT_MAX_VOICED_MS and ((avg_logprob is not None and avg_logprob < floor) or (
            no_speech_prob is not None and no_speech_prob > NO_SPEECH_SUSPECT)):
        if more_than_an_acknowledgement(text, syllables, longest_ms, no_speech_prob, backchannels, rise):
            return Overlap(OverlapKind.INTERRUPTION, "more than an acknowledgement, words unclear")
        return Overlap(OverlapKind.NON_SPEECH, "the recogniser doubts it was speech")
    if is_backchannel(text, backchannels):
        return Overlap(OverlapKind.BACKCHANNEL, "acknowledgement words only")
    if command:
        return Overlap(OverlapKind.INTERRUPTION, "a command")
    if question:
        return Overlap(OverlapKind.INTERRUPTION, "a question")
    if not is_meaningful_interruption(text, backchannels):
        return Overlap(OverlapKind.BACKCHANNEL, "no content words")
    if len(tokens) >= 4 and len(tokens) > MAX_WORDS_PER_VOICED_S * (voiced_ms + UNCOUNTED_ONSET_MS) / 1000.0:
        return Overlap(OverlapKind.NON_SPEECH, "more words than the voice could hold")
    return Overlap(OverlapKind.INTERRUPTION, "content words")
