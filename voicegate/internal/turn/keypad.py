"""Key presses gathered into one entry: digits pressed together are one turn for the agent.

A caller keying "4 2 #" means one thing, not three turns. Digits are held until the caller stops for
`DTMF_GAP_S` (or presses "#", which ends an entry at once), then released together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

DTMF_GAP_S = 1.5  # keypad digits separated by less than this form one entry ("#" ends it at once)


class Keypad:
    def __init__(self, release: Callable[[str], None], gap_s: float = DTMF_GAP_S) -> None:
        self._release = release
        self._gap_s = gap_s
        self.pending = ""
        self._timer: asyncio.TimerHandle | None = None

    def press(self, digit: str) -> None:
        self.pending += digit
        if self._timer is not None:
            self._timer.cancel()
        delay = 0.0 if digit == "#" else self._gap_s
        self._timer = asyncio.get_running_loop().call_later(delay, self._flush)

    def _flush(self) -> None:
        digits, self.pending = self.pending, ""
        self._timer = None
        if digits:
            self._release(digits)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.pending = ""
