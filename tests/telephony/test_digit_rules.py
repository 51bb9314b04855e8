"""The rules of one digit-collection attempt: terminator, lengths, timeouts, keys and speech."""

from __future__ import annotations

import pytest

from voicegate.internal.telephony.digits import AttemptResult, DigitEntry, DigitSpec, DigitSpecError, next_prompt

ACCOUNT = DigitSpec("Please enter your account number followed by hash.", min_digits=4, max_digits=8,
                    timeout_ms=5000, inter_digit_timeout_ms=3000, speech_end_ms=1000)


def keyed(entry: DigitEntry, keys: str, start_ms: int = 100, step_ms: int = 200) -> AttemptResult | None:
    result = None
    for index, key in enumerate(keys):
        result = entry.key(key, start_ms + index * step_ms)
    return result


def test_the_terminator_ends_a_valid_entry_without_being_part_of_it() -> None:
    entry = DigitEntry(ACCOUNT, 0)
    assert keyed(entry, "55512#") == AttemptResult("complete", "55512", "keys")


def test_max_digits_ends_the_entry_without_a_terminator() -> None:
    entry = DigitEntry(ACCOUNT, 0)
    assert keyed(entry, "1234567") is None
    assert entry.key("8", 2000) == AttemptResult("complete", "12345678", "keys")
    assert entry.key("9", 2100) == AttemptResult("complete", "12345678", "keys")  # later keys change nothing


def test_too_few_digits_before_the_terminator_is_invalid() -> None:
    entry = DigitEntry(ACCOUNT, 0)
    assert keyed(entry, "12#") == AttemptResult("invalid", "12", "keys")


def test_nothing_within_the_timeout_is_a_timeout_counted_from_the_prompts_end() -> None:
    entry = DigitEntry(ACCOUNT, 1000)
    assert entry.deadline_ms() == 6000
    assert entry.expire(5999) is None
    assert entry.expire(6000) == AttemptResult("timeout")


def test_the_inter_digit_timeout_finishes_an_entry_without_terminator() -> None:
    entry = DigitEntry(ACCOUNT, 0)
    keyed(entry, "12345", start_ms=1000)
    assert entry.deadline_ms() == 1800 + 3000
    assert entry.expire(4799) is None
    assert entry.expire(4800) == AttemptResult("complete", "12345", "keys")
    short = DigitEntry(ACCOUNT, 0)
    keyed(short, "12", start_ms=1000)
    assert short.expire(10_000) == AttemptResult("invalid", "12", "keys")


def test_spoken_digits_collect_across_utterances_and_end_after_a_shorter_wait() -> None:
    entry = DigitEntry(ACCOUNT, 0)
    entry.speech_started(500)
    assert entry.deadline_ms() is None  # the caller is talking: nothing times out
    assert entry.expire(60_000) is None
    assert entry.speech("five five five", 2000) is None
    entry.speech_started(2300)
    assert entry.speech("one two", 3000) is None
    assert entry.deadline_ms() == 4000
    assert entry.expire(4000) == AttemptResult("complete", "55512", "speech")


def test_saying_the_terminator_ends_it_and_words_without_digits_are_ignored() -> None:
    entry = DigitEntry(ACCOUNT, 0)
    assert entry.speech("um let me find it", 1500) is None
    assert entry.deadline_ms() == 5000  # still the first wait: nothing was entered
    assert entry.speech("5551 2 pound", 2500) == AttemptResult("complete", "55512", "speech")


def test_keys_and_speech_mix_and_the_form_can_refuse_either() -> None:
    both = DigitEntry(ACCOUNT, 0)
    both.speech("five five", 1000)
    assert keyed(both, "512#", start_ms=1500) == AttemptResult("complete", "55512", "both")
    keys_only = DigitEntry(DigitSpec("Key it in.", input="keys"), 0)
    assert keys_only.speech("one two three", 1000) is None and keys_only.digits == ""
    speech_only = DigitEntry(DigitSpec("Say it.", input="speech"), 0)
    assert speech_only.key("1", 1000) is None and speech_only.digits == ""


def test_a_key_or_words_during_the_prompt_mean_the_caller_has_begun() -> None:
    entry = DigitEntry(ACCOUNT, 1 << 62)
    assert not entry.begun
    entry.speech_started(100)
    assert entry.begun


def test_prompts_then_retries_then_giving_up() -> None:
    spec = DigitSpec("Enter your PIN.", max_attempts=2, retry_prompt="Sorry, that's not right.")
    assert next_prompt(spec, 1, None) == "Enter your PIN."
    assert next_prompt(spec, 2, AttemptResult("invalid", "1")) == "Sorry, that's not right. Enter your PIN."
    assert next_prompt(spec, 3, AttemptResult("timeout")) is None


@pytest.mark.parametrize("bad", [dict(min_digits=5, max_digits=4), dict(terminator="1"), dict(max_attempts=0),
                                 dict(timeout_ms=0)])
def test_impossible_forms_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(DigitSpecError):
        DigitSpec("x", **bad)  # type: ignore[arg-type]
