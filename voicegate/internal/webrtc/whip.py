"""WHIP signalling (RFC 9725) for browser calls, with StreamCore's session resume.

    POST    /whip                 SDP offer in; 201 + SDP answer, Location, ETag, X-Resume-Token/Status
    POST    /whip?resume=TOKEN    the same, reattached to the token's live session when it may be
    DELETE  /whip/{session}       end the call
    PATCH   /whip/{session}       405: neither trickle ICE nor ICE restart is supported (see `patch`)
    OPTIONS /whip[/{session}]     204 with Accept-Post / Allow

Every refusal is a SignalingError (JSON body). Order of checks for POST: rate limit (cheapest, and it
also throttles token guessing), authentication, media type, the offer itself, then session capacity.
"""

from __future__ import annotations

import logging
from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response

from voicegate.internal.config import Config
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.identity.http_identity import AuthError, HttpIdentityResolver
from voicegate.internal.peer import OfferError, PeerConnection, PeerRegistry, rtc_configuration
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.session import Session, SessionLimitReached, SessionManager, TransportKind
from voicegate.internal.signaling.problems import (
    SignalingError,
    at_capacity,
    bad_request,
    not_found,
    rate_limited,
    unauthorized,
)
from voicegate.internal.signaling.ratelimit import client_address
from voicegate.internal.token_bucket import TokenBucketLimiter
from voicegate.internal.webrtc.call import WebRtcCall, attached_call
from voicegate.internal.webrtc.resume import ResumeOutcome, ResumeTokens, same_caller

log = logging.getLogger(__name__)

SDP_TYPE = "application/sdp"
ICE_FRAGMENT_TYPE = "application/trickle-ice-sdpfrag"
RESUME_TOKEN_HEADER = "X-Resume-Token"
RESUME_STATUS_HEADER = "X-Resume-Status"
SESSION_METHODS = "DELETE, OPTIONS"  # what a session URL supports (the Allow header)
RESUME_INSTEAD = "resume with POST /whip?resume=TOKEN instead"


class GatewayLike(Protocol):
    """What signalling needs from the server's components (server.gateway.Gateway fits)."""

    config: Config
    sessions: SessionManager | None

    def new_pipeline(self, session: Session, sample_rate: int, sink: EventSink,
                     greeting: str | None = None) -> VoicePipeline: ...

    async def open_session(self, identity: CallerIdentity, transport: TransportKind) -> Session: ...


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


