"""HTTP wiring of the WebRTC transport: WHIP, token minting, the page's static files, CORS, body limits.

Everything here is composition: the behaviour lives in internal/signaling and internal/peer.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from voicegate.internal.identity.http_identity import HttpIdentityResolver
from voicegate.internal.peer import PeerRegistry, configure_ice_hosts
from voicegate.internal.peer.datagrams import drain_datagram_reads
from voicegate.internal.signaling import SignalingError, TokenEndpoint
from voicegate.internal.web import STATIC_DIR
from voicegate.internal.webrtc.whip import RESUME_STATUS_HEADER, RESUME_TOKEN_HEADER, WhipEndpoint
from voicegate.server.errors import ApiError, error_body
from voicegate.server.gateway import Gateway

# Headers a page on another origin (server.cors_origins) may send and read. The identity headers
# X-Voicegate-Resource-Id and X-Voicegate-Proxy-Secret are deliberately absent: browsers must not be
# able to send them at all.
CORS_ALLOWED_HEADERS = ["Authorization", "Content-Type", "If-Match"]
CORS_EXPOSED_HEADERS = ["Location", "ETag", "Accept-Post", "Allow", "Retry-After",
                        RESUME_TOKEN_HEADER, RESUME_STATUS_HEADER]


def install_webrtc_routes(app: FastAPI, gateway: Gateway) -> None:
    config = gateway.config
    # Process-wide (aioice has no per-connection setting); see internal/peer/ice.py.
    configure_ice_hosts(config.webrtc.ice_hosts)
    drain_datagram_reads()  # every waiting packet per wake: media must not queue in the kernel (datagrams.py)
    identities = HttpIdentityResolver(config.server)
    app.state.http_identity = identities  # shared with other routes that resolve callers (/api/*)
    peers = PeerRegistry()
    # Sessions close their own connections at shutdown; this catches any still negotiating.
    gateway.push_stop(peers.close_all)
    tokens = TokenEndpoint(config.server)

    @app.exception_handler(SignalingError)
    async def _signaling_error(request: Request, exc: SignalingError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), exc.status, headers=exc.headers)

    @app.post("/token", tags=["auth"])
    async def mint_token(request: Request) -> JSONResponse:
        return await tokens.mint(request)

    @app.get("/dev/token", tags=["auth"])
    async def dev_login_status(request: Request) -> JSONResponse:
        return tokens.dev_status(request)

    @app.post("/dev/token", tags=["auth"])
    async def dev_login(request: Request) -> JSONResponse:
        return await tokens.dev_mint(request)

    if config.webrtc.enabled:
        whip = WhipEndpoint(gateway, identities, peers)

        @app.post("/whip", tags=["whip"], status_code=201)
        async def whip_post(request: Request) -> Response:
            if gateway.draining:  # server/drain.py: this node takes no new session; another one will
                gateway.count_refusal("webrtc", "draining", "this node is draining",
                                      int(config.server.drain_timeout_s))
                raise ApiError(503, "draining", "this node is draining and takes no new sessions",
                               {"Retry-After": str(int(config.server.drain_timeout_s))})
            return await whip.post(request)

        @app.options("/whip", tags=["whip"], status_code=204)
        async def whip_options() -> Response:
            return whip.options()

        @app.options("/whip/{resource}", tags=["whip"], status_code=204)
        async def whip_session_options(resource: str) -> Response:
            return whip.options(resource)

        @app.patch("/whip/{resource}", tags=["whip"])
        async def whip_patch(request: Request, resource: str) -> Response:
            return await whip.patch(request, resource)

        @app.delete("/whip/{resource}", tags=["whip"])
        async def whip_delete(request: Request, resource: str) -> Response:
            return await whip.delete(request, resource)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(BodySizeLimit, max_bytes=config.server.max_body_bytes)
    if config.server.cors_origins:  # added last, so it wraps everything (even a 413 carries CORS headers)
        app.add_middleware(CORSMiddleware, allow_origins=config.server.cors_origins,
                           allow_methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
                           allow_headers=CORS_ALLOWED_HEADERS, expose_headers=CORS_EXPOSED_HEADERS,
                           max_age=600)


# A body announced as too large is read and discarded up to this much before answering, so an
# ordinary client sees the 413 instead of a reset connection; past it the connection is dropped.
DISCARD_LIMIT_BYTES = 16 * 1024 * 1024


class BodySizeLimit:
    """413 for request bodies over `server.max_body_bytes`, announced (Content-Length) or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> ApiError:
        return ApiError(413, "body_too_large", f"request body is larger than {self.max_bytes} bytes")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._discard(receive, int(declared))
            error = self._too_large()
            await JSONResponse(error_body(error.code, error.message), 413, headers={"Connection": "close"})(
                scope, receive, send)
            return
        if declared is not None and declared.isdigit():
            # Announced within the limit; a client that sends more than it announced is cut off.
            received = 0

            async def limited() -> Message:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > self.max_bytes:
                        raise self._too_large()
                return message

            await self.app(scope, limited, send)
            return
        # Streamed without a length (chunked): read it here, up to the limit, so an oversized body gets the
        # same 413 whatever route it was sent to (a route's JSON parser would turn a limit raised inside
        # its read into a 400), then hand the app what was read.
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                while message.get("more_body", False) and size <= DISCARD_LIMIT_BYTES:  # then the 413 is read
                    message = await receive()
                    size += len(message.get("body", b""))
                error = self._too_large()
                await JSONResponse(error_body(error.code, error.message), 413, headers={"Connection": "close"})(
                    scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        pending = iter(messages)

        async def replay() -> Message:
            return next(pending, None) or await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _discard(receive: Receive, declared: int) -> None:
        if declared > DISCARD_LIMIT_BYTES:
            return
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
