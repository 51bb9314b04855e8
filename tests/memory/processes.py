"""voicegate as separate processes, for tests that must cross process boundaries as an operator does.

A `Cluster` runs `voicegate serve` nodes as real subprocesses (one TOML config each, all on one
PostgreSQL database), each with its own `ScriptedOpenAI` in the test process as LLM and STT: the
caller "says" whatever the fake's `transcript` is, and every prompt a call sends is kept in
`fake.turns`. `node.cli(...)` runs `voicegate memory ...` as yet another process; `sipp_call` places
a real SIP call with RTP audio; `pg_dump_text` and `files_containing` look for traces afterwards.

The owner of a SIP caller is `sip:+E164` and the owner of a JWT is `jwt:<sub>` (internal/identity):
no token can address a phone caller's memory, so the HTTP API and SIP calls exercise different owners.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import httpx
import jwt

from tests.conftest import REPO, free_port
from tests.fakes.openai_fake import FakeOpenAI, ScriptedReply, ScriptedToolCall

SHARED_OWNER_SECRET = "owner-key-secret-shared-by-every-node"
JWT_SECRET = "jwt-secret-for-memory-api-tests-0123456789"
LISTENER_APP = "voicegate-memory-listener"  # application_name of a node's LISTEN connection
SCENARIO = Path(__file__).parent / "scenarios" / "uac_speak.xml"
START_TIMEOUT_S = 120.0  # two busy cores, several Python processes importing numpy at once
# What a node logs when a hang-up write finds its caller erased (internal/memory/outbox.py).
ERASED_DROPPED = "memory outbox: the caller was erased; this call's writes are dropped"
STOP_TIMEOUT_S = 25.0  # above server.shutdown_timeout_s: a graceful stop must get the chance to finish


def clean_env() -> dict[str, str]:
    """The test's environment without anything that would configure voicegate behind the TOML's back."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VOICEGATE_") and k not in ("OPENAI_API_KEY", "DEEPGRAM_API_KEY")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


async def wait_until(check: Callable[[], Any], timeout: float, what: str,
                     evidence: Callable[[], str] = lambda: "", interval: float = 0.25) -> Any:
    """Poll `check` (sync or async) until it returns something truthy, which is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{evidence()}")
        await asyncio.sleep(interval)


# ---- the model and the ears: one fake OpenAI per node ------------------------------------------------


@dataclass
class Turn:
    """One conversation turn's request to the model: the whole prompt the call sent."""

    at: float  # time.monotonic() on arrival
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        return json.dumps(self.body.get("messages", []), ensure_ascii=False)


def tool_call(name: str, **arguments: Any) -> ScriptedReply:
    return ScriptedReply(tool_calls=[ScriptedToolCall(name, json.dumps(arguments))])


class ScriptedOpenAI(FakeOpenAI):
    """FakeOpenAI that tells a call's turns (streamed, ending with the caller's words) apart from the
    one-shot requests a node makes after a call (reconciliation, session digest, rolling summary) and
    from the follow-up after a tool result, and answers each kind from its own script."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[Turn] = []
        self.turn_replies: deque[ScriptedReply] = deque()  # consumed by turns only, in order
        # consumed by the follow-ups after a tool's result, in order (then reply_text)
        self.follow_up_replies: deque[ScriptedReply] = deque()
        self.reply_text = "Okay."  # short: the node's espeak speaks it
        self.reconcile_reply = '{"edits": []}'
        self.digest_reply = '{"topics": ["a short call"], "gist": "a short call"}'
        self.summary_reply = "The caller and the agent talked briefly."
        self.holding = threading.Event()  # set while a held turn waits for release()
        self._hold_next = False
        self._held: int | None = None
        self._released = threading.Event()

    def _next_reply(self, body: dict[str, Any]) -> ScriptedReply:
        messages = body.get("messages") or []
        if not body.get("stream"):
            system = str(messages[0].get("content", "")) if messages else ""
            if "long-term memory about one caller" in system:
                return ScriptedReply(text=self.reconcile_reply)
            if system.startswith("Summarise this call"):
                return ScriptedReply(text=self.digest_reply)
            return ScriptedReply(text=self.summary_reply)
        if not messages or messages[-1].get("role") != "user":
            if messages and messages[-1].get("role") == "tool" and self.follow_up_replies:
                return self.follow_up_replies.popleft()
            return ScriptedReply(text=self.reply_text)
        self.turns.append(Turn(time.monotonic(), body))
        if self._hold_next:
            self._hold_next, self._held = False, id(body)
            self.holding.set()
        return self.turn_replies.popleft() if self.turn_replies else ScriptedReply(text=self.reply_text)

    async def _chat_chunks(self, body: dict[str, Any], reply: ScriptedReply) -> AsyncIterator[bytes]:
        if self._held == id(body):
            while not self._released.is_set() and not self.stopping.is_set():
                await asyncio.sleep(0.01)
            self._held = None
            self.holding.clear()
        async for chunk in super()._chat_chunks(body, reply):
            yield chunk

    def hold_next_turn(self, reply: ScriptedReply | None = None) -> None:
        """The next turn's reply (`reply`, else the usual one) waits until `release()`."""
        if reply is not None:
            self.turn_replies.append(reply)
        self._released.clear()
        self._hold_next = True

    async def wait_holding(self, timeout: float) -> None:
        if not await asyncio.to_thread(self.holding.wait, timeout):
            raise AssertionError(f"no turn reached the model within {timeout:.0f} s; turns: {len(self.turns)}")

    def release(self) -> None:
        self._released.set()

    def turns_since(self, at: float) -> list[Turn]:
        return [turn for turn in list(self.turns) if turn.at >= at]


