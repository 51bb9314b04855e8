"""HTTP Digest authentication for SIP (RFC 3261 22, RFC 2617, RFC 7616, RFC 8760).

Server side: nonces are stateless (issue time + HMAC over it and the client's address), so a node
keeps no table, restarts invalidate nothing but the secret, and any node sharing the secret can
verify. The cost is that a nonce may be replayed from the same address until it expires; the TTL
bounds that. Client side: answering a 401/407 when we place calls through a provider.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from voicegate.internal.sip_grammar.syntax import SyntaxProblem, quote, split_list, unquote
from voicegate.internal.sip_grammar.uri import SipUri, UriError

_HASHES: dict[str, Callable[[bytes], str]] = {
    "MD5": lambda data: hashlib.md5(data).hexdigest(),  # RFC 2617 peers still need it
    "SHA-256": lambda data: hashlib.sha256(data).hexdigest(),
}
# Strongest first: RFC 7616 3.7 and RFC 8760 ask servers to list the preferred challenge first.
# Clients that read only the first challenge and know only MD5 (sipp, some phones) need MD5 first.
SERVER_ALGORITHMS = ("SHA-256", "MD5")
_PARAM_RE = re.compile(r"^\s*([A-Za-z0-9\-_*]+)\s*=\s*(\"(?:[^\"\\]|\\.)*\"|[^\s,]*)\s*$", re.S)


class DigestError(ValueError):
    """A challenge or credentials header we cannot read."""


def parse_digest(value: str) -> dict[str, str]:
    """`Digest a="b", c=d` as a dict with lower-case keys and unquoted values."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "digest":
        raise DigestError("not a Digest header")
    params: dict[str, str] = {}
    try:
        items = split_list(rest)
    except SyntaxProblem as exc:
        raise DigestError(str(exc)) from exc
    for item in items:
        match = _PARAM_RE.match(item)
        if not match:
            raise DigestError("bad Digest parameter")
        params[match.group(1).lower()] = unquote(match.group(2))
    return params


def _algorithm(name: str) -> tuple[Callable[[bytes], str], bool]:
    """(hash function, is a -sess variant) for an algorithm name."""
    upper = name.upper()
    session = upper.endswith("-SESS")
    base = upper[: -len("-SESS")] if session else upper
    if base not in _HASHES:
        raise DigestError(f"unsupported algorithm {name[:20]!r}")
    return _HASHES[base], session


def digest_response(
    *, algorithm: str, username: str, realm: str, password: str, method: str, uri: str, nonce: str,
    qop: str | None = None, nc: str = "", cnonce: str = "",
) -> str:
    """The `response` value of RFC 2617 3.2.2.1 / RFC 7616 3.4.1 for qop auth or no qop."""
    hash_, session = _algorithm(algorithm)
    ha1 = hash_(f"{username}:{realm}:{password}".encode())
    if session:
        ha1 = hash_(f"{ha1}:{nonce}:{cnonce}".encode())
    ha2 = hash_(f"{method}:{uri}".encode())
    if qop:
        return hash_(f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}".encode())
    return hash_(f"{ha1}:{nonce}:{ha2}".encode())


AuthStatus = Literal["ok", "stale", "invalid"]


@dataclass(frozen=True, slots=True)
class AuthResult:
    status: AuthStatus
    username: str | None = None
    reason: str = ""  # for logs; never contains a password or a response value


