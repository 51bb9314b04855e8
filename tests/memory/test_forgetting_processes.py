"""A fact deleted on one node while its caller's call is live on another stays deleted: two
real `voicegate serve` processes on one PostgreSQL, a real WebRTC call (aiortc, WHIP, typed turns on the
DataChannel) on node A, the delete through node B's PATCH /api/memory, the hang-up on A with every
hang-up writer on (digest line, reconciliation, session digest, each with a model that would say it
again); afterwards the fact is nowhere in the database's dump nor in either node's files."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tests.memory.processes import Cluster, VoicegateNode, wait_until
from tests.memory.test_erasure_processes import stored
from tests.memory.traces import files_containing, lines_containing, settle
from tests.webrtc.harness import WhipClient

pytestmark = pytest.mark.slow

WEB = "zoe"  # owner jwt:zoe, on both nodes (one owner-key secret)
MARKER = "zanzibar"
LINE = "- The caller's locker code word is zanzibar."
WEBRTC = {"enabled": True, "ice_hosts": ["127.0.0.1"]}


@pytest.fixture
async def cluster(tmp_path: Path, fresh_db: str) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, fresh_db) as nodes:
        yield nodes


def models_that_would_say_it_again(node: VoicegateNode) -> None:
    model = node.model
    model.reply_text = "Okay."
    model.summary_reply = "The caller talked about green tea and the locker word zanzibar."
    model.reconcile_reply = json.dumps({"edits": [
        {"document": "memory", "action": "append", "content": "- The caller's locker word is zanzibar."},
        {"document": "memory", "action": "append", "content": "- The caller likes green tea."}]})
    model.digest_reply = json.dumps({"topics": ["zanzibar locker", "green tea"], "gist": "green tea"})


async def test_a_fact_deleted_through_node_b_while_the_call_is_live_on_node_a_stays_deleted(
        cluster: Cluster) -> None:
    memory = {"auto": True, "session_digests": True}
    a = await cluster.node("a", webrtc=WEBRTC, memory=memory)
    b = await cluster.node("b", webrtc=WEBRTC, memory=memory)
    models_that_would_say_it_again(a)
    added = await b.patch_memory(WEB, document="memory", action="append", content=LINE)
    assert added.status_code == 200, added.text

    async def node_b_deletes_it() -> None:
        assert MARKER in a.model.turns[-1].prompt, "A's call never had the fact in its memory"
        assert await a.live_calls() == 1
        removed = await b.patch_memory(WEB, document="memory", action="replace", old_text=LINE, new_text="")
        assert removed.status_code == 200 and removed.json()["changed"] is True, removed.text

    await typed_call(a, WEB, ("my locker code word zanzibar still works", "I also like green tea"),
                     during=node_b_deletes_it)
    # Every hang-up step has run (the call's outbox entry is done with), then the database is quiet; what
    # they stored is the positive control.
    await wait_until(a.hangup_writes_done, 60, "the call's hang-up writes to be done with", a.tails)
    dump = await settle(cluster.db_uri, quiet_s=4, timeout_s=60)
    assert "likes green tea" in dump, "A's reconciliation never landed"
    assert any("{\"green tea\"}" in line for line in lines_containing(dump, "green tea")), (
        "A's session digest never landed:\n" + "\n".join(lines_containing(dump, "green tea")))
    rows = lines_containing(dump, MARKER)
    assert not rows, "the deleted fact came back into the database at A's hang-up:\n" + "\n".join(rows)
    shown = (await a.get_memory(WEB)).text + (await b.get_memory(WEB)).text
    assert MARKER not in shown.lower()
    for node in (a, b):
        assert await node.stop() == 0, node.tails()
    assert not await stored(cluster.db_uri, MARKER)
    for node in (a, b):
        assert not files_containing(node.data_dir, MARKER), f"node {node.name}'s files still hold it"


async def _no_calls(node: VoicegateNode) -> bool:
    return await node.live_calls() == 0



# ---- a call line removed with the CLI during a call ------------------------------------------------

PLAN = "gold"  # what the caller's earlier call said, and says again


async def typed_call(node: VoicegateNode, subject: str, lines: tuple[str, ...],
                     during: Callable[[], Awaitable[None]] | None = None) -> None:
    """One WebRTC call on `node` whose caller types `lines`, one turn each; `during` runs before the hang-up."""
    caller = WhipClient()
    try:
        async with node.http() as http:
            token = node.auth(subject)["Authorization"].removeprefix("Bearer ")
            answer = await caller.dial(http, token=token)
            assert answer.status_code == 201, answer.text
            await caller.wait_channel_open()
            for said in lines:
                before = len(node.model.turns)
                caller.send({"type": "text", "text": said})
                await wait_until(lambda n=before: len(node.model.turns) > n, 60, "the typed turn to reach the model",
                                 node.tails)
                await caller.wait_for(lambda e: e.get("type") == "transcript" and e.get("role") == "agent"
                                      and bool(e.get("final")), 60)
                caller.events.clear()
            if during is not None:
                await during()
            hung_up = await caller.hang_up(http, headers=node.auth(subject))
            assert hung_up.status_code in (200, 204), hung_up.text
    finally:
        await caller.close()
    await wait_until(lambda: _no_calls(node), 30, "the call to end", node.tails)


def call_lines(document: str) -> list[str]:
    return [line for line in document.partition("## Recent calls")[2].splitlines() if line.startswith("- ")]


async def test_a_call_line_removed_with_the_cli_during_a_call_is_not_restated_at_its_hang_up(
        cluster: Cluster) -> None:
    """The issue's reproduction: an earlier call's "Recent calls" line mentions the caller's plan; they
    call again and say it again; mid-call the operator removes every line that mentions it with
    `voicegate memory edit --replace LINE --with ""` (a process of its own); at hang-up no writer (the
    digest line, reconciliation, the session digest) states it again. The summary model echoes the
    call's script back, which is no summary: the digest line quotes the caller's own words, labelled,
    never the agent's."""
    a = await cluster.node("a", webrtc=WEBRTC, memory={"auto": True, "session_digests": True})
    echo = "The caller said: Agent: Hello, this is your assistant. Caller: I'm on the {} plan. Agent: Okay."
    a.model.summary_reply = echo.format(PLAN)

    await typed_call(a, WEB, (f"I'm on the {PLAN} plan",))
    await wait_until(lambda: a.hangup_writes_done(1), 60, "the first call's hang-up writes", a.tails)
    first = (await a.get_memory(WEB)).json()["documents"]["memory"]["content"]
    lines = [line for line in call_lines(first) if PLAN in line]
    assert lines, f"the first call left no line that mentions the plan:\n{first}"
    assert all("Agent" not in line and "your assistant" not in line for line in call_lines(first)), (
        f"a call line quotes the agent as the caller:\n{first}")
    assert any("the caller said \u201cI'm on the gold plan\u201d" in line for line in lines), first

    models_that_would_say_it_again(a)
    a.model.summary_reply = echo.format(PLAN)
    a.model.reconcile_reply = json.dumps({"edits": [
        {"document": "memory", "action": "append", "content": f"- The caller is on the {PLAN} plan."},
        {"document": "memory", "action": "append", "content": "- The caller likes green tea."}]})
    a.model.digest_reply = json.dumps({"topics": [f"{PLAN} plan", "green tea"], "gist": "green tea"})

    async def operator_removes_every_line_that_mentions_it() -> None:
        content = (await a.get_memory(WEB)).json()["documents"]["memory"]["content"]
        mentioning = [line for line in content.splitlines() if PLAN in line.lower()]
        assert mentioning, content
        for line in mentioning:
            done = await a.cli("edit", "--caller", f"jwt:{WEB}", "--document", "memory",
                               "--replace", line, "--with", "")
            assert done.returncode == 0, str(done)
        assert PLAN not in (await a.get_memory(WEB)).text.lower()

    await typed_call(a, WEB, (f"I'm on the {PLAN} plan", "I want green tea next time"),
                     during=operator_removes_every_line_that_mentions_it)
    await wait_until(lambda: a.hangup_writes_done(2), 60, "the second call's hang-up writes", a.tails)
    dump = await settle(cluster.db_uri, quiet_s=4, timeout_s=60)
    rows = lines_containing(dump, PLAN)
    assert not rows, "the removed line came back at the hang-up:\n" + "\n".join(rows)
    assert "likes green tea" in dump, "the second call's reconciliation never landed"
    assert lines_containing(dump, "{\"green tea\"}"), "the second call's session digest never landed"
    second = (await a.get_memory(WEB)).json()["documents"]["memory"]["content"]
    assert any("the caller said \u201cI want green tea next time\u201d" in line for line in call_lines(second)), second
    assert "Agent" not in second, second
    assert await a.stop() == 0, a.tails()
