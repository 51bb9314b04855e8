"""Real SIP calls into a voicegate node, and the traces a test looks for afterwards: a full `pg_dump`
of the test database, every file of a data directory, the nodes' LISTEN connections."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.conftest import free_port
from tests.memory.processes import LISTENER_APP, SCENARIO, VoicegateNode, clean_env


def caller_audio(directory: Path, text: str, *, lead_ms: int = 400, tail_ms: int = 1200) -> Path:
    """espeak-ng saying `text`, as RAW u-law at 8 kHz (what sipp's rtp_stream sends), with silence
    around it so the node's VAD hears the speech start and end."""
    name = hashlib.sha256(f"{text}|{lead_ms}|{tail_ms}".encode()).hexdigest()[:12]
    wav, raw = directory / f"say-{name}.wav", directory / f"say-{name}.ulaw"
    if not raw.exists():
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(wav), text], check=True,
                       capture_output=True)
        subprocess.run(["sox", str(wav), "-r", "8000", "-c", "1", "-e", "u-law", "-t", "raw", str(raw),
                        "pad", f"{lead_ms / 1000}", f"{tail_ms / 1000}"], check=True, capture_output=True)
    return raw


def free_media_port() -> int:
    """An even port P with P..P+3 free on UDP (sipp binds audio RTP/RTCP and video on them)."""
    for _ in range(100):
        base = free_port(socket.SOCK_DGRAM) & ~1
        held: list[socket.socket] = []
        try:
            for port in range(base, base + 4):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                held.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return base
    raise RuntimeError("no four free UDP ports in a row")


@dataclass
class SippCall:
    caller: str
    directory: Path
    process: asyncio.subprocess.Process
    returncode: int | None = None
    output: str = field(default="", repr=False)

    async def wait(self, timeout: float = 120.0) -> SippCall:
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        self.returncode = self.process.returncode
        logs = sorted(self.directory.glob("*.log"))
        self.output = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                                for p in [self.directory / "sipp.stderr", *logs] if p.exists())
        return self

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    def check(self) -> None:
        assert self.returncode == 0, f"sipp call from {self.caller} failed (rc={self.returncode})\n{self.output}"


async def sipp_call(node: VoicegateNode, caller_number: str, talk_ms: int, *, text: str = "hello there",
                    loops: int = 1, tail_ms: int = 1200, wait: bool = True) -> SippCall:
    """A real call from `caller_number` that says `text` (`loops` times; -1: until the call ends) and
    hangs up after `talk_ms` unless the node hangs up first. With `wait`, returns once it ended (rc 0
    checked); otherwise at once: `await call.wait()` later."""
    directory = node.root / f"call-{len(node.calls) + 1}"
    directory.mkdir(parents=True, exist_ok=True)
    audio = caller_audio(node.root, text, tail_ms=tail_ms)
    scenario = directory / "scenario.xml"
    scenario.write_text(SCENARIO.read_text().replace("FROM_USER", caller_number).replace("AUDIO_FILE", str(audio))
                        .replace("LOOPS", str(loops)).replace("TALK_MS", str(talk_ms)))
    for _attempt in range(3):
        args = ["-sf", str(scenario), "-i", "127.0.0.1", "-p", str(free_port(socket.SOCK_DGRAM)),
                "-mi", "127.0.0.1", "-mp", str(free_media_port()), "-m", "1", "-nostdin", "-t", "u1",
                "-timeout", f"{talk_ms // 1000 + 60}s", "-timeout_error", "-trace_err"]
        with (directory / "sipp.stderr").open("wb") as err:
            process = await asyncio.create_subprocess_exec(
                "sipp", node.sip_target, *args, cwd=directory, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=err)
        call = SippCall(caller_number, directory, process)
        node.calls.append(call)
        await asyncio.sleep(0.3)
        if process.returncode != 254:  # 254: a port picked as free was taken before sipp bound it
            break
    if wait:
        (await call.wait(talk_ms / 1000 + 90)).check()
    return call


# ---- traces in the database and on disk --------------------------------------------------------------


def pg_bin(name: str) -> Path:
    import pgserver

    return Path(pgserver.__file__).parent / "pginstall" / "bin" / name


def pg_dump_text(uri: str) -> str:
    """The whole test database as pg_dump's plain SQL (schema and every row of every table)."""
    result = subprocess.run([str(pg_bin("pg_dump")), "--no-owner", "--dbname", uri], capture_output=True,
                            text=True, timeout=60, env=clean_env())
    if result.returncode != 0:
        raise AssertionError(f"pg_dump failed (rc={result.returncode}): {result.stderr}")
    return result.stdout


def lines_containing(text: str, marker: str) -> list[str]:
    return [line[:300] for line in text.splitlines() if marker.lower() in line.lower()]


def files_containing(root: Path, marker: str) -> dict[str, str]:
    """Every file under `root` whose bytes contain `marker` (case-insensitive), with some context."""
    found: dict[str, str] = {}
    needle = marker.lower().encode()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes().lower()
        at = data.find(needle)
        if at >= 0:
            found[str(path)] = data[max(0, at - 120):at + 120].decode(errors="replace")
    return found


async def settle(uri: str, *, quiet_s: float, minimum_s: float = 0.0, timeout_s: float = 60.0,
                 until: Callable[[str], bool] | None = None) -> str:
    """Wait until the database stops changing (its dump unchanged for `quiet_s`, and at least
    `minimum_s` in all), or `until(dump)` holds; the last dump."""
    start = changed = time.monotonic()
    previous = await asyncio.to_thread(pg_dump_text, uri)
    while time.monotonic() - start < timeout_s:
        if until is not None and until(previous):
            break
        now = time.monotonic()
        if now - changed >= quiet_s and now - start >= minimum_s:
            break
        await asyncio.sleep(0.5)
        current = await asyncio.to_thread(pg_dump_text, uri)
        if current != previous:
            previous, changed = current, time.monotonic()
    return previous


async def listener_backends(uri: str) -> set[int]:
    """Backend pids of LISTEN connections on this database (by application_name, else by last query)."""
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND (application_name = %s OR query ILIKE 'LISTEN%%')", (LISTENER_APP,))
        return {int(row[0]) for row in await cursor.fetchall()}


async def terminate_backend(uri: str, pid: int) -> bool:
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
        cursor = await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        row = await cursor.fetchone()
        return bool(row and row[0])
