"""JSON Web Tokens: minting our own HS256 tokens and verifying the ones callers present.

A token's `sub` becomes the caller's identity (and so the key to their memory), so verification is
strict: the algorithm is chosen by the server's configuration, never by the token (a token saying
`alg: none`, or HS256 signed with a public RSA key, is refused); issuer, audience, expiry and subject
are all required. RS256 tokens from an external issuer are accepted only when the deployer names its
keys (`server.jwks_file` or `server.jwks_url`).
"""

from __future__ import annotations

import asyncio
import json
import time
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

HS256 = "HS256"
RS256 = "RS256"
# Clocks on the deployer's backend and on this server disagree a little; a token is not refused for
# being a few seconds "early" or "late". Short enough that a stolen expired token stays useless.
CLOCK_SKEW_S = 30
# A JWKS endpoint is asked again at most this often (PyJWT's cache), so key rotation is picked up
# within minutes without fetching keys on every call.
JWKS_CACHE_S = 300
JWKS_FETCH_TIMEOUT_S = 5
MAX_SUBJECT_CHARS = 128


VERIFIED_CACHE_SIZE = 10_000


class TokenError(Exception):
    """A token that does not prove who the caller is; the message says why (safe to show the client)."""


class TokenConfigError(Exception):
    """The server cannot mint or verify tokens as configured (e.g. an unreadable JWKS file)."""


def subject_problem(value: object) -> str | None:
    """Why `value` cannot be a caller id (None when it can): 1-128 characters, no control characters."""
    if not isinstance(value, str):
        return "must be a string"
    if not 1 <= len(value) <= MAX_SUBJECT_CHARS:
        return f"must be 1-{MAX_SUBJECT_CHARS} characters"
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in value):
        return "must not contain control characters"
    if value != value.strip():
        return "must not start or end with whitespace"
    return None


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    subject: str
    algorithm: str
    expires_at: float
    claims: dict[str, Any]


def mint_token(secret: str, subject: str, *, issuer: str, audience: str, ttl_s: int,
               now: float | None = None) -> str:
    """An HS256 token naming `subject`, valid for `ttl_s` seconds from `now`."""
    if not secret:
        raise TokenConfigError("server.jwt_secret is not set, so this server cannot mint tokens")
    problem = subject_problem(subject)
    if problem:
        raise ValueError(f"resource_id {problem}")
    issued = int(now if now is not None else time.time())
    claims = {"sub": subject, "iss": issuer, "aud": audience, "iat": issued, "exp": issued + ttl_s}
    return jwt.encode(claims, secret, algorithm=HS256)


def load_jwks_file(path: str | Path) -> jwt.PyJWKSet:
    try:
        return jwt.PyJWKSet.from_json(Path(path).read_text())
    except (OSError, ValueError, jwt.PyJWTError) as exc:
        raise TokenConfigError(f"cannot load the JWKS file {path}: {exc}") from exc


class TokenVerifier:
    """Checks tokens against the configured secret and/or public keys.

    `verify` may fetch keys over the network (a JWKS URL), so on the event loop call `averify`, which
    runs that case in a thread.
    """

    def __init__(self, *, secret: str = "", issuer: str, audience: str, jwks_file: str = "",
                 jwks_url: str = "") -> None:
        self.secret = secret
        self.issuer = issuer
        self.audience = audience
        self._key_set = load_jwks_file(jwks_file) if jwks_file else None
        self._key_client = (jwt.PyJWKClient(jwks_url, cache_jwk_set=True, lifespan=JWKS_CACHE_S,
                                            timeout=JWKS_FETCH_TIMEOUT_S) if jwks_url else None)
        # Tokens already verified, until they expire: a browser presents the same token on every API
        # call and event socket, and PyJWT's checks cost ~9% of the control plane's CPU.
        self._verified: OrderedDict[str, VerifiedToken] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return bool(self.secret or self._key_set is not None or self._key_client is not None)

    @property
    def accepted_algorithms(self) -> list[str]:
        algorithms = [HS256] if self.secret else []
        if self._key_set is not None or self._key_client is not None:
            algorithms.append(RS256)
        return algorithms

    def needs_network(self, token: str) -> bool:
        return self._key_client is not None and self._algorithm(token) == RS256

    async def averify(self, token: str) -> VerifiedToken:
        cached = self._cached(token)
        if cached is not None:
            return cached
        # A JWKS fetch blocks, so it runs in a thread; the cache is only touched here, on the loop.
        verified = await asyncio.to_thread(self._verify, token) if self.needs_network(token) else self._verify(token)
        return self._remember(token, verified)

    def verify(self, token: str) -> VerifiedToken:
        cached = self._cached(token)
        return cached if cached is not None else self._remember(token, self._verify(token))

    def _cached(self, token: str) -> VerifiedToken | None:
        verified = self._verified.get(token)
        if verified is None:
            return None
        if verified.expires_at + CLOCK_SKEW_S <= time.time():
            del self._verified[token]
            return None
        self._verified.move_to_end(token)
        return verified

    def _remember(self, token: str, verified: VerifiedToken) -> VerifiedToken:
        self._verified[token] = verified
        while len(self._verified) > VERIFIED_CACHE_SIZE:
            self._verified.popitem(last=False)
        return verified

    def _verify(self, token: str) -> VerifiedToken:
        if not self.enabled:
            raise TokenError("this server does not accept tokens (no jwt_secret or JWKS configured)")
        algorithm = self._algorithm(token)
        key = self._key_for(token, algorithm)
        try:
            claims = jwt.decode(
                token, key, algorithms=[algorithm], audience=self.audience, issuer=self.issuer,
                leeway=CLOCK_SKEW_S, options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise TokenError("token has expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise TokenError("token is for another audience") from exc
        except jwt.InvalidIssuerError as exc:
            raise TokenError("token is from another issuer") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise TokenError(f"token has no {exc.claim} claim") from exc
        except jwt.InvalidSignatureError as exc:
            raise TokenError("token signature is invalid") from exc
        except jwt.PyJWTError as exc:
            raise TokenError(f"token is invalid: {exc}") from exc
        subject = claims.get("sub")
        problem = subject_problem(subject)
        if problem:
            raise TokenError(f"token subject {problem}")
        assert isinstance(subject, str)
        return VerifiedToken(subject=subject, algorithm=algorithm, expires_at=float(claims["exp"]), claims=claims)

    def _algorithm(self, token: str) -> str:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenError("token is not a JWT") from exc
        algorithm = header.get("alg")
        if algorithm not in self.accepted_algorithms:
            raise TokenError(f"token algorithm {json.dumps(algorithm)} is not accepted")
        return str(algorithm)

    def _key_for(self, token: str, algorithm: str) -> Any:
        if algorithm == HS256:
            return self.secret
        kid = jwt.get_unverified_header(token).get("kid")
        if self._key_set is not None:
            keys = [k for k in self._key_set.keys if kid is None or k.key_id == kid]
            if keys:
                return keys[0].key
            if self._key_client is None:
                raise TokenError("token is signed by an unknown key")
        assert self._key_client is not None
        try:
            return self._key_client.get_signing_key_from_jwt(token).key
        except jwt.PyJWKClientConnectionError as exc:
            raise TokenError("the token issuer's keys cannot be fetched right now") from exc
        except jwt.PyJWTError as exc:
            raise TokenError("token is signed by an unknown key") from exc
