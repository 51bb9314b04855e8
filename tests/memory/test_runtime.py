"""FrontendMemoryRuntime over every built-in provider: edits, revisions, isolation, expiry, deletion, audit."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.memory.conftest import make_runtime
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.memory.runtime import EditRejected, FrontendMemoryRuntime, SensitiveContent, StaleRevision

API = ChangeContext("api")
SAM = CallerIdentity("sip", "+15551234567")
ALICE = CallerIdentity("jwt", "alice")


def owner(runtime: FrontendMemoryRuntime, identity: CallerIdentity) -> str:
    key = runtime.owner_key(identity)
    assert key is not None
    return key


async def test_anonymous_callers_have_no_owner_and_keys_never_collide(runtime: FrontendMemoryRuntime) -> None:
    assert runtime.owner_key(CallerIdentity.anonymous()) is None
    assert owner(runtime, CallerIdentity("jwt", "+15551234567")) != owner(runtime, SAM)
    assert "+1555" not in owner(runtime, SAM)


async def test_append_replace_and_delete_through_the_runtime(runtime: FrontendMemoryRuntime) -> None:
    key = owner(runtime, SAM)
    first = await runtime.edit(key, "memory", "append", content="- The caller's name is Sam.", context=API)
    assert first.changed and first.documents["memory"].revision == 1
    second = await runtime.edit(key, "memory", "append", content="- On the pro plan.", context=API)
    assert second.documents["memory"].content == "- The caller's name is Sam.\n- On the pro plan."
    third = await runtime.edit(key, "memory", "replace", old_text="pro", new_text="enterprise", context=API)
    assert third.documents["memory"].revision == 3
    await runtime.edit(key, "memory", "replace", old_text="- The caller's name is Sam.\n", new_text="", context=API)
    assert (await runtime.latest(key))["memory"].content == "- On the enterprise plan."


async def test_stale_expected_revision_is_refused_with_the_current_documents(runtime: FrontendMemoryRuntime) -> None:
    key = owner(runtime, ALICE)
    await runtime.edit(key, "user", "append", content="- Keep replies short.", context=API)
    with pytest.raises(StaleRevision) as stale:
        await runtime.edit(key, "user", "append", content="- Call me Al.", expected_revision=0, context=API)
    assert stale.value.status == 409
    assert stale.value.documents["user"].revision == 1
    assert (await runtime.latest(key))["user"].content == "- Keep replies short."


async def test_missing_and_ambiguous_edits_fail_safely(runtime: FrontendMemoryRuntime) -> None:
    key = owner(runtime, ALICE)
    await runtime.edit(key, "memory", "append", content="- Likes tea.\n- Likes coffee.", context=API)
    for old, code in (("cocoa", "edit_not_found"), ("Likes", "ambiguous_edit")):
        with pytest.raises(EditRejected) as rejected:
            await runtime.edit(key, "memory", "replace", old_text=old, new_text="x", context=API)
        assert rejected.value.code == code and rejected.value.status == 422
    assert (await runtime.latest(key))["memory"].revision == 1


async def test_sensitive_content_is_refused(runtime: FrontendMemoryRuntime) -> None:
    key = owner(runtime, ALICE)
    for text in ("- Card 4111 1111 1111 1111.", "- My password is hunter2", "- SSN 123-45-6789"):
        with pytest.raises(SensitiveContent) as refused:
            await runtime.edit(key, "memory", "append", content=text, context=API)
        assert "never stored" in refused.value.message
    assert (await runtime.latest(key))["memory"].revision == 0


async def test_owners_are_isolated(runtime: FrontendMemoryRuntime) -> None:
    await runtime.edit(owner(runtime, ALICE), "memory", "append", content="- Alice's secret plan.", context=API)
    bob = owner(runtime, CallerIdentity("jwt", "bob"))
    assert (await runtime.latest(bob))["memory"].content == ""
    assert runtime.projection(bob) == ("", "")


async def test_listeners_hear_real_changes_only(runtime: FrontendMemoryRuntime) -> None:
    key = owner(runtime, ALICE)
    heard: list[str] = []
    unsubscribe = runtime.subscribe(key, lambda: heard.append("changed"))
    runtime.subscribe(owner(runtime, CallerIdentity("jwt", "bob")), lambda: heard.append("bob"))
    await runtime.edit(key, "memory", "append", content="- Likes tea.", context=API)
    await runtime.edit(key, "memory", "replace", old_text="tea", new_text="tea", context=API)  # no-op
    with pytest.raises(EditRejected):
        await runtime.edit(key, "memory", "replace", old_text="cocoa", new_text="x", context=API)  # failure
    assert heard == ["changed"]
    unsubscribe()
    await runtime.edit(key, "memory", "append", content="- Likes cake.", context=API)
    assert heard == ["changed"]


async def test_concurrent_writers_with_the_same_revision_exactly_one_wins(runtime: FrontendMemoryRuntime) -> None:
    key = owner(runtime, ALICE)
    await runtime.edit(key, "memory", "append", content="- Start.", context=API)

    async def writer(n: int) -> bool:
        try:
            await runtime.edit(key, "memory", "append", content=f"- Writer {n}.", expected_revision=1, context=API)
            return True
        except StaleRevision:
            return False

    results = await asyncio.gather(*(writer(n) for n in range(8)))
    assert results.count(True) == 1
    assert (await runtime.latest(key))["memory"].revision == 2


async def test_revision_conflicts_from_another_writer_are_retried_for_tool_edits(provider: Any, tmp_path: Path) -> None:
    # Two runtimes over one store stand for two nodes; each edit starts from the latest document.
    one, two = make_runtime(provider, tmp_path), make_runtime(provider, tmp_path)
    key = owner(one, ALICE)
    await asyncio.gather(*(rt.edit(key, "memory", "append", content=f"- Fact {n}.", context=ChangeContext("tool"))
                           for n, rt in enumerate([one, two, one, two])))
    content = (await one.latest(key))["memory"].content
    assert sorted(content.splitlines()) == [f"- Fact {n}." for n in range(4)]


async def test_the_audit_log_records_outcomes_never_text(runtime: FrontendMemoryRuntime, tmp_path: Path) -> None:
    key = owner(runtime, SAM)
    await runtime.edit(key, "memory", "append", content="- Sam likes oolong.", context=ChangeContext("tool", "s1", 2))
    with pytest.raises(StaleRevision):
        await runtime.edit(key, "memory", "append", content="- Sam hates oolong.", expected_revision=0, context=API)
    with pytest.raises(SensitiveContent):
        await runtime.edit(key, "memory", "append", content="- card 4111111111111111", context=API)
    lines = [json.loads(line) for line in (tmp_path / "memory-audit.jsonl").read_text().splitlines()]
    assert [(e["source"], e["outcome"]) for e in lines] == [("tool", "applied"), ("api", "stale"), ("api", "refused")]
    assert lines[0]["revision"] == 1 and lines[0]["session_id"] == "s1" and lines[1]["error"] == "stale_revision"
    raw = (tmp_path / "memory-audit.jsonl").read_text()
    assert "oolong" not in raw and "4111" not in raw and key not in raw and "+1555" not in raw


async def test_delete_owner_removes_everything_and_reports_counts(runtime: FrontendMemoryRuntime) -> None:
    key = owner(runtime, SAM)
    await runtime.edit(key, "memory", "append", content="- Name: Sam.", context=API)
    await runtime.edit(key, "user", "append", content="- Keep replies short.", context=API)
    removed = await runtime.delete_owner(key)
    assert sum(removed.values()) >= 2
    assert (await runtime.latest(key))["memory"].revision == 0
    assert sum((await runtime.delete_owner(key)).values()) == 0


async def test_expired_memory_is_never_served_and_is_purged(provider: Any, tmp_path: Path) -> None:
    runtime = make_runtime(provider, tmp_path, retention_days=0.5 / 86400)  # half a second
    key = owner(runtime, SAM)
    await runtime.edit(key, "memory", "append", content="- Short-lived fact.", context=API)
    assert runtime.documents(key)["memory"].content
    await asyncio.sleep(1.0)
    assert runtime.documents(key)["memory"].content == ""  # even the cache refuses it
    assert (await runtime.latest(key))["memory"].content == ""
    removed = await runtime.purge_expired()
    assert sum(removed.values()) >= 1
    # A new write after expiry starts a fresh document, revision 1.
    again = await runtime.edit(key, "memory", "append", content="- New fact.", context=API)
    assert again.documents["memory"].revision == 1 and again.documents["memory"].content == "- New fact."
