"""The idle-caller policy as a table (internal/turn/idle.py): pure values, no call."""

from __future__ import annotations

import pytest

from voicegate.internal.turn.idle import IdleSettings, IdleStage, IdleStep, IdleWatch, idle_step

DEFAULT = IdleSettings(prompt_after_ms=8000, hangup_after_ms=8000)
PROMPT_ONLY = IdleSettings(prompt_after_ms=8000, hangup_after_ms=0)
OFF = IdleSettings(prompt_after_ms=0, hangup_after_ms=8000)


@pytest.mark.parametrize(("settings", "stage", "quiet_ms", "step"), [
    (DEFAULT, "waiting", 0, "none"),
    (DEFAULT, "waiting", 7980, "none"),
    (DEFAULT, "waiting", 8000, "prompt"),
    (DEFAULT, "prompted", 7980, "none"),
    (DEFAULT, "prompted", 8000, "goodbye"),
    (DEFAULT, "ended", 60000, "none"),  # the goodbye is said once
    (PROMPT_ONLY, "waiting", 8000, "prompt"),
    (PROMPT_ONLY, "prompted", 600000, "none"),  # 0: never hang up
    (OFF, "waiting", 600000, "none"),  # 0: no prompt, and so no goodbye either
    (OFF, "prompted", 600000, "none"),
])
def test_what_is_due_after_a_silence(settings: IdleSettings, stage: IdleStage, quiet_ms: float, step: IdleStep) -> None:
    assert idle_step(settings, stage, quiet_ms) == step


def run(watch: IdleWatch, script: list[tuple[int, bool]]) -> list[tuple[int, IdleStep]]:
    """Feed (frames, quiet) runs of 20 ms ticks; the steps that came, with the frame they came at."""
    steps, frame = [], 0
    for frames, quiet in script:
        for _ in range(frames):
            frame += 1
            step = watch.tick(20, quiet)
            if step != "none":
                steps.append((frame, step))
    return steps


def test_a_silent_caller_is_prompted_then_told_goodbye_after_the_prompt_played() -> None:
    watch = IdleWatch(DEFAULT)
    # 8 s quiet -> prompt; the prompt plays for 1 s (not quiet); 8 s more -> goodbye; then nothing more.
    assert run(watch, [(400, True), (50, False), (400, True), (500, True)]) == [(400, "prompt"), (850, "goodbye")]
    assert watch.stage == "ended"


def test_anything_in_flight_restarts_the_count_but_keeps_the_stage() -> None:
    watch = IdleWatch(DEFAULT)
    assert run(watch, [(399, True), (1, False), (399, True)]) == []  # a reply, a digit form, a hold: count again
    assert run(watch, [(1, True)]) == [(1, "prompt")]
    assert run(watch, [(399, True), (1, False), (399, True)]) == []  # the agent said something else meanwhile
    assert watch.stage == "prompted"


def test_a_caller_who_speaks_or_keys_after_the_prompt_starts_over() -> None:
    watch = IdleWatch(DEFAULT)
    assert run(watch, [(400, True)]) == [(400, "prompt")]
    watch.caller_active()
    assert watch.stage == "waiting"
    assert run(watch, [(399, True)]) == []  # no goodbye: a whole new silence is needed, and a new prompt first
    assert run(watch, [(1, True)]) == [(1, "prompt")]


def test_speech_over_the_goodbye_keeps_the_call() -> None:
    watch = IdleWatch(DEFAULT)
    assert [step for _, step in run(watch, [(400, True), (400, True)])] == ["prompt", "goodbye"]
    watch.caller_active()
    assert watch.stage == "waiting"


def test_off_costs_nothing_and_says_nothing() -> None:
    watch = IdleWatch(OFF)
    assert run(watch, [(100000, True)]) == []
