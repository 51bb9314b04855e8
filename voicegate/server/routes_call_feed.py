"""WebSocket /api/admin/calls/events: every call's events, for the API key's holder (server.call_events).

    ws://HOST/api/admin/calls/events        X-API-Key: <server.api_key>  (or Authorization: Bearer)
    -> {"type": "call.started", "session_id": "...", "transport": "sip", "sip_call_id": "...", "caller": "sip", ...}
       {"type": "transcript", "session_id": "...", "role": "agent", "text": "...", "final": true, ...}
       {"type": "tool", "session_id": "...", "name": "memory", "arguments": {...}, "ok": true, "error": ""}
       {"type": "call.ended", "session_id": "...", "reason": "agent ended the call"}

What `voicegate eval` checks a call against (docs/evals.md); the events and their fields are in
docs/protocol.md. Refused by closing right after the handshake: 4404 when server.call_events is off,
4403 with no server.api_key configured, 4401 without the key (the close reason says which). A
subscriber that falls behind loses events and is sent `{"type": "feed.dropped", "count": N}` once it
catches up, so it knows its view has gaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from voicegate.server.errors import ApiError
from voicegate.server.gateway import Gateway
from voicegate.server.routes_calls import KeyedRoute, require_api_key
from voicegate.server.routes_memory import drain_incoming

CALL_EVENTS = KeyedRoute("/api/admin/calls/events", "admin_api_disabled",
                         "every call's words and tool calls are never open to anyone")
CLOSE_CODES = {401: 4401, 403: 4403, 404: 4404}


def install_call_feed_routes(app: FastAPI, gateway: Gateway) -> None:
    api_key = gateway.config.server.api_key

    @app.websocket("/api/admin/calls/events")
    async def call_events(socket: WebSocket) -> None:
        feed = gateway.call_feed
        try:
            require_api_key(socket, api_key, CALL_EVENTS)
            if feed is None:
                raise ApiError(404, "call_events_disabled", "call events are off on this server "
                               "(server.call_events = false)")
        except ApiError as exc:
            # Accepted first so the client reads the code and the reason (a close before the handshake is
            # a bare HTTP 403 that says nothing).
            await socket.accept()
            await socket.close(code=CLOSE_CODES.get(exc.status, 4400), reason=exc.message[:120])
            return
        await socket.accept()
        receiver = asyncio.create_task(drain_incoming(socket))
        reported = 0
        with feed.subscribe() as subscription:
            try:
                while not receiver.done():
                    getter = asyncio.create_task(subscription.queue.get())
                    done, _ = await asyncio.wait({getter, receiver}, return_when=asyncio.FIRST_COMPLETED)
                    if getter not in done:
                        getter.cancel()
                        break
                    if subscription.dropped > reported:
                        await socket.send_text(json.dumps({"type": "feed.dropped",
                                                           "count": subscription.dropped - reported}))
                        reported = subscription.dropped
                    await socket.send_text(getter.result())
            except (WebSocketDisconnect, RuntimeError):
                pass
            finally:
                receiver.cancel()
                with contextlib.suppress(Exception):
                    await socket.close()

