"""POST /calls: the deployer's backend asks voicegate to phone someone.

    POST /calls  {"to": "sip:+15551234567@trunk.example.com", "greeting": "Hi, it's your pharmacy."}
    X-API-Key: <server.api_key>            (or Authorization: Bearer <server.api_key>)
    -> 201 {"session_id": "...", "call_id": "..."}   once the callee answers

With answering-machine detection (`[amd] enabled`, or `"amd": true` in the request) the answer comes once
the detection has decided, a few seconds after the callee picked up, and says what it decided:
    -> 201 {..., "amd": {"result": "machine", "reason": "beep", "decision_ms": 2140, "greeting_ms": 1880,
                         "outcome": "leave_message"}}

With a `goal` ("reach billing"), the agent first walks the callee's phone menu toward it (docs/sip.md,
"Phone menus"): the answer comes once answered with `"menu": {"result": "pending", ...}`, or, with
`"wait_for_menu": true`, once the walk has ended (a person reached, or a dead end and its reason):
    -> 201 {..., "menu": {"goal": "reach billing", "result": "reached", "reason": "...", "path": ["1 billing"]}}

An outbound call spends money and speaks in the deployer's name, so this route is never open: with no
`server.api_key` configured it answers 403 rather than falling back to "anyone may call". The request
returns when the call is answered or has failed, at most `sip.outbound.timeout_s` later:
  401  no or wrong API key          403  no server.api_key configured
  422  `to` is not a sip: URI       404  SIP is off    503  full, or admission control refuses (Retry-After)
  502  the callee (or a proxy) refused: `error.sip_status` / `error.sip_reason` say how
  504  nobody answered within sip.outbound.timeout_s (the INVITE was CANCELled)
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import HTTPConnection

from voicegate.internal.session import Session, SessionLimitReached
from voicegate.internal.sip.handler import CallFailed
from voicegate.internal.sip.voice import AT_CAPACITY
from voicegate.internal.sip.voice.call import SIP_CALL_ID
from voicegate.internal.telephony.answering_machine import AMD, AmdRun, plan_from_config
from voicegate.internal.telephony.menu_model import menu_completion
from voicegate.internal.telephony.navigation import MENU, MenuRun, menu_plan
from voicegate.server.errors import ApiError, error_body
from voicegate.server.gateway import Gateway

RETRY_AFTER_S = "5"
AMD_SLACK_S = 2.0  # beyond amd.max_decision_ms: the decision is made by then whatever the callee does
AMD_POLL_S = 0.25  # how often a POST /calls waiting for the decision checks the call has not ended
# CallFailed carries SIP statuses; these two are ours, not the callee's (see internal/sip/uac.py).
OUR_TIMEOUT = (408, "timeout")
NO_ROUTE_PREFIX = "no route"


class CallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to: str = Field(min_length=5, max_length=512, description="sip:user@host[:port][;transport=tcp]")
    greeting: str | None = Field(default=None, max_length=2000,
                                 description="said when answered (default: pipeline.greeting_outgoing)")
    amd: bool | None = Field(default=None, description="answering-machine detection (default: amd.enabled)")
    voicemail_message: str | None = Field(default=None, max_length=2000,
                                          description="left on a machine (default: amd.voicemail_message)")
    goal: str | None = Field(default=None, min_length=2, max_length=500,
                             description="walk the callee's phone menu toward this first (\"reach billing\")")
    wait_for_menu: bool = Field(default=False, description="with a goal: answer once the menu walk has ended")


class CallPlaced(BaseModel):
    session_id: str
    call_id: str  # the SIP Call-ID, to find the call in logs and on the trunk
    amd: dict[str, Any] | None = None  # the detection's decision (AmdRun.describe), when it ran
    menu: dict[str, Any] | None = None  # the phone menu walk (MenuRun.describe), with a goal


def presented_key(request: HTTPConnection) -> str:
    key = request.headers.get("x-api-key")
    if key:
        return key
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def holds_api_key(request: HTTPConnection, api_key: str) -> bool:
    """Does this request carry the server's API key? (For what an open route says to the operator only.)"""
    return bool(api_key) and hmac.compare_digest(presented_key(request).encode(), api_key.encode())


@dataclass(frozen=True, slots=True)
class KeyedRoute:
    """How a route that only the API key's holder may use names itself when it refuses a request."""

    name: str  # "POST /calls"
    closed_code: str  # the 403's code when no server.api_key is configured
    closed_why: str  # why the route is then closed rather than open to anyone


OUTBOUND_CALLS = KeyedRoute("POST /calls", "outbound_calls_disabled", "outbound calling is never open")


def api_key_guard(api_key: str, route: KeyedRoute = OUTBOUND_CALLS) -> Callable[[Request], None]:
    """A route dependency: the key is checked before the body is read or validated, so a client without
    it learns 401/403 and nothing about what a valid body looks like."""

    def guard(request: Request) -> None:
        require_api_key(request, api_key, route)

    return guard


