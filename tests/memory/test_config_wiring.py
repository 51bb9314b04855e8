"""The `[memory]` keys that act with nobody asking, through the real gateway and PostgreSQL: the periodic
retention sweeper, the audit log's path, the deployer's sensitive patterns, and the provider's close()."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.memory.test_calls import SAM, call, documents, memory_config
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.memory.errors import SensitiveContent
from voicegate.internal.memory.provider import ChangeContext
from voicegate.server.gateway import Gateway

API = ChangeContext("api")


async def wait_for(condition: Callable[[], Any], timeout: float = 60.0) -> None:
    """Poll `condition` (sync or async) until it holds; a deadline, never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


@pytest.fixture
async def gateway_with(tmp_path: Path, fresh_db: str) -> AsyncIterator[Any]:
    started: list[Gateway] = []

    async def make(**memory: Any) -> Gateway:
        gateway = Gateway(memory_config(tmp_path, fresh_db, **memory), stt=ScriptedStt([]))
        await gateway.start()
        started.append(gateway)
        return gateway

    yield make
    for gateway in started:
        await gateway.stop()


def owner_of(gateway: Gateway) -> str:
    assert gateway.memory is not None
    owner = gateway.memory.owner_key(SAM)
    assert owner is not None
    return owner


async def stored_rows(uri: str, owner: str) -> int:
    """Rows of `owner` on disk, expired or not (reads hide expired rows; only deletion removes them)."""
    async with await psycopg.AsyncConnection.connect(uri) as conn:
        cursor = await conn.execute("SELECT count(*) FROM memories WHERE owner_key = %s", (owner,))
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_the_running_sweeper_deletes_expired_memory_with_nobody_asking(gateway_with: Any,
                                                                              fresh_db: str) -> None:
    # Records live 2 s; the sweeper runs every 0.2 s. Nothing below reads, writes or purges after the edit.
    gateway = await gateway_with(retention_days=2.0 / 86400, sweep_interval_s=0.2)
    assert gateway.memory is not None
    owner = owner_of(gateway)
    written = await gateway.memory.edit(owner, "memory", "append", content="- Short-lived fact.", context=API)
    assert written.documents["memory"].revision == 1
    await wait_for(lambda: gone(fresh_db, owner))
    assert gateway.memory.documents(owner)["memory"].content == ""


async def gone(uri: str, owner: str) -> bool:
    return await stored_rows(uri, owner) == 0


async def test_audit_lines_go_to_the_configured_path_and_hold_no_memory_text(gateway_with: Any,
                                                                             tmp_path: Path) -> None:
    audit_path = tmp_path / "elsewhere" / "audit.jsonl"
    gateway = await gateway_with(audit_path=str(audit_path))
    assert gateway.memory is not None
    owner = owner_of(gateway)
    await gateway.memory.edit(owner, "memory", "append", content="- The caller's dog is called Biscuit.",
                              context=API)
    await gateway.memory.edit(owner, "memory", "replace", old_text="Biscuit", new_text="Pepperoni", context=API)
    await gateway.memory.edit(owner, "user", "append", content="- Address the caller as Captain Marlowe.",
                              context=API)
    await gateway.memory.edit(owner, "user", "replace", old_text="- Address the caller as Captain Marlowe.",
                              new_text="", context=API)  # a delete
    await call(gateway, SAM, "my parrot Zanzibar squawks at night")  # the hang-up digest is audited too
    await gateway.memory.delete_owner(owner, source="api")
    raw = audit_path.read_text()
    entries = [json.loads(line) for line in raw.splitlines()]
    operations = [(e["source"], e["operation"], e["outcome"]) for e in entries]
    assert sum(1 for source, _, outcome in operations if source == "api" and outcome == "applied") >= 4
    assert any(source == "digest" for source, _, _ in operations)
    assert ("api", "delete_owner", "applied") in operations
    for text in ("Biscuit", "Pepperoni", "Marlowe", "Captain", "Zanzibar", "parrot", owner, "5551234567"):
        assert text not in raw
    assert not (tmp_path / "data" / "memory-audit.jsonl").exists()  # not also at the default path


async def test_a_configured_sensitive_pattern_never_reaches_stored_memory(gateway_with: Any) -> None:
    gateway = await gateway_with(sensitive_patterns=[r"\bZX-\d{4}\b"])
    assert gateway.memory is not None
    owner = owner_of(gateway)
    with pytest.raises(SensitiveContent):
        await gateway.memory.edit(owner, "memory", "append", content="- The caller's badge is ZX-4471.",
                                  context=API)
    await call(gateway, SAM, "my badge number is ZX-4471 and the door will not open")
    memory = (await documents(gateway, SAM))["memory"]
    assert "door will not open" in memory  # the call was remembered...
    assert "ZX-4471" not in memory and "[removed]" in memory  # ...without what the pattern matches


async def test_the_providers_close_runs_at_shutdown(tmp_path: Path, fresh_db: str) -> None:
    # pgvector with OpenAI embeddings: the provider owns an HTTP client that only its close() releases.
    async with FakeOpenAI(embedding_dims=256) as fake:
        config = memory_config(tmp_path, fresh_db, embedding="openai")
        config.openai.base_url, config.openai.api_key = fake.url + "/v1", "sk-test"
        gateway = Gateway(config, stt=ScriptedStt([]))
        await gateway.start()
        assert gateway.memory is not None
        owner = owner_of(gateway)
        await gateway.memory.edit(owner, "memory", "append", content="- Likes tea.", context=API)
        assert fake.embedding_requests  # the client is in use
        client = gateway.memory.provider.inner._embedder._client  # type: ignore[attr-defined]
        assert not client.is_closed()
        await gateway.stop()
        assert client.is_closed()
