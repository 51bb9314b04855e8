"""An operator's erasures and edits reach every process: real `voicegate serve` nodes, the real CLI as a
process of its own, real SIP calls (sipp, RTP), one PostgreSQL; traces looked for in pg_dump and on disk.

A phone caller's memory (`sip:+15551234567`) cannot be addressed by any JWT (a token's owner is
`jwt:<sub>`), so it is written with `voicegate memory edit` and observed in the prompts its calls send;
a web caller's (`jwt:zoe`) is written and read through /api/memory.

The tests on default nodes share the module's nodes `a` and `b` (one database), each with callers and a
marker word of its own; a test that stops a node, or wants other settings, keeps a cluster of its own.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.memory.processes import Cluster, Turn, VoicegateNode, tool_call, wait_until
from tests.memory.traces import (
    files_containing,
    lines_containing,
    listener_backends,
    pg_dump_text,
    settle,
    sipp_call,
    terminate_backend,
)

# One event loop for the module: the shared nodes' calls (asyncio subprocesses) outlive a test.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CALLER = "+15551234567"
PHONE_OWNER = f"sip:{CALLER}"
WEB = "zoe"  # the JWT subject: owner jwt:zoe
MARKER = "zanzibar"
LINE = "- The caller's locker code word is zanzibar."
# The shared nodes' tests: callers of their own (a phone number, a JWT subject), and for the test that looks
# for its marker in the whole database, a marker of its own.
DELETE_CALLER, DELETE_WEB = "+15550100101", "zoe-delete"
TWO_CALLER, TWO_WEB = "+15550100102", "zoe-two"
PATCH_WEB, PATCH_MARKER = "zoe-patch", "quetzal"
PATCH_LINE = "- The caller's locker code word is quetzal."


@pytest_asyncio.fixture(loop_scope="module")
async def cluster(tmp_path: Path, fresh_db: str) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, fresh_db) as nodes:
        yield nodes


class Shared(Cluster):
    """The module's nodes on default settings, each started the first time a test asks for it."""

    async def running(self, name: str) -> VoicegateNode:
        for node in self.nodes:
            if node.name == name and node.proc is not None and node.proc.poll() is None:
                return node
        assert all(node.name != name for node in self.nodes), f"shared node {name} was stopped"
        return await self.node(name)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory, module_db: str) -> AsyncIterator[Shared]:
    async with Shared(tmp_path_factory.mktemp("shared"), module_db) as nodes:
        yield nodes


def memory_section(prompt: str) -> str:
    """The part of a prompt that carries memory, for failure messages."""
    at = prompt.find("## Long-term memory")
    return prompt[at:at + 600] if at >= 0 else "(the prompt has no memory section)"


async def one_turn_call(node: VoicegateNode, said: str, caller: str = CALLER) -> Turn:
    """A call from CALLER that says one thing; the agent hangs up after its reply (end_call). The turn's
    request as the model received it."""
    node.model.transcript = said
    node.model.turn_replies.clear()
    node.model.turn_replies.append(tool_call("end_call"))
    since = time.monotonic()
    # No comma: a pause there makes two requests of one turn, and the first (prepared, then withdrawn)
    # would take the scripted end_call.
    await sipp_call(node, caller, 30_000, text="hello there how are you")
    turns = node.model.turns_since(since)
    assert turns, f"the call on {node.name} never reached the model\n{node.tails()}"
    return turns[0]


async def quiet_after_calls(node: VoicegateNode, uri: str) -> str:
    """No call live on `node` and the database no longer changing (hang-up writes landed)."""
    await wait_until(lambda: _no_calls(node), 30, f"node {node.name}'s calls to end", node.tails)
    return await settle(uri, quiet_s=2.5, timeout_s=30)


async def _no_calls(node: VoicegateNode) -> bool:
    return await node.live_calls() == 0


async def stored(uri: str, text: str) -> list[str]:
    """The lines of the database's dump that contain `text`."""
    return lines_containing(await asyncio.to_thread(pg_dump_text, uri), text)


