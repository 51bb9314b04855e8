"""The memory control plane: GET/PATCH /api/memory and the /api/events WebSocket.

Owner-scoped by the authenticated identity (a verified JWT, or the trusted server-side header), or by a
BYO agent's capability for the live call it answers (X-Voicegate-Call-Token: internal/memory/call_access.py),
never by a parameter: there is no way to name another caller. Writes go through FrontendMemoryRuntime, so they are
the same exact edits the memory tool makes, with the same revisions, filtering, audit and notifications.
Each PATCH is a `memory.write` span whose trace id the change carries (audit log, provider context).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import Any, Literal

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field

from voicegate.internal.identity.http_identity import AuthError, HttpIdentityResolver
from voicegate.internal.memory.call_access import CALL_TOKEN_HEADER, CallGrant
from voicegate.internal.memory.documents import project_for_model
from voicegate.internal.memory.events import MemoryChangedEvent
from voicegate.internal.memory.provider import ChangeContext, MemoryDocument, Scope
from voicegate.internal.memory.runtime import FrontendMemoryRuntime, MemoryRuntimeError
from voicegate.internal.signaling.ratelimit import client_address
from voicegate.internal.telemetry.otel import current_trace_id
from voicegate.internal.token_bucket import TokenBucketLimiter
from voicegate.server.errors import ApiError
from voicegate.server.gateway import Gateway

log = logging.getLogger(__name__)


class DocumentBody(BaseModel):
    content: str
    format: Literal["markdown", "text"]
    revision: int
    truncated: bool


class MemoryLimits(BaseModel):
    max_chars: int


class MemoryBody(BaseModel):
    documents: dict[Scope, DocumentBody]
    limits: MemoryLimits


class PatchResult(MemoryBody):
    changed: bool


class MemoryPatch(BaseModel):
    """One exact edit, like the memory tool's, against the revision the client last saw."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    document: Scope
    action: Literal["append", "replace"]
    content: str = Field("", max_length=20_000)
    old_text: str = Field("", max_length=20_000)
    new_text: str = Field("", max_length=20_000)
    expected_revision: int | None = Field(None, alias="expectedRevision", ge=0)


def document_body(document: MemoryDocument, max_chars: int) -> DocumentBody:
    content, truncated = document.content, False
    if len(content) > max_chars:  # only when max_chars was lowered after the document was written
        content, truncated = project_for_model(content, document.format, max_chars)
    return DocumentBody(content=content, format=document.format, revision=document.revision, truncated=truncated)


def memory_body(documents: dict[Scope, MemoryDocument], max_chars: int) -> dict[str, Any]:
    return {"documents": {scope: document_body(doc, max_chars).model_dump() for scope, doc in documents.items()},
            "limits": {"max_chars": max_chars}}


def memory_runtime(gateway: Gateway) -> FrontendMemoryRuntime:
    """The server's memory, or the 404 every memory route answers when memory is off."""
    if gateway.memory is None:
        raise ApiError(404, "memory_disabled", "memory is not enabled on this server ([memory] enabled)")
    return gateway.memory


