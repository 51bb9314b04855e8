"""`make cluster` as a person runs it: PostgreSQL, two nodes, Kamailio and HAProxy come up and print
their addresses, a browser page and a SIP call work through the front ends, and Ctrl-C stops it all."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from bench.common.cluster import PROXY_IP
from tests.cluster.harness import LIGHT_ENGINES, scenario
from tests.conftest import REPO, free_port
from tests.sip.conftest import run_sipp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LIGHT_CONFIG = LIGHT_ENGINES + '[pocketsphinx]\nworkers = 1\n[pipeline]\nend_of_turn = "off"\n'


def processes_using(directory: Path) -> list[str]:
    """Command lines of live processes that mention `directory` (the cluster's own files)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(directory) in cmdline:
            found.append(cmdline)
    return found


def start_make(output: Path, env: dict[str, str], *variables: str) -> subprocess.Popen[bytes]:
    """`make cluster` in a session of its own, as a terminal's foreground job is a group of its own."""
    with output.open("wb") as out:
        return subprocess.Popen(["make", "--no-print-directory", "cluster", *variables], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


async def test_make_cluster_starts_everything_prints_its_addresses_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    config = tmp_path / "light.toml"
    config.write_text(LIGHT_CONFIG)
    cluster_dir = tmp_path / "cluster"
    http_port, sip_port = free_port(), free_port()
    args = (f"--dir {cluster_dir} --http-port {http_port} --sip-port {sip_port} "
            f"--node-http-port {free_port()} --node-sip-port {free_port()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
    output = tmp_path / "make.out"
    make = await asyncio.to_thread(start_make, output, env, f"CONFIG={config}", f"CLUSTER_ARGS={args}")
    try:
        deadline = time.monotonic() + 420
        while "voicegate cluster is up" not in output.read_text(errors="replace"):
            assert make.poll() is None, output.read_text(errors="replace")
            assert time.monotonic() < deadline, output.read_text(errors="replace")
            time.sleep(0.5)
        banner = output.read_text(errors="replace")
        assert f"http://127.0.0.1:{http_port}/" in banner
        assert f"sip:voicegate@{PROXY_IP}:{sip_port}" in banner
        assert re.search(r"node a .* node b ", banner.replace("\n", " ")), banner

        page = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{http_port}/", timeout=30)
        assert page.status_code == 200 and "<html" in page.text.lower()
        result = await run_sipp(tmp_path, scenario(tmp_path, talk_ms=300), f"{PROXY_IP}:{sip_port}", timeout=120,
                                extra=["-m", "2"])
        result.check()
    finally:
        os.killpg(make.pid, signal.SIGINT)  # what Ctrl-C in the terminal does: the whole foreground group
        try:
            make.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)
            raise
    deadline = time.monotonic() + 60
    while processes_using(cluster_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_using(cluster_dir) == [], "Ctrl-C left processes running"
    assert "stopping" in output.read_text(errors="replace")