class DigestAuthenticator:
    """Challenges and verifies credentials for one realm."""

    def __init__(
        self,
        realm: str,
        users: Mapping[str, str],
        nonce_ttl_s: float,
        *,
        secret: bytes | None = None,
        clock: Callable[[], float] = time.time,
        algorithms: tuple[str, ...] = SERVER_ALGORITHMS,
    ) -> None:
        for algorithm in algorithms:
            _algorithm(algorithm)  # fail at start-up, not at the first call
        self.realm = realm
        self.algorithms = algorithms
        self._users = users
        self._ttl = nonce_ttl_s
        self._secret = secret or os.urandom(32)
        self._clock = clock

    def make_nonce(self, bind: str = "") -> str:
        """A nonce saying when it was issued, signed together with `bind` (the client's address)."""
        stamp = struct.pack(">Q", int(self._clock() * 1000))
        mac = hmac.new(self._secret, stamp + bind.encode(), hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(stamp + mac).decode().rstrip("=")

    def _nonce_age(self, nonce: str, bind: str) -> float | None:
        """Seconds since the nonce was issued, or None if we did not issue it (for this client)."""
        try:
            raw = base64.urlsafe_b64decode(nonce + "=" * (-len(nonce) % 4))
        except ValueError:
            return None
        if len(raw) != 24:
            return None
        stamp, mac = raw[:8], raw[8:]
        expected = hmac.new(self._secret, stamp + bind.encode(), hashlib.sha256).digest()[:16]
        if not hmac.compare_digest(mac, expected):
            return None
        return self._clock() - struct.unpack(">Q", stamp)[0] / 1000

    def challenges(self, *, stale: bool = False, bind: str = "") -> list[str]:
        """WWW-Authenticate (or Proxy-Authenticate) values, one per algorithm, strongest first."""
        nonce = self.make_nonce(bind)
        stale_part = ", stale=true" if stale else ""
        return [
            f"Digest realm={quote(self.realm)}, nonce={quote(nonce)}, algorithm={algorithm}, qop=\"auth\"{stale_part}"
            for algorithm in self.algorithms
        ]

    def verify(self, authorization: str, method: str, request_uri: str, *, bind: str = "") -> AuthResult:
        """Check one Authorization header value against our users."""
        try:
            params = parse_digest(authorization)
        except DigestError as exc:
            return AuthResult("invalid", reason=str(exc))
        username = params.get("username", "")
        if params.get("realm") != self.realm:
            return AuthResult("invalid", username, "wrong realm")
        digest_uri = params.get("uri", "")
        if not _same_resource(digest_uri, request_uri):
            return AuthResult("invalid", username, "uri does not match the request")
        nonce = params.get("nonce", "")
        age = self._nonce_age(nonce, bind)
        if age is None or age < -5:
            return AuthResult("invalid", username, "nonce not issued by us")
        # Only what our challenge offered: qop "auth" (RFC 7616 3.4: a client must use the qop offered;
        # the older no-qop form has no client nonce) and one of our algorithms, so a weaker answer
        # than the one asked for is refused rather than verified.
        qop = params.get("qop")
        if qop != "auth":
            return AuthResult("invalid", username, "qop not offered" if qop else "no qop: auth was offered")
        if not (params.get("cnonce") and re.fullmatch(r"[0-9a-fA-F]{8}", params.get("nc", ""))):
            return AuthResult("invalid", username, "qop without cnonce/nc")
        algorithm = params.get("algorithm", "MD5")
        if algorithm.upper() not in (offered.upper() for offered in self.algorithms):
            return AuthResult("invalid", username, "algorithm not offered")
        # Compare against something even for unknown users, so timing does not reveal who exists.
        password = self._users.get(username)
        try:
            expected = digest_response(
                algorithm=algorithm, username=username, realm=self.realm, password=password or os.urandom(8).hex(),
                method=method, uri=digest_uri, nonce=nonce, qop=qop, nc=params.get("nc", ""),
                cnonce=params.get("cnonce", ""),
            )
        except DigestError as exc:
            return AuthResult("invalid", username, str(exc))
        matches = hmac.compare_digest(expected.encode(), params.get("response", "").lower().encode())
        if not matches or password is None:
            return AuthResult("invalid", username, "wrong credentials")
        if age > self._ttl:
            return AuthResult("stale", username, "nonce expired")
        return AuthResult("ok", username, "digest verified")


def _same_resource(digest_uri: str, request_uri: str) -> bool:
    """RFC 2617 3.2.2.5: the signed uri must name the request's resource. Some clients (sipp among
    them) sign the Request-URI without its user part, so host and port decide, not the exact text."""
    if digest_uri == request_uri:
        return True
    try:
        signed, actual = SipUri.parse(digest_uri), SipUri.parse(request_uri)
    except UriError:
        return False
    return signed.is_sip and (signed.host.lower(), signed.port) == (actual.host.lower(), actual.port)


def choose_challenge(values: list[str]) -> dict[str, str]:
    """The strongest challenge we can answer among a response's WWW-/Proxy-Authenticate values."""
    usable: list[tuple[int, dict[str, str]]] = []
    for value in values:
        try:
            params = parse_digest(value)
            _algorithm(params.get("algorithm", "MD5"))
        except DigestError:
            continue
        qops = [q.strip() for q in params.get("qop", "").split(",") if q.strip()]
        if qops and "auth" not in qops:
            continue
        rank = 0 if params.get("algorithm", "MD5").upper().startswith("SHA-256") else 1
        usable.append((rank, params))
    if not usable:
        raise DigestError("no Digest challenge we can answer")
    return min(usable, key=lambda item: item[0])[1]


def authorization_header(
    challenge: dict[str, str] | str,
    *,
    method: str,
    uri: str,
    username: str,
    password: str,
    cnonce: str | None = None,
    nc: int = 1,
) -> str:
    """An Authorization/Proxy-Authorization value answering `challenge` (qop auth when offered)."""
    params = parse_digest(challenge) if isinstance(challenge, str) else challenge
    realm, nonce = params.get("realm", ""), params.get("nonce", "")
    algorithm = params.get("algorithm", "MD5")
    qops = [q.strip() for q in params.get("qop", "").split(",") if q.strip()]
    qop = "auth" if "auth" in qops else None
    cnonce = cnonce or os.urandom(8).hex()
    nc_text = f"{nc:08x}"
    response = digest_response(
        algorithm=algorithm, username=username, realm=realm, password=password, method=method, uri=uri,
        nonce=nonce, qop=qop, nc=nc_text, cnonce=cnonce,
    )
    parts = [
        f"username={quote(username)}", f"realm={quote(realm)}", f"nonce={quote(nonce)}", f"uri={quote(uri)}",
        f"response={quote(response)}", f"algorithm={algorithm}",
    ]
    if qop:
        parts += [f"qop={qop}", f"nc={nc_text}", f"cnonce={quote(cnonce)}"]
    if "opaque" in params:
        parts.append(f"opaque={quote(params['opaque'])}")
    return "Digest " + ", ".join(parts)
