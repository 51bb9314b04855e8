"""The whole server registered with sipp as its registrar: state in /health and /metrics, and the
binding removed when the server stops."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from tests.conftest import tone_driven
from tests.pipeline.conftest import ScriptedStt
from tests.sip.conftest import eventually, free_port, run_sipp
from tests.sip.registrar import challenge_round, write_scenario
from voicegate.internal.config import load_config
from voicegate.internal.config.sip_registration import SipRegistration
from voicegate.server.app import create_gateway_application
from voicegate.server.gateway import Gateway

pytestmark = pytest.mark.slow

API_KEY = "operator-api-key-0123456789"


async def test_registration_state_is_in_health_and_metrics_and_ends_with_the_server(tmp_path: Path) -> None:
    registrar_port = free_port()
    scenario = write_scenario(tmp_path, [challenge_round(0, "pbx-pw", grant=300, expires="3600"),
                                         challenge_round(1, "pbx-pw", grant=300, expires="0")])
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, None, local_port=registrar_port, timeout=60))
    config = load_config(None)
    config.server.data_dir = str(tmp_path / "data")
    config.pipeline.greeting = ""
    config.server.api_key = API_KEY  # the registrations' accounts are in /health for its holder only
    config.sip.bind = f"127.0.0.1:{free_port()}"
    config.sip.transports = ["udp"]
    config.sip.registrations = [SipRegistration(registrar=f"sip:127.0.0.1:{registrar_port}", username="alice",
                                                password="pbx-pw")]
    app = create_gateway_application(tone_driven(config), stt=ScriptedStt([]))
    gateway: Gateway = app.state.gateway
    async with app.router.lifespan_context(app):
        status = gateway.sip.registrations.statuses()[0]
        await eventually(lambda: status.state == "registered", what="registered")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            health = await http.get("/health", headers={"X-API-Key": API_KEY})
            anyone = await http.get("/health")
            metrics = await http.get("/metrics")
    # Without the API key: the state, not which account is registered where.
    (public,) = anyone.json()["components"]["sip_registrations"]["registrations"]
    assert public["state"] == "registered" and "username" not in public and "registrar" not in public
    assert "alice" not in anyone.text
    component = health.json()["components"]["sip_registrations"]
    assert component["ok"] is True
    (entry,) = component["registrations"]
    assert entry["state"] == "registered" and entry["last_status"] == 200 and entry["failures"] == 0
    assert entry["username"] == "alice" and 290 <= entry["expires_in_s"] <= 300
    assert "pbx-pw" not in health.text
    assert re.search(rf'voicegate_sip_registration_up\{{registrar="sip:127.0.0.1:{registrar_port}",'
                     r'username="alice"\} 1', metrics.text)
    # Leaving the lifespan stopped the gateway: sipp's last round insisted on Expires: 0.
    (await sipp).check()
    assert status.state == "unregistered"


async def test_health_reports_a_refused_registration_without_taking_the_node_out(tmp_path: Path) -> None:
    registrar_port = free_port()
    scenario = write_scenario(tmp_path, [challenge_round(0, "pbx-pw", grant=300)])
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, None, local_port=registrar_port, timeout=60))
    config = load_config(None)
    config.server.data_dir = str(tmp_path / "data")
    config.sip.bind = f"127.0.0.1:{free_port()}"
    config.sip.transports = ["udp"]
    config.sip.registrations = [SipRegistration(registrar=f"sip:127.0.0.1:{registrar_port}", username="alice",
                                                password="wrong-pw")]
    app = create_gateway_application(tone_driven(config), stt=ScriptedStt([]))
    gateway: Gateway = app.state.gateway
    async with app.router.lifespan_context(app):
        status = gateway.sip.registrations.statuses()[0]
        await eventually(lambda: status.failures >= 1, what="refused")
        (await sipp).check()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            health = await http.get("/health")
            metrics = await http.get("/metrics")
    # The node still serves browsers and trunks: a load balancer must not drop it over one PBX.
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["components"]["sip_registrations"]["ok"] is False
    (entry,) = health.json()["components"]["sip_registrations"]["registrations"]
    assert entry["state"] == "backing-off" and entry["last_status"] == 403 and entry["failures"] >= 1
    assert entry["next_attempt_in_s"] is not None and "wrong-pw" not in health.text
    assert re.search(r'voicegate_sip_registration_up\{[^}]*username="alice"\} 0', metrics.text)
