"""Who is calling over HTTP (WHIP, the memory API): a verified JWT, a vouching server, or nobody.

The rules (PRODUCT.md section 2), in order:
1. A Bearer JWT, when this server verifies tokens (`jwt_secret` or JWKS), must be valid; its `sub`
   is the caller. With verification configured, a request without a valid token is refused (401).
2. Without token verification, `X-Voicegate-Resource-Id` names the caller only when the TCP peer is
   inside `server.trusted_header_sources` (a backend or SIP bridge the deployer runs), the request
   carries `X-Voicegate-Proxy-Secret` equal to `server.trusted_header_secret`, and no JWT was
   presented. The peer address is the socket's, never X-Forwarded-For, which anyone can write; and an
   address alone is not enough, because any process on a trusted host (a curl on the proxy machine)
   has it. Without a configured secret the header is never believed.
3. Everyone else is anonymous. Nothing a browser controls (query strings, the page, DataChannel
   messages) ever names a caller: browsers cannot even send the header, as CORS does not allow it.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from typing import Protocol

from voicegate.internal.config.sections import ServerConfig
from voicegate.internal.identity.caller import CallerIdentity
from voicegate.internal.identity.jwt import TokenError, TokenVerifier, subject_problem
from voicegate.internal.identity.networks import address_in

log = logging.getLogger(__name__)

RESOURCE_ID_HEADER = "X-Voicegate-Resource-Id"
PROXY_SECRET_HEADER = "X-Voicegate-Proxy-Secret"


class PeerAddress(Protocol):
    @property
    def host(self) -> str: ...


class HttpRequestLike(Protocol):
    """What identity resolution reads from a request (Starlette's Request fits)."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def client(self) -> PeerAddress | None: ...


class AuthError(Exception):
    """The request must authenticate (HTTP 401); the message says what was wrong with it."""


def bearer_token(headers: Mapping[str, str]) -> str | None:
    value = headers.get("authorization", "")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def proxy_secret_presented(headers: Mapping[str, str], secret: str) -> bool:
    presented = headers.get(PROXY_SECRET_HEADER.lower(), "")
    return hmac.compare_digest(presented.encode(), secret.encode())


def is_loopback(host: str | None) -> bool:
    return address_in(host, ("127.0.0.0/8", "::1/128"))


def verifier_from_config(config: ServerConfig) -> TokenVerifier:
    return TokenVerifier(secret=config.jwt_secret, issuer=config.jwt_issuer, audience=config.jwt_audience,
                         jwks_file=config.jwks_file, jwks_url=config.jwks_url)


class HttpIdentityResolver:
    """Resolves callers for one server; holds the token verifier (and its cached JWKS keys)."""

    def __init__(self, config: ServerConfig, verifier: TokenVerifier | None = None) -> None:
        self.config = config
        self.verifier = verifier if verifier is not None else verifier_from_config(config)
        if config.trusted_header_sources and not config.trusted_header_secret and not self.auth_required:
            log.warning("server.trusted_header_sources is set but server.trusted_header_secret is not: "
                        f"{RESOURCE_ID_HEADER} is never believed")

    @property
    def auth_required(self) -> bool:
        return self.verifier.enabled

    async def resolve(self, request: HttpRequestLike) -> CallerIdentity:
        token = bearer_token(request.headers)
        if self.auth_required:
            if token is None:
                raise AuthError("this server requires Authorization: Bearer <jwt>")
            try:
                verified = await self.verifier.averify(token)
            except TokenError as exc:
                raise AuthError(str(exc)) from exc
            return CallerIdentity("jwt", verified.subject, f"{verified.algorithm} token")
        if token is not None:
            # We cannot check it, and a presented token must never be outranked by a header.
            return CallerIdentity.anonymous("bearer token presented but this server verifies none")
        claimed = request.headers.get(RESOURCE_ID_HEADER.lower())
        if claimed is None:
            return CallerIdentity.anonymous("no credentials")
        peer = request.client.host if request.client is not None else None
        if not address_in(peer, self.config.trusted_header_sources):
            return CallerIdentity.anonymous("resource header from an untrusted source")
        if not self.config.trusted_header_secret:
            return CallerIdentity.anonymous("resource header refused: no trusted_header_secret configured")
        if not proxy_secret_presented(request.headers, self.config.trusted_header_secret):
            # From a trusted address, so either a misconfigured proxy or someone on that host: worth a
            # warning. Neither header's value is logged (one is an identity, the other a guess at a secret).
            log.warning("resource header without the right proxy secret; the caller is anonymous",
                        extra={"peer": peer})
            return CallerIdentity.anonymous("resource header without the right proxy secret")
        if subject_problem(claimed):
            return CallerIdentity.anonymous("malformed resource header")
        return CallerIdentity("trusted_header", claimed, f"trusted source {peer}")
