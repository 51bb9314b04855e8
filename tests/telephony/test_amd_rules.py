"""Answering-machine detection: the policy on what has been heard, and the classifier on real speech."""

from __future__ import annotations

import numpy as np

from tests.speech import neural, tone
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.telephony.amd import (
    AmdSettings,
    AnsweringMachineClassifier,
    Heard,
    MessageTiming,
    classify,
    message_may_start,
    probe_due,
    words_say,
)
from voicegate.internal.telephony.beep import Beep

S = AmdSettings()


def greeting(onset: int, length: int, now: int, **kw: object) -> Heard:
    return Heard(now_ms=now, onset_ms=onset, last_speech_ms=onset + length, **kw)  # type: ignore[arg-type]


def test_a_short_greeting_then_waiting_is_a_person() -> None:
    assert classify(greeting(400, 600, 1500), S) is None  # not quiet long enough yet
    decision = classify(greeting(400, 600, 1700), S)
    assert decision is not None and (decision.result, decision.reason, decision.at_ms) == (
        "human", "short greeting", 1700)


def test_a_greeting_that_runs_on_is_a_machine() -> None:
    assert classify(greeting(500, S.machine_greeting_ms - 20, 3180), S) is None
    decision = classify(greeting(500, S.machine_greeting_ms, 3200), S)
    assert decision is not None and (decision.result, decision.reason) == ("machine", "long greeting")


def test_a_beep_or_a_recordings_words_settle_it_at_once() -> None:
    assert classify(greeting(500, 300, 900, beep=True), S).result == "machine"  # type: ignore[union-attr]
    assert classify(greeting(500, 900, 1400, words="machine"), S).reason == "words"  # type: ignore[union-attr]


def test_nobody_speaking_is_unknown() -> None:
    assert classify(Heard(now_ms=S.initial_silence_ms - 20), S) is None
    decision = classify(Heard(now_ms=S.initial_silence_ms), S)
    assert decision is not None and (decision.result, decision.reason) == ("unknown", "silence")


def test_with_a_recogniser_a_long_greeting_is_judged_sooner_unless_its_words_say_person() -> None:
    listening = dict(words_expected=True)
    at = 500 + S.words_greeting_ms
    assert classify(greeting(500, S.words_greeting_ms, at, **listening), S).result == "machine"  # type: ignore[union-attr]
    person = classify(greeting(500, S.words_greeting_ms, at, words="human", **listening), S)
    assert person is None  # "Sam speaking, how can I help": let them finish
    ended = classify(greeting(500, 2500, 500 + 2500 + S.end_silence_ms, words="human", **listening), S)
    assert ended is not None and (ended.result, ended.reason) == ("human", "words")


def test_words_on_their_way_are_waited_for_but_not_forever() -> None:
    pending = greeting(500, S.words_greeting_ms, 500 + S.words_greeting_ms, words_expected=True,
                       pending_since_ms=2200)
    assert classify(pending, S) is None
    late = greeting(500, S.words_greeting_ms + 1300, 2200 + S.word_wait_ms, words_expected=True,
                    pending_since_ms=2200)
    assert classify(late, S).result == "machine"  # type: ignore[union-attr]


def test_the_greeting_is_probed_while_it_runs() -> None:
    running = greeting(500, S.first_probe_ms, 500 + S.first_probe_ms, words_expected=True)
    assert probe_due(running, 0, S)
    assert not probe_due(running, S.first_probe_ms - 100, S)  # too soon after the last probe
    assert not probe_due(greeting(500, S.first_probe_ms, 500 + S.first_probe_ms), 0, S)  # no recogniser
    assert not probe_due(greeting(500, 1000, 1500 + S.end_silence_ms, words_expected=True), 0, S)  # it ended


def test_what_words_say() -> None:
    assert words_say("Hi, you've reached Sam. Please leave a message.") == "machine"
    assert words_say("Hello, this is Sam. Sorry I missed your call.") == "machine"
    assert words_say("Hi, this is Sam speaking, how can I help?") == "human"
    assert words_say("This is Sam.") == "unknown"


def test_the_message_starts_after_the_beep_or_after_the_greeting_never_over_a_tone() -> None:
    timing = MessageTiming()
    beep = Beep(3000, 3500, 1000.0)
    after = greeting(500, 2400, 3500 + 300)
    assert message_may_start(after, beep, False, 2000, timing)
    assert not message_may_start(greeting(500, 2400, 3700), beep, False, 2000, timing)  # a breath first
    assert not message_may_start(after, None, True, 2000, timing)  # a tone sounds
    quiet = greeting(500, 2400, 2900 + timing.after_greeting_silence_ms)
    assert message_may_start(quiet, None, False, 2000, timing)
    assert not message_may_start(greeting(500, 2400, 3000), None, False, 2000, timing)
    assert message_may_start(greeting(500, 30000, 30500), None, False, 2000, timing)  # beep_wait_ms ran out


def line(*parts: bytes) -> bytes:
    pcm = b"".join(parts)
    noisy = np.frombuffer(pcm, dtype=np.int16) + np.random.default_rng(3).normal(0, 40, len(pcm) // 2)
    return ulaw_decode(ulaw_encode(np.clip(noisy, -32768, 32767).astype(np.int16).tobytes()))


def run(pcm: bytes) -> tuple[AnsweringMachineClassifier, int | None]:
    classifier = AnsweringMachineClassifier(S, 8000)
    for index in range(len(pcm) // 320):
        if classifier.feed(pcm[index * 320:(index + 1) * 320], (index + 1) * 20) is not None:
            return classifier, (index + 1) * 20
    return classifier, None


def test_the_classifier_on_a_person_and_on_a_machine_with_a_beep() -> None:
    hello, machine_greeting = neural(["Hello?", "Hi, you've reached Sam. I can't take your call right now. "
                                      "Please leave a message after the tone."], 8000)
    person, _ = run(line(bytes(8000), hello, bytes(16000 * 3)))
    assert person.decision is not None and person.decision.result == "human"
    machine, at = run(line(bytes(8000), machine_greeting, bytes(4000), tone(500, 8000, -15.0, 1000.0),
                           bytes(16000 * 3)))
    assert machine.decision is not None and machine.decision.result == "machine"
    assert at is not None and at < 500 + len(machine_greeting) // 16  # decided while the greeting still ran
    silent, _ = run(line(bytes(16000 * 4)))
    assert silent.decision is not None and silent.decision.result == "unknown"
