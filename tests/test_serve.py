"""`voicegate serve` as a person runs it: a real process, a real embedded PostgreSQL, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import REPO, free_port
from voicegate.server.version import git_revision, package_version

pytestmark = pytest.mark.slow


def postgres_processes(data_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "postgres" in (proc.info["name"] or "") and str(data_dir) in cmdline:
            found.append(proc)
    return found


API_KEY = "serve-test-api-key-0123456789"


def wait_healthy(url: str, timeout: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200:
                return response
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not become healthy")
        time.sleep(0.2)


def test_serve_answers_health_with_database_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\ndata_dir = "{tmp_path / "data"}"\napi_key = "{API_KEY}"\n'
        f'[sip]\nbind = "127.0.0.1:{free_port()}"\n[memory]\nenabled = true\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
    proc = subprocess.Popen([sys.executable, "-m", "voicegate", "--config", str(config), "serve"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        health = wait_healthy(f"http://127.0.0.1:{port}/health").json()
        assert health["status"] == "ok"
        assert health["components"]["database"] == {"ok": True, "embedded": True}
        # Which voicegate answers: run from this checkout, the revision is git's, read at start; told to the
        # API key's holder only (it names the exact code an attacker could study).
        assert health["version"] == package_version() and "revision" not in health
        keyed = httpx.get(f"http://127.0.0.1:{port}/health", headers={"X-API-Key": API_KEY}, timeout=5).json()
        assert (keyed["version"], keyed["revision"]) == (package_version(), git_revision(REPO))
        assert postgres_processes(tmp_path / "data"), "the embedded PostgreSQL should be running"
        proc.send_signal(signal.SIGTERM)
        _stdout, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert f"http://127.0.0.1:{port}/" in stderr or f"http://localhost:{port}/" in stderr
    deadline = time.monotonic() + 10
    while postgres_processes(tmp_path / "data") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert postgres_processes(tmp_path / "data") == []


def test_migrate_command_applies_then_reports_up_to_date(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
    env["VOICEGATE_SERVER__DATA_DIR"] = str(tmp_path / "data")
    first = subprocess.run([sys.executable, "-m", "voicegate", "migrate"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "0001_init" in first.stdout
    second = subprocess.run([sys.executable, "-m", "voicegate", "migrate"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and "up to date" in second.stdout


def test_migrate_with_data_dir_starts_the_embedded_database_there_and_not_in_the_cwd(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([sys.executable, "-m", "voicegate", "migrate", "--data-dir", str(tmp_path / "store")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "0001_init" in done.stdout
    assert (tmp_path / "store" / "postgres").is_dir() and list(work.iterdir()) == []
