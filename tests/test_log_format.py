"""`telemetry.log_format`: console lines for people at a terminal, JSON lines for machines; redacted alike."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from voicegate.internal.telemetry import configure_logging
from voicegate.internal.telemetry.logs import colours_wanted

CONSOLE_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR) +\S")
# Logs one line the way `voicegate serve` sets logging up, from a real config file.
LOG_ONE_LINE = (
    "import logging, sys\nfrom pathlib import Path\n"
    "from voicegate.internal.config import load_config\n"
    "from voicegate.server.cli_logging import configure_command_logging\n"
    "configure_command_logging(load_config(Path(sys.argv[1])))\n"
    "logging.getLogger('voicegate.test').info('call started', extra={'transport': 'sip'})\n"
)


def emit(log_format: str, secrets: tuple[str, ...] = (), **extra: object) -> str:
    stream = io.StringIO()
    configure_logging("debug", stream=stream, secrets=secrets, log_format=log_format)
    logging.getLogger("test.format").warning("login with hunter2-secret failed", extra=extra)
    return stream.getvalue().strip()


def test_console_line_is_time_level_message_and_the_extra_fields_without_noise() -> None:
    line = emit("console", transport="sip", session_id="sess-7", reason="no route")
    assert CONSOLE_LINE.match(line), line
    assert " WARNING " in line and "login with" in line
    assert "transport=sip" in line and "session_id=sess-7" in line
    assert 'reason="no route"' in line  # quoted, so a value with a space stays one field
    assert "test.format" not in line and "\033[" not in line  # logger name is noise; StringIO is no TTY


def test_a_secret_and_a_callers_words_are_redacted_in_console_exactly_as_in_json() -> None:
    fields = {"text": "my card is 4111", "headers": {"Authorization": "Digest abc"}, "note": "pw hunter2-secret"}
    as_json = json.loads(emit("json", secrets=("hunter2-secret",), **fields))
    as_console = emit("console", secrets=("hunter2-secret",), **fields)
    assert "hunter2-secret" not in as_console and "4111" not in as_console and "Digest abc" not in as_console
    assert as_json["message"] in as_console  # "login with [REDACTED] failed"
    assert "text" not in as_json and "text=" not in as_console  # content dropped by both (log_content off)
    assert f"headers={json.dumps(as_json['headers'])}" in as_console
    assert f'note="{as_json["note"]}"' in as_console


def test_colours_need_a_terminal_a_capable_term_and_no_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as terminal:
            monkeypatch.setenv("TERM", "xterm-256color")
            monkeypatch.delenv("NO_COLOR", raising=False)
            assert colours_wanted(terminal)
            monkeypatch.setenv("NO_COLOR", "1")
            assert not colours_wanted(terminal)
            monkeypatch.delenv("NO_COLOR")
            monkeypatch.setenv("TERM", "dumb")
            assert not colours_wanted(terminal)
        assert not colours_wanted(io.StringIO())
    finally:
        os.close(master)
        os.close(slave)


def run_logging(config: Path, on_terminal: bool, term: str = "xterm") -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_") and k != "NO_COLOR"}
    env.update(PYTHONPATH=str(REPO), TERM=term)
    if not on_terminal:
        done = subprocess.run([sys.executable, "-c", LOG_ONE_LINE, str(config)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        return done.stdout.strip()
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", LOG_ONE_LINE, str(config)], cwd=REPO, env=env,
                            stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    return out.decode().strip()


def test_auto_renders_console_lines_in_a_real_terminal_and_json_into_a_pipe(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[telemetry]\nlog_format = "auto"\n')
    on_terminal = run_logging(config, on_terminal=True)
    assert re.search(r"\d\d:\d\d:\d\d\.\d{3}", on_terminal) and "call started" in on_terminal
    assert "\033[" in on_terminal  # a capable terminal gets colours
    assert "transport=sip" in on_terminal and not on_terminal.startswith("{")
    plain = run_logging(config, on_terminal=True, term="dumb")
    assert "\033[" not in plain and CONSOLE_LINE.match(plain), plain
    piped = json.loads(run_logging(config, on_terminal=False))
    assert piped["message"] == "call started" and piped["transport"] == "sip"


def test_json_and_console_are_forced_whatever_the_stream(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[telemetry]\nlog_format = "json"\n')
    assert json.loads(run_logging(config, on_terminal=True))["message"] == "call started"
    config.write_text('[telemetry]\nlog_format = "console"\n')
    assert CONSOLE_LINE.match(run_logging(config, on_terminal=False))