async def seed(node: VoicegateNode, phone_owner: str = PHONE_OWNER, web: str = WEB) -> None:
    """LINE in the phone caller's memory (through the CLI) and in the web caller's (through the API)."""
    edited = await node.cli("edit", "--caller", phone_owner, "--document", "memory", "--append", LINE)
    assert edited.returncode == 0, f"memory edit failed: {edited}"
    patched = await node.patch_memory(web, document="memory", action="append", content=LINE)
    assert patched.status_code == 200, patched.text


async def erase(node: VoicegateNode, *owners: str) -> None:
    """`voicegate memory delete` for each owner, as operators running them at once (each its own process)."""
    results = await asyncio.gather(*(node.cli("delete", "--caller", owner, "--yes") for owner in owners))
    for owner, deleted in zip(owners, results, strict=True):
        assert deleted.returncode == 0, f"memory delete --caller {owner} failed: {deleted}"


async def assert_web_caller_forgotten(node: VoicegateNode, web: str = WEB) -> None:
    response = await node.get_memory(web)
    assert response.status_code == 200, response.text
    documents = response.json()["documents"]
    assert {scope: doc["content"] for scope, doc in documents.items()} == {"user": "", "memory": ""}, (
        f"node {node.name} still serves the erased web caller's memory: {documents}")


async def test_the_harness_sees_what_it_looks_for(cluster: Cluster) -> None:
    """The positive controls: what the other tests expect to be absent is found when present."""
    a = await cluster.node("a")
    patched = await a.patch_memory(WEB, document="memory", action="append", content=LINE)
    assert patched.status_code == 200, patched.text
    shown = await a.cli("show", "--caller", f"jwt:{WEB}")  # another process, same database and secret
    assert shown.returncode == 0 and LINE in shown.stdout, str(shown)
    assert await stored(cluster.db_uri, MARKER), "pg_dump does not show a row just written"
    planted = a.data_dir / "planted" / "deep" / "x.bin"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"\x00\xffZanZiBar\x00")
    assert str(planted) in files_containing(a.data_dir, MARKER)
    assert await wait_until(lambda: listener_backends(cluster.db_uri), 30, "a LISTEN connection", a.tails)
    assert await a.stop() == 0, a.tails()


async def test_cli_delete_reaches_a_running_server(shared: Shared) -> None:
    caller, web = DELETE_CALLER, DELETE_WEB
    a = await shared.running("a")
    await seed(a, f"sip:{caller}", web)
    # The running server has both callers' memory in hand: a call from the number, a GET for the web caller.
    before = await one_turn_call(a, "hello there", caller)
    assert MARKER in before.prompt, f"the seeded memory never reached the call: {memory_section(before.prompt)}"
    assert MARKER in (await a.get_memory(web)).text
    await quiet_after_calls(a, shared.db_uri)

    await erase(a, f"sip:{caller}", f"jwt:{web}")

    after = await one_turn_call(a, "hello again", caller)
    assert MARKER not in after.prompt.lower(), (
        f"the next call after `memory delete` still got the erased memory: {memory_section(after.prompt)}")
    await assert_web_caller_forgotten(a, web)