# ---- a voicegate node --------------------------------------------------------------------------------


def rtp_port_range() -> tuple[int, int]:
    low = random.randrange(30000, 59800) & ~1
    return low, low + 199


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def render_toml(sections: dict[str, dict[str, Any]]) -> str:
    return "".join(f"[{name}]\n" + "".join(f"{key} = {toml_value(v)}\n" for key, v in values.items()) + "\n"
                   for name, values in sections.items())


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"rc={self.returncode}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"


class RunningCall(Protocol):
    """What a node needs of a call placed against it (tests/memory/traces.py's SippCall)."""

    process: asyncio.subprocess.Process

    @property
    def running(self) -> bool: ...


class VoicegateNode:
    """One `voicegate serve` process and its config, data dir and logs (all under `root`)."""

    def __init__(self, root: Path, db_uri: str, model: ScriptedOpenAI, *,
                 owner_key_secret: str | None = SHARED_OWNER_SECRET,
                 settings: dict[str, dict[str, Any]] | None = None) -> None:
        self.root, self.model = root, model
        self.name = root.name
        self.data_dir = root / "data"
        self.config_path = root / "config.toml"
        self.http_port, self.sip_port = free_port(), free_port(socket.SOCK_DGRAM)
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.sip_target = f"127.0.0.1:{self.sip_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.calls: list[RunningCall] = []  # placed by traces.sipp_call; any still going are killed at the end
        low, high = rtp_port_range()
        memory: dict[str, Any] = {"enabled": True, "provider": "pgvector", "auto": False}
        if owner_key_secret is not None:
            memory["owner_key_secret"] = owner_key_secret
        config: dict[str, dict[str, Any]] = {
            "server": {"host": "127.0.0.1", "port": self.http_port, "data_dir": str(self.data_dir),
                       "jwt_secret": JWT_SECRET, "patch_rate_per_min": 0, "shutdown_timeout_s": 10.0},
            "sip": {"enabled": True, "bind": self.sip_target, "transports": ["udp"],
                    "trusted_peers": ["127.0.0.1/32"], "rtp_port_min": low, "rtp_port_max": high,
                    "invite_rate_per_min": 0},
            "webrtc": {"enabled": False},
            "pipeline": {"greeting": ""},
            "stt": {"provider": "openai"},
            "tts": {"provider": "espeak"},
            "llm": {"provider": "openai"},
            "openai": {"api_key": "k", "base_url": model.url + "/v1", "timeout_s": 30.0},
            "espeak": {"workers": 1},
            "memory": memory,
            "pgvector": {"connection_string": db_uri, "pool_max": 4},
        }
        for section, values in (settings or {}).items():
            config.setdefault(section, {}).update(values)
        root.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(render_toml(config))

    # ---- the process -------------------------------------------------------------------------------

    def _log(self, stream: str) -> Path:
        return self.root / f"serve-{self.runs}.{stream}"

    def tails(self, lines: int = 40) -> str:
        parts = []
        for stream in ("stdout", "stderr"):
            path = self._log(stream)
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"--- node {self.name} run {self.runs} {stream} (last {lines} lines)\n"
                         + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(parts)

    def _spawn(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, f"node {self.name} is already running"
        self.runs += 1
        with self._log("stdout").open("wb") as out, self._log("stderr").open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "voicegate", "--config", str(self.config_path), "serve"],
                cwd=REPO, env=clean_env(), stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    async def health(self) -> dict[str, Any] | None:
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                response = await client.get(self.url + "/health")
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None  # type: ignore[no-any-return]

    async def start(self, timeout: float = START_TIMEOUT_S) -> None:
        self._spawn()
        deadline = time.monotonic() + timeout
        while await self.health() is None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"node {self.name} exited with {self.proc.returncode} while starting\n"
                                     + self.tails())
            if time.monotonic() > deadline:
                raise AssertionError(f"node {self.name} not healthy after {timeout:.0f} s\n" + self.tails())
            await asyncio.sleep(0.25)

    async def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; always reaped. The exit code (None if never run)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
        return proc.returncode

    async def serve_until_exit(self, timeout: float) -> CliResult | None:
        """Run `serve` expecting it to refuse: its exit, or None (and it is stopped) if still up at `timeout`."""
        self._spawn()
        assert self.proc is not None
        try:
            await asyncio.to_thread(self.proc.wait, timeout)
        except subprocess.TimeoutExpired:
            await self.stop()
            return None
        return CliResult(self.proc.returncode, self._log("stdout").read_text(errors="replace"),
                         self._log("stderr").read_text(errors="replace"))

    async def cli(self, *args: str, timeout: float = 120.0) -> CliResult:
        """`voicegate --config <this node's TOML> memory ARGS...` as a process of its own."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "voicegate", "--config", str(self.config_path), "memory", *args,
            cwd=REPO, env=clean_env(), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except BaseException:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return CliResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    # ---- HTTP ----------------------------------------------------------------------------------------

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30)

    @staticmethod
    def auth(subject: str) -> dict[str, str]:
        """A Bearer JWT whose `sub` is `subject`: the owner `jwt:<subject>`."""
        now = int(time.time())
        claims = {"sub": subject, "iss": "voicegate", "aud": "voicegate", "iat": now, "exp": now + 3600}
        return {"Authorization": f"Bearer {jwt.encode(claims, JWT_SECRET, algorithm='HS256')}"}

    async def get_memory(self, subject: str) -> httpx.Response:
        async with self.http() as client:
            return await client.get("/api/memory", headers=self.auth(subject))

    async def patch_memory(self, subject: str, **edit: Any) -> httpx.Response:
        async with self.http() as client:
            return await client.patch("/api/memory", json=edit, headers=self.auth(subject))

    async def live_calls(self) -> int:
        report = await self.health()
        return int(((report or {}).get("components") or {}).get("sessions", {}).get("live", -1))

    async def hangup_writes_done(self, calls: int = 1) -> bool:
        """This run of the node has finished with the hang-up writes of `calls` calls (every step run:
        landed, refused by the store, or dropped for a caller erased meanwhile, which its log says), and
        none is pending: what a test waits for instead of a fixed time before it looks for what they left."""
        report = await self.health()
        memory = ((report or {}).get("components") or {}).get("memory") or {}
        outbox = memory.get("outbox") or {}
        log = self._log("stdout")
        erased = log.read_text(errors="replace").count(ERASED_DROPPED) if log.exists() else 0
        handled = int(outbox.get("landed", 0)) + int(outbox.get("rejected", 0)) + int(outbox.get("dropped", 0))
        return report is not None and handled + erased >= calls and int(memory.get("pending_writes", 1)) == 0


class Cluster:
    """Nodes (each with its own ScriptedOpenAI) on one database; everything stopped on exit."""

    def __init__(self, root: Path, db_uri: str) -> None:
        self.root, self.db_uri = root, db_uri
        self.nodes: list[VoicegateNode] = []
        self._fakes: list[ScriptedOpenAI] = []

    async def node(self, name: str, *, start: bool = True, owner_key_secret: str | None = SHARED_OWNER_SECRET,
                   **settings: dict[str, Any]) -> VoicegateNode:
        fake = ScriptedOpenAI()
        await asyncio.to_thread(fake.start)
        self._fakes.append(fake)
        node = VoicegateNode(self.root / name, self.db_uri, fake, owner_key_secret=owner_key_secret,
                             settings=settings)
        self.nodes.append(node)
        if start:
            await node.start()
        return node

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.gather(*(node.stop() for node in self.nodes), return_exceptions=True)
        for call in [call for node in self.nodes for call in node.calls if call.running]:
            call.process.kill()
            await call.process.wait()
        for fake in self._fakes:
            fake.release()
            await asyncio.to_thread(fake.stop)
