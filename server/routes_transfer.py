"""POST /calls/{id}/transfer: move a live SIP call to a target from `sip.transfer_targets` (REFER).

    POST /calls/{id}/transfer  {"target": "sales"}        X-API-Key: <server.api_key>
    -> 202 {"session_id": "...", "call_id": "...", "target": "sales", "status": "accepted"}

`{id}` is the session id or the SIP Call-ID (both are in POST /calls' answer and in the logs). The
answer comes once the caller's phone has accepted the REFER, not when the transfer is over: that can
take as long as the target rings (up to sip.transfer_timeout_s). Then a successful transfer ends the
call (end reason "transferred"); a failed one is announced to the caller, and the call carries on.
  401/403  the API key, as for POST /calls      403  target_not_allowed / transfer_disabled
  404  no such live call (or SIP is off)         409  not_transferable: not a SIP call, not answered yet,
  502  transfer_refused: the phone refused the REFER (`error.sip_status`), the caller is told so
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from internal.session import Session
from internal.sip.voice_call import SIP_CALL_ID
from internal.sip.voice_transfer import NotTransferable, TargetNotAllowed, TransferRefused
from server.errors import ApiError, error_body
from server.gateway import Gateway
from server.routes_calls import api_key_guard


class TransferRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = Field(min_length=1, max_length=512, description="a name or URI from sip.transfer_targets")


class TransferAccepted(BaseModel):
    session_id: str
    call_id: str
    target: str  # the allow-list name
    status: str = "accepted"


def find_call(gateway: Gateway, call: str) -> Session:
    sessions = gateway.sessions
    if sessions is not None:
        session = sessions.get(call)
        if session is None:
            session = next((s for s in sessions.sessions() if s.data.get(SIP_CALL_ID) == call), None)
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
        try:
            state = await transfers.start(session, body.target)
        except TargetNotAllowed as exc:
            raise ApiError(403, exc.code, exc.message) from None
        except NotTransferable as exc:
            raise ApiError(409, exc.code, exc.message) from None
        except TransferRefused as exc:
            payload = error_body(exc.code, exc.message)
            payload["error"].update(sip_status=exc.status, sip_reason=exc.reason)
            return JSONResponse(payload, 502)
        accepted = TransferAccepted(session_id=session.id, call_id=str(session.data.get(SIP_CALL_ID, "")),
                                    target=state.target)
        return JSONResponse(accepted.model_dump(), 202)
