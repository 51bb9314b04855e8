"""Schemathesis against the OpenAPI schema of the memory API and /token: no input gets a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.pipeline.conftest import ScriptedStt
from tests.reliability.served import ThreadedServer, serve_in_thread
from voicegate.internal.config import load_config
from voicegate.internal.identity.jwt import mint_token
from voicegate.server.app import create_gateway_application

SECRET = "fuzz-secret-0123456789abcdefghijklmnop"


def _app():  # type: ignore[no-untyped-def]
    import tempfile

    config = load_config(None)
    config.server.data_dir = tempfile.mkdtemp(prefix="voicegate-fuzz-")
    config.server.jwt_secret = SECRET
    config.server.api_key = "fuzz-api-key-0123456789"
    config.server.patch_rate_per_min = 0
    config.sip.enabled = False
    config.memory.enabled = True
    config.memory.provider = "memory"
    return create_gateway_application(config, stt=ScriptedStt([]))


APP = _app()
schema = schemathesis.openapi.from_dict(APP.openapi())


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedServer]:
    with serve_in_thread(APP) as live:
        yield live


TOKEN = mint_token(SECRET, "fuzzer", issuer="voicegate", audience="voicegate", ttl_s=3600)


@schema.include(path_regex=r"^/(api/memory|token|health)$").parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case: schemathesis.Case, server: ThreadedServer, tmp_path: Path) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "X-API-Key": "fuzz-api-key-0123456789"}
    response = case.call(base_url=server.url, headers=headers, timeout=30)
    assert response.status_code < 500, f"{case.method} {case.path} -> {response.status_code}: {response.text[:300]}"