async def test_call_live_during_erasure_leaves_nothing(cluster: Cluster) -> None:
    # Every hang-up writer on: digest, reconciliation (a model that wants to keep the word) and session digests.
    a = await cluster.node("a", memory={"auto": True, "session_digests": True})
    model = a.model
    model.transcript = "please remember zanzibar"
    model.reconcile_reply = json.dumps({"edits": [{"document": "memory", "action": "append",
                                                   "content": "- Reconciled: the caller's word is zanzibar."}]})
    model.digest_reply = json.dumps({"topics": ["zanzibar"], "gist": "the caller said zanzibar"})
    saved = tool_call("memory", action="append", document="memory", content="- Tool: remember zanzibar.")
    model.turn_replies.append(saved)
    call = await sipp_call(a, CALLER, 90_000, text="please remember this word", loops=-1, tail_ms=4000, wait=False)

    await wait_until(lambda: stored(cluster.db_uri, MARKER), 45, "the model's edit during the call to be stored",
                     a.tails)
    assert call.running and await a.live_calls() == 1, "the call must be live when the erasure starts\n" + a.tails()
    await erase(a, PHONE_OWNER)
    # If the call goes on, the caller says it again, the model tries to save it again, the agent hangs up.
    model.turn_replies.extend([saved, tool_call("end_call")])
    (await call.wait(150)).check()
    await wait_until(lambda: _no_calls(a), 30, "the call to end on the node", a.tails)
    # Every hang-up writer has had its turn (the call's outbox entry is done with), then the database is quiet.
    await wait_until(a.hangup_writes_done, 45, "the call's hang-up writes to be done with", a.tails)
    dump = await settle(cluster.db_uri, quiet_s=4, timeout_s=45,
                        until=lambda text: bool(lines_containing(text, MARKER)))
    rows, files = lines_containing(dump, MARKER), files_containing(a.data_dir, MARKER)
    assert not rows, "the erased caller's words came back into the database:\n" + "\n".join(rows)
    assert not files, f"the erased caller's words are in files of the node: {files}"
    # Whatever the node flushes when it stops must not bring them back either.
    assert await a.stop() == 0, a.tails()
    rows, files = await stored(cluster.db_uri, MARKER), files_containing(a.data_dir, MARKER)
    assert not rows, "after the node stopped, in the database:\n" + "\n".join(rows)
    assert not files, f"after the node stopped, in its files: {files}"


async def test_patch_removing_a_line_leaves_no_trace(shared: Shared) -> None:
    web, marker, line = PATCH_WEB, PATCH_MARKER, PATCH_LINE  # a marker no other test of the module writes
    a = await shared.running("a")
    assert not await stored(shared.db_uri, marker) and not files_containing(a.data_dir, marker)
    added = await a.patch_memory(web, document="memory", action="append", content=line)
    assert added.status_code == 200 and marker in added.json()["documents"]["memory"]["content"], added.text
    assert await stored(shared.db_uri, marker), "the appended line is not in the database"
    removed = await a.patch_memory(web, document="memory", action="replace", old_text=line, new_text="")
    assert removed.status_code == 200, removed.text
    assert removed.json()["changed"] is True and marker not in removed.text

    rows = lines_containing(await settle(shared.db_uri, quiet_s=2.5, timeout_s=30), marker)
    files = files_containing(a.data_dir, marker)
    assert not rows, "a line removed with PATCH is still in the database:\n" + "\n".join(rows)
    assert not files, f"a line removed with PATCH is still in files of the node: {files}"


