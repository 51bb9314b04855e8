"""Registration against a registrar written here, on a real UDP socket: for what sipp 3.6.1 cannot
check (SHA-256 digest) and for what a test must see byte by byte (the outbound proxy's Route)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from tests.sip.conftest import RawPeer, RecordingHandler, eventually, sip_config
from voicegate.internal.sip import SipRequest, TimerSettings, UserAgent
from voicegate.internal.sip.digest import DigestAuthenticator, parse_digest
from voicegate.internal.sip.message import make_response


@pytest.fixture
async def peer() -> AsyncIterator[RawPeer]:
    registrar = await RawPeer.open()
    yield registrar
    registrar.close()


async def start(registration: dict[str, object]) -> UserAgent:
    account = {"username": "alice", "password": "pa55", **registration}
    ua = UserAgent(sip_config(registrations=[account]), RecordingHandler(), bind=("127.0.0.1", 0),  # type: ignore[arg-type]
                   timers=TimerSettings())
    await ua.start()
    return ua


async def test_sha256_challenge_is_answered_with_sha256_and_verified(peer: RawPeer) -> None:
    authenticator = DigestAuthenticator("voicegate.test", {"alice": "pa55"}, 300, algorithms=("SHA-256", "MD5"))
    ua = await start({"registrar": f"sip:127.0.0.1:{peer.port}"})
    try:
        first = await peer.request("REGISTER")
        assert isinstance(first, SipRequest) and "Authorization" not in first.headers
        challenge = make_response(first, 401, "Unauthorized",
                                  [("WWW-Authenticate", value) for value in authenticator.challenges()])
        peer.send(challenge, ua.local_address().port)
        second = await peer.request("REGISTER")
        authorization = second.headers.get("Authorization") or ""
        assert parse_digest(authorization)["algorithm"] == "SHA-256"
        assert authenticator.verify(authorization, "REGISTER", second.uri).status == "ok"
        assert second.call_id == first.call_id and second.cseq[0] == first.cseq[0] + 1
        peer.send(make_response(second, 200, "OK", [("Expires", "120")]), ua.local_address().port)
        status = ua.registrations.statuses()[0]
        await eventually(lambda: status.state == "registered", what="registered")
        assert 100 < (status.expires_at or 0) - time.time() <= 120
    finally:
        await ua.shutdown(timeout_s=1)


async def test_outbound_proxy_gets_the_register_with_a_route_and_the_registrar_uri(peer: RawPeer) -> None:
    # The registrar's name does not resolve: only the proxy is ever looked up, as with INVITE.
    ua = await start({"registrar": "sip:pbx.invalid", "outbound_proxy": f"sip:127.0.0.1:{peer.port}"})
    try:
        request = await peer.request("REGISTER")
        assert request.uri == "sip:pbx.invalid"
        assert request.headers.get("Route") == f"<sip:127.0.0.1:{peer.port};lr>"
        assert request.headers.get("To") == "<sip:alice@pbx.invalid>"
        contact = f"<sip:alice@127.0.0.1:{ua.local_address().port}>"
        # The registrar lists another device's binding too; ours carries its own (shorter) grant.
        peer.send(make_response(request, 200, "OK", [
            ("Contact", f"<sip:alice@192.0.2.9:5060>;expires=3600, {contact};expires=90"), ("Expires", "3600")]),
            ua.local_address().port)
        status = ua.registrations.statuses()[0]
        await eventually(lambda: status.state == "registered", what="registered")
        assert (status.expires_at or 0) - time.time() <= 90
        assert ua.trusted_peers == ["127.0.0.1"], "INVITEs come through the proxy, so the proxy is trusted"
    finally:
        await ua.shutdown(timeout_s=1)


async def test_shutdown_without_a_binding_sends_no_unregister(peer: RawPeer) -> None:
    ua = await start({"registrar": f"sip:127.0.0.1:{peer.port}"})
    first = await peer.request("REGISTER")
    peer.send(make_response(first, 404, "Not Found"), ua.local_address().port)
    status = ua.registrations.statuses()[0]
    await eventually(lambda: status.state == "backing-off", what="backing off after 404")
    await ua.shutdown(timeout_s=1)
    assert status.state == "unregistered" and status.last_status == 404
    assert peer.queue.empty(), "nothing to remove, so no REGISTER with Expires: 0"


async def test_unroutable_registrar_is_reported_not_raised(peer: RawPeer) -> None:
    ua = await start({"registrar": "sip:pbx.invalid"})
    try:
        status = ua.registrations.statuses()[0]
        await eventually(lambda: status.failures >= 1, what="a failed attempt")
        assert status.state == "backing-off" and status.last_reason.startswith("no route")
    finally:
        await ua.shutdown(timeout_s=1)


async def test_sips_registrar_without_tls_fails_for_good(peer: RawPeer) -> None:
    ua = await start({"registrar": f"sips:127.0.0.1:{peer.port}"})
    try:
        status = ua.registrations.statuses()[0]
        await eventually(lambda: status.state == "failed", what="failed")
        assert status.last_reason == "transport tls is not enabled"  # sip.transports has no "tls" here
    finally:
        await ua.shutdown(timeout_s=1)


async def test_a_second_challenge_after_our_credentials_ends_the_attempt(peer: RawPeer) -> None:
    authenticator = DigestAuthenticator("voicegate.test", {"alice": "other"}, 300)
    ua = await start({"registrar": f"sip:127.0.0.1:{peer.port}"})
    try:
        for _ in range(2):  # the challenge, and the same again for credentials it does not accept
            request = await peer.request("REGISTER")
            peer.send(make_response(request, 401, "Unauthorized",
                                    [("WWW-Authenticate", value) for value in authenticator.challenges()]),
                      ua.local_address().port)
        status = ua.registrations.statuses()[0]
        await eventually(lambda: status.state == "backing-off", what="backing off")
        assert status.last_status == 401 and status.failures == 1
        assert peer.queue.empty(), "no third REGISTER in the same attempt: a wrong password is not retried at once"
    finally:
        await ua.shutdown(timeout_s=1)
