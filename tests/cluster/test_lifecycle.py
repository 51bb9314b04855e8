"""A caller's memory and a node's life in the cluster, through real Kamailio and real `voicegate serve`
processes on one PostgreSQL: what one node learnt the other says aloud, `voicegate memory delete` run
beside the cluster empties the cache of a live call on each node, and a drained node finishes its calls.

The listening tests run the nodes on the offline defaults (Whisper tiny.en hears, Piper answers), the
caller speaks in the Piper voice, and the test hears the reply with Whisper as a caller would."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio

from bench.common.figures import word_errors
from tests.cluster.harness import OWNER_KEY_SECRET, Node, Proxy, cluster, scenario
from tests.cluster.test_kamailio import ended_on, live_sip_calls, many_calls, sipp_counts
from tests.conftest import REPO, free_port
from tests.sip.conftest import run_sipp
from tests.sip_calls.conftest import RtpCapture, loud_part, neural_caller, stream
from voicegate.internal.audio.g711 import ulaw_decode
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.memory.owner import OwnerKeys
from voicegate.internal.stt.whisper import WhisperSpeechToText

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

CALLER = "+15551234567"  # the From user Kamailio asserts for a caller from the trunk address
# The listening tests share one cluster, each with a caller of its own (one database, one memory each).
RETURNING_CALLER = "+15552345678"
REMEMBER = "Remember that I like green tea."
RECALL = "What do you remember about me?"
REMEMBERED = "Here's what I remember: I like green tea."
FORGOTTEN = "I don't remember anything about you yet."


class Listening:
    """The module's listening cluster (two nodes on Whisper and Piper, on the module's database), shared by
    the tests that listen: started at first use, and again after a test has stopped it to have every
    node's hang-up writes landed or refused (`stop`)."""

    def __init__(self, root: Path, db_uri: str) -> None:
        self.root, self.db_uri = root, db_uri
        self.runs = 0
        self._stack: contextlib.ExitStack | None = None
        self._nodes: tuple[Node, Node] | None = None

    def nodes(self) -> tuple[Node, Node]:
        if self._stack is None or self._nodes is None:
            self.runs += 1
            directory = self.root / f"run-{self.runs}"
            directory.mkdir()
            with contextlib.ExitStack() as stack:
                _, (node_a, node_b) = stack.enter_context(cluster(directory, self.db_uri, speech="whisper"))
                self._nodes, self._stack = (node_a, node_b), stack.pop_all()
        return self._nodes

    def stop(self) -> None:
        stack, self._stack, self._nodes = self._stack, None, None
        if stack is not None:
            stack.close()


@pytest.fixture(scope="module")
def listening(tmp_path_factory: pytest.TempPathFactory, module_db: str) -> Iterator[Listening]:
    shared = Listening(tmp_path_factory.mktemp("listening"), module_db)
    try:
        yield shared
    finally:
        shared.stop()


@pytest_asyncio.fixture
async def ears(tmp_path: Path) -> AsyncIterator[WhisperSpeechToText]:
    """The caller's ears: a Whisper of the test's own, apart from the nodes' recognisers."""
    engine = WhisperSpeechToText(WhisperConfig(workers=1), tmp_path / "ears-models")
    yield engine
    await engine.aclose()




def only(directory: Path, node: Node) -> Proxy:
    """A Kamailio of the tested configuration listing just `node`, so the test knows who answers."""
    directory.mkdir()
    proxy = Proxy(directory, free_port(), [node])
    proxy.start()
    return proxy


async def call(directory: Path, proxy: Proxy, media: str, capture: RtpCapture | None, talk_ms: int,
               caller: str = CALLER) -> None:
    """One call from the trunk through `proxy`: `media` is played, then the caller stays `talk_ms` and
    hangs up with BYE; what the node says goes to `capture`."""
    directory.mkdir(exist_ok=True)
    path = scenario(directory, talk_ms=talk_ms, media=media, from_user=caller,
                    media_port=capture.port if capture is not None else "[media_port]")
    (await run_sipp(directory, path, proxy.target, timeout=talk_ms / 1000 + 60)).check()


