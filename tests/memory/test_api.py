"""The memory control plane over real HTTP and WebSocket: GET/PATCH /api/memory and /api/events."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import websockets

from tests.webrtc.harness import LiveServer, live_server, webrtc_config
from voicegate.internal.identity.http_identity import PROXY_SECRET_HEADER, RESOURCE_ID_HEADER
from voicegate.internal.identity.jwt import mint_token

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


@pytest.mark.parametrize("server", ["pgvector"], indirect=True)
@pytest.mark.parametrize("text", ["- Likes \u0000 tea.", "- Likes \u001b[31m tea.", "- Likes tea.\u0085"])
async def test_control_characters_get_422_naming_them_and_change_nothing(server: LiveServer, text: str) -> None:
    """PostgreSQL refuses U+0000 in text: refused here as bad input (422), never a failed write (503)."""
    await patch(server, "alice", document="memory", action="append", content="- Likes coffee.")
    for edit in ({"action": "append", "content": text},
                 {"action": "replace", "old_text": "coffee", "new_text": text}):
        response = await patch(server, "alice", document="memory", **edit)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "control_characters" and "U+" in error["message"], error
    async with server.http() as http:
        document = (await http.get("/api/memory", headers=auth("alice"))).json()["documents"]["memory"]
    assert document["revision"] == 1 and document["content"] == "- Likes coffee."
    windows = await patch(server, "alice", document="memory", action="append", content="- Likes tea.\r\n")
    assert windows.status_code == 200, windows.text  # a CR LF line ending is a line break, not refused


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


def claims(**changes: object) -> dict[str, object]:
    now = int(time.time())
    base: dict[str, object] = {"sub": "alice", "iss": "voicegate", "aud": "voicegate", "iat": now, "exp": now + 600}
    return {key: value for key, value in {**base, **changes}.items() if value is not None}


def unsigned_token(**changes: object) -> str:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims(**changes))}."


@pytest.mark.parametrize("presented", [
    jwt.encode(claims(), "another-secret-entirely-0123456789ab", algorithm="HS256"),
    unsigned_token(),
    unsigned_token(sub="bob"),
    jwt.encode(claims(exp=int(time.time()) - 3600), SECRET, algorithm="HS256"),
    jwt.encode(claims(iss="someone-else"), SECRET, algorithm="HS256"),
    jwt.encode(claims(aud="another-service"), SECRET, algorithm="HS256"),
    jwt.encode(claims(exp=None), SECRET, algorithm="HS256"),
    # A real token with its payload swapped for bob's: the signature no longer matches.
    ".".join([token("alice").split(".")[0], token("bob").split(".")[1], token("alice").split(".")[2]]),
], ids=["forged", "unsigned", "unsigned-other-subject", "expired", "wrong-issuer", "wrong-audience", "no-exp",
        "swapped-payload"])
async def test_memory_refuses_every_token_that_does_not_prove_the_caller(server: LiveServer, presented: str) -> None:
    await patch(server, "alice", document="memory", action="append", content="- Alice's door code is on file.")
    async with server.http() as http:
        read = await http.get("/api/memory", headers={"Authorization": f"Bearer {presented}"})
        write = await http.patch("/api/memory", json={"document": "memory", "action": "append", "content": "- x"},
                                 headers={"Authorization": f"Bearer {presented}"})
        for response in (read, write):
            assert response.status_code == 401, response.text
            assert response.json()["error"]["code"] == "unauthorized" and "door" not in response.text
        assert (await http.get("/api/memory", headers=auth("alice"))).json()["documents"]["memory"]["revision"] == 1


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


PROXY_SECRET = "the-proxy-shared-secret-0123456789"


async def test_a_backend_names_the_owner_with_the_trusted_header_only_with_the_proxy_secret(tmp_path: Path) -> None:
    config = webrtc_config(tmp_path, trusted_header_sources=["127.0.0.1/32"], trusted_header_secret=PROXY_SECRET,
                           patch_rate_per_min=0)
    config.memory.enabled = True
    config.memory.provider = "memory"
    claim = {RESOURCE_ID_HEADER: "crm-4711"}
    async with live_server(config) as live, live.http() as http:
        vouched = claim | {PROXY_SECRET_HEADER: PROXY_SECRET}
        added = await http.patch("/api/memory", json={"document": "memory", "action": "append",
                                                      "content": "- Prefers email."}, headers=vouched)
        assert added.status_code == 200, added.text
        for headers in (claim, claim | {PROXY_SECRET_HEADER: "wrong"}, claim | {PROXY_SECRET_HEADER: ""}):
            refused = await http.get("/api/memory", headers=headers)
            assert refused.status_code == 401 and "email" not in refused.text, headers
        read = await http.get("/api/memory", headers=vouched)
        assert read.json()["documents"]["memory"]["content"] == "- Prefers email."
    config.server.trusted_header_secret = ""  # sources alone: the header is never believed
    async with live_server(config) as live, live.http() as http:
        refused = await http.get("/api/memory", headers=claim | {PROXY_SECRET_HEADER: PROXY_SECRET})
        assert refused.status_code == 401


async def test_the_api_is_in_the_openapi_schema(server: LiveServer) -> None:
    async with server.http() as http:
        schema = (await http.get("/openapi.json")).json()
    assert {"get", "patch"} <= set(schema["paths"]["/api/memory"])
    assert "MemoryPatch" in schema["components"]["schemas"]
