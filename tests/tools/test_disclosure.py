"""What unauthenticated endpoints and operator commands give away: /health and GET /api/agent keep MCP
server and tool names, model paths, the revision and recording figures for the API key's holder;
`config check` and `doctor` (real CLI processes) mask MCP URLs and arguments; a stdio MCP server's stderr
goes through the log, never straight to voicegate's stderr."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, run_cli
from tests.fakes.openai_fake import FakeOpenAI
from tests.pipeline.conftest import ScriptedStt
from tests.tools.test_mcp import SERVER, mcp_config, stdio_server
from voicegate.server.app import create_gateway_application

pytestmark = pytest.mark.slow

API_KEY = "disclosure-api-key-0123456789"
URL_PASSWORD, URL_TOKEN = "u5er-pa55word", "qu3ry-t0ken-value"
ARG_TOKEN, ARG_KEY = "argv-t0ken-123456789", "s3cret-flag"
ARG_PASSWORD = "hunter2"  # a plain word, a secret only by the flag before it


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test") as server:
        yield server


async def test_health_and_the_agent_route_keep_details_for_the_api_keys_holder(
        tmp_path: Path, fake: FakeOpenAI) -> None:
    config = mcp_config(tmp_path, fake, [stdio_server(tmp_path / "calls.jsonl", tools=["lookup_order"])])
    config.server.api_key = API_KEY
    config.recording.enabled = True
    app = create_gateway_application(config, stt=ScriptedStt([]))
    await app.state.gateway.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://voicegate") as client:
            public = (await client.get("/health")).json()
            keyed = (await client.get("/health", headers={"X-API-Key": API_KEY})).json()
            agent = (await client.get("/api/agent")).json()
            agent_keyed = (await client.get("/api/agent", headers={"Authorization": f"Bearer {API_KEY}"})).json()
    finally:
        await app.state.gateway.stop()
    text = json.dumps(public)
    assert "revision" not in public and public["version"]
    assert "orders" not in text and "lookup_order" not in text
    assert public["components"]["mcp"] == {"ok": True, "advisory": True, "servers_up": 1, "servers": 1}
    assert not any(key in public["components"]["recording"] for key in ("stored", "stored_bytes", "kept"))
    assert "end_of_turn_model" not in public["components"]["turn_taking"]
    assert str(Path.home()) not in text and "/site-packages/" not in text  # no file of this machine
    assert "revision" in keyed and {"stored", "stored_bytes", "kept"} <= set(keyed["components"]["recording"])
    assert keyed["components"]["mcp"]["servers"][0]["tools"] == ["orders__lookup_order"]
    if keyed["components"]["turn_taking"].get("end_of_turn") == "smart_turn":
        assert keyed["components"]["turn_taking"]["end_of_turn_model"].endswith(".onnx")
    assert agent["mcp"] == {"callable": True}
    assert agent_keyed["mcp"]["servers"] == [{"name": "orders", "state": "up", "tools": ["orders__lookup_order"]}]


def secret_config(tmp_path: Path) -> Path:
    port = free_port()
    path = tmp_path / "config.toml"
    path.write_text(
        f"[server]\nport = {free_port()}\nhost = '127.0.0.1'\ndata_dir = '{tmp_path / 'data'}'\n"
        f"[sip]\nenabled = false\n"
        f"[[mcp.servers]]\nname = 'remote'\nurl = 'http://svc:{URL_PASSWORD}@127.0.0.1:{port}/mcp?key={URL_TOKEN}'\n"
        f"tools = ['*']\nconnect_timeout_s = 3\n"
        f"[[mcp.servers]]\nname = 'local'\ncommand = '{sys.executable}'\n"
        f"args = ['{SERVER}', 'stdio', '--token', '{ARG_TOKEN}', '--api-key={ARG_KEY}',\n"
        f" '--password', '{ARG_PASSWORD}']\ntools = ['lookup_order']\n")
    return path


def test_config_check_and_doctor_mask_mcp_urls_and_arguments(tmp_path: Path) -> None:
    config = secret_config(tmp_path)
    checked = run_cli("config", "check", "--config", str(config))
    assert checked.returncode == 0, checked.stderr
    doctor = run_cli("--config", str(config), "doctor", timeout=180)
    for output in (checked.stdout + checked.stderr, doctor.stdout + doctor.stderr):
        for secret in (URL_PASSWORD, URL_TOKEN, ARG_TOKEN, ARG_KEY, ARG_PASSWORD):
            assert secret not in output, (secret, output)
    assert "http://********@127.0.0.1:" in checked.stdout and "?key=********" in checked.stdout
    assert "'stdio', '--token', '********', '--api-key=********'" in checked.stdout.replace('"', "'")
    assert "mcp server remote" in doctor.stdout and "********@127.0.0.1" in doctor.stdout


async def test_a_stdio_servers_stderr_goes_through_the_log_with_its_secrets_masked(
        tmp_path: Path, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    from voicegate.internal.tools.mcp import McpToolset
    from voicegate.internal.tools.registry import ToolRegistry

    caplog.set_level(logging.INFO, logger="voicegate.internal.tools.mcp.stderr")
    server = stdio_server(tmp_path / "calls.jsonl", tools=["lookup_order"])
    server["env"]["MCP_TEST_STDERR"] = (f"warming up against https://svc:{URL_PASSWORD}@db.internal/orders"
                                        f"?token={URL_TOKEN}")
    config = mcp_config(tmp_path, fake, [server])
    toolset = McpToolset(config.mcp, ToolRegistry())
    await toolset.start()
    try:
        assert toolset.connections[0].up
        for _ in range(100):
            if any("warming up" in record.getMessage() for record in caplog.records):
                break
            await asyncio.sleep(0.05)
    finally:
        await toolset.close()
    (line,) = [record for record in caplog.records if "warming up" in record.getMessage()]
    assert line.getMessage() == ("mcp server stderr: warming up against "
                                 "https://********@db.internal/orders?token=********")
    assert line.mcp_server == "orders"  # type: ignore[attr-defined]
    assert "warming up" not in capfd.readouterr().err  # never straight onto voicegate's own stderr
