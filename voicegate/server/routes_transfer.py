"""Acting on a live SIP call: transfer it (POST /calls/{id}/transfer), press keys on it (POST /calls/{id}/dtmf).

    POST /calls/{id}/transfer  {"target": "sales"}        X-API-Key: <server.api_key>
    -> 202 {"session_id": "...", "call_id": "...", "target": "sales", "mode": "cold", "status": "accepted"}

`"mode": "warm"` (or `warm_transfer.default_mode = "warm"`) transfers warm instead: the caller is put on
hold, voicegate calls the target, briefs them and bridges the two (internal/sip/voice/warm_transfer.py);
the 202 comes at once with `"status": "holding"`, and the call's events follow the transfer.

`{id}` is the session id or the SIP Call-ID (both are in POST /calls' answer and in the logs). The
answer comes once the caller's phone has accepted the REFER, not when the transfer is over: that can
take as long as the target rings (up to sip.transfer_timeout_s). Then a successful transfer ends the
call (end reason "transferred"); a failed one is announced to the caller, and the call carries on.
  401/403  the API key, as for POST /calls      403  target_not_allowed / transfer_disabled
  404  no such live call (or SIP is off)         409  not_transferable: not a SIP call, not answered yet,
  502  transfer_refused: the phone refused the REFER (`error.sip_status`), the caller is told so

    POST /calls/{id}/dtmf  {"digits": "1#"}               X-API-Key: <server.api_key>
    -> 200 {"session_id": "...", "call_id": "...", "digits": "1#", "method": "rfc4733"}
once the key presses have gone out: RFC 4733 events when the call negotiated telephone-event, else one
SIP INFO per key ("method": "info"). 422 invalid_digits, 404 call_not_found, 409 not_established, 502
dtmf_failed (the peer refused the INFO; `error.sip_status`).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from voicegate.internal.session import Session
from voicegate.internal.sip.voice.call import SIP_CALL_ID
from voicegate.internal.sip.voice.dtmf import DtmfError, InvalidDigits, KeysRefused, NotSendable, check_digits
from voicegate.internal.sip.voice.transfer import (
    NotTransferable,
    TargetNotAllowed,
    TransferError,
    TransferRefused,
    start_transfer,
)
from voicegate.server.errors import ApiError, error_body
from voicegate.server.gateway import Gateway
from voicegate.server.routes_calls import api_key_guard


class TransferRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = Field(min_length=1, max_length=512, description="a name or URI from sip.transfer_targets")
    mode: Literal["cold", "warm"] | None = Field(default=None, description="default: warm_transfer.default_mode")


class TransferAccepted(BaseModel):
    session_id: str
    call_id: str
    target: str  # the allow-list name
    mode: str = "cold"
    status: str = "accepted"  # cold: the phone accepted the REFER; warm: "holding" (the transfer has begun)


class DtmfRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    digits: str = Field(min_length=1, max_length=64, description="keys to press: 0-9, *, #, A-D")


class DtmfSent(BaseModel):
    session_id: str
    call_id: str
    digits: str
    method: str  # rfc4733 or info


def find_call(gateway: Gateway, call: str) -> Session:
    sessions = gateway.sessions
    if sessions is not None:
        session = sessions.get(call)
        if session is None:
            session = next((s for s in sessions.sessions() if s.slots.get(SIP_CALL_ID) == call), None)
        if session is not None and not session.ended:
            return session
    raise ApiError(404, "call_not_found", "no live call with that session id or SIP Call-ID")


def install_transfer_routes(app: FastAPI, gateway: Gateway) -> None:
    api_key = gateway.config.server.api_key

    @app.post("/calls/{call}/transfer", tags=["calls"], status_code=202, response_model=TransferAccepted,
              responses={401: {}, 403: {}, 404: {}, 409: {}, 422: {}, 502: {}},
              dependencies=[Depends(api_key_guard(api_key))])
    async def transfer_call(request: Request, call: str, body: TransferRequest) -> Any:
        session = find_call(gateway, call)
        transfers = gateway.sip_transfers
        if transfers is None:
            raise ApiError(403, "transfer_disabled", "transfers are off: sip.transfer_targets is empty")
        mode = body.mode or gateway.config.warm_transfer.default_mode
        try:
            state = await start_transfer(transfers, gateway.sip_warm_transfers, session, body.target, mode)
        except TargetNotAllowed as exc:
            raise ApiError(403, exc.code, exc.message) from None
        except NotTransferable as exc:
            raise ApiError(409, exc.code, exc.message) from None
        except TransferRefused as exc:
            payload = error_body(exc.code, exc.message)
            payload["error"].update(sip_status=exc.status, sip_reason=exc.reason)
            return JSONResponse(payload, 502)
        except TransferError as exc:
            raise ApiError(409, exc.code, exc.message) from None
        accepted = TransferAccepted(session_id=session.id, call_id=str(session.slots.get(SIP_CALL_ID, "")),
                                    target=state.target, mode=state.mode, status=state.phase)
        return JSONResponse(accepted.model_dump(), 202)

    @app.post("/calls/{call}/dtmf", tags=["calls"], response_model=DtmfSent,
              responses={401: {}, 403: {}, 404: {}, 409: {}, 422: {}, 502: {}},
              dependencies=[Depends(api_key_guard(api_key))])
    async def send_dtmf(request: Request, call: str, body: DtmfRequest) -> Any:
        session = find_call(gateway, call)
        keypad = gateway.sip_keypad
        if keypad is None:
            raise ApiError(404, "sip_disabled", "SIP is off on this server ([sip] enabled = false)")
        try:
            digits = check_digits(body.digits)
            method = await keypad.send(session, digits, source="api")
        except InvalidDigits as exc:
            raise ApiError(422, exc.code, exc.message) from None
        except KeysRefused as exc:  # the per-call cap on a call we placed (internal/telephony/key_policy.py)
            raise ApiError(403, exc.code, exc.message) from None
        except NotSendable as exc:
            raise ApiError(409, exc.code, exc.message) from None
        except DtmfError as exc:
            payload = error_body(exc.code, exc.message)
            payload["error"].update(sip_status=exc.status)
            return JSONResponse(payload, 502)
        sent = DtmfSent(session_id=session.id, call_id=str(session.slots.get(SIP_CALL_ID, "")), digits=digits,
                        method=method)
        return JSONResponse(sent.model_dump(), 200)
