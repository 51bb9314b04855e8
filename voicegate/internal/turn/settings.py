"""The turn's knobs from [pipeline] (docs/configuration.md), as the TurnOwner reads them."""

from __future__ import annotations

from dataclasses import dataclass

from voicegate.internal.config.sections import PipelineConfig

FRAME_MS = 20  # the pipeline's frames


@dataclass(frozen=True, slots=True)
class TurnSettings:
    merge_ms: int
    quiet_ms: int
    max_turn_wait_ms: int
    threshold: float
    barge_in: bool
    barge_in_confirm_ms: int
    vad_offset_ms: int
    early_verdict: bool = True
    adaptive_hold: bool = True
    head_threshold: float = 0.55
    resume_after_false_interruption_s: float = 0.0

    @classmethod
    def from_config(cls, config: PipelineConfig) -> TurnSettings:
        return cls(config.turn_merge_ms, config.user_speech_quiet_ms, config.max_turn_wait_ms,
                   config.end_of_turn_threshold, config.barge_in, config.barge_in_confirm_ms, config.vad_offset_ms,
                   config.end_of_turn_early, config.adaptive_hold, config.phone_turn_threshold,
                   config.resume_after_false_interruption_s)
