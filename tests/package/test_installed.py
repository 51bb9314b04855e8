"""voicegate installed from its wheel and from its sdist, and run as a new user runs it: a fresh virtualenv
outside the tree, an empty directory, no checkout anywhere in sight.

`pip install` of the wheel that `python -m build` built from this tree's sdist (its dependencies come
from pip's cache when it has them), then, from an empty directory: `voicegate --version`;
`voicegate doctor`, and the fix it prints for what a fresh install lacks (the end-of-turn model);
`voicegate config init`; `voicegate serve` with memory on and the loopback as a trusted SIP peer, so the
embedded PostgreSQL starts in ./data; a real SIP call (sipp streaming a Piper voice that says who is
calling) heard by the offline defaults (Whisper, the built-in agent, Piper); and what that call left in
memory, read back with the installed `voicegate memory show`. The sdist is installed too, with
`pip install --no-deps` into a second virtualenv that borrows the first one's dependencies (a .pth file)
instead of installing 900 MB again. This test's own process imports the checkout; the installed commands
never do.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, free_port
from tests.package.wheel import INSTALL_TIMEOUT_S, BuiltWheel, install, outside_env, project_version
from tests.sip_calls.conftest import caller_bye, render, rtp_port_range, run_sipp, stream
from tests.speech import neural, silence
from tests.test_serve import postgres_processes
from voicegate.internal.audio.g711 import ulaw_encode
from voicegate.internal.db import EmbeddedPostgres, discover

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]

CALLER = "+15551234567"
SAYS = "Hello. My name is Sam."
TALK_MS = 15000  # the caller stays on this long: the greeting, their sentence, Whisper, the reply
COMMAND_TIMEOUT_S = 180  # a cold interpreter importing numpy, onnxruntime and friends on two busy cores
START_TIMEOUT_S = 300  # first start: initdb, migrations, Whisper and Piper workers loaded
MEMORY_TIMEOUT_S = 120  # the hang-up write lands off the call path
STOP_TIMEOUT_S = 60


@dataclass
class Installed:
    bin: Path
    work: Path  # the empty directory every command runs in
    env: dict[str, str]

    def run(self, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / "voicegate"), *args], cwd=self.work, env=self.env, text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)


@pytest.fixture(scope="module")
def installed(built_wheel: BuiltWheel) -> Iterator[Installed]:
    # The system temp dir, outside the tree. Not under pytest's own temp root: each pytest session that
    # starts on this machine resets that root to mode 0700, which locks the embedded PostgreSQL (running
    # as its own user) out of a data directory below it, mid-test.
    root = Path(tempfile.mkdtemp(prefix="voicegate-installed-"))
    assert not root.resolve().is_relative_to(REPO)
    try:
        home, work = root / "home", root / "work"
        home.mkdir()
        work.mkdir()
        env = outside_env(home)
        started = time.monotonic()
        bin_dir = install(built_wheel.path, root / "venv", env)
        print(f"pip install of the wheel into a fresh venv: {time.monotonic() - started:.0f} s")
        low, high = rtp_port_range()
        env.update({  # only what this machine needs: free ports, and the two settings the story turns on
            "VOICEGATE_SERVER__HOST": "127.0.0.1", "VOICEGATE_SERVER__PORT": str(free_port()),
            "VOICEGATE_SIP__BIND": f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}",
            "VOICEGATE_SIP__TRANSPORTS": '["udp"]',
            "VOICEGATE_SIP__RTP_PORT_MIN": str(low), "VOICEGATE_SIP__RTP_PORT_MAX": str(high),
            "VOICEGATE_WHISPER__WORKERS": "1", "VOICEGATE_PIPER__WORKERS": "1",  # gentle on a shared machine
            "VOICEGATE_MEMORY__ENABLED": "true", "VOICEGATE_SIP__TRUSTED_PEERS": '["127.0.0.1/32"]',
        })
        yield Installed(bin_dir, work, env)
    finally:
        shutil.rmtree(root, ignore_errors=True)  # 900 MB of virtualenv; failures carry the logs they need


def lines_of(output: str, prefix: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(prefix)]


def test_only_voicegate_is_imported_and_from_the_fresh_venv_never_the_checkout(installed: Installed) -> None:
    probe = ("import json, sys, importlib.util as u, voicegate, voicegate.server, voicegate.memory, voicegate.tools, "
             "voicegate.internal.db.migrator as m, voicegate.internal.config as c; "
             "assert u.find_spec('server') is None and u.find_spec('internal') is None, 'a second top-level name'; "
             "print(json.dumps([voicegate.__file__, voicegate.server.__file__, voicegate.memory.__file__, "
             "str(m.MIGRATIONS), str(c.DEFAULT_CONFIG), sys.executable, sys.path]))")
    done = subprocess.run([str(installed.bin / "python"), "-c", probe], cwd=installed.work, env=installed.env,
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    *modules, executable, path = json.loads(done.stdout)
    venv = installed.bin.parent
    assert all(Path(m).is_relative_to(venv / "lib") for m in modules), modules
    assert Path(executable).parent == installed.bin
    assert not [entry for entry in path if entry and Path(entry).resolve().is_relative_to(REPO)], path


def test_the_sdist_installs_with_pip_and_runs_from_its_own_virtualenv(installed: Installed, built_wheel: BuiltWheel,
                                                                      tmp_path: Path) -> None:
    """`pip install voicegate-X.tar.gz`: pip builds the wheel from the sdist alone (no .git, no
    VOICEGATE_BUILD_REVISION), and the installed package finds its code, its data and its revision."""
    venv = tmp_path / "sdist-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120,
                   env=installed.env)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # The dependencies are the wheel's virtualenv's: added to sys.path after this venv's own site-packages,
    # so voicegate itself is the one installed here from the sdist.
    (site / "dependencies.pth").write_text(str(next((installed.bin.parent / "lib").glob("python3*/site-packages"))))
    done = subprocess.run([str(installed.bin / "python"), "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "--no-deps", "--disable-pip-version-check", "--progress-bar", "off",
                           str(built_wheel.sdist)], capture_output=True, text=True, env=installed.env,
                          cwd=installed.work, timeout=INSTALL_TIMEOUT_S)
    assert done.returncode == 0, f"pip install of the sdist failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    from_sdist = Installed(venv / "bin", installed.work, installed.env)
    version = from_sdist.run("--version")
    assert version.stdout == f"voicegate {project_version()} (git {built_wheel.revision})\n", version
    # The whole server imports (every dependency found), and the package data comes from this venv.
    probe = ("import json, importlib.resources as r, voicegate.server.gateway, voicegate.internal.db.migrator as m, "
             "voicegate.internal.config as c; page = r.files('voicegate.internal.web') / 'static' / 'index.html'; "
             "print(json.dumps([voicegate.server.gateway.__file__, str(m.MIGRATIONS), str(c.DEFAULT_CONFIG), "
             "str(page), len(m.discover()), page.is_file()]))")
    imported = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=installed.work, env=installed.env,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert imported.returncode == 0, imported.stderr
    *paths, migrations, page = json.loads(imported.stdout)
    assert all(Path(path).is_relative_to(site / "voicegate") for path in paths), paths
    assert migrations == len(discover()) and page
    config = from_sdist.run("config", "init", "-")
    assert config.returncode == 0 and config.stdout.startswith("# Written by `voicegate config init`"), config


@contextlib.contextmanager
def serving(installed: Installed) -> Iterator[subprocess.Popen[bytes]]:
    """`voicegate serve` in the empty directory until its /health answers; stopped (and its embedded
    PostgreSQL with it) however the test ends."""
    log = installed.work.parent / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(installed.bin / "voicegate"), "serve"], cwd=installed.work,
                                   env=installed.env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while health(installed) is None:
            assert process.poll() is None, f"serve exited with {process.returncode}\n{serve_log(installed)}"
            assert time.monotonic() < deadline, f"no /health in {START_TIMEOUT_S} s\n{serve_log(installed)}"
            time.sleep(0.5)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if postgres_processes(installed.work / "data"):  # killed: its postmaster outlived it
            leaked = EmbeddedPostgres(installed.work / "data")
            leaked.start_sync()
            leaked.stop_sync()


def health(installed: Installed) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"http://127.0.0.1:{installed.env['VOICEGATE_SERVER__PORT']}/health", timeout=5)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None  # type: ignore[no-any-return]


def serve_log(installed: Installed) -> str:
    return "--- serve log (tail)\n" + (installed.work.parent / "serve.log").read_text(errors="replace")[-5000:]


def caller_audio(directory: Path) -> Path:
    """The Piper voice saying SAYS once the greeting is over, as RAW mu-law for sipp's rtp_stream."""
    pcm = silence(4000, 8000) + neural([SAYS], 8000)[0] + silence(2000, 8000)
    path = directory / "caller.pcmu"
    path.write_bytes(ulaw_encode(pcm))
    return path


