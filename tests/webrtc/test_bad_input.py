"""What the WHIP endpoints and the DataChannel do with input they cannot use: refuse it or ignore it."""

from __future__ import annotations

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import WhipClient, live_server, wait_until
from voicegate.internal.config import Config
from voicegate.internal.webrtc.call import CALL_KEY

pytestmark = pytest.mark.slow

SDP = {"Content-Type": "application/sdp"}


async def test_unusable_offers_get_400_with_the_reason_and_leave_no_session(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        for body in (b"", b"   ", b"hello, this is not SDP", b"\xff\xfe\x00garbage",
                     b"v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF\r\n",
                     b"v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n"):
            response = await http.post("/whip", content=body, headers=SDP)
            assert response.status_code == 400, (body, response.text)
            error = response.json()["error"]
            assert error["code"] == "bad_request" and error["message"]
        assert len(server.sessions) == 0


async def test_an_offer_with_the_wrong_content_type_gets_415(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        offer_client = WhipClient()
        await offer_client.pc.setLocalDescription(await offer_client.pc.createOffer())
        for content_type in ("text/plain", "application/json", ""):
            response = await http.post("/whip", content=offer_client.pc.localDescription.sdp,
                                       headers={"Content-Type": content_type})
            assert response.status_code == 415
            assert response.headers["accept-post"] == "application/sdp"
        await offer_client.close()
        assert len(server.sessions) == 0


async def test_a_body_over_the_limit_gets_413(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        response = await http.post("/whip", content=b"v" * (5 * 1024 * 1024), headers=SDP)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "body_too_large"

        async def chunked() -> object:  # no Content-Length: counted as it streams in
            for _ in range(40):
                yield b"v" * 65536

        streamed = await http.post("/whip", content=chunked(), headers=SDP)  # type: ignore[arg-type]
        assert streamed.status_code == 413
        # The same on a JSON route, whose parser would have turned the limit into a 400.
        for path in ("/api/memory", "/calls", "/token"):
            json_route = await http.request("POST" if path != "/api/memory" else "PATCH", path, content=chunked(),
                                            headers={"Content-Type": "application/json"})  # type: ignore[arg-type]
            assert json_route.status_code == 413, (path, json_route.text)
            assert json_route.json()["error"]["code"] == "body_too_large"
        async def little() -> object:
            yield b"v=0\r\n"

        small = await http.post("/whip", content=little(), headers=SDP)  # type: ignore[arg-type]
        assert small.status_code not in (413, 500), small.text  # a small streamed body still reaches the route
        assert (await http.get("/health")).status_code == 200
        assert len(server.sessions) == 0


async def test_patch_is_answered_405_with_allow_and_the_way_to_recover(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        assert "accept-patch" not in client.response.headers  # type: ignore[union-attr]
        fragment = "a=ice-ufrag:abcd\r\na=ice-pwd:0123456789012345678901\r\n"
        response = await http.patch(client.location, content=fragment, headers={
            "Content-Type": "application/trickle-ice-sdpfrag", "If-Match": "*", "X-Resume-Token": client.resume_token})
        assert response.status_code == 405
        assert response.headers["allow"] == "DELETE, OPTIONS"
        assert "resume with POST /whip?resume=TOKEN instead" in response.json()["error"]["message"]
        assert (await http.patch("/whip/no-such-session", content=fragment)).status_code == 404
        options = await http.options(client.location)
        assert options.status_code == 204 and "accept-patch" not in options.headers
        whip_options = await http.options("/whip")
        assert whip_options.status_code == 204
        assert whip_options.headers["accept-post"] == "application/sdp"
        assert server.session_at(client.location) is not None  # a refused PATCH does not end the call
        await client.close()


async def test_delete_of_an_unknown_or_ended_session_is_404(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        assert (await http.delete("/whip/0123456789abcdef01234567")).status_code == 404
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        assert (await http.delete(client.location)).status_code == 404  # anonymous: its id alone is not enough
        assert (await http.delete(client.location, headers={"X-Resume-Token": "guessed"})).status_code == 404
        assert server.session_at(client.location) is not None
        assert (await client.hang_up(http)).status_code == 200  # the client holding its resume token
        assert (await client.hang_up(http)).status_code == 404
        assert len(server.sessions) == 0
        await client.close()


async def test_unknown_and_malformed_data_channel_messages_are_ignored_and_the_call_goes_on(
        config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient()
        assert (await client.dial(http)).status_code == 201
        await client.wait_channel_open()
        await client.wait_for(lambda e: e["type"] == "connection")
        for junk in ("{not json", "[]", "42", '"text"', '{"type": "resource_id", "value": "alice"}',
                     '{"type": "text"}', '{"type": "text", "text": 5}', '{"type": "text", "text": "   "}',
                     '{"no": "type"}', "x" * 20000):
            client.send(junk)
        assert client.channel is not None
        client.channel.send(b"\x00\x01binary")
        client.send({"type": "ping"})
        await client.wait_for(lambda e: e["type"] == "pong")
        client.send({"type": "text", "text": "say hello world"})
        reply = await client.wait_for(lambda e: e["type"] == "response")
        assert reply["text"] == "Hello world."
        await client.wait_said("Hello world.")  # the turn is on record once its reply has played
        session = server.session_at(client.location)
        assert session is not None and session.identity.is_anonymous and session.conversation.turns == 1
        await client.close()


async def test_an_offer_without_a_data_channel_still_gets_a_working_call(config: Config) -> None:
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        client = WhipClient(data_channel=False)
        assert (await client.dial(http)).status_code == 201
        session = server.session_at(client.location)
        assert session is not None
        await wait_until(lambda: session.slots.get(CALL_KEY).started, what="the call to start")
        await client.close()


async def test_with_webrtc_disabled_there_is_no_whip_endpoint_but_the_page_is_served(config: Config) -> None:
    config.webrtc.enabled = False
    async with live_server(config, stt=ScriptedStt([])) as server, server.http() as http:
        assert (await http.post("/whip", content="v=0", headers=SDP)).status_code == 404
        page = await http.get("/")
        assert page.status_code == 200 and "/static/app.js" in page.text
        assert (await http.get("/static/app.js")).status_code == 200
        assert (await http.get("/static/style.css")).status_code == 200