def install_memory_routes(app: FastAPI, gateway: Gateway) -> None:
    config = gateway.config
    limiter = TokenBucketLimiter(config.server.patch_rate_per_min)

    def resolver() -> HttpIdentityResolver:
        existing = getattr(app.state, "http_identity", None)
        if existing is None:
            existing = app.state.http_identity = HttpIdentityResolver(config.server)
        return existing  # type: ignore[no-any-return]

    def runtime() -> FrontendMemoryRuntime:
        return memory_runtime(gateway)

    def call_grant(request: Request) -> CallGrant | None:
        """A BYO agent's capability for its live call's caller (X-Voicegate-Call-Token), when it sent one;
        an unknown token, or one whose call has ended, is refused (never taken for no token)."""
        token = request.headers.get(CALL_TOKEN_HEADER)
        if token is None:
            return None
        access = gateway.session_memory.access if gateway.session_memory is not None else None
        grant = access.grant(token) if access is not None else None
        if grant is None:
            raise ApiError(401, "unauthorized", "this call token is not valid here: its call has ended, or it is "
                           "not hosted by this node")
        return grant

    async def owner_of(request: Request | _WithQueryToken) -> str:
        memory = runtime()
        if isinstance(request, Request) and (grant := call_grant(request)) is not None:
            return grant.owner
        try:
            identity = await resolver().resolve(request)  # type: ignore[arg-type]
        except AuthError as exc:
            raise ApiError(401, "unauthorized", str(exc), {"WWW-Authenticate": "Bearer"}) from None
        owner = memory.owner_key(identity)
        if owner is None:
            raise ApiError(401, "unauthorized", "memory belongs to a verified caller; present a valid Bearer token",
                           {"WWW-Authenticate": "Bearer"})
        return owner

    @app.get("/api/memory", tags=["memory"], response_model=MemoryBody,
             responses={401: {"description": "no verified identity"}, 404: {"description": "memory is off"},
                        503: {"description": "memory store unreachable"}})
    async def get_memory(request: Request) -> dict[str, Any]:
        owner = await owner_of(request)
        try:
            documents = await runtime().latest(owner)
        except MemoryRuntimeError as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None
        return memory_body(documents, config.memory.max_chars)

    @app.patch("/api/memory", tags=["memory"], response_model=PatchResult,
               responses={401: {"description": "no verified identity"}, 409: {"description": "stale revision"},
                          422: {"description": "edit not found, ambiguous, too long or refused"},
                          429: {"description": "rate limited"}})
    async def patch_memory(request: Request, edit: MemoryPatch) -> dict[str, Any]:
        decision = limiter.take(client_address(request, config.server.trusted_proxies))
        if not decision.allowed:
            raise ApiError(429, "rate_limited", "too many memory edits; try again shortly",
                           {"Retry-After": str(decision.retry_after_s)})
        owner = await owner_of(request)
        grant = call_grant(request)  # a call's own edit: its session, and its erasure epoch
        context = ChangeContext("api", grant.session_id if grant else None, trace_id=current_trace_id(),
                                erasure_epoch=grant.epoch if grant else None)
        try:
            # record_exception off: an edit's error may quote the caller's text, and spans leave the node
            with gateway.telemetry.tracer.start_as_current_span(
                    "memory.write", record_exception=False,
                    attributes={"voicegate.memory.source": "api", "voicegate.memory.document": edit.document}):
                outcome = await runtime().edit(owner, edit.document, edit.action, content=edit.content,
                                               old_text=edit.old_text, new_text=edit.new_text,
                                               expected_revision=edit.expected_revision,
                                               context=replace(context, trace_id=current_trace_id()))
        except MemoryRuntimeError as exc:
            extra = memory_body(exc.documents, config.memory.max_chars) if exc.documents else {}
            raise ApiError(exc.status, exc.code, exc.message, extra=extra) from None
        return {**memory_body(outcome.documents, config.memory.max_chars), "changed": outcome.changed}

    @app.websocket("/api/events")
    async def events(socket: WebSocket) -> None:
        """`memory.changed` for the authenticated owner only; browsers pass the JWT as `?token=`."""
        try:
            owner = await owner_of(_WithQueryToken(socket))  # type: ignore[arg-type]
        except ApiError as exc:
            await socket.close(code=4401 if exc.status == 401 else 4404, reason=exc.message[:120])
            return
        await socket.accept()
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=32)

        def changed() -> None:
            with contextlib.suppress(asyncio.QueueFull):  # a slow client misses duplicates, never blocks us
                queue.put_nowait(MemoryChangedEvent().model_dump_json())

        unsubscribe = runtime().subscribe(owner, changed)
        receiver = asyncio.create_task(drain_incoming(socket))
        try:
            while not receiver.done():
                getter = asyncio.create_task(queue.get())
                done, _ = await asyncio.wait({getter, receiver}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    await socket.send_text(getter.result())
                else:
                    getter.cancel()
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            unsubscribe()
            receiver.cancel()
            with contextlib.suppress(Exception):
                await socket.close()


class _WithQueryToken:
    """A WebSocket's identity view: browsers cannot set headers on a WebSocket, so a JWT may come as
    `?token=`. It is verified like any bearer token; nothing else about the query is believed."""

    def __init__(self, socket: WebSocket) -> None:
        self.client = socket.client
        headers = {k.lower(): v for k, v in socket.headers.items()}
        token = socket.query_params.get("token")
        if token and "authorization" not in headers:
            headers["authorization"] = f"Bearer {token}"
        self.headers = headers


async def drain_incoming(socket: WebSocket) -> None:
    """Read (and ignore) what the client sends, so a disconnect is noticed promptly."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        while True:
            message = await socket.receive_text()
            if message == '{"type":"ping"}':
                await socket.send_text('{"type":"pong"}')
