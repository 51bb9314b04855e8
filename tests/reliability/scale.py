"""How big the reliability runs are: sized for CI by default, `make soak` multiplies them."""

import os

SOAK = int(os.environ.get("VOICEGATE_SOAK", "1") or "1")


def scaled(count: int) -> int:
    return count * max(1, SOAK)


def scaled_timeout(base_s: float, soak: int = SOAK) -> float:
    """A test doing `soak` times the work gets `soak` times pytest's timeout: at ten times its size
    the 3000-call SIP load took 9.3 minutes and hit the 300 s meant for 300 calls."""
    return base_s * max(1, soak)
