"""DELETE /api/admin/memory/{caller} over real HTTP, on every provider: the operator's erasure, API key only."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.webrtc.harness import LiveServer, live_server, webrtc_config
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.identity.jwt import mint_token
from voicegate.internal.memory.provider import ChangeContext

SECRET = "test-jwt-secret-0123456789-abcdefgh"
API_KEY = "admin-api-key-0123456789"
KEY = {"X-API-Key": API_KEY}


def auth(subject: str) -> dict[str, str]:
    token = mint_token(SECRET, subject, issuer="voicegate", audience="voicegate", ttl_s=600)
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def serving(tmp_path: Path, provider: str, request: pytest.FixtureRequest, **server: Any,
                  ) -> AsyncIterator[LiveServer]:
    config = webrtc_config(tmp_path, jwt_secret=SECRET, patch_rate_per_min=0, **server)
    config.memory.enabled = True
    config.memory.provider = provider  # type: ignore[assignment]
    if provider == "pgvector":
        config.pgvector.connection_string = request.getfixturevalue("fresh_db")
    async with live_server(config) as live:
        yield live


@pytest.fixture(params=["memory", "markdown", "pgvector"])
async def server(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[LiveServer]:
    async with serving(tmp_path, request.param, request, api_key=API_KEY) as live:
        yield live


async def remember(live: LiveServer, subject: str, line: str) -> None:
    async with live.http() as http:
        response = await http.patch("/api/memory", json={"document": "memory", "action": "append", "content": line},
                                    headers=auth(subject))
    assert response.status_code == 200, response.text


async def memory_of(live: LiveServer, subject: str) -> dict[str, Any]:
    async with live.http() as http:
        response = await http.get("/api/memory", headers=auth(subject))
    assert response.status_code == 200, response.text
    return response.json()["documents"]["memory"]  # type: ignore[no-any-return]


def audit_lines(live: LiveServer) -> list[dict[str, Any]]:
    path = live.gateway.config.data_dir / "memory-audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_the_admin_route_erases_one_caller_and_tells_its_subscribers(server: LiveServer) -> None:
    await remember(server, "alice", "- Likes oolong tea.")
    await remember(server, "bob", "- Likes coffee.")
    memory = server.gateway.memory
    assert memory is not None
    alice = memory.owner_key(CallerIdentity("jwt", "alice"))
    assert alice is not None
    told: list[str] = []
    memory.subscribe(alice, lambda: told.append("changed"))  # how a live call and /api/events hear it

    async with server.http() as http:
        response = await http.delete("/api/admin/memory/jwt:alice", headers=KEY)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["caller"] == "jwt:alice" and body["total"] == sum(body["removed"].values()) >= 1
    assert body["removed"]["pending hang-up writes (files)"] == 0
    assert "oolong" not in response.text  # counts, never content
    assert told == ["changed"]
    assert await memory_of(server, "alice") == {"content": "", "format": "markdown", "revision": 0,
                                                "truncated": False}
    assert (await memory_of(server, "bob"))["content"] == "- Likes coffee."
    erasures = [line for line in audit_lines(server) if line["operation"] == "delete_owner"]
    assert [(line["source"], line["outcome"]) for line in erasures] == [("api", "applied")]

    async with server.http() as http:
        again = await http.delete("/api/admin/memory/jwt:alice", headers=KEY)
    assert again.status_code == 200 and again.json()["total"] == 0  # forgotten either way; the CLI exits 3


@pytest.mark.parametrize("server", ["memory"], indirect=True)
async def test_a_raw_phone_number_and_an_owner_key_name_callers_like_the_cli(server: LiveServer) -> None:
    memory = server.gateway.memory
    assert memory is not None
    owners = {}
    for number in ("+15551234567", "+15557654321"):
        owner = memory.owner_key(CallerIdentity("sip", number))
        assert owner is not None
        await memory.edit(owner, "memory", "append", content="- Calls on Mondays.", context=ChangeContext("cli"))
        owners[number] = owner

    async with server.http() as http:
        national = await http.delete("/api/admin/memory/(555) 123-4567", params={"kind": "sip", "region": "US"},
                                     headers=KEY)
        by_key = await http.delete(f"/api/admin/memory/{owners['+15557654321']}", params={"kind": "owner_key"},
                                   headers=KEY)
    assert national.status_code == 200, national.text
    assert national.json()["caller"] == "sip:+15551234567" and national.json()["removed"]["memories"] == 1
    assert by_key.status_code == 200, by_key.text
    assert by_key.json()["caller"] is None and by_key.json()["removed"]["memories"] == 1
    for owner in owners.values():
        assert not any(doc.revision for doc in (await memory.latest(owner)).values())


@pytest.mark.parametrize("server", ["memory"], indirect=True)
@pytest.mark.parametrize(("path", "params"), [
    ("alice", {}),  # no kind: and not kind:value
    ("sip:not-a-number", {}),
    ("5551234567", {"kind": "sip", "region": "XX"}),
    ("alice", {"kind": "email"}),
    ("abc123", {"kind": "owner_key"}),
])
async def test_a_caller_that_cannot_be_resolved_is_400(server: LiveServer, path: str, params: dict[str, str]) -> None:
    async with server.http() as http:
        response = await http.delete(f"/api/admin/memory/{path}", params=params, headers=KEY)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_caller"


@pytest.mark.parametrize("server", ["memory"], indirect=True)
async def test_without_the_api_key_nothing_is_deleted(server: LiveServer) -> None:
    await remember(server, "alice", "- Likes oolong tea.")
    async with server.http() as http:
        for headers in ({}, {"X-API-Key": "wrong-key-0123456789"}, {"Authorization": "Bearer wrong"}, auth("alice")):
            response = await http.delete("/api/admin/memory/jwt:alice", headers=headers)
            assert response.status_code == 401, (headers, response.text)
            assert response.json()["error"]["code"] == "unauthorized"
    assert (await memory_of(server, "alice"))["revision"] == 1


async def test_with_no_api_key_configured_the_route_is_closed(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    async with serving(tmp_path, "memory", request) as live:
        await remember(live, "alice", "- Likes oolong tea.")
        async with live.http() as http:
            response = await http.delete("/api/admin/memory/jwt:alice", headers=KEY)
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert error["code"] == "admin_api_disabled" and "server.api_key" in error["message"]
        assert (await memory_of(live, "alice"))["revision"] == 1


async def test_with_memory_off_the_route_says_so(tmp_path: Path) -> None:
    config = webrtc_config(tmp_path, api_key=API_KEY)
    async with live_server(config) as live, live.http() as http:
        response = await http.get("/api/admin/memory/jwt:alice", headers=KEY)
        unauthorised = await http.get("/api/admin/memory/jwt:alice")
        # Erasure still works with memory off: on the caller's call recordings (tests/recording/test_memory_off.py).
        erased = await http.delete("/api/admin/memory/jwt:alice", headers=KEY)
    assert response.status_code == 404 and response.json()["error"]["code"] == "memory_disabled"
    assert unauthorised.status_code == 401  # the key first: memory being off is not for anyone to learn
    assert erased.status_code == 200 and erased.json()["removed"] == {"call recordings (files)": 0}