def require_api_key(request: HTTPConnection, api_key: str, route: KeyedRoute = OUTBOUND_CALLS) -> None:
    if not api_key:
        raise ApiError(403, route.closed_code,
                       f"{route.name} needs server.api_key to be configured: {route.closed_why}")
    if not hmac.compare_digest(presented_key(request).encode(), api_key.encode()):
        raise ApiError(401, "unauthorized", f"{route.name} requires the server's API key "
                       "(X-API-Key or Authorization: Bearer)", {"WWW-Authenticate": "Bearer"})


async def amd_decision(session: Session, timeout_s: float) -> AmdRun:
    """The call's detection once decided (or when the call ended first, or at `timeout_s`: "pending")."""
    run = session.slots.setdefault(AMD, AmdRun())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not run.decided.is_set() and not session.ended and loop.time() < deadline:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.decided.wait(), AMD_POLL_S)
    return run


async def menu_outcome(session: Session, run: MenuRun, timeout_s: float) -> None:
    """Wait for the walk to end (or the call, or `timeout_s`: still "pending")."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not run.done.is_set() and not session.ended and loop.time() < deadline:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.done.wait(), AMD_POLL_S)


def call_failed_response(failure: CallFailed) -> JSONResponse:
    """Our own failures keep their HTTP meaning; anything the far end said is a 502 carrying its status."""
    if (failure.status, failure.reason) == OUR_TIMEOUT:
        status, code, message = 504, "no_answer", "nobody answered within sip.outbound.timeout_s"
    elif failure.status == 503 and failure.reason == AT_CAPACITY:
        return at_capacity()
    elif failure.reason.startswith(NO_ROUTE_PREFIX):
        status, code, message = 502, "no_route", f"cannot reach the callee: {failure.reason}"
    else:
        status, code = 502, "call_failed"
        message = f"the call was refused: SIP {failure.status} {failure.reason}"
    body: dict[str, Any] = error_body(code, message)
    body["error"].update(sip_status=failure.status, sip_reason=failure.reason)
    return JSONResponse(body, status)


def at_capacity(refusal: SessionLimitReached | None = None) -> JSONResponse:
    """503 + Retry-After; the body's `reason` is the refusal's (capacity, queue, loop_lag, max_sessions,
    draining: docs/protocol.md), its message the words the node logged."""
    message = ("every session slot is taken (server.max_sessions), or admission control refuses new calls "
               "(docs/scaling.md)")
    body = error_body("at_capacity", f"{message}: {refusal.detail}" if refusal is not None else message)
    if refusal is not None:
        body["error"]["reason"] = refusal.reason
    retry = str(refusal.retry_after_s) if refusal is not None else RETRY_AFTER_S
    return JSONResponse(body, 503, headers={"Retry-After": retry})


def install_call_routes(app: FastAPI, gateway: Gateway) -> None:
    api_key = gateway.config.server.api_key

    @app.post("/calls", tags=["calls"], status_code=201, response_model=CallPlaced,
              responses={401: {}, 403: {}, 404: {}, 422: {}, 502: {}, 503: {}, 504: {}},
              dependencies=[Depends(api_key_guard(api_key))])
    async def place_call(request: Request, call: CallRequest) -> Any:
        handler = gateway.sip_calls
        if handler is None:
            raise ApiError(404, "sip_disabled", "SIP is off on this server ([sip] enabled = false)")
        refusal = gateway.sessions.refusal("sip") if gateway.sessions is not None else None
        if refusal is not None:
            gateway.count_refusal("sip", refusal.reason, refusal.detail, refusal.retry_after_s)
            return at_capacity(refusal)
        amd_config = gateway.config.amd
        plan = (plan_from_config(amd_config, voicemail_message=call.voicemail_message)
                if (call.amd if call.amd is not None else amd_config.enabled) else None)
        try:
            # The first goal loads the embedding (a second): off the event loop.
            menu = (await asyncio.to_thread(menu_plan, gateway.config.menus, call.goal,
                                             model=menu_completion(gateway.config)) if call.goal else None)
            session = await handler.place_call(call.to, greeting=call.greeting, amd=plan, menu=menu)
        except ValueError as exc:
            raise ApiError(422, "invalid_target", str(exc)) from None
        except CallFailed as failure:
            return call_failed_response(failure)
        placed = CallPlaced(session_id=session.id, call_id=str(session.slots.get(SIP_CALL_ID, "")))
        if plan is not None:
            placed.amd = (await amd_decision(session, plan.settings.max_decision_ms / 1000 + AMD_SLACK_S)).describe()
        run = session.slots.get(MENU)
        if menu is not None and run is not None:
            if call.wait_for_menu:
                await menu_outcome(session, run, menu.max_s + AMD_SLACK_S)
            placed.menu = run.describe()
        return JSONResponse(placed.model_dump(exclude_none=True), 201)