def follow_the_doctor(installed: Installed, label: str) -> None:
    """`voicegate doctor` on a fresh install, the fix it prints run as printed, then the doctor again."""
    doctor = installed.run("doctor")
    assert doctor.returncode == 1, doctor.stdout
    site = next((installed.bin.parent / "lib").glob("python3*/site-packages"))
    assert lines_of(doctor.stdout, "ok   package: ") == [
        f"ok   package: voicegate {label} installed in {site / 'voicegate'}: {len(discover())} migrations, "
        "default config, prompt, page"]
    # A fresh install lacks one thing, the end-of-turn model, and the doctor says how to fetch it with a
    # command that works here (no `make serve`: there is no checkout).
    assert [line.split(":")[0] for line in lines_of(doctor.stdout, "FAIL")] == ["FAIL model smart turn"]
    assert "make serve" not in doctor.stdout
    (fix,) = [line.split("fix: ", 1)[1] for line in doctor.stdout.splitlines() if "fix: " in line]
    command = shlex.split(fix.split(", or set", 1)[0])
    assert Path(command[0]).parent == installed.bin, fix
    fetched = subprocess.run(command, cwd=installed.work, env=installed.env, capture_output=True, text=True,
                             timeout=COMMAND_TIMEOUT_S)
    assert fetched.returncode == 0, fetched.stderr
    ready = installed.run("doctor")
    assert ready.returncode == 0 and ready.stdout.rstrip().endswith(": ready"), ready.stdout


