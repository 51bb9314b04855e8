"""Turns in real people's voices (tests/human_speech.py): finished, paused mid-sentence, and spoken over the agent.

`human` is the DEV split (looked at, tuned on); `human-heldout` is measured only. Each split gives:
- **complete**: every clip whole, as recorded (its own lead and trailing room noise), then silence;
- **paused**: each clip with a mark (`ClipSpec.pause_after`) cut at that word boundary (Whisper's word
  timestamps on the clip) with 0.5, 1.0 and 1.5 s of the clip's own room tone: a lead-in with a comma
  ("He turned sharply, | and faced Gregson ..."), a list ("Eight of spades, four of clubs, | ..."), a number
  read in groups ("Thirty three, | four six nine two");
- **interruption**: every clip spoken over the agent's long answer (2.5 and 3.0 s into it), after the
  caller's opening question; `answer_after_s` in the pipeline bench is how long after they stopped
  speaking the agent answered them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.turns.cases import (
    BARGE_AT_S,
    LEAD_S,
    TAIL_S,
    Aligner,
    Dialogue,
    cut_at,
    last_loud_end,
    levels_10ms,
    quietest_near,
)

PAUSES_S = (0.5, 1.0, 1.5)
SPLITS = {"human": "dev", "human-heldout": "heldout"}
OPENING = "goforward"  # the dev split's opening turn before an interruption (any human turn would do)
OPENING_HELDOUT = "something"


def room_tone(pcm: bytes, seconds: float, rate: int = 16000) -> bytes:
    """`seconds` of the recording's own background: its quietest 100 ms, tiled (a spliced pause of digital
    silence is a line drop no caller makes)."""
    samples = np.frombuffer(pcm, dtype=np.int16)
    window = rate // 10
    starts = range(0, max(1, samples.size - window), window // 2)
    quietest = min(starts, key=lambda i: float(np.mean(samples[i:i + window].astype(np.float64) ** 2)))
    piece = samples[quietest:quietest + window]
    count = int(rate * seconds)
    return np.resize(piece, count).astype(np.int16).tobytes()


def speech_end(pcm: bytes, rate: int = 16000) -> float:
    """Where the person's last word ends: the last 10 ms louder than their recording's floor by 15 dB (and
    within 45 dB of its peak). A fixed -45 dBFS line reads a recording's breath and room noise as speech."""
    levels = levels_10ms(pcm, rate)
    if not levels.size:
        return 0.0
    return last_loud_end(levels, max(float(np.percentile(levels, 10)) + 15.0, float(levels.max()) - 45.0))


def human_dialogues(voice: str, barge: bool = False) -> list[Dialogue]:
    from tests.human_speech import clip, clips

    chosen = clips(SPLITS[voice])
    lead, tail = bytes(int(16000 * LEAD_S) * 2), bytes(int(16000 * TAIL_S) * 2)
    out = [Dialogue("complete", c.text, voice, lead + c.pcm16k + tail, LEAD_S + speech_end(c.pcm16k, 16000))
           for c in chosen]
    aligner = Aligner()
    for c in chosen:
        before = c.words_before_pause()
        if not before:
            continue
        cut = cut_at(aligner.boundaries(c.pcm16k), before)
        if cut is None:
            cut = quietest_near(c.pcm16k, before / len(c.text.split()))
        for pause in PAUSES_S:
            spliced = c.pcm16k[:cut] + room_tone(c.pcm16k, pause) + c.pcm16k[cut:]
            out.append(Dialogue("paused", c.text, voice, lead + spliced + tail,
                                LEAD_S + speech_end(spliced, 16000), pause, LEAD_S + cut / 32000,
                                words_before=before))
    if barge:
        opening = clip(OPENING if voice == "human" else OPENING_HELDOUT).pcm16k
        opening_end = LEAD_S + speech_end(opening, 16000)
        for c in chosen:
            for at in BARGE_AT_S[:2]:
                start = opening_end + at
                gap = bytes(int(16000 * start) * 2 - len(lead) - len(opening))
                out.append(Dialogue("interruption", c.text, voice, lead + opening + gap + c.pcm16k + tail + tail,
                                    start + speech_end(c.pcm16k, 16000), barge_s=start))
    return out
