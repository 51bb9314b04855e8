"""`voicegate memory` against `memory.provider = "memory"`, whose store lives inside `voicegate serve`:
a real server process, the real CLI as another process, the admin route between them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import free_port, run_cli
from tests.memory.processes import Cluster, VoicegateNode, render_toml

pytestmark = pytest.mark.slow

API_KEY = "admin-api-key-0123456789"
ROUTE = "DELETE /api/admin/memory/{caller}"
WEB = "zoe"  # the JWT subject: owner jwt:zoe
LINE = "- The caller's locker code word is zanzibar."


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[VoicegateNode]:
    async with Cluster(tmp_path, "") as cluster:  # no database: the memory is the server's alone
        yield await cluster.node("solo", memory={"provider": "memory"}, server={"api_key": API_KEY},
                                 sip={"enabled": False})


def operator_config(tmp_path: Path, **server: object) -> Path:
    path = tmp_path / "operator.toml"
    path.write_text(render_toml({"server": {"host": "127.0.0.1", "data_dir": str(tmp_path / "data"), **server},
                                 "memory": {"enabled": True, "provider": "memory"}}))
    return path


async def test_cli_delete_erases_the_running_servers_in_process_memory(node: VoicegateNode) -> None:
    patched = await node.patch_memory(WEB, document="memory", action="append", content=LINE)
    assert patched.status_code == 200, patched.text

    async with node.http() as http:
        for headers in ({}, {"X-API-Key": "wrong-key-0123456789"}):
            refused = await http.delete(f"/api/admin/memory/jwt:{WEB}", headers=headers)
            assert refused.status_code == 401, refused.text
    assert (await node.get_memory(WEB)).json()["documents"]["memory"]["content"] == LINE

    shown = await node.cli("show", "--caller", f"jwt:{WEB}")  # no store of its own to read: says so
    assert shown.returncode == 1 and "inside the running server" in shown.stderr, shown

    deleted = await node.cli("delete", "--caller", f"jwt:{WEB}", "--yes")
    assert deleted.returncode == 0, str(deleted) + node.tails()
    assert "memories: 1 removed" in deleted.stdout and f"deleted 2 record(s) of jwt:{WEB}" in deleted.stdout, deleted
    documents = (await node.get_memory(WEB)).json()["documents"]
    assert [(doc["content"], doc["revision"]) for doc in documents.values()] == [("", 0), ("", 0)]
    audit = [json.loads(line) for line in (node.data_dir / "memory-audit.jsonl").read_text().splitlines()]
    assert [(a["operation"], a["source"]) for a in audit] == [("append", "api"), ("delete_owner", "api")]

    again = await node.cli("delete", "--caller", f"jwt:{WEB}", "--yes")
    assert again.returncode == 3 and "no memory" in again.stderr, again  # nothing left: said, not pretended


def test_cli_delete_with_no_server_listening_fails_naming_the_route(tmp_path: Path) -> None:
    config = operator_config(tmp_path, port=free_port(), api_key=API_KEY)
    done = run_cli("--config", str(config), "memory", "delete", "--caller", "sip:+15551234567", "--yes")
    assert done.returncode == 1, done.stderr
    assert ROUTE in done.stderr and "cannot reach the server" in done.stderr, done.stderr
    assert "deleted" not in done.stdout


def test_cli_delete_without_an_api_key_refuses_before_asking(tmp_path: Path) -> None:
    config = operator_config(tmp_path, port=free_port())
    done = run_cli("--config", str(config), "memory", "delete", "--caller", "sip:+15551234567", "--yes")
    assert done.returncode == 1, done.stderr
    assert ROUTE in done.stderr and "server.api_key" in done.stderr, done.stderr
    assert not (tmp_path / "data").exists()  # no store, no secret of its own made up meanwhile
