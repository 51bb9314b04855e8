"""The node id on its own: how it is chosen, refused when malformed, and stamped on logs and metrics.

The end-to-end behaviour (two real processes, drain on SIGTERM) is in tests/test_drain.py.
"""

from __future__ import annotations

import io
import json
import logging
import socket
from pathlib import Path

import pytest

from voicegate.internal.config import ConfigError, load_config
from voicegate.internal.config.providers import TelemetryConfig
from voicegate.internal.telemetry import configure_logging
from voicegate.internal.telemetry.otel import Telemetry
from voicegate.server.node import resolve_node_id


def test_a_configured_node_id_is_used_as_given() -> None:
    assert resolve_node_id("eu-west-1a") == "eu-west-1a"


def test_an_empty_node_id_becomes_the_hostname_with_a_suffix_that_tells_two_processes_apart() -> None:
    first, second = resolve_node_id(""), resolve_node_id("")
    host = socket.gethostname()[:48]
    assert first.startswith(host + "-") and second.startswith(host + "-")
    assert first != second  # two processes on one host (same hostname, or containers) still differ


@pytest.mark.parametrize("value", ["node one", "a:b", "x" * 65])
def test_a_node_id_with_spaces_colons_or_too_long_is_refused_naming_the_key(tmp_path: Path, value: str) -> None:
    # ':' separates the fields of a memory change notice; spaces would break a log or metric label reader.
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nnode_id = "{value}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "server.node_id" in str(caught.value)


def test_a_zero_or_negative_drain_timeout_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[server]\ndrain_timeout_s = 0\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "server.drain_timeout_s" in str(caught.value)


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_every_log_line_carries_the_node_id(log_format: str) -> None:
    stream = io.StringIO()
    configure_logging("info", stream=stream, log_format=log_format, node_id="node-7")
    logging.getLogger("test.node").info("hello")
    # A library's logger (not uvicorn's: a server started earlier in this process may have set it
    # not to propagate, and the root handler would never see it).
    logging.getLogger("some.library").warning("from a library")
    out = stream.getvalue().splitlines()
    assert len(out) == 2
    if log_format == "json":
        assert [json.loads(line)["node_id"] for line in out] == ["node-7", "node-7"]
    else:
        assert all("node_id=node-7" in line for line in out)


def test_the_node_info_metric_names_the_node() -> None:
    telemetry = Telemetry(TelemetryConfig(), "1.0", node_id="node-7")
    try:
        assert 'voicegate_node_info{node_id="node-7"} 1' in telemetry.prometheus()
    finally:
        telemetry.shutdown()
