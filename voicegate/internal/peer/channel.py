"""The DataChannel `events`: pipeline events out as JSON, a few client messages in.

Out: `ChannelEventSink` is the pipeline's EventSink. `emit` never blocks and never raises: before the
channel opens, events wait in a short queue (so the page sees the greeting's transcript); once open,
each event is one JSON text message; when the channel is congested or closed, events are dropped.
The call is audio first; a slow page must not stall it.

In: `parse_client_message` turns one text message into a typed `ClientMessage`, or None for anything
it does not understand; unknown messages are ignored so old servers keep working with newer pages.
Nothing a client sends here can change who the caller is.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from dataclasses import dataclass
from typing import Literal

from aiortc import RTCDataChannel

from voicegate.internal.event_envelope import Event

log = logging.getLogger(__name__)

EVENT_CHANNEL_LABEL = "events"
# Events kept while the channel is still opening; a call produces a handful before it opens.
PENDING_EVENTS = 64
# Above this many bytes queued in the SCTP stack the page is not keeping up; drop, do not queue more.
CONGESTED_BYTES = 256 * 1024
MAX_CLIENT_MESSAGE_BYTES = 8 * 1024
MAX_TYPED_TURN_CHARS = 2000


class ChannelEventSink:
    def __init__(self) -> None:
        self._channel: RTCDataChannel | None = None
        self._pending: deque[str] = deque(maxlen=PENDING_EVENTS)
        self._closed = False
        self.sent = 0
        self.dropped = 0

    def use(self, channel: RTCDataChannel) -> None:
        """Deliver on `channel` from now on (flushing what waited for it, once it is open)."""
        self._channel = channel
        if channel.readyState == "open":
            self._flush()
        else:
            channel.on("open", self._flush)

    def close(self) -> None:
        self._closed = True
        self._pending.clear()

    @property
    def open(self) -> bool:
        channel = self._channel
        return not self._closed and channel is not None and channel.readyState == "open"

    def emit(self, event: Event) -> None:
        try:
            self.send_json(event.model_dump_json())
        except Exception:  # an event that cannot be serialised is a bug, not a reason to stop the call
            self.dropped += 1
            log.exception("event not sent", extra={"event_type": getattr(event, "type", "?")})

    def send_json(self, text: str) -> None:
        if self._closed:
            self.dropped += 1
            return
        channel = self._channel
        if channel is None or channel.readyState == "connecting":
            if len(self._pending) == self._pending.maxlen:
                self.dropped += 1
            self._pending.append(text)
            return
        self._send(channel, text)

    def _flush(self) -> None:
        channel = self._channel
        while self._pending and channel is not None:
            self._send(channel, self._pending.popleft())

    def _send(self, channel: RTCDataChannel, text: str) -> None:
        if self._closed or channel.readyState != "open" or channel.bufferedAmount > CONGESTED_BYTES:
            self.dropped += 1
            return
        try:
            channel.send(text)
            self.sent += 1
        except Exception:  # closing under us: the event is lost, the call is not
            self.dropped += 1
            log.debug("event dropped: the channel is closing")


@dataclass(frozen=True, slots=True)
class TypedTurn:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class Ping:
    type: Literal["ping"] = "ping"


ClientMessage = TypedTurn | Ping


def parse_client_message(message: str | bytes) -> ClientMessage | None:
    """A message the server acts on, or None (logged at debug) for anything else."""
    if not isinstance(message, str):
        log.debug("binary DataChannel message ignored")
        return None
    if len(message.encode("utf-8", "replace")) > MAX_CLIENT_MESSAGE_BYTES:
        log.debug("oversized DataChannel message ignored")
        return None
    try:
        data = json.loads(message)
    except ValueError:
        log.debug("malformed DataChannel message ignored")
        return None
    if not isinstance(data, dict):
        log.debug("non-object DataChannel message ignored")
        return None
    kind = data.get("type")
    if kind == "ping":
        return Ping()
    if kind == "text":
        text = data.get("text")
        if isinstance(text, str) and text.strip():
            return TypedTurn(text.strip()[:MAX_TYPED_TURN_CHARS])
        log.debug("text message without text ignored")
        return None
    log.debug("unknown DataChannel message ignored", extra={"message_type": str(kind)[:40]})
    return None
