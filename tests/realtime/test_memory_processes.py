"""A fact deleted on another node while its caller talks to the Realtime agent leaves the model's
instructions at the next idle point, on the same connection, and stays deleted: two real `voicegate serve`
processes on one PostgreSQL (tests/memory/processes.py), node A's agent the fake Realtime server (in this
test's process, `stub=True`), a real WebRTC call with typed turns on node A, the delete through node B's
PATCH /api/memory. The Realtime counterpart of tests/memory/test_forgetting_processes.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.realtime_fake import FakeRealtime
from tests.memory.processes import Cluster, VoicegateNode, wait_until
from tests.memory.test_erasure_processes import stored
from tests.memory.test_forgetting_processes import models_that_would_say_it_again
from tests.memory.traces import files_containing, lines_containing, settle
from tests.webrtc.harness import WhipClient

pytestmark = pytest.mark.slow

KEY = "rt-test-key"
WEB = "zoe"  # owner jwt:zoe, on both nodes (one owner-key secret)
MARKER = "zanzibar"
LINE = "- The caller's locker code word is zanzibar."
NAME = "- The caller's name is Zoe."
WEBRTC = {"enabled": True, "ice_hosts": ["127.0.0.1"]}


@pytest.fixture
async def cluster(tmp_path: Path, fresh_db: str) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, fresh_db) as nodes:
        yield nodes


@pytest.fixture
async def fake() -> AsyncIterator[FakeRealtime]:
    async with FakeRealtime(api_key=KEY, stub=True) as server:
        yield server


async def _no_calls(node: VoicegateNode) -> bool:
    return await node.live_calls() == 0


async def say(caller: WhipClient, text: str) -> None:
    """A typed turn on the DataChannel; until the agent's answer is in."""
    caller.events.clear()
    caller.send({"type": "text", "text": text})
    await caller.wait_for(lambda e: e.get("type") == "transcript" and e.get("role") == "agent"
                          and bool(e.get("final")), 60)


async def test_a_fact_deleted_through_node_b_mid_call_leaves_the_realtime_models_instructions_on_node_a(
        cluster: Cluster, fake: FakeRealtime) -> None:
    a = await cluster.node("a", webrtc=WEBRTC, realtime={"enabled": True, "url": fake.url, "api_key": KEY},
                           memory={"auto": True, "session_digests": True})
    b = await cluster.node("b", webrtc=WEBRTC)
    models_that_would_say_it_again(a)  # its summary, reconciliation and session digest models would
    for line in (NAME, LINE):
        added = await b.patch_memory(WEB, document="memory", action="append", content=line)
        assert added.status_code == 200, added.text

    caller = WhipClient()
    try:
        async with a.http() as http:
            answer = await caller.dial(http, token=a.auth(WEB)["Authorization"].removeprefix("Bearer "))
            assert answer.status_code == 201, answer.text
            await caller.wait_channel_open()
            await say(caller, "my locker code word zanzibar still works")
            assert LINE in fake.instructions, "the call's model never had the fact in its instructions"
            assert not a.model.turns, "node A's call went to the cascade's model, not the Realtime one"

            removed = await b.patch_memory(WEB, document="memory", action="replace", old_text=LINE, new_text="")
            assert removed.status_code == 200 and removed.json()["changed"] is True, removed.text
            await wait_until(lambda: MARKER not in fake.instructions, 30,
                             "node A's call to send the model instructions without the deleted fact", a.tails)
            assert NAME in fake.instructions  # the rest of its memory stays
            assert len(fake.connections) == 1  # updated on the same connection: no reconnect

            await say(caller, "I also like green tea")
            hung_up = await caller.hang_up(http, headers=a.auth(WEB))
            assert hung_up.status_code in (200, 204), hung_up.text
    finally:
        await caller.close()
    await wait_until(lambda: _no_calls(a), 30, "the call to end", a.tails)
    await wait_until(a.hangup_writes_done, 60, "the call's hang-up writes to be done with", a.tails)
    dump = await settle(cluster.db_uri, quiet_s=4, timeout_s=60)
    assert "likes green tea" in dump, "A's reconciliation never landed (the positive control)"
    assert lines_containing(dump, "{\"green tea\"}"), "A's session digest never landed"
    rows = lines_containing(dump, MARKER)
    assert not rows, "the deleted fact came back into the database at A's hang-up:\n" + "\n".join(rows)
    for node in (a, b):
        assert await node.stop() == 0, node.tails()
    assert not await stored(cluster.db_uri, MARKER)
    assert not files_containing(a.data_dir, MARKER), "node A's files still hold it"
