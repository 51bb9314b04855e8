"""How big the soak-sized tests are: sized for `make test` by default, full size times N under `make soak`.

A soak-sized test (marked `soak`: every test in tests/reliability, and the load tests elsewhere) places
hundreds of calls or sends tens of thousands of messages when it runs full size. `make test` runs each at
its CI size, enough to prove its point on two busy cores (calls overlapping up to the concurrency limit,
every kind of hostile message many times over); `make soak` sets VOICEGATE_SOAK=10 and runs every `soak`
test at ten times its full size, with ten times its timeout. Each test's docstring says both sizes.
"""

from __future__ import annotations

import os

import pytest

SOAK = int(os.environ.get("VOICEGATE_SOAK", "1") or "1")


def scaled(ci: int, full: int, soak: int = SOAK) -> int:
    """`ci` under `make test`; `full` (the size the test was written for) times the soak factor under
    `make soak`."""
    return ci if soak <= 1 else full * soak


def scaled_timeout(base_s: float, soak: int = SOAK) -> float:
    """A test doing `soak` times the work gets `soak` times its timeout: at ten times its size the
    3000-call SIP load took 9.3 minutes and hit the 300 s meant for 300 calls."""
    return base_s * max(1, soak)


def soak_timeouts(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `make soak`, each `soak` test's timeout (its own, else pytest's) grows with the work."""
    if SOAK <= 1:
        return
    base = float(config.getini("timeout") or 300)
    for item in items:
        if item.get_closest_marker("soak") is not None:
            own = item.get_closest_marker("timeout")
            item.add_marker(pytest.mark.timeout(scaled_timeout(float(own.args[0]) if own and own.args else base)))
