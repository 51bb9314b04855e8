"""Every command block of README.md and docs/quickstart.md runs as written, in a fresh copy of the tree.

What runs how (and what cannot run here, with why) is listed in tests/doc_commands.py. The copy's `.venv`
is the one this test runs in, already set up: `make serve` then runs scripts/bootstrap.sh as on any second
run (apt and pip steps find nothing to do) before it starts the server. HOME is a temporary directory and
no VOICEGATE_* variable or provider key from the developer's shell reaches the commands, so they see what
a newcomer's shell would: the offline defaults.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, free_port
from tests.doc_commands import SKIPPED, Block, How, blocks_in, how, with_ports

pytestmark = pytest.mark.slow

BLOCKS = blocks_in(REPO)
RUN_TIMEOUT_S = 600  # `voicegate talk` loads Whisper and Piper on two shared cores
START_TIMEOUT_S = 600  # bootstrap, then the server's own start (model checks, worker pools)
STOP_TIMEOUT_S = 60
COPY_IGNORED = shutil.ignore_patterns(".git", ".venv", "data", "test-artifacts", "__pycache__", ".mypy_cache",
                                      ".ruff_cache", ".pytest_cache", ".hypothesis", "*.egg-info", "my.toml")


def _block_id(block: Block) -> str:
    return f"{block.document}:{block.line}:{block.first_command[:40]}"


def _install_set_up_venv(copy: Path) -> None:
    """A `.venv` in the copy that is this test's interpreter, stamped as bootstrap leaves it."""
    bin_dir = copy / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = shlex.quote(sys.executable)
    scripts = {
        "python": f'exec {python} "$@"',
        "voicegate": f'exec {python} -c "import sys; from voicegate.server.cli import main; sys.exit(main())" "$@"',
    }
    for name, line in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n")
        (bin_dir / name).chmod(0o755)
    digest = hashlib.sha256((copy / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (copy / ".venv" / f".voicegate-installed-serve-{digest}").touch()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    copy = tmp_path / "voicegate"
    shutil.copytree(REPO, copy, ignore=COPY_IGNORED)
    _install_set_up_venv(copy)
    return copy


@pytest.fixture
def ports() -> tuple[int, int]:
    return free_port(), free_port()


@pytest.fixture
def shell_env(tree: Path, tmp_path: Path, ports: tuple[int, int]) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("VOICEGATE_") and name not in ("OPENAI_API_KEY", "DEEPGRAM_API_KEY")}
    http_port, sip_port = ports
    env.update(HOME=str(home), PYTHONPATH=str(tree), VOICEGATE_SERVER__PORT=str(http_port),
               VOICEGATE_SIP__BIND=f"127.0.0.1:{sip_port}")
    return env


def _run(block: Block, tree: Path, env: dict[str, str], ports: tuple[int, int]) -> None:
    text = with_ports(block.text, *ports)
    try:
        done = subprocess.run(["bash", "-e", "-c", text], cwd=tree, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"no end in {RUN_TIMEOUT_S} s: {block.describe()}") from exc
    assert done.returncode == 0, (f"exit status {done.returncode}: {block.describe()}\n"
                                  f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")


@contextlib.contextmanager
def _serving(block: Block, tree: Path, env: dict[str, str], ports: tuple[int, int],
             log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The block running in its own process group (as in a terminal) until its page answers."""
    with log.open("wb") as out:
        process = subprocess.Popen(["bash", "-e", "-c", with_ports(block.text, *ports)], cwd=tree, env=env,
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{ports[0]}/"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(url):
            assert process.poll() is None, \
                f"exited ({process.returncode}) before {url} answered: {block.describe()}\n{_tail(log)}"
            assert time.monotonic() < deadline, f"{url} did not answer in {START_TIMEOUT_S} s: " \
                                                f"{block.describe()}\n{_tail(log)}"
            time.sleep(1)
        yield process
    finally:
        _stop(process)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C in the terminal: SIGINT to the whole foreground group (make and the server under it)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise AssertionError(f"Ctrl-C did not stop the server in {STOP_TIMEOUT_S} s") from None


def _tail(log: Path) -> str:
    return "--- output\n" + log.read_text(errors="replace")[-4000:]


def test_every_block_is_found_and_every_listed_exception_names_one() -> None:
    assert {b.document for b in BLOCKS} == {"README.md", "docs/quickstart.md"}
    keys = {(b.document, b.first_command) for b in BLOCKS}
    assert [key for key in SKIPPED if key not in keys] == [], "a skip entry matches no block any more"
    assert all(len(reason) > 20 for reason in SKIPPED.values())
    for block in BLOCKS:
        if how(block) is How.WHILE_SERVING:
            assert any(how(b) is How.SERVE and b.document == block.document and b.line < block.line
                       for b in BLOCKS), f"no server started before this block: {block.describe()}"
    # The README's `make serve` is skipped only because quickstart runs the very same command.
    assert any(b.text.strip() == "make serve" and how(b) is How.SERVE for b in BLOCKS)


@pytest.mark.parametrize("block", [b for b in BLOCKS if how(b) is How.RUN], ids=_block_id)
def test_the_block_runs_offline_as_written(block: Block, tree: Path, shell_env: dict[str, str],
                                           ports: tuple[int, int]) -> None:
    _run(block, tree, shell_env, ports)


@pytest.mark.parametrize("block", [b for b in BLOCKS if how(b) is How.SERVE], ids=_block_id)
def test_the_server_block_serves_the_page_and_the_blocks_that_use_it_run(
        block: Block, tree: Path, shell_env: dict[str, str], ports: tuple[int, int], tmp_path: Path) -> None:
    first_server = next(b for b in BLOCKS if how(b) is How.SERVE and b.document == block.document)
    users = [b for b in BLOCKS if how(b) is How.WHILE_SERVING and b.document == block.document] \
        if block == first_server else []
    log = tmp_path / "server.log"
    with _serving(block, tree, shell_env, ports, log):
        page = httpx.get(f"http://127.0.0.1:{ports[0]}/", timeout=10)
        assert "<title>voicegate</title>" in page.text
        for user in users:
            _run(user, tree, shell_env, ports)
    # What the banner promises: where the page is (the quickstart shows it).
    assert re.search(rf"http://(localhost|127\.0\.0\.1):{ports[0]}/", log.read_text(errors="replace")), _tail(log)
