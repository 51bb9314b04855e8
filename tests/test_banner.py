"""The start-up banner: what it says (a pure function), and that what it says works on a real server."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO

import httpx
import pytest

from tests.conftest import REPO, free_port
from voicegate.internal.config import Config, load_config
from voicegate.server.banner import BannerInfo, memory_description, page_urls, render_banner, sip_uris


def config_from(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config(path)


def test_a_server_on_all_interfaces_is_shown_on_localhost_and_on_the_lan(tmp_path: Path) -> None:
    config = config_from(tmp_path, '[server]\nhost = "0.0.0.0"\n')
    assert page_urls(config, 8080, "192.168.1.20") == ["http://127.0.0.1:8080/", "http://192.168.1.20:8080/"]
    assert page_urls(config, 8080, None) == ["http://127.0.0.1:8080/"]
    bound = config_from(tmp_path, '[server]\nhost = "10.0.0.5"\n')
    assert page_urls(bound, 9000, "192.168.1.20") == ["http://10.0.0.5:9000/"]


def test_sip_uris_name_each_transport_and_the_loopback_one_for_a_local_softphone(tmp_path: Path) -> None:
    config = config_from(tmp_path, '[sip]\nbind = "0.0.0.0:5060"\n')
    uris, local = sip_uris(config, {"udp": 5060, "tcp": 5060, "tls": 5061}, "192.168.1.20")
    assert uris == ["sip:agent@192.168.1.20:5060", "sip:agent@192.168.1.20:5060;transport=tcp",
                    "sips:agent@192.168.1.20:5061"]
    assert local == "sip:agent@127.0.0.1:5060"
    public = config_from(tmp_path, '[sip]\nbind = "10.0.0.5:5070"\npublic_address = "203.0.113.9:5070"\n')
    uris, local = sip_uris(public, {"udp": 5070}, None)
    assert uris == ["sip:agent@203.0.113.9:5070"] and local == ""  # not on loopback: no local hint
    loopback = config_from(tmp_path, '[sip]\nbind = "127.0.0.1:5080"\n')
    uris, local = sip_uris(loopback, {"udp": 5080}, "192.168.1.20")
    assert uris == ["sip:agent@127.0.0.1:5080"] and local == ""  # the URI already is the local one


def test_memory_says_where_its_data_lives_and_never_the_database_password(tmp_path: Path) -> None:
    off = config_from(tmp_path, "")
    assert memory_description(off).startswith("off")
    embedded = config_from(tmp_path, f'[server]\ndata_dir = "{tmp_path / "d"}"\n[memory]\nenabled = true\n')
    assert memory_description(embedded) == f"on, embedded PostgreSQL in {tmp_path / 'd' / 'postgres'}"
    remote = config_from(tmp_path, '[memory]\nenabled = true\n[pgvector]\n'
                                   'connection_string = "postgresql://vg:s3cret-pw@db.example:5433/voice?sslmode=require"\n')
    described = memory_description(remote)
    assert described == "on, PostgreSQL at db.example:5433/voice"
    assert "s3cret-pw" not in described and "vg" not in described
    markdown = config_from(tmp_path, f'[memory]\nenabled = true\nprovider = "markdown"\nmarkdown_dir = "{tmp_path}"\n')
    assert memory_description(markdown) == f"on, Markdown files in {tmp_path}"


def test_banner_names_page_sip_engines_memory_and_three_things_to_try() -> None:
    info = BannerInfo(
        page_urls=["http://127.0.0.1:8080/", "http://192.168.1.20:8080/"],
        sip_uris=["sip:agent@192.168.1.20:5060", "sip:agent@192.168.1.20:5060;transport=tcp"],
        local_sip_uri="sip:agent@127.0.0.1:5060",
        engines={"Speech-to-text": "whisper", "Text-to-speech": "piper", "Language model": "local",
                 "Turn taking": "VAD silero, end of turn smart_turn"},
        memory="on, embedded PostgreSQL in /srv/vg/postgres",
        offline_agent=True,
        command="voicegate --config /etc/vg.toml",
    )
    text = render_banner(info)
    assert "Browser page   http://127.0.0.1:8080/" in text and "http://192.168.1.20:8080/" in text
    assert "SIP, dial      sip:agent@192.168.1.20:5060" in text and ";transport=tcp" in text
    assert "from a softphone on this machine: sip:agent@127.0.0.1:5060" in text
    for label, engine in info.engines.items():
        assert re.search(rf"^  {label} +{re.escape(engine)}$", text, re.M)
    assert "Memory         on, embedded PostgreSQL in /srv/vg/postgres" in text
    tries = re.findall(r"^  ([123])\. ", text, re.M)
    assert tries == ["1", "2", "3"]
    assert '"what time is it?"' in text and "sipp -sn uac -m 1 127.0.0.1:5060" in text
    assert "voicegate --config /etc/vg.toml talk --mic" in text


def test_banner_without_sip_says_so_and_offers_another_second_thing() -> None:
    text = render_banner(BannerInfo(page_urls=["http://127.0.0.1:8080/"], engines={"Language model": "openai"}))
    assert "SIP            off (sip.enabled = false)" in text
    assert "  2. Check the effective configuration: voicegate config check" in text
    assert '"what time is it?"' not in text  # a language model answers anything, not only the offline agent's set
    assert "microphone only on localhost" not in text  # one URL, localhost: nothing to warn about


class Collector:
    """A child's stream read in a thread (so a quiet child cannot hang the test)."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._stream = stream
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        for line in self._stream:
            self.lines.append(line)

    def wait_for(self, marker: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while not any(marker in line for line in self.lines) and time.monotonic() < deadline:
            time.sleep(0.2)
        return "".join(self.lines)

    def rest(self) -> list[str]:
        self._thread.join(timeout=10)  # the child has exited: its stream ends
        return list(self.lines)


def sip_options(host: str, port: int) -> str:
    branch, tag = "z9hG4bK" + uuid.uuid4().hex[:12], uuid.uuid4().hex[:8]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(10)
        me = sock.getsockname()[1]
        request = (f"OPTIONS sip:agent@{host}:{port} SIP/2.0\r\n"
                   f"Via: SIP/2.0/UDP 127.0.0.1:{me};branch={branch};rport\r\n"
                   f"Max-Forwards: 70\r\nFrom: <sip:banner-test@127.0.0.1>;tag={tag}\r\n"
                   f"To: <sip:agent@{host}:{port}>\r\nCall-ID: {uuid.uuid4().hex}@127.0.0.1\r\n"
                   "CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n")
        sock.sendto(request.encode(), (host, port))
        data, _ = sock.recvfrom(65535)
    return data.decode(errors="replace")


@pytest.mark.slow
def test_make_serve_prints_a_banner_whose_page_and_sip_uri_answer(tmp_path: Path) -> None:
    http_port, sip_port = free_port(), free_port(socket.SOCK_DGRAM)
    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nhost = "127.0.0.1"\nport = {http_port}\ndata_dir = "{tmp_path / "data"}"\n'
                      f'[sip]\nbind = "127.0.0.1:{sip_port}"\ntransports = ["udp"]\n[memory]\nenabled = false\n')
    # The command exactly as the README's `make serve CONFIG=...` runs it, minus the machine set-up step.
    dry_run = subprocess.run(["make", "-n", "serve", f"CONFIG={config}"], cwd=REPO, capture_output=True,
                             text=True, check=True, timeout=30).stdout
    (line,) = [line for line in dry_run.splitlines() if "bin/voicegate" in line]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
    proc = subprocess.Popen([sys.executable, "-m", "voicegate", *shlex.split(line)[1:]], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout and proc.stderr
    stdout, stderr = Collector(proc.stdout), Collector(proc.stderr)
    try:
        banner = stderr.wait_for("Ctrl-C stops.", timeout=180)
        assert "Ctrl-C stops." in banner, banner
        page = re.search(r"Browser page +(http://\S+)", banner)
        sip = re.search(r"SIP, dial +sip:agent@([\d.]+):(\d+)", banner)
        assert page and sip, banner
        assert page.group(1) == f"http://127.0.0.1:{http_port}/"
        assert httpx.get(page.group(1), timeout=10).status_code == 200
        assert int(sip.group(2)) == sip_port
        assert sip_options(sip.group(1), int(sip.group(2))).startswith("SIP/2.0 200")
        assert "Memory         off" in banner
        assert re.search(r"Speech-to-text +whisper (cpu int8|cuda float16)\n", banner), banner  # its device
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0
    # stdout is a pipe: JSON lines only (the banner went to stderr), with one record saying it is ready.
    records = [json.loads(line) for line in stdout.rest() if line.strip()]
    (ready,) = [r for r in records if r["message"] == "voicegate is ready"]
    assert ready["page_url"] == page.group(1) and ready["memory_store"].startswith("off")
    assert ready["sip_uris"] == [f"sip:agent@127.0.0.1:{sip_port}"]
