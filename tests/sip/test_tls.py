"""SIP over TLS: config checks, a real TLS client, and UserAgents calling each other over sips:."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.sip.certs import ThrowawayCa
from tests.sip.conftest import OFFER, RawPeer, RecordingHandler, UaFactory, eventually, sip_text
from voicegate.internal.config.sections import SipConfig
from voicegate.internal.sip import CallFailed, SipResponse, TimerSettings, UserAgent, build_offer, parse
from voicegate.internal.sip.framer import StreamFramer
from voicegate.internal.sip.tls import tls_listen_address, transport_failure

FAST = TimerSettings(t1=0.05, t2=0.2, t4=0.2, timer_d=0.5)


@pytest.fixture
def ca(tmp_path: Path) -> ThrowawayCa:
    return ThrowawayCa(tmp_path / "ca")


def tls_keys(ca: ThrowawayCa, label: str = "voicegate", **names: tuple[str, ...]) -> dict[str, object]:
    leaf = ca.issue(label, **names)
    return {"tls_cert": str(leaf.cert), "tls_key": str(leaf.key), "tls_ca": str(ca.cert),
            "transports": ["udp", "tcp", "tls"]}


# ---- configuration ------------------------------------------------------------------------------------


def test_tls_without_a_certificate_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ValidationError, match=r"tls_cert is required when transports include \"tls\""):
        SipConfig(transports=["udp", "tls"])


def test_unreadable_key_file_is_a_config_error_naming_the_key(ca: ThrowawayCa, tmp_path: Path) -> None:
    leaf = ca.issue("server")
    with pytest.raises(ValidationError, match=r"tls_key: cannot read .*missing\.key"):
        SipConfig(transports=["tls"], tls_cert=str(leaf.cert), tls_key=str(tmp_path / "missing.key"))


def test_key_that_is_not_the_certificates_is_refused(ca: ThrowawayCa) -> None:
    one, other = ca.issue("one"), ca.issue("other")
    with pytest.raises(ValidationError, match="tls_cert/tls_key: not a PEM certificate and its private key"):
        SipConfig(transports=["tls"], tls_cert=str(one.cert), tls_key=str(other.key))


def test_tls_port_is_5061_on_the_bind_host_unless_tls_bind_says_otherwise() -> None:
    assert tls_listen_address(SipConfig(), ("192.0.2.1", 5060)) == ("192.0.2.1", 5061)
    assert tls_listen_address(SipConfig(), ("127.0.0.1", 0)) == ("127.0.0.1", 0)  # tests: a free port
    assert tls_listen_address(SipConfig(tls_bind="0.0.0.0:5071"), ("127.0.0.1", 5060)) == ("0.0.0.0", 5071)


async def test_public_address_port_is_the_udp_one_and_tls_keeps_its_own(make_ua: UaFactory, ca: ThrowawayCa) -> None:
    ua = await make_ua(RecordingHandler(), public_address="203.0.113.7:5999", **tls_keys(ca))
    tls_port = ua.local_address("tls").port
    assert ua.stack.transport.advertised("tls", "127.0.0.1") == ("203.0.113.7", tls_port)
    assert ua.stack.transport.advertised("udp", "127.0.0.1") == ("203.0.113.7", 5999)
    assert ua.stack.contact("tls", "127.0.0.1", secure=True) == f"<sips:voicegate@203.0.113.7:{tls_port}>"


# ---- a real TLS client --------------------------------------------------------------------------------


async def tls_exchange(port: int, ca: Path, request: bytes) -> SipResponse:
    context = ssl.create_default_context(cafile=str(ca))
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    try:
        writer.write(request)
        framer = StreamFramer(65536)
        while True:
            data = await asyncio.wait_for(reader.read(4096), 10)
            assert data, "the server closed the connection without answering"
            for item in framer.feed(data):
                if isinstance(item, bytes):
                    message = parse(item)
                    assert isinstance(message, SipResponse)
                    if message.status >= 200:
                        return message
    finally:
        writer.close()


def over_tls(text: bytes, scheme: str = "sips") -> bytes:
    """A RawPeer request rewritten for a TLS connection: Via TLS and a sips: (or sip:) Request-URI."""
    text = text.replace(b"SIP/2.0/UDP", b"SIP/2.0/TLS")
    for method in (b"INVITE", b"OPTIONS"):
        text = text.replace(method + b" sip:", method + f" {scheme}:".encode())
    return text


async def test_options_over_tls_is_answered_on_the_same_connection(make_ua: UaFactory, ca: ThrowawayCa) -> None:
    ua = await make_ua(RecordingHandler(), **tls_keys(ca))
    port = ua.local_address("tls").port
    assert port not in (ua.local_address("udp").port, 0)
    response = await tls_exchange(port, ca.cert, over_tls(sip_text("OPTIONS", 5999, port, body="")))
    assert response.status == 200
    assert response.top_via.transport.upper() == "TLS"


async def test_plain_bytes_on_the_tls_port_are_dropped_and_tls_still_works(
        make_ua: UaFactory, ca: ThrowawayCa) -> None:
    ua = await make_ua(RecordingHandler(), **tls_keys(ca))
    port = ua.local_address("tls").port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(sip_text("OPTIONS", 5999, port, body=""))  # SIP in the clear, where a handshake belongs
    assert await asyncio.wait_for(reader.read(4096), 10) == b""  # closed, never answered in the clear
    writer.close()
    response = await tls_exchange(port, ca.cert, over_tls(sip_text("OPTIONS", 5999, port, body="")))
    assert response.status == 200


async def test_sips_invite_over_tls_is_answered_with_a_sips_contact(make_ua: UaFactory, ca: ThrowawayCa) -> None:
    handler = RecordingHandler()
    ua = await make_ua(handler, **tls_keys(ca))
    port = ua.local_address("tls").port
    response = await tls_exchange(port, ca.cert, over_tls(sip_text("INVITE", 5999, port, body=OFFER)))
    assert response.status == 200
    assert (response.headers.get("Contact") or "").startswith(f"<sips:voicegate@127.0.0.1:{port}")
    (call,) = handler.answered
    assert call.source.transport == "tls"


async def test_sip_uri_over_tls_gets_a_contact_with_transport_tls(make_ua: UaFactory, ca: ThrowawayCa) -> None:
    ua = await make_ua(RecordingHandler(), **tls_keys(ca))
    port = ua.local_address("tls").port
    response = await tls_exchange(port, ca.cert, over_tls(sip_text("INVITE", 5999, port, body=OFFER), "sip"))
    assert response.status == 200
    assert ";transport=tls" in (response.headers.get("Contact") or "")


async def test_sips_request_uri_over_udp_is_refused_with_416(make_ua: UaFactory) -> None:
    ua = await make_ua(RecordingHandler())
    peer = await RawPeer.open()
    try:
        port = ua.local_address().port
        peer.send(sip_text("INVITE", peer.port, port, uri=f"sips:agent@127.0.0.1:{port}", body=OFFER), port)
        response = await peer.response(416)
        assert "sips: only over TLS" in response.reason
    finally:
        peer.close()


# ---- calling out over TLS: the peer's certificate is verified -------------------------------------------


async def test_call_to_a_sips_uri_goes_over_verified_tls_and_ends_with_bye(make_ua: UaFactory, ca: ThrowawayCa) -> None:
    callee_handler = RecordingHandler()
    callee = await make_ua(callee_handler, timers=FAST, **tls_keys(ca, "callee"))
    caller = await make_ua(RecordingHandler(), timers=FAST, **tls_keys(ca, "caller"))
    port = callee.local_address("tls").port
    call = await caller.call(f"sips:agent@127.0.0.1:{port}", build_offer("127.0.0.1", 40002), timeout_s=10)
    assert call.dialog.secure and call.dialog.peer is not None and call.dialog.peer.transport == "tls"
    await eventually(lambda: len(callee_handler.confirmed_dialogs) == 1, what="the callee saw our ACK")
    (incoming,) = callee_handler.answered
    assert incoming.source.transport == "tls" and incoming.request.uri.startswith("sips:")
    assert incoming.request.top_via.transport.upper() == "TLS"
    assert (incoming.request.headers.get("Contact") or "").startswith("<sips:")
    await caller.hangup(call.dialog)
    await eventually(lambda: callee_handler.reasons == ["bye"], what="the callee got our BYE over TLS")


def connect_errors(caplog: pytest.LogCaptureFixture) -> str:
    return " ".join(str(getattr(r, "sip_error", "")) for r in caplog.records if r.getMessage() == "sip connect failed")


async def test_call_to_a_peer_whose_certificate_we_cannot_verify_fails(
        make_ua: UaFactory, ca: ThrowawayCa, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    callee = await make_ua(RecordingHandler(), **tls_keys(ca, "callee"))
    stranger = ThrowawayCa(tmp_path / "other-ca", "some other CA")
    caller = await make_ua(RecordingHandler(), **tls_keys(stranger, "caller"))
    port = callee.local_address("tls").port
    with pytest.raises(CallFailed) as failed:
        await caller.call(f"sips:agent@127.0.0.1:{port}", build_offer("127.0.0.1", 40002), timeout_s=10)
    assert failed.value.status == 503
    assert "CERTIFICATE_VERIFY_FAILED" in connect_errors(caplog)


async def test_call_to_a_host_the_certificate_does_not_name_fails(
        make_ua: UaFactory, ca: ThrowawayCa, caplog: pytest.LogCaptureFixture) -> None:
    # Signed by the CA we trust, but for another host: chaining alone is not enough (RFC 5922).
    elsewhere = tls_keys(ca, "elsewhere", dns=("pbx.example.com",), ips=("192.0.2.9",))
    callee = await make_ua(RecordingHandler(), **elsewhere)
    caller: UserAgent = await make_ua(RecordingHandler(), **tls_keys(ca, "caller"))
    port = callee.local_address("tls").port
    with pytest.raises(CallFailed) as failed:
        await caller.call(f"sip:agent@127.0.0.1:{port};transport=tls", build_offer("127.0.0.1", 40002), timeout_s=10)
    assert failed.value.status == 503
    assert "IP address mismatch" in connect_errors(caplog)


def test_a_failed_send_is_explained_in_one_short_printable_line() -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.reason, verify.verify_message = "CERTIFICATE_VERIFY_FAILED", "unable to get local issuer certificate"
    assert transport_failure(verify) == "CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate"
    assert transport_failure(ConnectionRefusedError(111, "Connection refused")) == "Connection refused"
    assert transport_failure(RuntimeError("secret\r\nInjected: header")) == "RuntimeError"  # the kind, not the text
    odd = ssl.SSLError(1, "x")
    odd.reason = "WRONG_VERSION\r\nX: y" + "z" * 300
    explained = transport_failure(odd)
    assert "\r" not in explained and "\n" not in explained and len(explained) == 120
