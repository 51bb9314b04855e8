"""What a run did and found, scenario by scenario: calls as they happened (PlacedCall, ScenarioRun), then
judged (CallResult, ScenarioResult), which is all the reports (console, JUnit, HTML) read."""

from __future__ import annotations

from dataclasses import dataclass, field

from voicegate.internal.evals.checks import CallFacts, Check
from voicegate.internal.evals.conversation import TurnRecord
from voicegate.internal.evals.phone import Phone
from voicegate.internal.evals.replies import TurnView
from voicegate.internal.evals.scenario import Call, Scenario, Transport
from voicegate.internal.evals.server_api import Observed


@dataclass
class Clip:
    """One stretch of a call's audio, both sides: stereo PCM16 (caller left, agent right)."""

    pcm: bytes
    rate: int


@dataclass
class TurnResult:
    index: int  # from 0
    label: str
    checks: list[Check]
    view: TurnView
    clip: Clip | None = None


@dataclass
class CallResult:
    index: int  # from 0
    name: str
    checks: list[Check]  # the call's own expectations, the rubric last
    turns: list[TurnResult]
    greeting: TurnView
    greeting_clip: Clip | None
    transcript: list[list[str]]  # [role, text], as the server told it
    facts: CallFacts
    seconds: float

    @property
    def title(self) -> str:
        return f"call {self.index + 1}" + (f" ({self.name})" if self.name else "")

    def all_checks(self) -> list[Check]:
        return [*self.checks, *(check for turn in self.turns for check in turn.checks)]


@dataclass
class ScenarioResult:
    scenario: Scenario
    transport: Transport
    calls: list[CallResult] = field(default_factory=list)
    error: str = ""  # it could not run at all (no target, the voice failed, the server went away)
    seconds: float = 0.0

    @property
    def title(self) -> str:
        return f"{self.scenario.name} [{self.transport}]"

    def checks(self) -> list[Check]:
        return [check for call in self.calls for check in call.all_checks()]

    @property
    def failures(self) -> int:
        return sum(check.failed for check in self.checks()) + (1 if self.error else 0)

    @property
    def skipped(self) -> int:
        return sum(check.status == "skipped" for check in self.checks())

    @property
    def ok(self) -> bool:
        return self.failures == 0


@dataclass
class PlacedCall:
    """A call as it happened, not judged yet."""

    index: int
    call: Call
    facts: CallFacts
    phone: Phone | None = None  # None: it never connected (facts.setup_error)
    records: list[TurnRecord] = field(default_factory=list)
    events: list[Observed] = field(default_factory=list)
    connected: float = 0.0
    seconds: float = 0.0


@dataclass
class ScenarioRun:
    scenario: Scenario
    transport: Transport
    placed: list[PlacedCall] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
