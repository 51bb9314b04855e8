"""Shared fixtures: a real embedded PostgreSQL per test session, free ports, a clean environment."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio

from tests.scale import soak_timeouts
from tests.worker_groups import keep_groups_together
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.db import EmbeddedPostgres
from voicegate.internal.stt.whisper import WhisperSpeechToText

REPO = Path(__file__).resolve().parents[1]

# The ports free_port hands out, for a server a test starts later: below the kernel's ephemeral range
# (32768-60999 on Linux) and the default RTP range (20000-29999). A port from the ephemeral range can be taken
# between the check and the server's bind by anything on the machine that binds port 0 or connects out (the
# other test worker's fakes, ICE, HTTP clients): the node then exits with "address already in use".
TEST_PORTS = range(10000, 20000)


def _worker_ports() -> range:
    """This xdist worker's own slice of TEST_PORTS (gw0 the first half, gw1 the second, ...): a port one
    worker has picked but not yet bound cannot be picked by the other (CI once had a SIP node on 2 workers
    exit with "address already in use" when both drew the same port). Child processes inherit the variable."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), 1)
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    size = len(TEST_PORTS) // count
    start = TEST_PORTS.start + (index % count) * size
    return range(start, start + size)


_next_port = [0]
_STRIDE = 23  # coprime to the slice's size: every port once per round, and a test that takes a few ports
# above the one it was given (an RTP range) does not get them handed out next


def ports_free(port: int, host: str = "127.0.0.1") -> bool:
    """Is `port` free on `host` for both UDP and TCP (sipp and the SIP transports bind both)?"""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, \
                socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            udp.bind((host, port))
            tcp.bind((host, port))
    except OSError:
        return False
    return True


def free_port(kind: int = socket.SOCK_STREAM, host: str = "127.0.0.1") -> int:
    """A port from this worker's slice of TEST_PORTS free for UDP and TCP on `host` (`kind`: either, for the
    callers that name one). Handed out in strides from a random start, so a port picked and not yet bound
    is not handed out again until the whole slice has gone round."""
    ports = _worker_ports()
    if not _next_port[0]:
        _next_port[0] = random.randrange(len(ports))
    for _ in range(400):
        port = ports[_next_port[0] % len(ports)]
        _next_port[0] += _STRIDE
        if ports_free(port, host):
            return port
    raise RuntimeError("no free port")


VOICEGATE = [sys.executable, "-m", "voicegate"]


@pytest.hookimpl(trylast=True)  # after xdist's own (tests/worker_groups.py) and the `soak` marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    soak_timeouts(config, items)
    keep_groups_together(config, items)



@pytest.fixture(autouse=True)
def _clean_voicegate_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not see a developer's VOICEGATE_* or provider keys."""
    for name in list(os.environ):
        if name.startswith("VOICEGATE_") or name in ("OPENAI_API_KEY", "DEEPGRAM_API_KEY"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def pg_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL 16 + pgvector (pgserver) in a fresh temp dir, shared by this test session."""
    embedded = EmbeddedPostgres(tmp_path_factory.mktemp("pg"))
    yield embedded.start_sync()
    embedded.stop_sync()


@pytest.fixture
async def pg_conn(pg_uri: str) -> AsyncIterator[psycopg.AsyncConnection]:
    conn = await psycopg.AsyncConnection.connect(pg_uri, autocommit=True)
    try:
        yield conn
    finally:
        await conn.close()


@contextlib.contextmanager
def new_database(pg_uri: str) -> Iterator[str]:
    """A new empty database on the shared server, dropped afterwards."""
    name = f"t_{os.getpid()}_{os.urandom(4).hex()}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = pg_uri.partition("?")
    yield f"{base.rsplit('/', 1)[0]}/{name}?{query}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_db(pg_uri: str) -> Iterator[str]:
    """A new empty database on the shared server, dropped afterwards."""
    with new_database(pg_uri) as uri:
        yield uri


@pytest.fixture(scope="module")
def module_db(pg_uri: str) -> Iterator[str]:
    """A new empty database for a module whose tests share servers on it (each test keeps to callers of
    its own), dropped after the module."""
    with new_database(pg_uri) as uri:
        yield uri




@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def whisper(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WhisperSpeechToText]:
    """A real Whisper engine (one worker), shared by a module's tests."""
    engine = WhisperSpeechToText(WhisperConfig(workers=1), tmp_path_factory.mktemp("models"))
    await engine.warm_up()
    yield engine
    await engine.aclose()


def tone_driven(config: Any) -> Any:
    """Pin the energy VAD and the text rules: for tests whose caller is a tone or espeak-ng and whose
    checks time the silence rules. A tone is not a voice to Silero, and Smart Turn was not made for
    espeak-ng's monotone; the defaults are tested on a neural voice (tests/turn/test_turn_taking.py,
    tests/sip_calls/test_whisper_calls.py, tests/test_talk.py)."""
    config.pipeline.vad = "energy"
    config.pipeline.end_of_turn = "off"
    config.pipeline.vad_offset_ms = 300  # the text rules' utterances (the default's 120 ms suits the fusion)
    return config


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
    full_env.update(env or {})
    return subprocess.run([*VOICEGATE, *args], capture_output=True, text=True, env=full_env,
                          cwd=cwd or REPO, timeout=timeout)