async def test_two_processes_one_database(shared: Shared) -> None:
    caller, web = TWO_CALLER, TWO_WEB
    uri = shared.db_uri
    a = await shared.running("a")
    assert all(node.name != "b" for node in shared.nodes), "node b must start here, to tell its LISTEN apart"
    on_a = await wait_until(lambda: listener_backends(uri), 30, "node a's LISTEN connection", a.tails)
    b = await shared.running("b")

    async def b_listener() -> set[int]:
        return await listener_backends(uri) - on_a

    await seed(a, f"sip:{caller}", web)
    # B has both in hand.
    before = await one_turn_call(b, "hello there", caller)
    assert MARKER in before.prompt, f"the seeded memory never reached B's call: {memory_section(before.prompt)}"
    assert MARKER in (await b.get_memory(web)).text
    await quiet_after_calls(b, uri)

    await erase(a, f"sip:{caller}", f"jwt:{web}")

    # B's next call, which stays live for the rest of the test, and B's API show nothing.
    b.model.transcript = "tell me more"
    b.model.turn_replies.clear()
    since = time.monotonic()
    live_b = await sipp_call(b, caller, 120_000, text="tell me more please", loops=-1, tail_ms=4000, wait=False)
    first = (await wait_until(lambda: b.model.turns_since(since), 45, "a turn of the live call on B", b.tails))[0]
    assert MARKER not in first.prompt.lower(), f"B's call after the erasure: {memory_section(first.prompt)}"
    await assert_web_caller_forgotten(b, web)

    # B loses its LISTEN connection; at once A changes both callers' memory: the web caller's with a
    # PATCH, the phone caller's from a live call of its own (the model's memory edit, held at the model
    # until the connection is gone).
    listeners = await wait_until(b_listener, 30, "node b's LISTEN connection", b.tails)
    assert len(listeners) == 1, f"cannot tell node b's LISTEN connection among {listeners} (node a's: {on_a})"
    (listener,) = listeners
    a.model.transcript = "please note my parking bay"
    a.model.turn_replies.clear()
    a.model.hold_next_turn(tool_call("memory", action="append", document="memory",
                                     content="- The caller's parking bay is quokka."))
    live_a = await sipp_call(a, caller, 120_000, text="please note my parking bay", loops=-1, tail_ms=4000,
                             wait=False)
    await a.model.wait_holding(45)
    assert await terminate_backend(uri, listener), "could not terminate node b's LISTEN connection"
    patched = await a.patch_memory(web, document="memory", action="append", content="- Loves marmalade.")
    assert patched.status_code == 200, patched.text
    a.model.release()
    await wait_until(lambda: stored(uri, "quokka"), 30, "A's call to store its edit", a.tails)
    changed_at = time.monotonic()

    async def b_serves_it() -> bool:
        return "marmalade" in (await b.get_memory(web)).text

    await wait_until(b_serves_it, 15, "B's GET /api/memory to serve A's PATCH", b.tails)

    def b_call_heard_it() -> bool:
        return any("quokka" in turn.prompt for turn in b.model.turns_since(changed_at))

    def stale() -> str:
        turns = b.model.turns_since(changed_at)
        return (f"{len(turns)} turn(s) of B's live call since the change; their memory:\n"
                + "\n".join(memory_section(turn.prompt) for turn in turns) + "\n" + b.tails())

    await wait_until(b_call_heard_it, 30, "B's live call to get A's change at its next turn", stale)

    for node in (a, b):
        node.model.turn_replies.append(tool_call("end_call"))
    for call in (live_a, live_b):
        (await call.wait(90)).check()
    after = await one_turn_call(b, "hello again", caller)
    assert "quokka" in after.prompt, f"B's next call after the change: {memory_section(after.prompt)}"


async def test_missing_secret_with_owners_refuses(cluster: Cluster) -> None:
    a = await cluster.node("a", owner_key_secret=None)
    secret = a.data_dir / "owner-key.secret"
    patched = await a.patch_memory(WEB, document="memory", action="append", content=LINE)
    assert patched.status_code == 200, patched.text
    assert await a.stop() == 0, a.tails()
    assert secret.is_file(), f"the node kept no generated owner-key secret in {a.data_dir}"
    secret.unlink()
    names = (str(secret), str(secret.resolve()))

    refused = await a.serve_until_exit(60)
    assert refused is not None, ("serve kept running without the owner-key secret its stored callers were "
                                 "written with (every one of them is now unreachable)\n" + a.tails())
    assert refused.returncode != 0, str(refused)
    assert any(name in refused.stderr for name in names), f"stderr does not name {secret}: {refused}"
    assert "restore" in refused.stderr.lower() or "owner_key_secret" in refused.stderr, (
        f"stderr says nothing of how to fix it: {refused}")

    shown = await a.cli("show", "--caller", f"jwt:{WEB}")
    assert shown.returncode not in (0, 3), f"3 would say 'no memory', which is not so: {shown}"
    assert any(name in shown.stderr for name in names), f"stderr does not name {secret}: {shown}"
    assert not secret.exists(), "a refusal must not leave a new secret behind (the next start would use it)"
