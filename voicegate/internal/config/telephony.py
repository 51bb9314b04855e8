"""Config sections for the phone flows: digit forms, answering-machine detection, phone menus, warm transfer.

Each is documented in docs/configuration.md and config.toml like every other section; what the flows do
with them is in docs/sip.md and docs/agent-runtime.md.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from voicegate.internal.config.sections import Section

InputMode = Literal["keys", "speech", "both"]
Terminator = Literal["#", "*", ""]
AmdOutcome = Literal["continue", "leave_message", "hangup"]
FORM_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class DigitFormConfig(Section):
    """One named form; an unset key takes the [digits] section's value."""

    prompt: str = Field(min_length=1, max_length=500)
    min_digits: int = Field(1, ge=1, le=64)
    max_digits: int = Field(16, ge=1, le=64)
    terminator: Terminator | None = None
    timeout_s: float | None = Field(None, gt=0, le=120)
    inter_digit_timeout_s: float | None = Field(None, gt=0, le=60)
    speech_end_s: float | None = Field(None, gt=0, le=30)
    input: InputMode | None = None
    max_attempts: int | None = Field(None, ge=1, le=10)
    retry_prompt: str | None = Field(None, max_length=500)
    sensitive: bool | None = None  # a card, a PIN: the recording pauses while it collects; the model gets it masked

    @model_validator(mode="after")
    def _bounds(self) -> DigitFormConfig:
        if self.min_digits > self.max_digits:
            raise ValueError(f"min_digits ({self.min_digits}) is above max_digits ({self.max_digits})")
        return self


class DigitsConfig(Section):
    enabled: bool = True
    terminator: Terminator = "#"
    timeout_s: float = Field(8.0, gt=0, le=120)
    inter_digit_timeout_s: float = Field(4.0, gt=0, le=60)
    speech_end_s: float = Field(1.5, gt=0, le=30)
    input: InputMode = "both"
    max_attempts: int = Field(3, ge=1, le=10)
    retry_prompt: str = Field("Sorry, I didn't get that.", max_length=500)
    sensitive: bool = False  # every form pauses the recording, unless a form says otherwise
    # Only the [digits.forms] the deployer wrote: the model cannot make up a prompt ("enter your card
    # number") that a caller would trust because the agent's voice asks it.
    forms_only: bool = False
    forms: dict[str, DigitFormConfig] = Field(default_factory=dict)

    @field_validator("forms")
    @classmethod
    def _names(cls, forms: dict[str, DigitFormConfig]) -> dict[str, DigitFormConfig]:
        for name in forms:
            if not FORM_NAME.match(name):
                raise ValueError(f"form name {name!r}: use lower-case letters, digits and _ (it is what the "
                                 "model passes to collect_digits)")
        return forms


class AmdConfig(Section):
    enabled: bool = False
    on_human: AmdOutcome = "continue"
    on_machine: AmdOutcome = "leave_message"
    on_unknown: AmdOutcome = "continue"
    voicemail_message: str = Field("", max_length=2000)
    initial_silence_ms: int = Field(2500, ge=500, le=30000)
    end_silence_ms: int = Field(700, ge=200, le=5000)
    human_greeting_ms: int = Field(1800, ge=200, le=10000)
    machine_greeting_ms: int = Field(2700, ge=500, le=20000)
    words_greeting_ms: int = Field(1900, ge=500, le=20000)
    max_human_greeting_ms: int = Field(4000, ge=500, le=20000)
    word_wait_ms: int = Field(1200, ge=0, le=10000)
    probe: bool = True
    first_probe_ms: int = Field(700, ge=200, le=10000)
    probe_every_ms: int = Field(500, ge=200, le=10000)
    max_decision_ms: int = Field(5000, ge=1000, le=30000)
    after_greeting_silence_ms: int = Field(1500, ge=200, le=10000)
    beep_wait_s: float = Field(20.0, gt=0, le=120)

    @model_validator(mode="after")
    def _order(self) -> AmdConfig:
        if not self.human_greeting_ms < self.words_greeting_ms <= self.machine_greeting_ms:
            raise ValueError("need human_greeting_ms < words_greeting_ms <= machine_greeting_ms")
        return self


class MenusConfig(Section):
    max_s: float = Field(300.0, gt=0, le=3600)
    prompt_end_ms: int = Field(1500, ge=300, le=10000)
    person_wait_ms: int = Field(2500, ge=500, le=20000)
    dead_air_ms: int = Field(20000, ge=1000, le=120000)
    max_steps: int = Field(8, ge=1, le=30)
    # Each menu prompt, once it ended, is heard again whole by this Whisper model (a name or a CTranslate2
    # directory, resolved as [whisper] model is) with this beam: a menu can wait for a better decode than a
    # conversation can. "": only the call's own recogniser, in parts.
    whisper_model: str = "base"
    whisper_beam_size: int = Field(5, ge=1, le=10)
    # Who chooses the option toward the goal: "model" asks the configured [llm] provider (openai or ollama)
    # with the offline matcher behind it for timeouts and bad answers; "offline" the matcher alone
    # (words, shipped paraphrases, wordllama); "auto" the model when the provider is openai or ollama.
    chooser: Literal["auto", "model", "offline"] = "auto"
    model_timeout_ms: int = Field(4000, ge=100, le=30000)  # a menu waits some seconds for a key, no longer
    model_max_tokens: int = Field(40, ge=8, le=400)  # the answer is one short JSON object
    # The deployer's paraphrases: a phrase in a goal -> the words its menus use ("called off" = ["cancel"]).
    synonyms: dict[str, list[str]] = Field(default_factory=dict)


class WarmTransferConfig(Section):
    default_mode: Literal["cold", "warm"] = "cold"
    hold_message: str = Field("Please hold while I connect you.", max_length=500)
    hold_music: str = ""
    ring_timeout_s: float = Field(30.0, gt=0, le=300)
    greet_wait_ms: int = Field(2500, ge=0, le=10000)
    brief_template: str = Field("Hello, this is the voice assistant with a caller for {target}. {summary} "
                                "I'm connecting you now.", max_length=1000)
    summary_max_chars: int = Field(300, ge=0, le=2000)
    return_message: str = Field("Sorry, {target} {why}. I'm still here. How else can I help?", max_length=500)
    # The caller's keys sent on, on voicegate's leg to the target: off, so a caller cannot key feature
    # codes (transfer, park) into the system voicegate called on their behalf. The target's keys always
    # reach the caller.
    relay_caller_keys: bool = False
    max_bridge_s: float = Field(3600.0, ge=1, le=86400)  # a bridged call is hung up (both legs) after this long

    @field_validator("brief_template", "return_message")
    @classmethod
    def _placeholders(cls, text: str) -> str:
        unknown = set(re.findall(r"{(\w*)}", text)) - {"target", "summary", "why"}
        if unknown:
            raise ValueError(f"unknown placeholder(s) {', '.join(sorted(unknown))}: use {{target}}, {{summary}} "
                             "(brief_template) and {why} (return_message)")
        return text
