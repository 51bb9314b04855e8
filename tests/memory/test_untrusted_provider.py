"""A provider's answers are data to check: bad results cannot corrupt documents, send events or break
/health; the runtime is the provider's only door (tool reads, trace ids); and changes made through any
provider reach the other nodes on the database."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psycopg
import pytest

from tests.memory.conftest import base_config, make_runtime
from tests.memory.test_api import SECRET, auth
from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import webrtc_config
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.base import ToolCall
from voicegate.internal.memory.provider import (
    ApplyResult,
    ChangeContext,
    Health,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    ProviderDescription,
    RevisionConflict,
    Scope,
)
from voicegate.internal.memory.providers.pgvector import CHANGE_CHANNEL
from voicegate.internal.memory.results import CEILING_FACTOR
from voicegate.internal.memory.runtime import MemoryUnavailable
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.tools.registry import ToolContext
from voicegate.server.app import create_gateway_application
from voicegate.server.gateway import Gateway

API = ChangeContext("api")
ALICE = CallerIdentity("jwt", "alice")


class ScriptedProvider:
    """A provider whose answers the test writes: list() returns `listed`, apply() returns `answer(changes)`."""

    def __init__(self) -> None:
        self.listed: Any = []
        self.answer: Callable[[Sequence[MemoryChange]], Any] = self.store
        self.healthy: Callable[[], Any] = lambda: Health(True, "scripted store")
        self.contexts: list[ChangeContext] = []

    def describe(self) -> ProviderDescription:
        return ProviderDescription("scripted", "Scripted")

    def list(self, owner_id: str, options: ListOptions) -> Any:
        if isinstance(self.listed, Exception):
            raise self.listed
        return self.listed

    def store(self, changes: Sequence[MemoryChange]) -> ApplyResult:
        written = [MemoryDocument(c.scope, c.content, c.base_revision + 1) for c in changes]
        self.listed = written + [d for d in self.listed if d.scope not in {c.scope for c in changes}]
        return ApplyResult(len(written), written)

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> Any:
        self.contexts.append(context)
        return self.answer(changes)

    def health(self) -> Any:
        return self.healthy()


def audit_outcomes(tmp_path: Path) -> list[str]:
    lines = (tmp_path / "memory-audit.jsonl").read_text().splitlines()
    return [json.loads(line)["outcome"] for line in lines]


async def test_garbage_from_list_never_reaches_the_prompt_or_another_scope(tmp_path: Path) -> None:
    provider = ScriptedProvider()
    runtime = make_runtime(provider, tmp_path)
    owner = runtime.owner_key(ALICE)
    assert owner is not None
    provider.listed = [
        {"scope": "secrets", "content": "- another caller's plan", "revision": 1},
        MemoryDocument("memory", "- Likes tea.", 2),
        MemoryDocument("memory", "- A duplicate that must lose.", 9),
        SimpleNamespace(scope="user", content=None, revision=1),
        {"scope": "user", "content": "- Call me Al.", "revision": -3},
        {"scope": "user", "content": "- Call me Al.", "revision": True},
        "garbage", 42, None,
    ]
    docs = runtime.documents(owner)
    assert set(docs) == {"user", "memory"}
    assert docs["memory"].content == "- Likes tea." and docs["memory"].revision == 2
    assert docs["user"] == MemoryDocument("user")
    assert runtime.projection(owner) == ("", "- Likes tea.")

    provider.listed = [{"scope": "user", "content": "- Keep replies short.\n" * 2000, "revision": 4}]
    huge = runtime.documents(owner)["user"]
    assert huge.revision == 4 and 0 < len(huge.content) <= CEILING_FACTOR * runtime.config.max_chars
    assert huge.content.endswith("- Keep replies short.")  # cut at a line end

    for answer in (17, "not a list", {"user": "x"}, RuntimeError("- Alice's card is 4111")):
        provider.listed = answer
        assert runtime.documents(owner) == {"user": MemoryDocument("user"), "memory": MemoryDocument("memory")}
        assert runtime.projection(owner) == ("", "")


async def test_an_apply_that_changed_nothing_is_a_no_op(tmp_path: Path) -> None:
    provider = ScriptedProvider()
    runtime = make_runtime(provider, tmp_path)
    owner = runtime.owner_key(ALICE)
    assert owner is not None
    before = MemoryDocument("memory", "- Likes tea.", 1)
    provider.listed = [before]
    told: list[str] = []
    runtime.subscribe(owner, lambda: told.append("listener"))
    runtime.on_changed.append(lambda _owner: told.append("hook"))
    answers: list[Any] = [
        ApplyResult(0, [MemoryDocument("memory", "- Likes tea.\n- Likes coffee.", 2)]),  # says: nothing changed
        ApplyResult(1, []),  # changed, but will not say to what
        ApplyResult(1, [MemoryDocument("user", "- Call me Al.", 1)]),  # not the document it was asked to write
        ApplyResult(1, [{"scope": "secrets", "content": "x", "revision": 1}]),
        ApplyResult(-2, [MemoryDocument("memory", "- x", 2)]),
        SimpleNamespace(changed="1", documents=[MemoryDocument("memory", "- x", 2)]),
        None,
    ]
    for answer in answers:
        provider.answer = lambda _changes, answer=answer: answer
        outcome = await runtime.edit(owner, "memory", "append", content="- Likes coffee.", context=API)
        assert not outcome.changed, answer
        assert outcome.documents["memory"] == before  # what was read before, never an empty or stale list
        assert outcome.documents["user"] == MemoryDocument("user")
    unchanged = await runtime.set_document(owner, "memory", "- Replaced.", ChangeContext("digest"))
    assert not unchanged.changed and unchanged.documents["memory"] == before
    assert told == []
    outcomes = audit_outcomes(tmp_path)
    assert "applied" not in outcomes and outcomes.count("unchanged") == len(answers) + 1

    # A real change, returned with a duplicate and a stray scope: the first valid document per scope wins.
    after = MemoryDocument("memory", "- Likes tea.\n- Likes coffee.", 2)
    provider.answer = lambda _changes: ApplyResult(1, [after, MemoryDocument("memory", "- not this", 7),
                                                       {"scope": "secrets", "content": "x", "revision": 1}])
    outcome = await runtime.edit(owner, "memory", "append", content="- Likes coffee.", context=API)
    assert outcome.changed and outcome.documents == {"user": MemoryDocument("user"), "memory": after}
    assert told == ["listener", "hook"]
    assert audit_outcomes(tmp_path)[-1] == "applied"


async def test_an_unreadable_snapshot_is_never_written_over(tmp_path: Path) -> None:
    provider = ScriptedProvider()
    runtime = make_runtime(provider, tmp_path)
    owner = runtime.owner_key(ALICE)
    assert owner is not None
    provider.listed = RuntimeError("the store is down")
    with pytest.raises(MemoryUnavailable):
        await runtime.edit(owner, "memory", "append", content="- Likes tea.", context=API)
    assert provider.contexts == []  # an unreadable document was not taken for an empty one and replaced


def gateway_config(tmp_path: Path) -> Any:
    config = webrtc_config(tmp_path, jwt_secret=SECRET, patch_rate_per_min=0)
    config.memory.enabled = True
    config.telemetry.traces = "memory"
    return config


async def test_a_bad_provider_sends_no_event_and_cannot_break_health(tmp_path: Path) -> None:
    provider = ScriptedProvider()
    provider.answer = lambda _changes: ApplyResult(0, [])
    app = create_gateway_application(gateway_config(tmp_path), stt=ScriptedStt([]), memory_provider=provider)
    gateway: Gateway = app.state.gateway
    async with app.router.lifespan_context(app):
        assert gateway.sessions is not None and gateway.session_memory is not None and gateway.memory is not None
        announced: list[str] = []
        gateway.memory.on_changed.append(announced.append)
        session = await gateway.open_session(ALICE, "talk")
        sink = CollectingSink()
        pipeline = gateway.new_pipeline(session, 16000, sink)
        async with LocalCall(pipeline, speed=6.0) as live:
            await live.wait_agent_quiet(100)
            pipeline.submit_text("remember that I like green tea")
            await live.wait_agent_quiet(100)
        await gateway.sessions.end(session, "caller hung up")
        await gateway.sessions.drain()
        await gateway.session_memory.drain(10)
        assert {c.source for c in provider.contexts} >= {"tool", "digest"}  # both writes were tried
        assert not any(e.type == "memory.changed" for e in sink.events) and announced == []

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            healthy = await http.get("/health")
            assert healthy.status_code == 200
            memory = healthy.json()["components"]["memory"]
            assert memory.pop("outbox")["stuck"] is False
            assert memory == {"ok": True, "provider": "scripted", "detail": "scripted store", "pending_writes": 0}

            def leaky() -> Health:
                raise RuntimeError("Alice's card is 4111 1111 1111 1111")

            for health, detail in ((leaky, "RuntimeError"), (lambda: "fine", "health() returned str, not Health"),
                                   (lambda: Health(False, "disk full"), "disk full")):
                provider.healthy = health
                response = await http.get("/health")
                assert response.status_code == 503 and response.json()["status"] == "degraded"
                memory = response.json()["components"]["memory"]
                assert memory["ok"] is False and memory["detail"] == detail
                assert "4111" not in response.text and "Alice" not in response.text


async def test_tool_read_honours_document_and_writes_carry_the_turns_trace(tmp_path: Path) -> None:
    provider = ScriptedProvider()
    provider.listed = [MemoryDocument("user", "- Keep replies short.", 1)]
    app = create_gateway_application(gateway_config(tmp_path), stt=ScriptedStt([]), memory_provider=provider)
    gateway: Gateway = app.state.gateway
    async with app.router.lifespan_context(app):
        assert gateway.sessions is not None and gateway.telemetry.spans is not None
        session = await gateway.open_session(ALICE, "talk")
        context = ToolContext(session.id, None, 1, extras={"session": session})

        async def read(**arguments: Any) -> dict[str, Any]:
            result: dict[str, Any] = json.loads(await gateway.tools.run(ToolCall("t", "memory", arguments),
                                                                        context))
            return result

        assert set((await read(action="read"))["documents"]) == {"user", "memory"}
        only_user = await read(action="read", document="user")
        assert only_user == {"documents": {"user": {"content": "- Keep replies short.", "revision": 1}}}
        assert set((await read(action="read", document="memory"))["documents"]) == {"memory"}
        assert "error" in await read(action="read", document="secrets")

        # A write the model makes inside a turn carries that turn's trace id.
        pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
        async with LocalCall(pipeline, speed=6.0) as live:
            await live.wait_agent_quiet(100)
            pipeline.submit_text("remember that I like green tea")
            await live.wait_agent_quiet(100)
        await gateway.sessions.end(session, "caller hung up")
        await gateway.sessions.drain()
        turns = [s for s in gateway.telemetry.spans.get_finished_spans() if s.name == "turn"]
        tool_writes = [c for c in provider.contexts if c.source == "tool"]
        assert tool_writes and turns
        assert tool_writes[0].trace_id in {format(turn.context.trace_id, "032x") for turn in turns}

        # An API write carries the trace id of its own span.
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            response = await http.patch("/api/memory", headers=auth("bob"),
                                        json={"document": "user", "action": "append", "content": "- Call me B."})
        assert response.status_code == 200, response.text
        writes = [s for s in gateway.telemetry.spans.get_finished_spans() if s.name == "memory.write"]
        api = [c for c in provider.contexts if c.source == "api"]
        assert api and api[0].trace_id == format(writes[-1].context.trace_id, "032x")
    audit = [json.loads(line) for line in (tmp_path / "data" / "memory-audit.jsonl").read_text().splitlines()]
    assert {e.get("trace_id") for e in audit if e["source"] in ("tool", "api")} == {
        tool_writes[0].trace_id, api[0].trace_id}


class SharedStore:
    """Memory kept outside any one process, as a Redis- or HTTP-backed provider would keep it."""

    def __init__(self) -> None:
        self.documents: dict[str, dict[Scope, MemoryDocument]] = {}


class CachingProvider:
    """A custom provider over a shared store with a per-process cache, like the built-in ones; it sends no
    change notices of its own."""

    def __init__(self, store: SharedStore) -> None:
        self.store = store
        self._cache: dict[str, list[MemoryDocument]] = {}

    def describe(self) -> ProviderDescription:
        return ProviderDescription("shared", "A shared store")

    def list(self, owner_id: str, options: ListOptions) -> list[MemoryDocument]:
        return self._cache.get(owner_id, [])

    async def prefetch(self, owner_id: str) -> None:
        self._cache[owner_id] = list(self.store.documents.get(owner_id, {}).values())

    def invalidate(self, owner_id: str) -> None:
        self._cache.pop(owner_id, None)

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult:
        owned = self.store.documents.setdefault(owner_id, {})
        written = []
        for change in changes:
            current = owned.get(change.scope, MemoryDocument(change.scope)).revision
            if current != change.base_revision:
                raise RevisionConflict(change.scope, current)
            owned[change.scope] = MemoryDocument(change.scope, change.content, current + 1)
            written.append(owned[change.scope])
        self._cache[owner_id] = list(owned.values())
        return ApplyResult(len(written), written)


@contextlib.asynccontextmanager
async def node(tmp_path: Path, db: str, provider: Any = None) -> AsyncIterator[Gateway]:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.memory.enabled = True
    config.memory.embedding = "none"
    config.memory.owner_key_secret = "shared-between-nodes"
    config.pgvector.connection_string = db
    gateway = Gateway(config, stt=ScriptedStt([]), memory_provider=provider)
    await gateway.start()
    try:
        assert gateway.memory_bus is not None
        await asyncio.wait_for(gateway.memory_bus.listening.wait(), 30)
        yield gateway
    finally:
        await gateway.stop()


async def test_a_change_through_any_provider_reaches_the_other_node(tmp_path: Path, fresh_db: str) -> None:
    store = SharedStore()
    async with node(tmp_path / "a", fresh_db, CachingProvider(store)) as a, \
            node(tmp_path / "b", fresh_db, CachingProvider(store)) as b:
        assert a.memory is not None and b.memory is not None and a.memory_bus is not None
        assert a.memory_bus.announces and a.memory_bus.node_id != b.memory_bus.node_id
        alice, bob = b.memory.owner_key(ALICE), b.memory.owner_key(CallerIdentity("jwt", "bob"))
        assert alice is not None and bob is not None and alice == a.memory.owner_key(ALICE)
        await b.memory.prefetch(alice)  # node B holds a cached copy, about to go stale
        heard_on_b = asyncio.Event()
        b.memory.subscribe(alice, heard_on_b.set)
        bob_heard: list[str] = []
        b.memory.subscribe(bob, lambda: bob_heard.append("bob"))
        told_on_a: list[str] = []
        a.memory.subscribe(alice, lambda: told_on_a.append("a"))

        await a.memory.edit(alice, "memory", "append", content="- Alice moved to Lisbon.", context=API)
        await asyncio.wait_for(heard_on_b.wait(), 15)
        assert "Lisbon" in b.memory.documents(alice)["memory"].content  # B dropped and reloaded its copy
        await asyncio.sleep(0.3)  # A's own notice comes back to it too, and is ignored
        assert told_on_a == ["a"] and bob_heard == [] and a.memory_bus.sent == 1


async def test_the_postgres_provider_announces_each_change_once(tmp_path: Path, fresh_db: str) -> None:
    async with node(tmp_path, fresh_db) as gateway, \
            await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as listener:
        assert gateway.memory is not None and gateway.memory_bus is not None
        assert not gateway.memory_bus.announces  # it notifies in its own transactions
        await listener.execute(f"LISTEN {CHANGE_CHANNEL}")
        owner = gateway.memory.owner_key(ALICE)
        assert owner is not None
        await gateway.memory.edit(owner, "memory", "append", content="- Alice moved to Lisbon.", context=API)
        notices = [n.payload async for n in listener.notifies(timeout=1.0)]
    assert len([payload for payload in notices if owner in payload]) == 1


class DictDescribingProvider(ScriptedProvider):
    """A hand-written provider that describes itself with a plain dict, as the seed's JSON spells it."""

    def __init__(self, description: dict[str, Any]) -> None:
        super().__init__()
        self.description = description

    def describe(self) -> Any:
        return self.description

    async def query(self, owner_id: str, text: str, options: Any, context: Any = None) -> Any:
        return SimpleNamespace(memories=["The caller's name is Sam."])


async def test_a_provider_describing_itself_with_a_dict_is_read_as_the_version_it_declares(tmp_path: Path) -> None:
    for spelling in ({"key": "dicty", "label": "Dicty", "protocolVersion": 2,
                      "capabilities": {"semanticQuery": True}},
                     {"key": "dicty", "label": "Dicty", "protocol_version": 2,
                      "capabilities": {"semantic_query": True}}):
        runtime = make_runtime(DictDescribingProvider(spelling), tmp_path)
        assert runtime.capabilities.semantic_query
        assert runtime.describe().protocol_version == 2 and runtime.describe().key == "dicty"
        assert await runtime.query("owner", "what is my name") == ["The caller's name is Sam."]
    # No version, or nonsense: version 1, every capability off, as for any v1 provider.
    for v1 in ({"key": "old", "capabilities": {"semanticQuery": True}},
               {"key": "old", "protocolVersion": "two", "capabilities": {"semanticQuery": True}}):
        runtime = make_runtime(DictDescribingProvider(v1), tmp_path)
        assert not runtime.capabilities.semantic_query and runtime.describe().protocol_version == 1
