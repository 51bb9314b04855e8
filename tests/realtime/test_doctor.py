"""`voicegate doctor` with the Realtime agent on: the endpoint reached, the key accepted, the call's session.update
answered, each failure named with its fix; against the fake Realtime server (tests/fakes/realtime_fake.py)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, run_cli
from tests.fakes.realtime_fake import FakeRealtime
from voicegate.internal.config.providers import RealtimeConfig
from voicegate.internal.config.realtime_checks import REALTIME_WITHOUT
from voicegate.server.doctor import Check
from voicegate.server.doctor_realtime import probe_realtime

KEY = "rt-key-0123456789"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "realtime.md"


def realtime(url: str, **overrides: object) -> RealtimeConfig:
    return RealtimeConfig(enabled=True, url=url, api_key=KEY, **overrides)  # type: ignore[arg-type]


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {check.name: check for check in checks}


async def test_a_healthy_endpoint_passes_reach_key_and_session_with_the_calls_own_session_update() -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        checks = by_name(await probe_realtime(realtime(fake.url, voice="verse"), KEY))
        assert [checks[name].ok for name in ("realtime endpoint", "realtime key", "realtime session")] == [True] * 3
        assert "TCP (no TLS: ws://)" in checks["realtime endpoint"].detail
        assert "session.update answered with session.updated" in checks["realtime session"].detail
        assert "voice verse" in checks["realtime session"].detail
        (session,) = fake.sessions  # one session.update, the call's shape, no instructions to pay for
        assert session["audio"]["output"]["voice"] == "verse" and session["audio"]["input"]["format"]["rate"] == 24000
        assert not session["instructions"] and not fake.received_of("input_audio_buffer.append")
        assert fake.connections[0].params.get("model") == ["gpt-realtime"]


async def test_beta_dialect_is_probed_in_its_own_shape() -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        checks = by_name(await probe_realtime(realtime(fake.url, dialect="beta"), KEY))
        assert checks["realtime session"].ok is True, checks["realtime session"]
        assert fake.sessions[0]["input_audio_format"] == "pcm16"


@pytest.mark.parametrize(("status", "said"), [(401, "key refused (HTTP 401)"), (403, "key refused (HTTP 403)"),
                                              (429, "rate-limited or out of quota (HTTP 429)"),
                                              (404, "no Realtime endpoint or model there (HTTP 404)")])
async def test_a_refused_handshake_is_named_and_the_session_not_tried(status: int, said: str) -> None:
    async with FakeRealtime(stub=True) as fake:
        fake.fail_connect = status
        checks = by_name(await probe_realtime(realtime(fake.url), KEY))
        assert checks["realtime endpoint"].ok is True
        assert checks["realtime key"].ok is False and said in checks["realtime key"].detail
        assert checks["realtime key"].fix
        assert checks["realtime session"].ok is None


async def test_a_wrong_key_is_refused_and_never_printed() -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        checks = await probe_realtime(realtime(fake.url, auth="api-key"), "not-the-key-999")
        key = by_name(checks)["realtime key"]
        assert key.ok is False and "key refused (HTTP 401)" in key.detail and 'auth = "api-key"' in key.fix
        assert not any("not-the-key-999" in c.detail + c.fix for c in checks)


async def test_an_error_event_answering_session_update_is_shown() -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.error_next("invalid_request_error", "invalid_value", "Invalid value: 'nobody'. Supported voices are ...")
        session = by_name(await probe_realtime(realtime(fake.url, voice="nobody"), KEY))["realtime session"]
        assert session.ok is False
        assert "the endpoint refused the session: Invalid value: 'nobody'" in session.detail and session.fix


async def test_an_endpoint_that_never_answers_session_update_fails_within_the_connect_timeout() -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.stall = True
        session = by_name(await probe_realtime(realtime(fake.url, connect_timeout_ms=500), KEY))["realtime session"]
        assert session.ok is False and "no session.updated within 500 ms" in session.detail


async def test_a_hung_handshake_fails_the_key_check_within_the_timeout() -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.hang_handshake = True
        checks = by_name(await probe_realtime(realtime(fake.url, connect_timeout_ms=500), KEY))
        fake.hang_handshake = False
        key = checks["realtime key"]
        assert key.ok is False and "no WebSocket handshake within 500 ms" in key.detail


async def test_nothing_listening_fails_the_endpoint_check_naming_host_and_port() -> None:
    port = free_port()
    checks = by_name(await probe_realtime(realtime(f"ws://127.0.0.1:{port}/v1/realtime"), KEY))
    endpoint = checks["realtime endpoint"]
    assert endpoint.ok is False and f"127.0.0.1:{port}" in endpoint.detail and "no TCP connection" in endpoint.detail
    assert checks["realtime key"].ok is None and checks["realtime session"].ok is None


async def test_a_host_that_does_not_resolve_fails_the_endpoint_check() -> None:
    endpoint = by_name(await probe_realtime(realtime("wss://realtime.invalid/v1/realtime"), KEY))["realtime endpoint"]
    assert endpoint.ok is False and "cannot resolve realtime.invalid" in endpoint.detail


async def test_wss_to_a_server_without_tls_fails_the_tls_handshake() -> None:
    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")  # not a TLS record: the client's handshake fails
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(plain, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        endpoint = by_name(await probe_realtime(realtime(f"wss://localhost:{port}/v1/realtime"), KEY))[
            "realtime endpoint"]
    assert endpoint.ok is False and "the TLS handshake failed" in endpoint.detail, endpoint


def test_every_feature_the_doctor_names_as_missing_is_in_the_docs() -> None:
    text = DOCS.read_text()
    for feature, _why in REALTIME_WITHOUT:
        assert feature in text, feature


# ---- the real command ------------------------------------------------------------------------------------

@pytest.fixture
def fake_in_a_thread() -> Iterator[FakeRealtime]:
    """The fake on its own event loop in a thread, so the doctor (another process) can reach it."""
    started = threading.Event()
    stop: asyncio.Event | None = None
    holder: list[FakeRealtime] = []
    loop = asyncio.new_event_loop()

    async def run() -> None:
        nonlocal stop
        stop = asyncio.Event()
        async with FakeRealtime(api_key=KEY, stub=True) as fake:
            holder.append(fake)
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    assert started.wait(30)
    yield holder[0]
    assert stop is not None
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


def test_doctor_command_checks_the_endpoint_and_names_a_refused_key(tmp_path: Path,
                                                                    fake_in_a_thread: FakeRealtime) -> None:
    rtp = free_port(socket.SOCK_DGRAM) & ~1
    toml = (f"[server]\nport = {free_port()}\nhost = '127.0.0.1'\ndata_dir = '{tmp_path / 'data'}'\n"
            f"[sip]\nenabled = false\nrtp_port_min = {max(rtp, 1024)}\nrtp_port_max = {max(rtp, 1024) + 10}\n"
            f"[realtime]\nenabled = true\nurl = '{fake_in_a_thread.url}'\napi_key = '{KEY}'\n")
    path = tmp_path / "config.toml"
    path.write_text(toml)
    healthy = run_cli("--config", str(path), "doctor", timeout=180)
    for name in ("realtime endpoint", "realtime key", "realtime session"):
        assert f"ok   {name}: " in healthy.stdout, healthy.stdout + healthy.stderr
    assert "skip realtime features: the Realtime agent does without: digit forms" in healthy.stdout
    fake_in_a_thread.fail_connect = 401
    refused = run_cli("--config", str(path), "doctor", timeout=180)
    assert refused.returncode == 1
    assert "FAIL realtime key: " in refused.stdout and "key refused (HTTP 401)" in refused.stdout, refused.stdout
    assert "fix: set the endpoint's key in realtime.api_key" in refused.stdout
    assert KEY not in refused.stdout + refused.stderr
