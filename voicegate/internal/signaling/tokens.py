"""Minting caller tokens: `POST /token` for the deployer's backend, `/dev/token` for a developer.

`POST /token` signs `{"resource_id": ...}` into a short-lived HS256 JWT. The backend that calls it
knows which of its users is signed in and holds `server.api_key`; the browser only ever carries the
result, so it cannot choose whose memory it reaches. Without an api_key the endpoint is closed (403):
an open one would let anyone who can reach it mint any name, and so read anyone's memory.

`/dev/token` lets a person at the server's own keyboard try memory as "alice" and "bob" without a
backend: only when `server.dev_login` is on, and only from loopback, and never through a proxy (a
proxy on the same machine would make every visitor look local).
"""

from __future__ import annotations

import hmac
import json
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse

from voicegate.internal.config.sections import ServerConfig
from voicegate.internal.identity.http_identity import bearer_token, is_loopback
from voicegate.internal.identity.jwt import TokenConfigError, mint_token, subject_problem
from voicegate.internal.signaling.problems import SignalingError, bad_request, not_found

log = logging.getLogger(__name__)

PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
NO_STORE = {"Cache-Control": "no-store"}
MINTING_DISABLED = ("POST /token is off because server.api_key is not set: set server.api_key and send it "
                    "from your backend as X-API-Key or Authorization: Bearer (for local development, "
                    "server.dev_login = true enables /dev/token from loopback)")


def api_key_presented(request: Request, api_key: str) -> bool:
    presented = request.headers.get("x-api-key") or bearer_token(request.headers) or ""
    return hmac.compare_digest(presented.encode(), api_key.encode())


def from_local_user(request: Request) -> bool:
    host = request.client.host if request.client is not None else None
    return is_loopback(host) and not any(name in request.headers for name in PROXY_HEADERS)


class TokenEndpoint:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        if config.jwt_secret and not config.api_key:
            log.info("POST /token is closed (403): server.api_key is not set")
        if config.dev_login:
            log.warning("server.dev_login is on: local users can sign in as anyone (development only)")

    async def mint(self, request: Request) -> JSONResponse:
        if self.config.jwt_secret and not self.config.api_key:
            raise SignalingError(403, "token_minting_disabled", MINTING_DISABLED)
        if self.config.api_key and not api_key_presented(request, self.config.api_key):
            raise SignalingError(401, "unauthorized", "POST /token requires the server's API key "
                                 "(X-API-Key or Authorization: Bearer)", {"WWW-Authenticate": "Bearer"})
        return await self._mint_for(request)

    def dev_status(self, request: Request) -> JSONResponse:
        if not (self.config.dev_login and from_local_user(request)):
            raise not_found("dev login is off")
        return JSONResponse({"dev_login": True, "can_mint": bool(self.config.jwt_secret)}, headers=NO_STORE)

    async def dev_mint(self, request: Request) -> JSONResponse:
        if not (self.config.dev_login and from_local_user(request)):
            raise not_found("dev login is off")
        return await self._mint_for(request)

    async def _mint_for(self, request: Request) -> JSONResponse:
        if not self.config.jwt_secret:
            raise SignalingError(503, "cannot_mint", "this server cannot mint tokens: server.jwt_secret is not set")
        resource_id = await self._resource_id(request)
        ttl = self.config.token_ttl_s
        try:
            token = mint_token(self.config.jwt_secret, resource_id, issuer=self.config.jwt_issuer,
                               audience=self.config.jwt_audience, ttl_s=ttl)
        except TokenConfigError as exc:
            raise SignalingError(503, "cannot_mint", str(exc)) from exc
        return JSONResponse({"token": token, "expires_in": ttl}, headers=NO_STORE)

    @staticmethod
    async def _resource_id(request: Request) -> str:
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError as exc:
            raise bad_request('the body must be JSON: {"resource_id": "..."}') from exc
        if not isinstance(body, dict) or "resource_id" not in body:
            raise bad_request('the body must be JSON: {"resource_id": "..."}')
        value = body["resource_id"]
        problem = subject_problem(value)
        if problem:
            raise bad_request(f"resource_id {problem}")
        assert isinstance(value, str)
        return value
