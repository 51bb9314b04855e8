"""Who may call and as whom: JWT verification, POST /token, dev login, the trusted identity header."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given
from hypothesis import strategies as st

from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import WhipClient, live_server
from voicegate.internal.config import Config
from voicegate.internal.config.sections import ServerConfig
from voicegate.internal.identity.http_identity import (
    PROXY_SECRET_HEADER,
    RESOURCE_ID_HEADER,
    AuthError,
    HttpIdentityResolver,
)
from voicegate.internal.identity.jwt import CLOCK_SKEW_S, TokenError, TokenVerifier, mint_token, subject_problem

SECRET = "a-test-secret-that-is-long-enough"
PROXY_SECRET = "the-proxy-shared-secret-0123456789"


@dataclass
class Peer:
    host: str


@dataclass
class FakeRequest:
    headers: dict[str, str] = field(default_factory=dict)
    client: Peer | None = field(default_factory=lambda: Peer("127.0.0.1"))


def server_config(**overrides: object) -> ServerConfig:
    config = ServerConfig()
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def token(secret: str = SECRET, **claims: object) -> str:
    now = int(time.time())
    body: dict[str, object] = {"sub": "alice", "iss": "voicegate", "aud": "voicegate", "iat": now, "exp": now + 600}
    body.update(claims)
    return jwt.encode({k: v for k, v in body.items() if v is not None}, secret, algorithm="HS256")


def unsigned(**claims: object) -> str:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    now = int(time.time())
    body = {"sub": "alice", "iss": "voicegate", "aud": "voicegate", "exp": now + 600, **claims}
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(body)}."


def bearer(value: str) -> dict[str, str]:
    return {"authorization": f"Bearer {value}"}


# ---- verification ---------------------------------------------------------------------------------

# Tokens are made inside the test, not at collection: a suite slower than their 10 minutes would expire them.
@pytest.mark.parametrize(("make", "reason"), [
    (lambda: token(), None),
    (lambda: token(secret="another-secret-entirely-0123456789"), "signature is invalid"),
    (lambda: token(exp=int(time.time()) - 3600), "expired"),
    (lambda: token(aud="someone-else"), "another audience"),
    (lambda: token(iss="someone-else"), "another issuer"),
    (lambda: token(sub=None), "no sub claim"),
    (lambda: token(sub=""), "subject must be 1-128 characters"),
    (lambda: token(sub="x" * 129), "subject must be 1-128 characters"),
    (lambda: token(sub="bob\nadmin"), "control characters"),
    (lambda: unsigned(), 'algorithm "none" is not accepted'),
    (lambda: "not-a-jwt", "not a JWT"),
])
def test_hs256_tokens_are_checked_strictly(make: Callable[[], str], reason: str | None) -> None:
    presented = make()
    verifier = TokenVerifier(secret=SECRET, issuer="voicegate", audience="voicegate")
    if reason is None:
        assert verifier.verify(presented).subject == "alice"
        return
    with pytest.raises(TokenError, match=reason):
        verifier.verify(presented)


def test_minted_tokens_carry_the_claims_and_verify() -> None:
    minted = mint_token(SECRET, "alice", issuer="voicegate", audience="voicegate", ttl_s=120, now=1_000_000)
    claims = jwt.decode(minted, SECRET, algorithms=["HS256"], audience="voicegate",
                        options={"verify_exp": False})
    assert claims == {"sub": "alice", "iss": "voicegate", "aud": "voicegate", "iat": 1_000_000, "exp": 1_000_120}


async def test_a_verified_token_is_remembered_only_until_it_expires() -> None:
    verifier = TokenVerifier(secret=SECRET, issuer="voicegate", audience="voicegate")
    # Past its exp already, but inside the 30 s clock-skew allowance for about two more seconds.
    token = mint_token(SECRET, "alice", issuer="voicegate", audience="voicegate", ttl_s=60,
                       now=int(time.time()) - 60 - CLOCK_SKEW_S + 2)
    first = await verifier.averify(token)
    assert first.subject == "alice"
    assert await verifier.averify(token) is first  # the second presentation is answered from memory
    await asyncio.sleep(3.5)
    with pytest.raises(TokenError):
        await verifier.averify(token)  # expired: not served from memory, and refused
    with pytest.raises(TokenError):
        verifier.verify(token)


def rsa_jwks(tmp_path: Path) -> tuple[rsa.RSAPrivateKey, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return key, path


def test_rs256_tokens_from_a_jwks_file_verify_and_hs256_with_the_public_key_does_not(tmp_path: Path) -> None:
    key, path = rsa_jwks(tmp_path)
    verifier = TokenVerifier(issuer="voicegate", audience="voicegate", jwks_file=str(path))
    claims = {"sub": "carol", "iss": "voicegate", "aud": "voicegate", "exp": int(time.time()) + 60}
    good = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    assert verifier.verify(good).subject == "carol"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(TokenError, match="signature is invalid"):
        verifier.verify(jwt.encode(claims, other, algorithm="RS256", headers={"kid": "k1"}))
    with pytest.raises(TokenError, match='"HS256" is not accepted'):  # no secret configured: no HS256 at all
        verifier.verify(token(secret="whatever-secret-0123456789abcdef"))


async def test_rs256_tokens_verify_against_a_jwks_url_off_the_event_loop(tmp_path: Path) -> None:
    import functools
    import http.server
    import threading

    key, path = rsa_jwks(tmp_path)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/{path.name}"
        verifier = TokenVerifier(issuer="voicegate", audience="voicegate", jwks_url=url)
        claims = {"sub": "dave", "iss": "voicegate", "aud": "voicegate", "exp": int(time.time()) + 60}
        signed = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
        assert verifier.needs_network(signed)
        assert (await verifier.averify(signed)).subject == "dave"
        with pytest.raises(TokenError, match="unknown key"):
            await verifier.averify(jwt.encode(claims, key, algorithm="RS256", headers={"kid": "nope"}))
    finally:
        httpd.shutdown()
        httpd.server_close()


@given(st.text(max_size=200))
def test_subject_rules_accept_only_short_printable_names(value: str) -> None:
    problem = subject_problem(value)
    printable = all(ch.isprintable() for ch in value) and value == value.strip()
    if 1 <= len(value) <= 128 and printable:
        assert problem is None
    if problem is None:
        assert 1 <= len(value) <= 128 and "\n" not in value and "\x00" not in value


# ---- identity resolution --------------------------------------------------------------------------

async def test_with_a_secret_configured_a_valid_jwt_names_the_caller_and_anything_else_is_refused() -> None:
    resolver = HttpIdentityResolver(server_config(jwt_secret=SECRET, trusted_header_sources=["127.0.0.1/32"]))
    identity = await resolver.resolve(FakeRequest(bearer(token()) | {RESOURCE_ID_HEADER.lower(): "mallory"}))
    assert (identity.kind, identity.value) == ("jwt", "alice")  # the header never outranks a signature
    for headers in ({}, bearer(token(secret="wrong-secret-0123456789abcdefghijklmn")), bearer(unsigned()),
                    {RESOURCE_ID_HEADER.lower(): "alice"}, {"authorization": "Basic YWxpY2U6eA=="}):
        with pytest.raises(AuthError):
            await resolver.resolve(FakeRequest(headers))


async def test_the_trusted_header_counts_only_from_a_trusted_address_and_never_beside_a_jwt() -> None:
    resolver = HttpIdentityResolver(server_config(trusted_header_sources=["10.1.0.0/16"],
                                                  trusted_header_secret=PROXY_SECRET))
    claim = {RESOURCE_ID_HEADER.lower(): "+15551234567", PROXY_SECRET_HEADER.lower(): PROXY_SECRET}
    trusted = await resolver.resolve(FakeRequest(claim, Peer("10.1.2.3")))
    assert trusted.resource_id == "trusted_header:+15551234567"
    assert (await resolver.resolve(FakeRequest(claim, Peer("10.2.0.1")))).is_anonymous
    forwarded = claim | {"x-forwarded-for": "10.1.2.3"}
    assert (await resolver.resolve(FakeRequest(forwarded, Peer("192.0.2.9")))).is_anonymous
    assert (await resolver.resolve(FakeRequest(claim | bearer(token()), Peer("10.1.2.3")))).is_anonymous
    malformed = {RESOURCE_ID_HEADER.lower(): "a\x00b", PROXY_SECRET_HEADER.lower(): PROXY_SECRET}
    assert (await resolver.resolve(FakeRequest(malformed, Peer("10.1.2.3")))).is_anonymous
    assert (await resolver.resolve(FakeRequest({}, Peer("10.1.2.3")))).is_anonymous
    assert (await resolver.resolve(FakeRequest(claim, None))).is_anonymous


@pytest.mark.parametrize(("configured", "presented", "reason"), [
    (PROXY_SECRET, None, "resource header without the right proxy secret"),
    (PROXY_SECRET, "", "resource header without the right proxy secret"),
    (PROXY_SECRET, PROXY_SECRET[:-1], "resource header without the right proxy secret"),
    (PROXY_SECRET, PROXY_SECRET + "x", "resource header without the right proxy secret"),
    (PROXY_SECRET, PROXY_SECRET.upper(), "resource header without the right proxy secret"),
    ("", "", "resource header refused: no trusted_header_secret configured"),
    ("", PROXY_SECRET, "resource header refused: no trusted_header_secret configured"),
], ids=["absent", "empty", "prefix", "longer", "other-case", "none-configured", "none-configured-but-sent"])
async def test_a_trusted_address_alone_never_names_the_caller(
        configured: str, presented: str | None, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    resolver = HttpIdentityResolver(server_config(trusted_header_sources=["10.1.0.0/16"],
                                                  trusted_header_secret=configured))
    headers = {RESOURCE_ID_HEADER.lower(): "+15551234567"}
    if presented is not None:
        headers[PROXY_SECRET_HEADER.lower()] = presented
    with caplog.at_level("WARNING", logger="voicegate.internal.identity.http_identity"):
        identity = await resolver.resolve(FakeRequest(headers, Peer("10.1.2.3")))
    assert identity.is_anonymous and identity.reason == reason
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    if configured:  # a trusted host without the secret: warned about, without either header's value
        assert "proxy secret" in logged
    assert "5551234567" not in logged and (not presented or presented not in logged)


async def test_the_right_proxy_secret_from_a_trusted_address_names_the_caller() -> None:
    resolver = HttpIdentityResolver(server_config(trusted_header_sources=["10.1.0.0/16"],
                                                  trusted_header_secret=PROXY_SECRET))
    identity = await resolver.resolve(FakeRequest(
        {RESOURCE_ID_HEADER.lower(): "crm-4711", PROXY_SECRET_HEADER.lower(): PROXY_SECRET}, Peer("10.1.2.3")))
    assert identity.resource_id == "trusted_header:crm-4711"
    assert identity.reason == "trusted source 10.1.2.3"


# ---- over HTTP ------------------------------------------------------------------------------------

async def test_whip_refuses_missing_forged_expired_unsigned_and_misaddressed_tokens(config: Config) -> None:
    config.server.jwt_secret = SECRET
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        for presented in (None, token(secret="wrong-secret-0123456789abcdefghijklmn"), token(exp=int(time.time()) - 60),
                          unsigned(), token(aud="another-service")):
            client = WhipClient()
            response = await client.dial(http, token=presented)
            assert response.status_code == 401, presented
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")
            await client.close()
        assert len(server.sessions) == 0


async def test_token_endpoint_needs_the_api_key_and_mints_tokens_whip_accepts(config: Config) -> None:
    config.server.jwt_secret = SECRET
    config.server.api_key = "backend-key-123456"
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        body = {"resource_id": "alice"}
        assert (await http.post("/token", json=body)).status_code == 401
        assert (await http.post("/token", json=body, headers={"X-API-Key": "wrong"})).status_code == 401
        assert (await http.post("/token", json=body, headers=bearer("wrong"))).status_code == 401
        minted = await http.post("/token", json=body, headers={"X-API-Key": "backend-key-123456"})
        assert minted.status_code == 200
        assert minted.json()["expires_in"] == config.server.token_ttl_s
        via_bearer = await http.post("/token", json={"resource_id": "bob"}, headers=bearer("backend-key-123456"))
        assert via_bearer.status_code == 200
        for bad in ({}, {"resource_id": ""}, {"resource_id": 7}, {"resource_id": "x" * 129},
                    {"resource_id": "a\u0007b"}, [1]):
            refused = await http.post("/token", json=bad, headers={"X-API-Key": "backend-key-123456"})
            assert refused.status_code == 400, bad
        garbage = await http.post("/token", content=b"{", headers={"X-API-Key": "backend-key-123456"})
        assert garbage.status_code == 400

        client = WhipClient()
        response = await client.dial(http, token=minted.json()["token"])
        assert response.status_code == 201
        session = server.session_at(client.location)
        assert session is not None and session.resource_id == "jwt:alice"
        await client.close()


async def test_token_endpoint_without_an_api_key_is_closed_and_says_how_to_open_it(config: Config) -> None:
    config.server.jwt_secret = SECRET
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        for headers in ({}, {"X-API-Key": ""}, {"X-API-Key": "anything"}, bearer("anything"), bearer(token())):
            refused = await http.post("/token", json={"resource_id": "alice"}, headers=headers)
            assert refused.status_code == 403, headers
            assert set(refused.json()) == {"error"} and "token" not in refused.json()["error"]
            error = refused.json()["error"]
            assert error["code"] == "token_minting_disabled"
            assert "set server.api_key" in error["message"] and "X-API-Key" in error["message"]
            assert "Authorization: Bearer" in error["message"]
        assert len(server.sessions) == 0


async def test_token_endpoint_without_a_secret_says_it_cannot_mint(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        response = await http.post("/token", json={"resource_id": "alice"})
        assert response.status_code == 503
        assert "jwt_secret" in response.json()["error"]["message"]


async def test_dev_login_is_off_by_default_and_loopback_only_when_on(config: Config) -> None:
    config.server.jwt_secret = SECRET
    config.server.api_key = "backend-key-123456"
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        assert (await http.get("/dev/token")).status_code == 404
        assert (await http.post("/dev/token", json={"resource_id": "alice"})).status_code == 404
    config.server.dev_login = True
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        assert (await http.get("/dev/token")).json() == {"dev_login": True, "can_mint": True}
        minted = await http.post("/dev/token", json={"resource_id": "bob"})
        assert minted.status_code == 200
        claims = jwt.decode(minted.json()["token"], SECRET, algorithms=["HS256"], audience="voicegate")
        assert claims["sub"] == "bob"
        proxied = await http.post("/dev/token", json={"resource_id": "bob"}, headers={"X-Forwarded-For": "203.0.113.5"})
        assert proxied.status_code == 404


async def test_dev_login_needs_no_api_key_when_on_but_never_opens_token_or_answers_another_host(
        config: Config) -> None:
    config.server.jwt_secret = SECRET
    config.server.dev_login = True
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        assert (await http.post("/token", json={"resource_id": "carol"})).status_code == 403
        minted = await http.post("/dev/token", json={"resource_id": "carol"})
        assert minted.status_code == 200
        assert jwt.decode(minted.json()["token"], SECRET, algorithms=["HS256"], audience="voicegate")["sub"] == "carol"
        # The same application, asked by a host that is not this machine.
        elsewhere = httpx.ASGITransport(app=server.app, client=("192.0.2.9", 40000))
        async with httpx.AsyncClient(transport=elsewhere, base_url=server.url) as remote:
            assert (await remote.get("/dev/token")).status_code == 404
            refused = await remote.post("/dev/token", json={"resource_id": "carol"})
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
            assert (await remote.post("/token", json={"resource_id": "carol"})).status_code == 403


async def test_trusted_header_over_http_names_the_caller_only_from_a_trusted_source_with_the_secret(
        config: Config) -> None:
    config.server.trusted_header_sources = ["127.0.0.1/32"]
    config.server.trusted_header_secret = PROXY_SECRET
    vouched = {RESOURCE_ID_HEADER: "+15551234567", PROXY_SECRET_HEADER: PROXY_SECRET}
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http, headers=vouched)).status_code == 201
        session = server.session_at(client.location)
        assert session is not None and session.resource_id == "trusted_header:+15551234567"
        beside_jwt = WhipClient()  # no verification configured: a token cannot be checked, and disables the header
        assert (await beside_jwt.dial(http, token=token(), headers=vouched)).status_code == 201
        assert server.session_at(beside_jwt.location).identity.is_anonymous  # type: ignore[union-attr]
        clients = [client, beside_jwt]
        for headers in ({RESOURCE_ID_HEADER: "+15551234567"},  # a curl on the proxy's host
                        {RESOURCE_ID_HEADER: "+15551234567", PROXY_SECRET_HEADER: "guess"}):
            forged = WhipClient()
            clients.append(forged)
            assert (await forged.dial(http, headers=headers)).status_code == 201
            assert server.session_at(forged.location).identity.is_anonymous  # type: ignore[union-attr]
        for each in clients:
            await each.close()
    config.server.trusted_header_sources = ["10.0.0.0/8"]
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http, headers=vouched)).status_code == 201
        assert server.session_at(client.location).identity.is_anonymous  # type: ignore[union-attr]
        await client.close()
    config.server.trusted_header_sources = ["127.0.0.1/32"]
    config.server.trusted_header_secret = ""  # no secret configured: the header is never believed
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http, headers=vouched)).status_code == 201
        assert server.session_at(client.location).identity.is_anonymous  # type: ignore[union-attr]
        await client.close()


async def test_cors_never_lets_a_browser_send_the_identity_header(config: Config) -> None:
    config.server.cors_origins = ["https://app.example.com"]
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        preflight = await http.options("/whip", headers={
            "Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert preflight.status_code == 200
        allowed = preflight.headers["access-control-allow-headers"].lower()
        assert "authorization" in allowed and RESOURCE_ID_HEADER.lower() not in allowed
        forged = await http.options("/whip", headers={
            "Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": RESOURCE_ID_HEADER})
        assert forged.status_code == 400
        exposed = (await http.post("/whip", content="x", headers={"Origin": "https://app.example.com"}))
        assert "x-resume-token" in exposed.headers["access-control-expose-headers"].lower()