class WhipEndpoint:
    def __init__(self, gateway: GatewayLike, identities: HttpIdentityResolver, peers: PeerRegistry) -> None:
        self.gateway = gateway
        self.identities = identities
        self.peers = peers
        server = gateway.config.server
        self.post_limiter = TokenBucketLimiter(server.whip_rate_per_min)
        self.patch_limiter = TokenBucketLimiter(server.patch_rate_per_min)
        self.trusted_proxies = server.trusted_proxies
        self.rtc_config = rtc_configuration(gateway.config.webrtc.ice_servers)
        self.sample_rate = gateway.config.pipeline.sample_rate
        self.tokens = ResumeTokens(lambda session_id: self.sessions.get(session_id))

    @property
    def sessions(self) -> SessionManager:
        sessions = self.gateway.sessions
        if sessions is None:
            raise SignalingError(503, "starting", "the server is still starting", {"Retry-After": "1"})
        return sessions

    async def _caller(self, request: Request) -> CallerIdentity:
        try:
            return await self.identities.resolve(request)
        except AuthError as exc:
            raise unauthorized(str(exc)) from exc

    # ---- POST ---------------------------------------------------------------------------------------

    async def post(self, request: Request) -> Response:
        decision = self.post_limiter.take(client_address(request, self.trusted_proxies))
        if not decision.allowed:
            raise rate_limited("calls", decision.retry_after_s)
        caller = await self._caller(request)
        if media_type(request) != SDP_TYPE:
            raise SignalingError(415, "unsupported_media_type", f"the offer must be sent as {SDP_TYPE}",
                                 {"Accept-Post": SDP_TYPE})
        offer = await self._read_offer(request)
        sessions = self.sessions
        if not request.query_params.get("resume"):
            # Refused before the offer is negotiated: a busy node spends nothing on a call it will not take
            # (a resumed session is no new call; its token is checked below).
            refusal = sessions.refusal("webrtc")
            if refusal is not None:
                sessions.on_refused("webrtc", refusal)
                raise at_capacity(refusal.retry_after_s, refusal.detail)
        peer = PeerConnection(self.rtc_config, self.sample_rate)
        self.peers.add(peer)
        try:
            try:
                await peer.accept_offer(offer)
            except OfferError as exc:
                raise bad_request(str(exc)) from exc
            outcome = self.tokens.redeem(request.query_params.get("resume"), caller)
            session = await self._session_for(outcome, caller, sessions)
            call = WebRtcCall(session, peer, sessions, self._pipeline_factory, resumed=outcome.status == "resumed")
            call.bind()
            try:
                answer = await peer.answer()
            except Exception as exc:
                log.exception("SDP answer failed", extra={"session_id": session.id})
                if outcome.status == "resumed":
                    await call.evict("negotiation failed")
                else:
                    await sessions.end(session, "negotiation failed")
                raise SignalingError(500, "negotiation_failed", "could not answer the offer") from exc
        except BaseException:
            await peer.close()
            raise
        token = self.tokens.issue(session)
        log.info("WHIP call answered", extra={"session_id": session.id, "resume_status": outcome.status,
                                              "identity_kind": caller.kind})
        return Response(answer, status_code=201, media_type=SDP_TYPE, headers={
            "Location": f"/whip/{session.id}",
            "ETag": peer.etag,
            RESUME_TOKEN_HEADER: token,
            RESUME_STATUS_HEADER: outcome.status,
            "Cache-Control": "no-store",
        })

    async def _read_offer(self, request: Request) -> str:
        body = await request.body()
        try:
            offer = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise bad_request("the SDP offer is not UTF-8 text") from exc
        if not offer.strip():
            raise bad_request("the SDP offer is empty")
        return offer

    async def _session_for(self, outcome: ResumeOutcome, caller: CallerIdentity,
                           sessions: SessionManager) -> Session:
        if outcome.status == "resumed" and outcome.session is not None:
            previous = attached_call(outcome.session)
            if previous is not None:  # the old connection never said goodbye; it is gone for the client
                await previous.evict("resumed on a new connection")
            return outcome.session
        if outcome.status == "expired":
            log.info("resume token not honoured; starting a new session")
        try:
            # The gateway opens sessions: it also loads the caller's memory and starts the trace.
            return await self.gateway.open_session(caller, "webrtc")
        except SessionLimitReached as exc:
            raise at_capacity(exc.retry_after_s, exc.detail) from exc

    def _pipeline_factory(self, session: Session, sink: EventSink) -> VoicePipeline:
        return self.gateway.new_pipeline(session, self.sample_rate, sink)

    # ---- the session URL ------------------------------------------------------------------------------

    async def _owned_session(self, request: Request, resource: str) -> Session:
        """The caller's own live WebRTC session at `resource`; 404 for anything else, so a session URL
        reveals nothing to someone who does not own it."""
        caller = await self._caller(request)
        session = self.sessions.get(resource)
        if session is None or session.ended or session.transport != "webrtc" \
                or not same_caller(session.identity, caller):
            raise not_found("no such WHIP session (it ended, or was never yours)")
        # Every anonymous caller is "the same caller": for them only the session's resume token (sent
        # back as X-Resume-Token) shows the session is theirs, not its id, which logs and URLs carry.
        presented = request.headers.get(RESUME_TOKEN_HEADER)
        if session.identity.is_anonymous and not self.tokens.holds(session.id, presented):
            raise not_found("no such WHIP session (it ended, or was never yours)")
        return session

    async def delete(self, request: Request, resource: str) -> Response:
        session = await self._owned_session(request, resource)
        await self.sessions.end(session, "client hung up")
        return Response(status_code=200)

    async def patch(self, request: Request, resource: str) -> Response:
        """Trickle ICE and ICE restart both arrive as PATCH; we can do neither.

        aiortc gathers every candidate before answering and has no ICE restart, so this server accepts
        no PATCH on a session. RFC 9725 keeps 422 for a server that supports one of trickle and restart
        but not the other; for a resource that supports PATCH for nothing, HTTP's own answer applies:
        405 Method Not Allowed with an Allow header (RFC 9110 section 15.5.6). 501 would claim the server
        does not know PATCH at all, which is false (the memory API uses it). Accept-Patch is therefore
        never advertised. A client that lost its connection keeps its conversation through resume.
        """
        decision = self.patch_limiter.take(client_address(request, self.trusted_proxies))
        if not decision.allowed:
            raise rate_limited("PATCH requests", decision.retry_after_s)
        await self._owned_session(request, resource)
        raise SignalingError(
            405, "ice_restart_unsupported",
            "this server supports neither trickle ICE nor ICE restart (PATCH); " + RESUME_INSTEAD,
            {"Allow": SESSION_METHODS},
        )

    def options(self, resource: str | None = None) -> Response:
        if resource is None:
            return Response(status_code=204, headers={"Accept-Post": SDP_TYPE, "Allow": "POST, OPTIONS"})
        return Response(status_code=204, headers={"Allow": SESSION_METHODS})
