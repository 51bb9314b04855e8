"""Real peers over TLS and SRTP: baresip calls in over sips-style TLS and with SRTP (srtp.so,
mediaenc=srtp-mand) and hears the agent's reply; sipp's plain offer meets sip.srtp = "required"."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import shutil
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.sip.certs import ThrowawayCa
from tests.sip.conftest import RawPeer, sip_text
from tests.sip_calls.conftest import (
    REPLY_PHRASES,
    ServerFactory,
    SipServer,
    agent_said,
    best_match,
    eventually,
    free_port,
    loud_part,
    render,
    run_sipp,
    sip_calls_config,
)
from tests.sip_calls.test_baresip import baresip_home, recording, running_baresip
from tests.speech import active_ms, speak, transcribe, write_wav
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.sip.message import make_response
from voicegate.internal.sip.sdes import CryptoAttribute, crypto_line, new_key
from voicegate.internal.sip.sdp import SessionDescription

pytestmark = pytest.mark.slow
GREETING = "This is an outgoing call."


@pytest.fixture(autouse=True)
def _baresip_installed() -> None:
    assert shutil.which("baresip") is not None, "baresip is not installed (apt: baresip-core; make test installs it)"
    assert Path("/usr/lib/baresip/modules/srtp.so").exists(), "baresip's srtp.so module is missing"


async def tls_server(make_server: ServerFactory, tmp_path: Path, ca: ThrowawayCa, **sip: Any) -> SipServer:
    leaf = ca.issue("voicegate")
    config = sip_calls_config(tmp_path, **sip)
    config.sip.tls_cert, config.sip.tls_key, config.sip.tls_ca = str(leaf.cert), str(leaf.key), str(ca.cert)
    config.sip.tls_bind = f"127.0.0.1:{free_port()}"
    config.sip.transports = ["udp", "tcp", "tls"]  # after the files: the config checks them now
    return await make_server(config=config)


async def baresip_call(server: SipServer, home: Path, target: str) -> str:
    """baresip dials `target`; once the server's session has ended (and baresip has taken our BYE),
    baresip is stopped and its output returned."""
    async with running_baresip(home, "-e", f"/dial {target}") as baresip:
        await server.wait_ended(timeout=60)
        with contextlib.suppress(AssertionError):  # the callers' assertions say what is missing
            await eventually(lambda: "terminated" in baresip.output(), 10, "baresip to take our BYE")
    return baresip.output()


def secure_baresip(tmp_path: Path, ca: ThrowawayCa, account_params: str, *, talk: bool = True) -> Path:
    """A baresip that trusts our CA (sip_cafile), has a certificate of its own (sip_certificate, which
    it needs to enable TLS at all) and loads srtp.so; `account_params` go on its account line. With
    `talk` it asks for "hello world" and then says "okay goodbye", else it stays silent."""
    speech = bytes(16000) + speak("say hello world", 8000) + bytes(16000 * 4) + speak("okay goodbye", 8000) \
        + bytes(16000 * 8) if talk else bytes(16000 * 20)
    home = baresip_home(tmp_path, write_wav(tmp_path / "caller.wav", speech, 8000))
    client = ca.combined(ca.issue("baresip"))
    with (home / "config").open("a") as config:
        config.write(f"sip_certificate {client}\nsip_cafile {ca.cert}\nmodule srtp.so\n")
    (home / "accounts").write_text(f"<sip:+15551234567@127.0.0.1>;regint=0{account_params}\n")
    return home


async def live_call_security(server: SipServer) -> tuple[str, str | None]:
    """(transport of the live call's signalling, its SRTP suite or None), read while it runs."""
    await server.wait_live(timeout=30)
    assert server.gateway.sip is not None and server.gateway.sip_calls is not None
    (dialog,) = server.gateway.sip.dialogs
    (voice,) = server.gateway.sip_calls.calls.values()
    assert dialog.peer is not None
    return dialog.peer.transport, voice.srtp_keys.suite if voice.srtp_keys else None


async def assert_heard_the_replies(server: SipServer, home: Path, output: str) -> None:
    (session,) = await server.wait_ended(timeout=60)
    assert "Call established" in output, output
    entries = [(e.role, e.text) for e in session.conversation.transcript.entries()]
    assert entries == [("user", "say hello world"), ("agent", "Hello world."),
                       ("user", "okay goodbye"), ("agent", "Goodbye. Thanks for calling.")], output
    assert session.end_reason == "agent ended the call"
    assert "terminated" in output, output  # baresip took our BYE (sent back over its TLS connection)
    heard, rate = recording(home, "dec")
    assert active_ms(heard, rate) > 1000, output
    assert "hello world" in transcribe(loud_part(heard, rate)[: rate * 2 * 3], rate, REPLY_PHRASES)
    reference = ulaw_decode(ulaw_encode(b"".join([c async for c in server.tts.synthesize("Hello world.", rate)])))
    assert best_match(heard, loud_part(reference, rate, margin_ms=0)) > 0.9


async def test_baresip_over_tls_is_understood_and_hears_the_reply(make_server: ServerFactory, tmp_path: Path) -> None:
    ca = ThrowawayCa(tmp_path / "ca")
    server = await tls_server(make_server, tmp_path, ca)
    tls_port = server.gateway.sip.local_address("tls").port  # type: ignore[union-attr]
    home = secure_baresip(tmp_path, ca, "")
    call = asyncio.create_task(baresip_call(server, home, f"sip:agent@127.0.0.1:{tls_port};transport=tls"))
    assert await live_call_security(server) == ("tls", None)
    await assert_heard_the_replies(server, home, await call)


async def test_baresip_requiring_srtp_over_tls_gets_srtp_and_hears_the_reply_under_the_default_policy(
        make_server: ServerFactory, tmp_path: Path) -> None:
    ca = ThrowawayCa(tmp_path / "ca")
    server = await tls_server(make_server, tmp_path, ca)  # sip.srtp as shipped: "accept"
    tls_port = server.gateway.sip.local_address("tls").port  # type: ignore[union-attr]
    home = secure_baresip(tmp_path, ca, ";mediaenc=srtp-mand")
    call = asyncio.create_task(baresip_call(server, home, f"sip:agent@127.0.0.1:{tls_port};transport=tls"))
    assert await live_call_security(server) == ("tls", "AES_CM_128_HMAC_SHA1_80")
    output = await call
    await assert_heard_the_replies(server, home, output)
    # baresip decrypted our audio (it would hear nothing from plain RTP with srtp-mand) and said so:
    assert "SRTP is Enabled" in output, output


async def test_outbound_call_to_baresip_over_verified_tls_with_srtp_is_heard(
        make_server: ServerFactory, tmp_path: Path) -> None:
    ca = ThrowawayCa(tmp_path / "ca")
    server = await tls_server(make_server, tmp_path, ca, srtp="required")
    # Silent: a callee talking over the greeting would duck it (barge-in), and we compare its samples.
    home = secure_baresip(tmp_path, ca, ";answermode=auto;mediaenc=srtp-mand", talk=False)
    listening = re.search(r"^sip_listen 127\.0\.0\.1:(\d+)$", (home / "config").read_text(), re.M)
    assert listening is not None
    listen = int(listening.group(1))
    tls_port = listen + 1  # baresip puts TLS next to its UDP/TCP port
    async with running_baresip(home) as baresip:
        await eventually(lambda: not tcp_port_free(tls_port), 20, "baresip to listen for TLS")
        assert server.gateway.sip_calls is not None
        session = await server.gateway.sip_calls.place_call(f"sips:+15551234567@127.0.0.1:{tls_port}",
                                                            greeting=GREETING)
        assert server.gateway.sip is not None
        (dialog,) = server.gateway.sip.dialogs
        assert dialog.secure and dialog.peer is not None and dialog.peer.transport == "tls"
        (voice,) = server.gateway.sip_calls.calls.values()
        assert voice.srtp_keys is not None and voice.srtp_keys.suite == "AES_CM_128_HMAC_SHA1_80"
        await agent_said(session, "outgoing call")
        await asyncio.sleep(1.0)  # "said" means sent: let baresip's jitter buffer play out the last words
        await server.hang_up(session)
        await server.wait_ended()
        await eventually(lambda: "terminated" in baresip.output(), 20, "baresip to take our BYE")
    output = baresip.output()
    assert "SRTP is Enabled" in output, output
    heard, rate = recording(home, "dec")
    # pocketsphinx hears this espeak sentence poorly (see RtpCapture.played), so its samples are compared.
    reference = ulaw_decode(ulaw_encode(b"".join([c async for c in server.tts.synthesize(GREETING, rate)])))
    assert best_match(heard, loud_part(reference, rate, margin_ms=0)) > 0.9, output


def tcp_port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


async def test_plain_offer_is_refused_with_488_and_a_warning_when_srtp_is_required(
        make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(srtp="required")
    # sipp fails the call unless the 488 carries the Warning (check_it on the regexp).
    scenario = render(tmp_path, "uac_refused.xml", EXPECTED_STATUS="488",
                      EXPECTED_REGEXP="Warning: 399 voicegate .SRTP required .sip.srtp = required.")
    (await run_sipp(tmp_path, scenario, server.target)).check()
    assert server.ended == [] and len(server.sessions) == 0


async def test_offerless_invite_gets_our_srtp_offer_and_the_ack_answer_sets_keys_never_logged(
        make_server: ServerFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = await make_server(srtp="required")
    peer = await RawPeer.open()
    try:
        peer.send(sip_text("INVITE", peer.port, server.port), server.port)  # no SDP: we offer in the 200
        ok = await peer.response(200)
        ours = SessionDescription.parse(ok.body).media[0]
        assert ours.proto == "RTP/SAVP"
        our_crypto = CryptoAttribute.parse(ours.attribute("crypto") or "")
        their_key = new_key()
        answer = (f"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                  f"m=audio 6000 RTP/SAVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
                  f"a=crypto:{crypto_line(our_crypto.tag, our_crypto.suite, their_key)}\r\n")
        peer.send(sip_text("ACK", peer.port, server.port, to_tag=ok.to_tag or "", branch="z9hG4bK-ack",
                           body=answer), server.port)
        await server.wait_live()
        assert server.gateway.sip_calls is not None
        (voice,) = server.gateway.sip_calls.calls.values()
        assert voice.srtp_keys is not None
        assert (voice.srtp_keys.local, voice.srtp_keys.remote) == (our_crypto.key_salt, their_key)
        # Forged media (an RTP header, noise, a made-up auth tag) is dropped and counted, per call and node.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
            for seq in range(5):
                header = struct.pack("!BBHII", 0x80, 0, seq, seq * 160, 0x1234)
                forger.sendto(header + os.urandom(160 + 10), ("127.0.0.1", ours.port))
        await eventually(lambda: voice.rtp.stats().srtp_rejected == 5, what="five forged packets rejected")
        hanging_up = asyncio.create_task(server.hang_up(server.live()))
        peer.send(make_response(await peer.request("BYE"), 200, "OK"), server.port)
        await hanging_up
    finally:
        peer.close()
    metrics = server.gateway.telemetry.prometheus()
    assert re.search(r"^voicegate_srtp_packets_rejected_total 5(\.0)?$", metrics, re.M), metrics
    logged = " ".join(str(record.__dict__) for record in caplog.records)
    assert "sip call media security" in logged  # the suite is logged, never a key:
    for key in (our_crypto.key_salt, their_key):
        assert base64.b64encode(key).decode() not in logged and key.hex() not in logged