async def hear(ears: WhisperSpeechToText, pcm: bytes) -> str:
    speech = loud_part(pcm)
    return (await ears.transcribe(speech, 8000)).lower() if speech else ""


def said_like(expected: str, heard: str) -> bool:
    """Mostly the expected words: two lossy hops (Piper through G.711, then Whisper tiny) vary a word."""
    edits, words = word_errors(expected, heard)
    return edits <= words // 2


def log_size(node: Node) -> int:
    """Where the node's log ends now: what a test reads of a shared node's log starts there."""
    return node.log.stat().st_size if node.log.exists() else 0


def memory_loaded(node: Node, since: int = 0) -> list[int]:
    """The size of the caller memory each of the node's calls started with, from its JSON log (from
    byte `since` on)."""
    found = []
    with node.log.open("rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    for line in text.splitlines():
        if line.startswith("{") and '"caller memory loaded"' in line:
            found.append(int(json.loads(line)["chars"]))
    return found


def stored(db_uri: str, caller: str) -> list[str]:
    """The caller's memory rows (keyed as the nodes key them, with the cluster's owner-key secret)."""
    owner_key = OwnerKeys(OWNER_KEY_SECRET.encode()).for_resource_id(f"sip:{caller}")
    with psycopg.connect(db_uri) as conn:
        rows = conn.execute("SELECT content FROM memories WHERE owner_key = %s", (owner_key,)).fetchall()
        return [row[0] for row in rows]


async def ended_after(nodes: list[Node], before: list[int], more: int) -> list[int]:
    """How many SIP calls each node has ended since `before` (its counts then), once `more` have."""
    counts = await ended_on(nodes, sum(before) + more)
    return [count - base for count, base in zip(counts, before, strict=True)]


async def ended_counts(nodes: list[Node]) -> list[int]:
    return [await asyncio.to_thread(node.sip_calls_ended) for node in nodes]


async def test_a_caller_remembered_on_one_node_is_remembered_on_the_other_by_ear(
        tmp_path: Path, listening: Listening, ears: WhisperSpeechToText) -> None:
    caller, db_uri = RETURNING_CALLER, listening.db_uri
    node_a, node_b = listening.nodes()
    since = [log_size(node_a), log_size(node_b)]
    before = await ended_counts([node_a, node_b])
    assert stored(db_uri, caller) == []  # a caller new to the cluster
    via_a = only(tmp_path / "via-a", node_a)
    try:
        await call(tmp_path / "on-a", via_a, stream(neural_caller(tmp_path, REMEMBER)), None, 15000, caller)
    finally:
        via_a.stop()
    assert await ended_after([node_a], before[:1], 1) == [1]
    assert any("green tea" in text.lower() for text in stored(db_uri, caller)), stored(db_uri, caller)

    via_b = only(tmp_path / "via-b", node_b)
    capture = await RtpCapture.open()
    try:
        await call(tmp_path / "on-b", via_b, stream(neural_caller(tmp_path, RECALL)), capture, 20000, caller)
    finally:
        capture.close()
        via_b.stop()
    assert await ended_after([node_b], before[1:], 1) == [1]
    a_loaded, b_loaded = memory_loaded(node_a, since[0]), memory_loaded(node_b, since[1])
    # Node a began with nothing; node b began its call with what a wrote to the one database ...
    assert a_loaded == [0] and len(b_loaded) == 1 and b_loaded[0] > 0, (a_loaded, b_loaded)
    # ... and the caller hears it from b, in b's voice, through G.711.
    heard = await hear(ears, capture.pcm())
    assert "green tea" in heard and said_like(REMEMBERED, heard), heard


def cli_config(directory: Path, db_uri: str) -> Path:
    """What an operator's `voicegate memory` needs: the cluster's database and owner-key secret."""
    directory.mkdir()
    config = directory / "config.toml"
    config.write_text(f"""
[server]
data_dir = "{directory / 'data'}"
[memory]
enabled = true
provider = "pgvector"
embedding = "none"
owner_key_secret = "{OWNER_KEY_SECRET}"
[pgvector]
connection_string = "{db_uri}"
""")
    return config


async def memory_cli(config: Path, *args: str) -> tuple[int, str]:
    """`voicegate memory ...` as a separate process (never blocking the loop the captures run on)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voicegate", "--config", str(config), "memory", *args, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return int(proc.returncode or 0), out.decode(errors="replace")


LOUD_DBFS = -45.0


def loud_times(capture: RtpCapture, since: float) -> list[float]:
    """Arrival times of the audible packets the node sent after `since` (comfort silence is not)."""
    times = []
    for received in capture.received:
        if received.at > since and received.packet.payload_type == 0 and loud_part(
                ulaw_decode(received.packet.payload), threshold_dbfs=LOUD_DBFS, margin_ms=0):
            times.append(received.at)
    return times


async def reply_over(capture: RtpCapture, quiet_s: float = 2.5, timeout: float = 90) -> float:
    """Wait until the node has said something and then been quiet for `quiet_s`; the loop time then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        times = loud_times(capture, 0.0)
        if times and loop.time() - times[-1] > quiet_s:
            return loop.time()
        await asyncio.sleep(0.25)
    raise AssertionError("the node never finished a reply")


def pcm_between(capture: RtpCapture, start: float, end: float = float("inf")) -> bytes:
    return b"".join(ulaw_decode(r.packet.payload) for r in capture.received
                    if start <= r.at < end and r.packet.payload_type == 0)


# The live calls ask twice: before the delete (the node's cache has the fact) and well after it.
ASK_AGAIN_MS = 30000


async def test_memory_delete_from_the_cli_reaches_both_nodes_caches(
        tmp_path: Path, listening: Listening, ears: WhisperSpeechToText) -> None:
    loop = asyncio.get_running_loop()
    db_uri = listening.db_uri
    operator = cli_config(tmp_path / "operator", db_uri)
    node_a, node_b = listening.nodes()
    since = [log_size(node_a), log_size(node_b)]
    ended_before = await ended_counts([node_a, node_b])
    try:
        assert stored(db_uri, CALLER) == []  # a caller new to the cluster
        # The caller is remembered (the first test has a call teach it; the operator's edit is quicker).
        rc, output = await memory_cli(operator, "edit", "--caller", f"sip:{CALLER}", "--document", "memory",
                                      "--append", "- I like green tea.")
        assert rc == 0 and any("green tea" in text.lower() for text in stored(db_uri, CALLER)), output
        via_a, via_b = only(tmp_path / "via-a", node_a), only(tmp_path / "via-b", node_b)
        captures = [await RtpCapture.open(), await RtpCapture.open()]
        try:
            # One live call on each node. Each asks what it remembers, which the node answers from the
            # cache its call set up (the memory tool reads only the cache) ...
            recall = stream(neural_caller(tmp_path, RECALL))
            media = f'{recall}\n  <pause milliseconds="{ASK_AGAIN_MS}"/>\n{recall}'
            calls = [asyncio.create_task(call(tmp_path / f"live-{node.name}", proxy, media, capture, 20000))
                     for node, proxy, capture in zip((node_a, node_b), (via_a, via_b), captures, strict=True)]
            for capture in captures:
                await reply_over(capture)
            # ... then the operator deletes the caller, from a process of its own, while both calls are up.
            rc, output = await memory_cli(operator, "delete", "--caller", f"sip:{CALLER}", "--yes")
            deleted_at = loop.time()
            assert rc == 0 and "running servers on this database were told" in output, output
            assert "green tea" not in output.lower(), output
            await asyncio.gather(*calls)
        finally:
            for capture in captures:
                capture.close()
            via_a.stop()
            via_b.stop()
        assert await ended_after([node_a, node_b], ended_before, 2) == [1, 1]
        a_loaded, b_loaded = memory_loaded(node_a, since[0]), memory_loaded(node_b, since[1])
        # Both live calls began with the caller's memory in their node's cache.
        assert len(a_loaded) == len(b_loaded) == 1 and a_loaded[0] > 0 and b_loaded[0] > 0, (a_loaded, b_loaded)
    finally:
        listening.stop()
    # The cluster has stopped, so every node's hang-up writes have landed or been refused.
    for node, capture in zip((node_a, node_b), captures, strict=True):
        before = await hear(ears, pcm_between(capture, 0.0, deleted_at))
        after = await hear(ears, pcm_between(capture, deleted_at))
        assert loud_times(capture, deleted_at), f"node {node.name} said nothing after the delete"
        assert "green tea" in before and said_like(REMEMBERED, before), (node.name, before)
        # The node dropped its cached copy when the delete's notice arrived: the same live call, asked
        # again, remembers nothing (without the notice its cache would still say "green tea").
        assert "green tea" not in after and said_like(FORGOTTEN, after), (node.name, after)
        assert "green tea" not in node.log.read_text(errors="replace").lower(), f"node {node.name} logged it"
    # Nothing came back: the live calls' hang-up digests were refused by the erasure.
    assert stored(db_uri, CALLER) == []
    rc, output = await memory_cli(operator, "show", "--caller", f"sip:{CALLER}")
    assert rc == 3 and "green tea" not in output.lower(), (rc, output)


def ends(node: Node) -> list[str]:
    """Why each of the node's SIP calls ended, from its JSON log ("bye": the caller's BYE)."""
    found = []
    for line in node.log.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"sip call ended"' in line:
            found.append(str(json.loads(line)["reason"]))
    return found


LONG_CALLS, DRAIN_CALLS = 6, 10


async def test_a_drained_node_finishes_its_calls_behind_kamailio(tmp_path: Path, fresh_db: str) -> None:
    # The drain outlasts the calls by far, so the calls end by the caller's BYE, never by the deadline.
    with cluster(tmp_path, fresh_db, drain_timeout_s=120) as (proxy, (node_a, node_b)):
        long = asyncio.create_task(many_calls(tmp_path / "long", proxy, LONG_CALLS, talk_ms=20000, rate=3))
        deadline = time.monotonic() + 60
        while sum(live := [await asyncio.to_thread(live_sip_calls, n) for n in (node_a, node_b)]) < LONG_CALLS:
            assert time.monotonic() < deadline and not long.done(), f"live calls: {live}"
            await asyncio.sleep(0.5)
        on_a, on_b = live
        assert on_a >= 1 and on_b >= 1, live  # round-robin: both nodes carry some

        assert node_a.proc is not None
        node_a.proc.send_signal(signal.SIGTERM)
        # New calls during the drain: node a refuses them (503), Kamailio takes each to node b.
        (await many_calls(tmp_path / "during", proxy, DRAIN_CALLS, talk_ms=500, rate=5)).check()
        assert sipp_counts(tmp_path / "during") == (DRAIN_CALLS, 0)
        assert node_a.proc.poll() is None, "node a left before its calls were done"

        (await long).check()
        assert sipp_counts(tmp_path / "long") == (LONG_CALLS, 0)  # every call ended by its caller's BYE
        rc = await asyncio.to_thread(node_a.proc.wait, 60)  # ... and then node a leaves on its own
        (b_ended,) = await ended_on([node_b], on_b + DRAIN_CALLS)
    assert rc == 0
    assert ends(node_a) == ["bye"] * on_a, ends(node_a)  # a's calls ended by the caller, not by a's BYE
    assert b_ended == on_b + DRAIN_CALLS  # and b took every call placed during the drain
    log = node_a.log.read_text(errors="replace")
    assert "drain complete: no live calls" in log and "drain deadline reached" not in log
