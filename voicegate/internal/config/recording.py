"""`[recording]`: call recording, off by default, with the caller's consent.

Kept in its own module: recording is personal data with its own lifecycle (consent, retention,
erasure with the caller's memory), not a knob of the pipeline. docs/recording.md is the guide.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from voicegate.internal.config.sections import Section

ConsentMode = Literal["announce", "ask", "none"]
KEYPAD = "0123456789*#ABCD"


class RecordingConfig(Section):
    enabled: bool = False
    # ask: nothing is recorded until the caller says yes (or presses yes_key); announce: recording starts
    # with the call and the announcement says so; none: the deployer has consent some other way.
    consent: ConsentMode = "ask"
    announcement: str = Field("This call is recorded. Say \"don't record this call\" at any time to stop it.",
                              min_length=1, max_length=500)
    question: str = Field("May I record this call? Say yes or press 1 to allow it, or say no or press 2.",
                          min_length=1, max_length=500)
    granted_reply: str = Field("Thank you, this call is being recorded.", max_length=500)
    declined_reply: str = Field("Okay, this call will not be recorded.", max_length=500)
    opted_out_reply: str = Field("Okay, I have stopped recording and deleted the recording of this call.",
                                 max_length=500)
    yes_key: str = "1"
    no_key: str = "2"
    opt_out_key: str = "*"
    yes_phrases: list[str] = Field(default_factory=lambda: [
        "yes", "yeah", "yep", "sure", "okay", "ok", "fine", "go ahead", "of course", "alright", "all right",
        "i agree", "you may", "you can", "that's fine", "no problem", "don't mind", "do not mind"])
    no_phrases: list[str] = Field(default_factory=lambda: [
        "no", "nope", "don't", "do not", "not", "decline", "rather not", "never"])
    opt_out_phrases: list[str] = Field(default_factory=lambda: [
        "don't record", "do not record", "stop recording", "stop the recording", "no recording",
        "don't want to be recorded", "do not want to be recorded"])
    format: Literal["wav", "opus"] = "wav"
    retention_days: float = Field(30, gt=0)
    sweep_interval_s: float = Field(3600, gt=0)
    # Audio of all calls waiting for the disk, in seconds of one call's stereo: past it a call's newest
    # second is replaced by silence of the same length rather than held in memory.
    max_pending_s: float = Field(120, ge=1, le=3600)

    @field_validator("yes_key", "no_key", "opt_out_key")
    @classmethod
    def _one_key(cls, value: str) -> str:
        if value and (len(value) != 1 or value.upper() not in KEYPAD):
            raise ValueError(f"must be one keypad key (0-9, *, #, A-D) or \"\" for none (got {value!r})")
        return value.upper()

    @field_validator("yes_phrases", "no_phrases", "opt_out_phrases")
    @classmethod
    def _phrases(cls, values: list[str]) -> list[str]:
        cleaned = [" ".join(value.lower().split()) for value in values]
        if any(not value for value in cleaned):
            raise ValueError("a phrase is empty")
        return cleaned
