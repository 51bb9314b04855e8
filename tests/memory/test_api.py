"""The memory control plane over real HTTP and WebSocket: GET/PATCH /api/memory and /api/events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from internal.identity.jwt import mint_token
from tests.webrtc.harness import LiveServer, live_server, webrtc_config

SECRET = "test-jwt-secret-0123456789-abcdefgh"


def token(subject: str) -> str:
    return mint_token(SECRET, subject, issuer="voicegate", audience="voicegate", ttl_s=600)


def auth(subject: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(subject)}"}


@pytest.fixture
async def server(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[LiveServer]:
    config = webrtc_config(tmp_path, jwt_secret=SECRET, patch_rate_per_min=0)
    config.memory.enabled = True
    config.memory.provider = getattr(request, "param", "memory")
    if config.memory.provider == "pgvector":
        config.pgvector.connection_string = request.getfixturevalue("fresh_db")
    async with live_server(config) as live:
        yield live


async def patch(live: LiveServer, subject: str, **body: Any) -> Any:
    async with live.http() as http:
        return await http.patch("/api/memory", json=body, headers=auth(subject))


async def test_get_and_patch_with_revisions(server: LiveServer) -> None:
    async with server.http() as http:
        empty = await http.get("/api/memory", headers=auth("alice"))
    assert empty.status_code == 200
    assert empty.json() == {
        "documents": {"user": {"content": "", "format": "markdown", "revision": 0, "truncated": False},
                      "memory": {"content": "", "format": "markdown", "revision": 0, "truncated": False}},
        "limits": {"max_chars": 2000},
    }
    added = await patch(server, "alice", document="memory", action="append", content="- Likes tea.",
                        expectedRevision=0)
    assert added.status_code == 200, added.text
    assert added.json()["changed"] is True and added.json()["documents"]["memory"]["revision"] == 1
    replaced = await patch(server, "alice", document="memory", action="replace", old_text="tea",
                           new_text="green tea", expectedRevision=1)
    assert replaced.json()["documents"]["memory"]["content"] == "- Likes green tea."
    same = await patch(server, "alice", document="memory", action="replace", old_text="green tea",
                       new_text="green tea")
    assert same.status_code == 200 and same.json()["changed"] is False


async def test_a_stale_revision_gets_409_with_the_current_documents(server: LiveServer) -> None:
    await patch(server, "alice", document="user", action="append", content="- Keep replies short.")
    stale = await patch(server, "alice", document="user", action="append", content="- Call me Al.",
                        expectedRevision=0)
    assert stale.status_code == 409
    body = stale.json()
    assert body["error"]["code"] == "stale_revision"
    assert body["documents"]["user"] == {"content": "- Keep replies short.", "format": "markdown", "revision": 1,
                                         "truncated": False}


@pytest.mark.parametrize(("edit", "code"), [
    ({"action": "replace", "old_text": "cocoa", "new_text": "x"}, "edit_not_found"),
    ({"action": "replace", "old_text": "Likes", "new_text": "x"}, "ambiguous_edit"),
    ({"action": "append", "content": "- My card is 4111 1111 1111 1111."}, "sensitive_content"),
    ({"action": "append", "content": "x" * 2500}, "too_long"),
])
async def test_bad_edits_get_422_and_change_nothing(server: LiveServer, edit: dict[str, str], code: str) -> None:
    await patch(server, "alice", document="memory", action="append", content="- Likes tea.\n- Likes coffee.")
    response = await patch(server, "alice", document="memory", **edit)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == code
    async with server.http() as http:
        assert (await http.get("/api/memory", headers=auth("alice"))).json()["documents"]["memory"]["revision"] == 1


async def test_malformed_bodies_are_422_not_500(server: LiveServer) -> None:
    async with server.http() as http:
        for body in ({"document": "secrets", "action": "append", "content": "x"},
                     {"document": "memory", "action": "delete"},
                     {"document": "memory", "action": "append", "owner": "bob"}):
            response = await http.patch("/api/memory", json=body, headers=auth("alice"))
            assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_request"
        garbage = await http.patch("/api/memory", content=b"{not json", headers=auth("alice"))
        assert garbage.status_code == 422


async def test_only_a_verified_identity_reaches_memory(server: LiveServer) -> None:
    async with server.http() as http:
        assert (await http.get("/api/memory")).status_code == 401
        bad = await http.get("/api/memory", headers={"Authorization": "Bearer not.a.jwt"})
        assert bad.status_code == 401 and bad.json()["error"]["code"] == "unauthorized"
        spoofed = await http.get("/api/memory", headers={"X-Voicegate-Resource-Id": "alice"})
        assert spoofed.status_code == 401


async def test_alice_can_never_read_or_change_bobs_memory(server: LiveServer) -> None:
    await patch(server, "bob", document="memory", action="append", content="- Bob's surprise party is Friday.")
    async with server.http() as http:
        alice_view = (await http.get("/api/memory", headers=auth("alice"))).json()
        assert "party" not in json.dumps(alice_view)
        # There is no parameter that names an owner: anything extra is ignored or refused.
        sneaky = await http.get("/api/memory?owner=bob&resource_id=jwt:bob", headers=auth("alice"))
        assert "party" not in sneaky.text
    attempt = await patch(server, "alice", document="memory", action="replace", old_text="Bob's surprise party",
                          new_text="nothing")
    assert attempt.status_code == 422  # not found: alice's document has no such text
    async with server.http() as http:
        bob_view = (await http.get("/api/memory", headers=auth("bob"))).json()
    assert bob_view["documents"]["memory"]["content"] == "- Bob's surprise party is Friday."


@pytest.mark.parametrize("server", ["memory", "pgvector"], indirect=True)
async def test_concurrent_patches_with_the_same_revision_exactly_one_wins(server: LiveServer) -> None:
    await patch(server, "alice", document="memory", action="append", content="- Start.")
    responses = await asyncio.gather(*(
        patch(server, "alice", document="memory", action="append", content=f"- Writer {n}.", expectedRevision=1)
        for n in range(10)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * 9


async def events_socket(server: LiveServer, subject: str) -> Any:
    url = server.url.replace("http://", "ws://") + f"/api/events?token={token(subject)}"
    return await websockets.connect(url)


async def test_memory_changed_reaches_the_owners_sockets_only_and_only_for_real_changes(server: LiveServer) -> None:
    alice = await events_socket(server, "alice")
    bob = await events_socket(server, "bob")
    try:
        await patch(server, "alice", document="memory", action="append", content="- Likes tea.")
        event = json.loads(await asyncio.wait_for(alice.recv(), 10))
        assert set(event) == {"type", "ts"} and event["type"] == "memory.changed"
        await patch(server, "alice", document="memory", action="replace", old_text="tea", new_text="tea")  # no-op
        await patch(server, "alice", document="memory", action="replace", old_text="cocoa", new_text="x")  # fails
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(alice.recv(), 1.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(bob.recv(), 0.5)
    finally:
        await alice.close()
        await bob.close()


async def test_the_events_socket_refuses_anonymous_clients(server: LiveServer) -> None:
    url = server.url.replace("http://", "ws://") + "/api/events"
    with pytest.raises(websockets.exceptions.InvalidStatus):
        async with websockets.connect(url) as socket:
            await socket.recv()


async def test_the_api_is_in_the_openapi_schema(server: LiveServer) -> None:
    async with server.http() as http:
        schema = (await http.get("/openapi.json")).json()
    assert {"get", "patch"} <= set(schema["paths"]["/api/memory"])
    assert "MemoryPatch" in schema["components"]["schemas"]
