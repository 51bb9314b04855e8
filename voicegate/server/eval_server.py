"""The server `voicegate eval` starts for itself when it is given no --target: `voicegate serve` as a
child process, on free loopback ports, in a temporary data directory that goes away with it.

Its config is the eval's config (the offline defaults unless --config names a file) with what an eval
needs on top: an API key and token secret of its own (for the call events, callers' tokens and their
memory), server.call_events on, the eval's own SIP address trusted (127.0.0.1, so a "trusted" scripted
caller is believed and one phoning from 127.0.0.2 is not), WebRTC offered on loopback, no rate limits,
no registrations. With the offline defaults it also turns memory on when a scenario checks memory,
names one transfer target (`sales`), and sheds no load and refuses no call (a loaded test machine is
not an overloaded server: admission control would answer the eval's own calls with 503). A config file
keeps its own choices on those: a broken config shows up as failing scenarios.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from voicegate.internal.config import Config, render_toml

READY = "voicegate is ready."  # the banner's first line (server/banner.py)
START_TIMEOUT_S = 300.0  # a first start may fetch nothing, but loads Whisper, Piper, Smart Turn and PostgreSQL
STOP_TIMEOUT_S = 30.0
EVAL_TRANSFER_TARGETS = {"sales": "sip:sales@pbx.invalid"}
TRUSTED_EVAL_PEER = "127.0.0.1/32"


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_port_pair() -> int:
    """A port free for both TCP (HTTP) and UDP (SIP) right now."""
    for _ in range(50):
        port = free_port()
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
    raise OSError("no free port")


def eval_server_config(base: Config, data_dir: Path, *, defaults: bool, memory: bool) -> Config:
    config = base.model_copy(deep=True)
    server = config.server
    server.host, server.port, server.data_dir = "127.0.0.1", free_port_pair(), str(data_dir)
    server.api_key = server.api_key or secrets.token_urlsafe(24)
    server.jwt_secret = server.jwt_secret or secrets.token_urlsafe(32)
    server.call_events = True
    server.whip_rate_per_min = server.patch_rate_per_min = 0
    sip = config.sip
    sip.enabled, sip.bind, sip.transports = True, f"127.0.0.1:{free_port_pair()}", ["udp"]
    sip.trusted_peers = [*sip.trusted_peers, TRUSTED_EVAL_PEER]
    sip.invite_rate_per_min = 0
    sip.registrations = []
    config.webrtc.enabled, config.webrtc.ice_hosts = True, ["127.0.0.1"]
    if defaults:
        config.memory.enabled = config.memory.enabled or memory
        sip.transfer_targets = sip.transfer_targets or dict(EVAL_TRANSFER_TARGETS)
        server.shed_wait_ms = server.shed_loop_lag_ms = 0
        config.whisper.shed_after_ms = 0
        config.admission.enabled = False
    return config


class EvalServer:
    """A `voicegate serve` child for one eval run."""

    def __init__(self, config: Config, *, defaults: bool, memory: bool) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="voicegate-eval-"))
        self.config = eval_server_config(config, self.work / "data", defaults=defaults, memory=memory)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.config.server.port}"

    @property
    def sip_uri(self) -> str:
        return f"sip:agent@{self.config.sip.bind}"

    @property
    def log(self) -> Path:
        return self.work / "server.log"

    def launch(self) -> None:
        path = self.work / "config.toml"
        path.write_text(render_toml(self.config.model_dump(mode="json")))
        # The file says everything; the environment must not change it behind the eval's back.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("VOICEGATE_") and k not in ("OPENAI_API_KEY", "DEEPGRAM_API_KEY")}
        with self.log.open("wb") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "voicegate", "--config", str(path), "serve"],
                                            stdout=out, stderr=subprocess.STDOUT, env=env,
                                            cwd=Path(__file__).resolve().parents[2], start_new_session=True)

    def ready(self) -> bool:
        """True once the banner is out; RuntimeError (with the log's tail) when the server died or hung."""
        assert self.process is not None
        output = self.log.read_text(errors="replace")
        if READY in output:
            return True
        if self.process.poll() is not None:
            raise RuntimeError(f"the server did not start (exit {self.process.poll()}); its output ends:\n"
                               f"{output[-3000:]}")
        return False

    async def start(self) -> None:
        await asyncio.to_thread(self.launch)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not await asyncio.to_thread(self.ready):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server was not ready after {START_TIMEOUT_S:.0f} s (log: {self.log})")
            await asyncio.sleep(0.25)

    def stop(self, keep: bool = False) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if not keep:
            shutil.rmtree(self.work, ignore_errors=True)
