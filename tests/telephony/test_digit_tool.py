"""collect_digits: how a form is put together from [digits], a named form and the model's arguments."""

from __future__ import annotations

import pytest

from voicegate.internal.config.telephony import DigitFormConfig, DigitsConfig
from voicegate.internal.telephony.digit_tool import form_spec, register_digits_tool, worst_case_s
from voicegate.internal.telephony.digits import DigitSpecError
from voicegate.internal.tools.registry import ToolRegistry
from voicegate.server.providers import call_control

SECTION = DigitsConfig(timeout_s=6.0, terminator="#", forms={
    "pin": DigitFormConfig(prompt="Enter your PIN.", min_digits=4, max_digits=4, terminator="", input="keys")})


def test_the_model_overrides_the_form_which_overrides_the_section() -> None:
    pin = form_spec(SECTION, SECTION.forms["pin"], {})
    assert (pin.prompt, pin.min_digits, pin.max_digits, pin.terminator, pin.input, pin.timeout_ms) == (
        "Enter your PIN.", 4, 4, "", "keys", 6000)
    longer = form_spec(SECTION, SECTION.forms["pin"], {"max_digits": 6, "input": "both"})
    assert (longer.max_digits, longer.input) == (6, "both")
    own = form_spec(SECTION, None, {"prompt": "Say your date of birth.", "min_digits": 8, "max_digits": 8,
                                    "terminator": "none"})
    assert (own.prompt, own.terminator, own.max_attempts) == ("Say your date of birth.", "", 3)


def test_a_form_without_a_prompt_or_with_impossible_lengths_is_refused() -> None:
    with pytest.raises(DigitSpecError, match="prompt"):
        form_spec(SECTION, None, {})
    with pytest.raises(DigitSpecError):
        form_spec(SECTION, None, {"prompt": "x", "min_digits": 9, "max_digits": 3})


def test_the_turns_deadline_covers_the_whole_form() -> None:
    spec = form_spec(SECTION, SECTION.forms["pin"], {})
    assert worst_case_s(spec) > spec.max_attempts * (spec.timeout_ms + 4 * spec.inter_digit_timeout_ms) / 1000


def test_the_tool_offers_the_configured_forms_and_has_side_effects() -> None:
    registry = ToolRegistry()
    register_digits_tool(registry, SECTION, control_of=call_control)
    (spec,) = registry.specs()
    assert spec.name == "collect_digits" and spec.parameters["properties"]["form"]["enum"] == ["pin"]
    from voicegate.internal.llm.base import ToolCall

    assert registry.has_side_effects(ToolCall("1", "collect_digits", {"form": "pin"}))