async def test_from_an_empty_directory_doctor_config_init_serve_a_sip_call_and_memory(
        installed: Installed, built_wheel: BuiltWheel, tmp_path: Path) -> None:
    label = f"{project_version()} (git {built_wheel.revision})"
    version = installed.run("--version")
    assert version.stdout == f"voicegate {label}\n", version
    follow_the_doctor(installed, label)
    init = installed.run("config", "init")
    assert init.returncode == 0, init.stderr
    assert (installed.work / "config.toml").read_text().startswith(
        f"# Written by `voicegate config init` (voicegate {project_version()})")
    checked = installed.run("config", "check")
    assert checked.returncode == 0 and "(from config.toml)" in checked.stdout, checked.stderr

    with serving(installed) as server:
        report = health(installed)
        assert report is not None
        # The revision is the API key's holder's to read (/health keeps it from anyone else); --version says it.
        assert report["version"] == project_version() and "revision" not in report
        assert report["components"]["database"] == {"ok": True, "embedded": True}
        assert (installed.work / "data" / "postgres").is_dir()  # ./data of the directory it was started in

        scenario = render(tmp_path, media=stream(caller_audio(tmp_path)), ending=caller_bye(TALK_MS),
                          from_user=CALLER)
        call = await run_sipp(tmp_path, scenario, installed.env["VOICEGATE_SIP__BIND"], timeout=TALK_MS / 1000 + 90)
        call.check()  # answered (200 with SDP), talked, hung up

        # What the call left, read back by another process of the installed package, on the same
        # embedded database: the built-in agent remembers a caller who gives their name.
        deadline = time.monotonic() + MEMORY_TIMEOUT_S
        while True:
            shown = installed.run("memory", "show", "--caller", f"sip:{CALLER}")
            if shown.returncode == 0 and "name is Sam" in shown.stdout:
                break
            assert time.monotonic() < deadline, f"no memory of the call:\n{shown.stdout}\n{shown.stderr}\n" \
                                                f"{serve_log(installed)}"
            time.sleep(2)
        stranger = installed.run("memory", "show", "--caller", "sip:+15559876543")
        assert stranger.returncode == 3, stranger  # nobody else was remembered

        server.send_signal(signal.SIGTERM)
        assert server.wait(STOP_TIMEOUT_S) == 0, serve_log(installed)
    deadline = time.monotonic() + 15
    while postgres_processes(installed.work / "data") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert postgres_processes(installed.work / "data") == []
