"""Jobs for DecoderPool tests: importable by the pool's spawned worker processes."""

from __future__ import annotations

import os
import time

from voicegate.internal.stt.workers import watch_parent


def start_worker(marker: str) -> None:
    watch_parent()
    os.environ["POOL_TEST_MARKER"] = marker


def sleep_then_echo(tag: str, seconds: float) -> str:
    time.sleep(seconds)
    return f"{tag}:{os.environ['POOL_TEST_MARKER']}"


def die(_tag: str, _seconds: float) -> str:
    os._exit(3)  # what a segfault in a native decoder looks like from the parent


def echo_batch(items: list[tuple[str, float]]) -> list[str]:
    """Several utterances in one worker call: each answer says how big its batch was."""
    if any(tag.startswith("bad") for tag, _ in items):
        raise ValueError("a bad utterance")
    time.sleep(max(seconds for _, seconds in items))
    return [f"{tag}:batch{len(items)}" for tag, _ in items]


def length_key(tag: str, _seconds: float) -> object:
    return tag.startswith("long")
