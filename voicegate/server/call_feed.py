"""Every call's events for the API key's holder: what `voicegate eval` checks a call against.

A SIP call has no DataChannel, and neither transport tells anyone which tools the agent called with
which arguments. With `server.call_events = true` the gateway copies each call's pipeline events (both
sides' words, the agent's state, DTMF, timings) into this feed, adds `call.started` (its transport, SIP
Call-ID and what kind of caller it was), `tool` (name, arguments, error) and `call.ended` (the reason),
each tagged with the session id, and `/api/admin/calls/events` streams them to API-key holders
(server/routes_call_feed.py). It carries what callers say, so it is off by default.

Subscribers get bounded queues: one that cannot keep up loses events (and is told how many), it never
slows a call down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from voicegate.internal.conversation.slots import Slot
from voicegate.internal.event_envelope import Event
from voicegate.internal.llm.base import ToolCall
from voicegate.internal.session import Session
from voicegate.internal.sip.voice.call import SIP_CALL_ID
from voicegate.internal.tools.registry import ToolContext

SUBSCRIBER_QUEUE = 2048  # events a subscriber may fall behind by before it loses some
STARTED_KEY: Slot[bool] = Slot("call_feed.started")  # call.started was published for this session


class FeedSubscription:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue(maxsize=SUBSCRIBER_QUEUE)
        self.dropped = 0

    def offer(self, text: str) -> None:
        try:
            self.queue.put_nowait(text)
        except asyncio.QueueFull:
            self.dropped += 1


class CallFeed:
    def __init__(self) -> None:
        self._subscribers: list[FeedSubscription] = []

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[FeedSubscription]:
        subscription = FeedSubscription()
        self._subscribers.append(subscription)
        try:
            yield subscription
        finally:
            self._subscribers.remove(subscription)

    def publish(self, session_id: str, payload: dict[str, Any]) -> None:
        if not self._subscribers:
            return
        text = json.dumps({**payload, "session_id": session_id}, ensure_ascii=False, default=str)
        for subscription in self._subscribers:
            subscription.offer(text)

    def started(self, session: Session) -> None:
        """Once per session, before its first event (a resumed call keeps its first): by then a SIP call's
        Call-ID is known, which it is not yet when the pipeline is made."""
        if session.slots.get(STARTED_KEY):
            return
        session.slots.set(STARTED_KEY, True)
        self.publish(session.id, {"type": "call.started", "ts": time.time(), "transport": session.transport,
                                  "sip_call_id": str(session.slots.get(SIP_CALL_ID, "")),
                                  "caller": session.identity.kind})

    def sink_for(self, session: Session) -> CallFeedSink:
        return CallFeedSink(self, session)

    def tool_ran(self, call: ToolCall, context: ToolContext, error: str) -> None:
        self.publish(context.session_id, {"type": "tool", "ts": time.time(), "name": call.name,
                                          "arguments": call.arguments, "ok": not error, "error": error,
                                          "turn": context.turn})

    async def ended(self, session: Session) -> None:
        self.started(session)
        self.publish(session.id, {"type": "call.ended", "ts": time.time(), "reason": session.end_reason})


class CallFeedSink:
    """A call's EventSink into the feed (beside its DataChannel or its log)."""

    def __init__(self, feed: CallFeed, session: Session) -> None:
        self._feed = feed
        self._session = session

    def emit(self, event: Event) -> None:
        self._feed.started(self._session)
        self._feed.publish(self._session.id, event.model_dump(mode="json"))
