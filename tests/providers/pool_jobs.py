"""Jobs for DecoderPool tests: importable by the pool's spawned worker processes."""

from __future__ import annotations

import os
import time

from internal.stt.workers import watch_parent


def start_worker(marker: str) -> None:
    watch_parent()
    os.environ["POOL_TEST_MARKER"] = marker


def sleep_then_echo(tag: str, seconds: float) -> str:
    time.sleep(seconds)
    return f"{tag}:{os.environ['POOL_TEST_MARKER']}"


def die(_tag: str, _seconds: float) -> str:
    os._exit(3)  # what a segfault in a native decoder looks like from the parent
