"""A bring-your-own agent can read and edit the memory of the phone caller it is answering:
each verified call's agent requests carry `memory_access`, a capability GET/PATCH /api/memory accept in
X-Voicegate-Call-Token, bound to that call's caller and valid only while the call lives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.agent_fake import FakeAgent
from tests.memory.test_api import SECRET, auth
from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import LiveServer, live_server, webrtc_config
from voicegate.internal.agent.client import AgentChatModel
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.call_access import CALL_TOKEN_HEADER
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.server.gateway import Gateway

SAM = CallerIdentity("sip", "+15551234567", "trusted peer")
LINE = "- The caller's locker code word is zanzibar."


@pytest.fixture
async def agent() -> AsyncIterator[FakeAgent]:
    async with FakeAgent(reply="Noted.") as fake:
        yield fake


@pytest.fixture
async def server(tmp_path: Path, agent: FakeAgent) -> AsyncIterator[LiveServer]:
    config = webrtc_config(tmp_path, jwt_secret=SECRET, patch_rate_per_min=0,
                           public_url="https://node-a.example.com/")
    config.memory.enabled = True
    config.memory.provider = "memory"
    config.llm.provider = "agent"
    config.agent.url = agent.url + "/agent"
    async with live_server(config, stt=ScriptedStt([]), model=AgentChatModel(config.agent)) as live:
        yield live



async def test_the_agent_edits_the_phone_callers_memory_only_while_the_call_lives(
        server: LiveServer, agent: FakeAgent) -> None:
    gateway: Gateway = server.gateway
    assert gateway.memory is not None and gateway.sessions is not None and gateway.session_memory is not None
    owner = gateway.memory.owner_key(SAM)
    assert owner is not None
    await gateway.memory.edit(owner, "memory", "append", content=LINE, context=ChangeContext("api"))
    session = await gateway.open_session(SAM, "sip")
    pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
    async with server.http() as http, LocalCall(pipeline, speed=30.0) as live:
        await live.wait_agent_quiet(100)
        for said in ("my locker code word zanzibar still works", "and I like green tea"):
            pipeline.submit_text(said)
            await live.wait_agent_quiet(100)
        access = agent.requests[-1].body["memory_access"]
        assert access == {"token": access["token"], "header": CALL_TOKEN_HEADER,
                          "url": "https://node-a.example.com/api/memory"}
        call_token = {CALL_TOKEN_HEADER: access["token"]}
        read = await http.get("/api/memory", headers=call_token)
        assert read.status_code == 200 and "zanzibar" in read.json()["documents"]["memory"]["content"]
        # The agent removes the fact and saves a preference, for the caller it is talking to.
        removed = await http.patch("/api/memory", headers=call_token,
                                   json={"document": "memory", "action": "replace", "old_text": LINE, "new_text": ""})
        assert removed.status_code == 200 and removed.json()["changed"] is True, removed.text
        added = await http.patch("/api/memory", headers=call_token,
                                 json={"document": "user", "action": "append", "content": "- Prefers email."})
        assert added.status_code == 200, added.text
        # No way to name anyone else with it: the body has no owner, and a JWT beside it changes nothing.
        named = await http.patch("/api/memory", headers=call_token,
                                 json={"document": "memory", "action": "append", "content": "- x",
                                       "caller": "sip:+15559999999"})
        assert named.status_code == 422
        beside = await http.get("/api/memory", headers={**call_token, **auth("alice")})
        assert "Prefers email" in beside.text
        assert "Prefers email" not in (await http.get("/api/memory", headers=auth("alice"))).text
        forged = await http.get("/api/memory", headers={CALL_TOKEN_HEADER: access["token"] + "x"})
        assert forged.status_code == 401
    await gateway.sessions.end(session, "caller hung up")
    await gateway.sessions.drain()
    await gateway.session_memory.drain(30)
    async with server.http() as http:
        after = await http.get("/api/memory", headers=call_token)
        assert after.status_code == 401  # valid only while the call lives
    documents = await gateway.memory.latest(owner)
    assert documents["user"].content == "- Prefers email."
    memory = documents["memory"].content
    assert "green tea" in memory and "zanzibar" not in memory  # the call's digest respects the agent's delete
    assert all("memory_access" not in r.body or r.body["memory_access"]["token"] == access["token"]
               for r in agent.requests)


async def test_an_anonymous_call_gives_the_agent_no_access_and_an_erasure_refuses_it(
        server: LiveServer, agent: FakeAgent) -> None:
    gateway: Gateway = server.gateway
    assert gateway.memory is not None and gateway.sessions is not None
    anonymous = await gateway.open_session(CallerIdentity.anonymous("withheld"), "sip")
    sam = await gateway.open_session(SAM, "sip")
    for session in (anonymous, sam):
        pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
        async with LocalCall(pipeline, speed=30.0) as live:
            await live.wait_agent_quiet(100)
            pipeline.submit_text("hello")
            await live.wait_agent_quiet(100)
    first, second = (r.body for r in agent.requests if r.body.get("type") == "chat")
    assert "memory_access" not in first and "resource_id" not in first
    token = second["memory_access"]["token"]
    owner = gateway.memory.owner_key(SAM)
    assert owner is not None
    await gateway.memory.delete_owner(owner, source="api")
    async with server.http() as http:
        refused = await http.patch("/api/memory", headers={CALL_TOKEN_HEADER: token},
                                   json={"document": "memory", "action": "append", "content": "- Back again."})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "memory_erased"
    assert (await gateway.memory.latest(owner))["memory"].content == ""
    for session in (anonymous, sam):
        await gateway.sessions.end(session, "test over")
