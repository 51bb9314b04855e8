"""DELETE /api/admin/memory/{caller}: the operator erases one caller's memory over HTTP; GET reads it.

    DELETE /api/admin/memory/sip:+15551234567                 X-API-Key: <server.api_key>
    DELETE /api/admin/memory/5551234567?kind=sip&region=US    a raw value of a kind (phones: E.164)
    DELETE /api/admin/memory/<64-hex owner key>?kind=owner_key
    -> 200 {"caller": "sip:+15551234567", "removed": {"memories": 1, ...}, "total": 3, "servers_told": false,
            "recordings": ["3f2a....wav"]}

The same erasure as `voicegate memory delete` (internal/memory/subject.py, `delete_everywhere`): under
the writers' lock, raising the erasure epoch, with this node's pending hang-up writes and call recordings
(named in `recordings`), live calls and other nodes told, audited with source "api". It is the only way
to erase from `memory.provider = "memory"`, whose store lives in this process, so the CLI calls it for
that provider. Counts and file names, never content. An owner with nothing stored is a 200 with `total`
0: the caller is forgotten either way. Like POST /calls it is never open: with no `server.api_key` it
answers 403. With memory off it still erases: the caller's call recordings in this node's data directory
(their owner key made from the owner-key secret: internal/recording/subject.py), `removed` naming only
those.

GET /api/admin/memory/{caller} (same key, same ways of naming the caller) answers what GET /api/memory
answers the caller themselves, plus `caller`: how `voicegate eval` checks what a phone caller is
remembered as (a SIP caller has no token to ask with), and what `voicegate memory show` reads for the
in-process provider.
  400  invalid_caller: the caller cannot be resolved     401  no or wrong API key
  403  admin_api_disabled: no server.api_key configured  404  memory_disabled: memory is off (GET only)
  503  memory_unavailable: the store is unreachable
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Query
from pydantic import BaseModel

from voicegate.internal.memory.owner import OwnerKeySecretError
from voicegate.internal.memory.runtime import FrontendMemoryRuntime, MemoryRuntimeError
from voicegate.internal.memory.subject import delete_everywhere, is_owner_key, resolve_caller
from voicegate.internal.recording.subject import RecordingOwners, erase_recordings
from voicegate.server.call_recording import recording_store
from voicegate.server.errors import ApiError
from voicegate.server.gateway import Gateway
from voicegate.server.routes_calls import KeyedRoute, api_key_guard
from voicegate.server.routes_memory import MemoryBody, memory_body, memory_runtime

ADMIN_MEMORY = KeyedRoute("DELETE /api/admin/memory/{caller}", "admin_api_disabled",
                          "erasing callers' memory over HTTP is never open")
ADMIN_MEMORY_READ = KeyedRoute("GET /api/admin/memory/{caller}", "admin_api_disabled",
                               "reading callers' memory over HTTP is never open")
BY_OWNER_KEY = "owner_key"  # the `kind` whose caller is a stored owner key, as `memory list --full` shows


class CallerMemory(MemoryBody):
    caller: str | None


class Erasure(BaseModel):
    caller: str | None  # the caller as resolved (`sip:+E164`); None when named by owner key
    removed: dict[str, int]  # per table (pgvector), file (markdown) or store, plus pending hang-up writes
    total: int
    servers_told: bool  # running servers on the shared database were told (their caches and calls drop it)
    recordings: list[str] = []  # the call recordings' audio files removed from this node's data directory


def owner_named(memory: FrontendMemoryRuntime | RecordingOwners, caller: str, kind: str | None,
                region: str) -> tuple[str, str | None]:
    """The owner key that `caller` names, and its resource id (None for an owner key); 400 if none."""
    if kind == BY_OWNER_KEY:
        if not is_owner_key(caller):
            raise ApiError(400, "invalid_caller", "an owner key is the 64 hex digits `voicegate memory list --full` "
                           "shows")
        return caller, None
    try:
        identity = resolve_caller(caller, kind, region)
    except ValueError as exc:
        raise ApiError(400, "invalid_caller", f"{exc} (or ?kind={BY_OWNER_KEY} for an owner key)") from None
    owner = memory.owner_key(identity)
    if owner is None:  # resolve_caller never returns an anonymous caller; an anonymous one has no memory
        raise ApiError(400, "invalid_caller", "an anonymous caller has no memory")
    return owner, identity.resource_id


def install_admin_routes(app: FastAPI, gateway: Gateway) -> None:
    config = gateway.config
    kind_query = Query(None, description=f"sip, jwt, trusted_header or {BY_OWNER_KEY}: what a raw `caller` is "
                       "(default: `caller` is `kind:value`)")
    region_query = Query(None, description="reads a national phone number (default: sip.default_region)")

    @app.get("/api/admin/memory/{caller:path}", tags=["admin"], response_model=CallerMemory,
             responses={400: {}, 401: {}, 403: {}, 404: {}, 503: {}},
             dependencies=[Depends(api_key_guard(config.server.api_key, ADMIN_MEMORY_READ))])
    async def get_caller_memory(caller: str, kind: str | None = kind_query,
                                region: str | None = region_query) -> dict[str, Any]:
        memory = memory_runtime(gateway)
        owner, resource_id = owner_named(memory, caller, kind, region or config.sip.default_region)
        try:
            documents = await memory.latest(owner)
        except MemoryRuntimeError as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None
        return {**memory_body(documents, config.memory.max_chars), "caller": resource_id}

    @app.delete("/api/admin/memory/{caller:path}", tags=["admin"], response_model=Erasure,
                responses={400: {}, 401: {}, 403: {}, 404: {}, 503: {}},
                dependencies=[Depends(api_key_guard(config.server.api_key, ADMIN_MEMORY))])
    async def delete_caller_memory(caller: str, kind: str | None = kind_query,
                                   region: str | None = region_query) -> Erasure:
        if gateway.memory is None:  # memory off: the caller's recordings are all there is to erase
            return await erase_recordings_only(caller, kind, region or config.sip.default_region)
        memory = memory_runtime(gateway)
        owner, resource_id = owner_named(memory, caller, kind, region or config.sip.default_region)
        try:
            erased = await delete_everywhere(memory, owner, memory.outbox_dir, source="api",
                                             recordings=recording_store(gateway.config, gateway.recordings))
        except MemoryRuntimeError as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None
        return Erasure(caller=resource_id, removed=erased.removed, total=sum(erased.removed.values()),
                       servers_told=erased.announced, recordings=erased.recordings)

    async def erase_recordings_only(caller: str, kind: str | None, region: str) -> Erasure:
        try:
            owners = RecordingOwners(config.memory.owner_key_secret, config.data_dir)
        except OwnerKeySecretError as exc:  # an emptied secret file: the operator's to restore
            raise ApiError(503, "owner_key_secret", str(exc)) from None
        owner, resource_id = owner_named(owners, caller, kind, region)
        erased = await erase_recordings(recording_store(gateway.config, gateway.recordings), owner)
        return Erasure(caller=resource_id, removed=erased.removed, total=sum(erased.removed.values()),
                       servers_told=False, recordings=erased.recordings)
