"""20 writers racing PATCHes on one caller's memory: no lost update, every failure is a 409.

In memory, `make test` runs 20 x 30 PATCHes and `make soak` 20 x 1000 (ten times the full 20 x 100;
tests/scale.py); in PostgreSQL, 20 x 20 at every size."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.scale import scaled
from tests.webrtc.harness import live_server, webrtc_config
from voicegate.internal.identity.jwt import mint_token

pytestmark = pytest.mark.slow
SECRET = "race-secret-0123456789abcdefghijklmnop"
HEADERS = {"Authorization": "Bearer " + mint_token(SECRET, "alice", issuer="voicegate", audience="voicegate",
                                                   ttl_s=3600)}


async def writer(http: httpx.AsyncClient, name: int, rounds: int, wins: list[tuple[int, str]],
                 failures: list[int]) -> None:
    for n in range(rounds):
        current = (await http.get("/api/memory", headers=HEADERS)).json()["documents"]["memory"]["revision"]
        line = f"- writer {name} edit {n}"
        response = await http.patch("/api/memory", headers=HEADERS, json={
            "document": "memory", "action": "append", "content": line, "expectedRevision": current})
        if response.status_code == 200:
            wins.append((response.json()["documents"]["memory"]["revision"], line))
        else:
            failures.append(response.status_code)


@pytest.mark.parametrize(("provider", "writers", "rounds"), [("memory", 20, scaled(30, 100)), ("pgvector", 20, 20)])
async def test_racing_writers_lose_no_update(tmp_path: Path, request: pytest.FixtureRequest, provider: str,
                                             writers: int, rounds: int) -> None:
    config = webrtc_config(tmp_path, jwt_secret=SECRET, patch_rate_per_min=0)
    config.memory.enabled = True
    config.memory.provider = provider
    config.memory.max_chars = 200_000
    config.memory.embedding = "none"
    if provider == "pgvector":
        config.pgvector.connection_string = request.getfixturevalue("fresh_db")
    wins: list[tuple[int, str]] = []
    failures: list[int] = []
    async with live_server(config) as live:
        limits = httpx.Limits(max_connections=writers * 2)
        async with httpx.AsyncClient(base_url=live.url, timeout=60, limits=limits) as http:
            await asyncio.gather(*(writer(http, w, rounds, wins, failures) for w in range(writers)))
            final = (await http.get("/api/memory", headers=HEADERS)).json()["documents"]["memory"]
    assert set(failures) <= {409}, f"unexpected statuses: {sorted(set(failures))}"
    assert len(wins) + len(failures) == writers * rounds
    assert wins, "nobody won"
    revisions = sorted(revision for revision, _ in wins)
    assert revisions == list(range(1, len(wins) + 1))  # each success made exactly one new revision
    expected = "\n".join(line for _, line in sorted(wins))
    assert final["content"] == expected and final["revision"] == len(wins)
