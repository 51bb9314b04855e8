"""TurnReply: one reply to one caller turn, from the moment it is prepared to the moment it is on record.

A reply can start before the caller's turn is known to be over (prepared from the transcript while the
end-of-turn decision is still out) and can be dropped after it was released (the caller goes on with the
same sentence). So what a reply did is kept here, apart from the conversation, and written into it
only once it counts (`Responder._commit`): when its audio has played, or a tool with side effects ran.

- prepared: generating and synthesising into a held playout; side-effect tools wait at their gate;
- released: the turn is over, its audio may play;
- heard: a frame of it reached the caller;
- absorbed: the caller went on with the same turn before it counted; it leaves no trace in the history.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from voicegate.internal.llm.base import ChatMessage


@dataclass(eq=False)
class TurnReply:
    text: str  # the caller's turn this answers
    released: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    prepared_at: float = 0.0
    heard: bool = False
    first_audio_at: float = 0.0
    side_effects: bool = False  # a tool that changes something ran: the turn is on record
    absorbed: bool = False
    heard_text: str = ""  # what the caller heard of it before it was absorbed
    exchange: list[ChatMessage] = field(default_factory=list)  # tool calls and results, in order

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def absorbable(self, now: float, window_ms: float) -> bool:
        """Can the caller's next words still join this turn (and this reply vanish)?

        Until a side-effect tool ran and while the reply has played for at most `window_ms`: a caller who
        goes on that soon after the agent began was finishing their sentence, not answering the agent.
        """
        if not self.running or self.side_effects:
            return False
        return not self.heard or (now - self.first_audio_at) * 1000.0 <= window_ms
