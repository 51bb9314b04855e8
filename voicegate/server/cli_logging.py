"""How each `voicegate` command logs: the server with the configured level, tools quietly on stderr.

Its own module so the sub-command modules (memory, rag, call) need nothing from `server.cli`, which runs
them: no import circle between the CLI and its commands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from voicegate.internal.config import Config


def configure_command_logging(config: Config, level: str | None = None, stream: TextIO | None = None) -> None:
    from voicegate.internal.config import secret_values
    from voicegate.internal.telemetry import configure_logging

    if config.telemetry.log_file:
        Path(config.telemetry.log_file).parent.mkdir(parents=True, exist_ok=True)
    configure_logging(
        level or config.telemetry.log_level,
        stream=stream,
        secrets=secret_values(config),
        log_content=config.telemetry.log_content,
        log_file=config.telemetry.log_file,
        log_format=config.telemetry.log_format,
        node_id=config.server.node_id,
    )


def configure_tool_logging(config: Config) -> None:
    """For commands whose stdout is their output: warnings and errors only, on stderr (telemetry.log_format)."""
    configure_command_logging(config, level="warning", stream=sys.stderr)
