"""How big the reliability runs are: sized for CI by default, `make soak` multiplies them."""

import os

SOAK = int(os.environ.get("VOICEGATE_SOAK", "1") or "1")


def scaled(count: int) -> int:
    return count * max(1, SOAK)
