"""What every simulated phone offers the conversation, whichever transport carries the call."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod

from voicegate.internal.evals.scenario import Transport
from voicegate.internal.evals.server_api import Observed
from voicegate.internal.evals.wire import Ear, Mouth


class CallSetupFailed(Exception):
    """The call never got going (refused, no answer, no media): the reason, as the server put it."""


class Phone(ABC):
    transport: Transport

    def __init__(self, mouth: Mouth, ear: Ear) -> None:
        self.mouth = mouth
        self.ear = ear
        self.ended = asyncio.Event()
        self.ended_by = ""  # "agent" (the server hung up) or "caller" (we did)
        self.end_reason = ""
        self.transferred_to = ""  # the URI a REFER asked this phone to call
        self.session_id = ""
        self.sip_call_id = ""

    def end(self, by: str, reason: str) -> None:
        if self.ended.is_set():
            return
        self.ended_by, self.end_reason = by, reason
        self.mouth.cancel()
        self.ended.set()

    @abstractmethod
    def server_events(self) -> list[Observed]:
        """The server's own account of this call so far (its events), with their arrival times."""

    @property
    @abstractmethod
    def server_events_problem(self) -> str:
        """Why this call has no server events ("" when it has them)."""

    @property
    def tool_events_problem(self) -> str:
        """Why the server's call events (tool calls, the caller's identity) are missing ("" if present)."""
        return self.server_events_problem

    @abstractmethod
    async def hang_up(self) -> None:
        """End the call from the caller's side (nothing when it has ended already)."""
