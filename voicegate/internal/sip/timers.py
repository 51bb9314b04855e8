"""RFC 3261 timer values (section 17 and table 4), configurable so tests can run them fast.

Everything derives from T1 (round-trip estimate), T2 (cap on non-INVITE retransmission interval) and
T4 (how long a message may linger in the network), exactly as the RFC defines them; Timer D is the
one value the RFC gives absolutely ("> 32 s for UDP"), so it is a setting of its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TimerSettings:
    t1: float = 0.5
    t2: float = 4.0
    t4: float = 5.0
    timer_d: float = 32.0

    @property
    def transaction_timeout(self) -> float:
        """64*T1: Timers B, F, H, J, L, M and the UAS wait for an ACK to its 2xx."""
        return 64 * self.t1

    def timer_d_for(self, reliable: bool) -> float:
        return 0.0 if reliable else self.timer_d

    def timer_i_for(self, reliable: bool) -> float:
        return 0.0 if reliable else self.t4

    def timer_j_for(self, reliable: bool) -> float:
        return 0.0 if reliable else self.transaction_timeout

    def timer_k_for(self, reliable: bool) -> float:
        return 0.0 if reliable else self.t4
