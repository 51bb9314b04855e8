"""The server side of evals: the call events on /api/admin/calls/events (server.call_events), the
operator's read of a caller's memory, and REFER only for a handler that takes transfers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.webrtc.harness import WhipClient, live_server, webrtc_config
from voicegate.internal.config import load_config
from voicegate.internal.identity.jwt import mint_token
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.message import SipRequest
from voicegate.internal.sip.ua import UserAgent

API_KEY = "eval-api-key-0123456789abcdef"
SECRET = "eval-jwt-secret-0123456789abcdef"


def feed_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/api/admin/calls/events"


async def next_event(socket: Any, kind: str, timeout: float = 30.0) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        while True:
            event = json.loads(await socket.recv())
            if event.get("type") == kind:
                return dict(event)


async def test_the_call_events_carry_a_calls_words_tools_and_end_to_the_key_holder(tmp_path: Path) -> None:
    config = webrtc_config(tmp_path, api_key=API_KEY, jwt_secret=SECRET, call_events=True)
    config.memory.enabled, config.memory.provider = True, "memory"
    config.llm.provider = "local"
    async with live_server(config) as server, server.http() as http:
        async with websockets.connect(feed_url(server.url), additional_headers={"X-API-Key": API_KEY}) as feed:
            client = WhipClient()
            token = mint_token(SECRET, "sam", issuer="voicegate", audience="voicegate", ttl_s=600)
            assert (await client.dial(http, token=token)).status_code == 201
            await client.wait_channel_open()
            client.send({"type": "text", "text": "My name is Sam."})
            started = await next_event(feed, "call.started")
            session = client.location.rsplit("/", 1)[-1]
            assert started["session_id"] == session
            assert (started["transport"], started["caller"], started["sip_call_id"]) == ("webrtc", "jwt", "")
            tool = await next_event(feed, "tool")
            assert tool["name"] == "memory" and tool["ok"] is True and tool["session_id"] == session
            assert tool["arguments"]["action"] == "append" and "Sam" in tool["arguments"]["content"]
            said = await next_event(feed, "transcript")
            while said["role"] != "agent":
                said = await next_event(feed, "transcript")
            assert said["text"] == "Nice to meet you, Sam." and said["session_id"] == session
            await client.hang_up(http, headers={"Authorization": f"Bearer {token}"})
            ended = await next_event(feed, "call.ended")
            assert ended["reason"] == "client hung up" and ended["session_id"] == session
            await client.close()
        # The operator reads what the call left, by the caller's id, with the key only.
        remembered = await http.get("/api/admin/memory/jwt:sam", headers={"X-API-Key": API_KEY})
        assert remembered.status_code == 200, remembered.text
        body = remembered.json()
        assert body["caller"] == "jwt:sam" and "name is Sam" in body["documents"]["memory"]["content"]
        assert (await http.get("/api/admin/memory/jwt:sam")).status_code == 401
        assert (await http.get("/api/admin/memory/nobody", headers={"X-API-Key": API_KEY})).status_code == 400


@pytest.mark.parametrize(("settings", "key", "code", "reason"), [
    ({"api_key": API_KEY, "call_events": False}, API_KEY, 4404, "server.call_events = false"),
    ({"api_key": "", "call_events": True}, API_KEY, 4403, "needs server.api_key"),
    ({"api_key": API_KEY, "call_events": True}, "wrong-key-0123456789abcdef", 4401, "requires the server's API key"),
])
async def test_the_call_events_are_closed_to_everyone_else(tmp_path: Path, settings: dict[str, Any], key: str,
                                                            code: int, reason: str) -> None:
    async with live_server(webrtc_config(tmp_path, **settings)) as server:
        async with websockets.connect(feed_url(server.url), additional_headers={"X-API-Key": key}) as feed:
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(feed.recv(), 10)
            assert feed.close_code == code and reason in (feed.close_reason or "")


async def test_the_operators_memory_read_answers_404_when_memory_is_off(tmp_path: Path) -> None:
    async with live_server(webrtc_config(tmp_path, api_key=API_KEY)) as server, server.http() as http:
        response = await http.get("/api/admin/memory/sip:+15551234567", headers={"X-API-Key": API_KEY})
    assert response.status_code == 404 and response.json()["error"]["code"] == "memory_disabled"


class _Handler:
    def admit(self, call: Any) -> None:
        return None


class _TransferringHandler(_Handler):
    def refer(self, dialog: Dialog, request: SipRequest) -> tuple[int, str]:
        return 202, "Accepted"


def test_only_a_handler_that_takes_transfers_lets_refer_in() -> None:
    config = load_config(None).sip
    assert "REFER" not in UserAgent(config, _Handler()).allowed_methods  # type: ignore[arg-type]
    assert "REFER" in UserAgent(config, _TransferringHandler()).allowed_methods  # type: ignore[arg-type]
