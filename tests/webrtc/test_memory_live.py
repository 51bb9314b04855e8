"""Memory edits reach live WebRTC calls: the owner's DataChannel hears memory.changed (nobody else's
does), a no-op edit sends nothing, and the next model request no longer contains a deleted fact."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import LiveServer, WhipClient, live_server, wait_until, webrtc_config
from voicegate.internal.config import Config
from voicegate.internal.identity.jwt import mint_token
from voicegate.internal.llm.openai import OpenAIChatModel

pytestmark = pytest.mark.slow
SECRET = "live-memory-secret-0123456789abcdefgh"


def token(subject: str) -> str:
    return mint_token(SECRET, subject, issuer="voicegate", audience="voicegate", ttl_s=600)


async def test_an_api_edit_reaches_the_owners_live_call_and_its_next_model_request(tmp_path: Path) -> None:
    config = webrtc_config(tmp_path, jwt_secret=SECRET, patch_rate_per_min=0)
    config.memory.enabled = True
    config.memory.provider = "memory"
    async with FakeOpenAI() as fake:
        model = OpenAIChatModel(config.openai, base_url=fake.url + "/v1", api_key="k")
        async with live_server(config, stt=ScriptedStt([]), model=model) as server:
            headers = {"Authorization": f"Bearer {token('alice')}"}
            async with server.http() as http:
                await http.patch("/api/memory", headers=headers, json={
                    "document": "memory", "action": "append", "content": "- The caller has a cat named Tom."})
                alice, bob = WhipClient(), WhipClient()
                assert (await alice.dial(http, token=token("alice"))).status_code == 201
                assert (await bob.dial(http, token=token("bob"))).status_code == 201
                await alice.wait_channel_open()
                await bob.wait_channel_open()
                try:
                    alice.send({"type": "text", "text": "what is my cat called"})
                    await wait_until(lambda: len(fake.requests) == 1, what="the first model request")
                    assert "cat named Tom" in fake.requests[0]["messages"][0]["content"]

                    # A no-op edit sends nothing; a real one reaches alice's call only.
                    await http.patch("/api/memory", headers=headers, json={
                        "document": "memory", "action": "replace", "old_text": "Tom", "new_text": "Tom"})
                    deleted = await http.patch("/api/memory", headers=headers, json={
                        "document": "memory", "action": "replace",
                        "old_text": "- The caller has a cat named Tom.", "new_text": ""})
                    assert deleted.json()["changed"] is True
                    await alice.wait_for(lambda e: e["type"] == "memory.changed")
                    await asyncio.sleep(1.0)
                    assert len(alice.of_type("memory.changed")) == 1
                    assert bob.of_type("memory.changed") == []

                    alice.send({"type": "text", "text": "what is my cat called"})
                    await wait_until(lambda: len(fake.requests) == 2, what="the second model request")
                    assert "Tom" not in fake.requests[1]["messages"][0]["content"]
                finally:
                    await alice.close()
                    await bob.close()
        await model.aclose()


async def browser_call(server: LiveServer, subject: str | None, text: str, *, hear_reply: bool = True) -> list[str]:
    """One browser call: dial (with a JWT for `subject`), hear the greeting, type one turn, hang up once
    the agent's reply has been heard (or, with `hear_reply=False`, as soon as the turn is taken: a caller
    who hangs up while the agent still speaks)."""
    client = WhipClient()
    async with server.http() as http:
        response = await client.dial(http, token=token(subject) if subject else None)
        assert response.status_code == 201
        await client.wait_channel_open()
        await client.wait_for(lambda e: e["type"] == "transcript" and e["role"] == "agent")
        client.send({"type": "text", "text": text})
        if hear_reply:
            await client.wait_for(lambda e: e["type"] == "transcript" and e["role"] == "agent"
                                  and e["text"] != client.of_type("transcript")[0]["text"])
        else:
            await client.wait_for(lambda e: e["type"] == "transcript" and e["role"] == "user")
        hang_up = await client.hang_up(http, {"Authorization": f"Bearer {token(subject)}"} if subject else {})
        assert hang_up.status_code == 200, hang_up.text  # the call ends now, not when its grace runs out
    await client.close()
    assert server.gateway.sessions is not None and server.gateway.session_memory is not None
    await server.gateway.sessions.drain()
    await server.gateway.session_memory.drain(10)
    return [e["text"] for e in client.of_type("transcript") if e["role"] == "agent"]


def memory_server_config(tmp_path: Path, secret: str) -> Config:
    config = webrtc_config(tmp_path, jwt_secret=secret, patch_rate_per_min=0)
    config.pipeline.greeting = "Hello, how can I help?"
    config.pipeline.returning_greeting = "Welcome back, {name}! How can I help you today?"
    config.memory.enabled = True
    config.memory.provider = "memory"
    return config


async def test_a_jwt_caller_is_remembered_across_browser_calls_and_nobody_else_is(tmp_path: Path) -> None:
    async with live_server(memory_server_config(tmp_path, SECRET), stt=ScriptedStt([])) as server:
        first = await browser_call(server, "alice", "my name is alice")
        assert first == ["Hello, how can I help?", "Nice to meet you, Alice."]
        again = await browser_call(server, "alice", "what is my name")
        assert again == ["Welcome back, Alice! How can I help you today?", "Your name is Alice."]
        bob = await browser_call(server, "bob", "what is my name")
        assert bob == ["Hello, how can I help?", "I don't know your name yet."]


async def test_an_anonymous_browser_call_gets_and_leaves_nothing(tmp_path: Path) -> None:
    async with live_server(memory_server_config(tmp_path, ""), stt=ScriptedStt([])) as server:
        lines = await browser_call(server, None, "my name is mallory")
        assert lines == ["Hello, how can I help?", "Nice to meet you, Mallory."]
        again = await browser_call(server, None, "what is my name")
        assert again == ["Hello, how can I help?", "I don't know your name yet."]
        memory = server.gateway.memory
        assert memory is not None
        assert await memory.provider.owners() == []


async def test_facts_kept_through_the_api_survive_many_browser_calls(tmp_path: Path) -> None:
    """Real WebRTC calls, each leaving a long digest line, between facts remembered through PATCH
    /api/memory: no fact is evicted by the digests and no "remember" is refused while the facts fit."""
    config = memory_server_config(tmp_path, SECRET)
    config.memory.max_chars = 800
    async with live_server(config, stt=ScriptedStt([])) as server:
        facts: list[str] = []
        headers = {"Authorization": f"Bearer {token('carol')}"}
        for n in range(8):
            said = f"call {n}: I ordered a kettle and a toaster and a blender and the parcel is very late again"
            await browser_call(server, "carol", said, hear_reply=False)  # the reply is long: no need to hear it
            fact = f"- Carol's order {n} is parcel KX{n:03d}."
            async with server.http() as http:
                response = await http.patch("/api/memory", headers=headers,
                                            json={"document": "memory", "action": "append", "content": fact})
            assert response.status_code == 200, f"remembering fact {n} was refused: {response.text}"
            facts.append(fact)
        content = ""
        for _attempt in range(100):  # the last call's digest lands off the call path
            async with server.http() as http:
                content = (await http.get("/api/memory", headers=headers)).json()["documents"]["memory"]["content"]
            if "call 7" in content:
                break
            await asyncio.sleep(0.2)
    head = content.split("## Recent calls")[0]
    assert [line for line in head.splitlines() if line.startswith("- Carol's order")] == facts
    assert "## Recent calls" in content and "call 7" in content, content  # the newest digest still fits
    assert len(content) <= 800
