"""A stdio MCP server's standard error, read into voicegate's log.

The SDK hands the program a file for its standard error; left to itself that is voicegate's own
stderr, so whatever the program prints (a traceback quoting its configuration, a token in a URL)
would bypass the log's redaction of secrets and its format. Here the program writes into a pipe, and a
thread reads it line by line into the `internal.tools.mcp.stderr` logger (each line bounded, tagged
with the server's name, URLs masked), where the log's redaction of configured secrets and credential
shapes applies like on every other line (internal/telemetry/logs.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import TextIO, cast

from voicegate.internal.config.display import mask_urls_in

log = logging.getLogger("voicegate.internal.tools.mcp.stderr")

MAX_LINE_CHARS = 500  # a program that prints a megabyte on one line does not make a megabyte log line


class ServerStderr:
    """A pipe for one run of the program: `writer` is what it writes to; the reading thread ends when
    every copy of the write end is closed (ours when this context ends, the program's when it exits)."""

    def __init__(self, server: str) -> None:
        self.server = server
        read_fd, write_fd = os.pipe()
        self.writer = cast(TextIO, os.fdopen(write_fd, "w"))
        self._reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self._thread = threading.Thread(target=self._read, name=f"mcp-stderr-{server}", daemon=True)

    def __enter__(self) -> ServerStderr:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()

    def _read(self) -> None:
        with self._reader:
            for line in self._reader:
                text = line.rstrip("\n")
                if text.strip():
                    log.info("mcp server stderr: %s", mask_urls_in(text[:MAX_LINE_CHARS]),
                             extra={"mcp_server": self.server})
