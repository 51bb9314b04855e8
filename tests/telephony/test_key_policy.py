"""The key policy of calls voicegate placed (internal/telephony/key_policy.py): what the far end can make
us key, step by step as the navigator keys, or in one entry as the agent and the API key."""

from __future__ import annotations

import pytest

from voicegate.internal.telephony.key_policy import (
    KeyLedger,
    KeyPolicy,
    KeySource,
    asks_for_keys,
    explain,
    keys_named,
    log_fields,
    record,
    screen,
)

POLICY = KeyPolicy()
FEATURE_KEYS = "*#"


def walk(presses: list[tuple[str, str]], source: KeySource = "menu", policy: KeyPolicy = POLICY) -> str:
    """Each (key, what the other side asked for) in turn, as the navigator presses; what went out."""
    ledger, sent = KeyLedger(), ""
    for key, asked in presses:
        if screen(policy, ledger, key, source, frozenset(asked)).allowed:
            record(ledger, key)
            sent += key
    return sent


def test_the_agent_keying_the_feature_code_sends_none_of_it() -> None:
    ledger = KeyLedger()
    verdict = screen(POLICY, ledger, "##900123", "agent", frozenset("#9"))
    assert not verdict.allowed
    assert {(r.index, r.rule) for r in verdict.refusals} == {(0, "not_last"), (1, "in_a_row")}
    assert ledger.sent == 0  # nothing recorded: the entry goes whole or not at all


def test_feature_keys_nobody_asked_for_are_refused() -> None:
    verdict = screen(POLICY, KeyLedger(), "##900123", "agent", frozenset())
    assert [(r.index, r.key, r.rule) for r in verdict.refusals] == [(0, "#", "not_asked"), (1, "#", "not_asked")]


def test_a_menu_naming_pound_twice_then_digits_gets_one_pound_and_never_two_in_a_row() -> None:
    # "for billing, press pound" twice, then "press 9", "press 0", ...: the ##900123 walk
    presses = [("#", "#"), ("#", "#"), *((digit, digit) for digit in "900123")]
    sent = walk(presses)
    assert sent == "#900123"
    assert "##" not in sent and sent.count("#") == 1


def test_pound_once_where_the_menu_asked_for_it() -> None:
    assert walk([("1", "1"), ("#", "#")]) == "1#"
    assert screen(POLICY, KeyLedger(), "12345678#", "agent", frozenset("#")).allowed  # "... followed by pound"


@pytest.mark.parametrize("digits", ["**", "*#", "#*"])
def test_two_feature_keys_in_a_row_are_refused_even_when_asked(digits: str) -> None:
    verdict = screen(POLICY, KeyLedger(), digits, "agent", frozenset(FEATURE_KEYS))
    assert "in_a_row" in [r.rule for r in verdict.refusals]
    ledger = KeyLedger()  # ... and one press at a time, as the navigator presses
    first, second = digits[0], digits[1]
    assert screen(POLICY, ledger, first, "menu", frozenset(first)).allowed
    record(ledger, first)
    assert [r.rule for r in screen(POLICY, ledger, second, "menu", frozenset(second)).refusals] == ["in_a_row"]


@pytest.mark.parametrize("digits", ["#9011", "*2", "1#2"])
def test_in_one_entry_a_feature_key_only_goes_last(digits: str) -> None:
    # what follows it in one go would be a feature code's target (Asterisk's built-in blind transfer is '#')
    verdict = screen(POLICY, KeyLedger(), digits, "agent", frozenset(FEATURE_KEYS))
    assert [r.rule for r in verdict.refusals] == ["not_last"]
    assert "end an entry" in explain(verdict, POLICY)


def test_in_a_row_spans_entries() -> None:
    ledger = KeyLedger()
    record(ledger, "*")
    assert [r.rule for r in screen(POLICY, ledger, "*", "menu", frozenset("*")).refusals] == ["in_a_row"]
    assert screen(POLICY, ledger, "2", "menu", frozenset("2")).allowed


def test_letters_are_never_keyed_and_no_feature_keys_when_the_deployer_says_so() -> None:
    assert [r.rule for r in screen(POLICY, KeyLedger(), "A", "agent", frozenset("A")).refusals] == ["not_allowed"]
    digits_only = KeyPolicy(asked_only="")
    assert walk([("#", "#"), ("2", "2")], policy=digits_only) == "2"


def test_the_cap_counts_every_sender_and_binds_the_api_too() -> None:
    ledger = KeyLedger()
    for key in "12345678":
        assert screen(POLICY, ledger, key, "menu", frozenset(key)).allowed
        record(ledger, key)
    api = screen(POLICY, ledger, "##9", "api")
    assert api.allowed  # the deployer may key feature codes through the API ...
    record(ledger, "##9")
    assert screen(POLICY, ledger, "12345", "agent").allowed
    record(ledger, "12345")
    assert ledger.sent == 16
    assert [r.rule for r in screen(POLICY, ledger, "1", "api").refusals] == ["cap"]  # ... but not past the cap
    assert [r.rule for r in screen(POLICY, ledger, "1", "agent").refusals] == ["cap"]


def test_a_refusal_reads_well_and_its_log_holds_no_digits() -> None:
    verdict = screen(POLICY, KeyLedger(), "#4111#", "agent", frozenset())
    text = explain(verdict, POLICY)
    assert "nothing was sent" in text and "asked" in text and "4111" not in text
    fields = log_fields(verdict, "#4111#", "agent")
    assert "4" not in str(fields["refused"]) and fields["length"] == 6
    over = screen(KeyPolicy(max_per_call=4), KeyLedger(), "4111", "agent", frozenset())
    assert over.allowed
    capped = screen(KeyPolicy(max_per_call=3), KeyLedger(), "4111", "agent", frozenset())
    assert "4111" not in str(log_fields(capped, "4111", "agent"))
    assert "at most 3 keys" in explain(capped, KeyPolicy(max_per_call=3))


@pytest.mark.parametrize(("said", "keys"), [
    ("For billing, press pound.", {"#"}),
    ("Please enter your account number followed by the pound key.", {"#"}),
    ("To return to the main menu, press star. For sales, press 2.", {"*", "2"}),
    ("Press the hash key, then 9.", {"#", "9"}),
])
def test_the_keys_the_other_side_names(said: str, keys: set[str]) -> None:
    assert keys_named(said) == keys
    assert asks_for_keys(said)


@pytest.mark.parametrize("said", ["Hi, this is Dana in billing. How can I help you?",
                                  "Could you tell me your account number?"])
def test_a_person_talking_asks_for_no_keys(said: str) -> None:
    assert not asks_for_keys(said)
    assert keys_named(said) == frozenset()


def test_a_digit_form_asks_for_keys() -> None:
    assert asks_for_keys("Please enter your eight digit account number.")
    assert asks_for_keys("Using your keypad, key in your date of birth.")


def test_the_deployer_sets_the_policy_in_sip() -> None:
    from pydantic import ValidationError

    from voicegate.internal.config.sections import SipConfig
    from voicegate.internal.sip.voice.dtmf import policy_of

    assert policy_of(SipConfig()) == POLICY
    config = SipConfig(outbound_keys="0 1 2 3", outbound_asked_keys="", outbound_max_keys=6)
    assert policy_of(config) == KeyPolicy("0123", "", 6)
    for wrong in ({"outbound_keys": "12x"}, {"outbound_keys": "0123#"}):  # not a key; '#' both free and asked
        with pytest.raises(ValidationError):
            SipConfig(**wrong)
