"""GET and DELETE /calls/{id}/recording: a call's recording, for the API key's holder only.

    GET /calls/{id}/recording        X-API-Key: <server.api_key>
    -> 200 audio/wav (or audio/ogg), streamed from the file; Content-Disposition names it <session id>.wav
    DELETE /calls/{id}/recording     -> 200 {"deleted": ["<session id>.wav"]}

`{id}` is the session id or the SIP Call-ID (as for POST /calls/{id}/transfer). A recording is personal
data, so like POST /calls these routes are never open: with no `server.api_key` they answer 403.
  401  no or wrong API key            403  recordings_api_disabled: no server.api_key configured
  404  recording_not_found: never recorded (consent declined, not asked for, recording off), deleted
       (the caller's erasure, an opt-out) or expired (recording.retention_days)
  409  recording_in_progress: the call is still live on this node (its file is being written)
"""

from __future__ import annotations

import asyncio

from fastapi import Depends, FastAPI
from fastapi.responses import FileResponse, JSONResponse

from voicegate.internal.recording.call import ConsentedRecording
from voicegate.internal.recording.service import RECORDING_KEY
from voicegate.internal.recording.store import RecordingInfo
from voicegate.internal.sip.voice.call import SIP_CALL_ID
from voicegate.server.call_recording import recording_store
from voicegate.server.errors import ApiError
from voicegate.server.gateway import Gateway
from voicegate.server.routes_calls import KeyedRoute, api_key_guard

RECORDING_ROUTE = KeyedRoute("/calls/{id}/recording", "recordings_api_disabled", "a recording is personal data")
NOT_FOUND = ("no recording of that call: it was not recorded (no consent, or recording off), or it was deleted "
             "or has expired")


def being_recorded(gateway: Gateway, call: str) -> bool:
    """Is `call` (a session id or SIP Call-ID) live on this node with its recording running?"""
    sessions = gateway.sessions.sessions() if gateway.sessions is not None else []
    session = next((s for s in sessions if call in (s.id, s.slots.get(SIP_CALL_ID))), None)
    recording = session.slots.get(RECORDING_KEY) if session is not None else None
    return isinstance(recording, ConsentedRecording) and recording.recording


def install_recording_routes(app: FastAPI, gateway: Gateway) -> None:
    guard = [Depends(api_key_guard(gateway.config.server.api_key, RECORDING_ROUTE))]

    async def find(call: str) -> RecordingInfo:
        store = recording_store(gateway.config, gateway.recordings)
        info = await asyncio.to_thread(store.find, call)
        if info is None or not await asyncio.to_thread(store.audio_path(info).is_file):
            raise ApiError(404, "recording_not_found", NOT_FOUND)
        return info

    @app.get("/calls/{call}/recording", tags=["calls"], responses={401: {}, 403: {}, 404: {}, 409: {}},
             response_class=FileResponse, dependencies=guard)
    async def get_recording(call: str) -> FileResponse:
        if being_recorded(gateway, call):
            raise ApiError(409, "recording_in_progress", "the call is still live; its recording is complete once "
                           "it ends")
        info = await find(call)
        store = recording_store(gateway.config, gateway.recordings)
        return FileResponse(store.audio_path(info), media_type=info.media_type, filename=info.file,
                            headers={"Cache-Control": "no-store"})

    @app.delete("/calls/{call}/recording", tags=["calls"], responses={401: {}, 403: {}, 404: {}},
                dependencies=guard)
    async def delete_recording(call: str) -> JSONResponse:
        info = await find(call)
        removed = await asyncio.to_thread(recording_store(gateway.config, gateway.recordings).delete, info)
        return JSONResponse({"deleted": [name for name in removed if name == info.file]})
