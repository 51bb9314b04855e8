"""Admission control over WHIP ([admission], docs/scaling.md): a node configured to be full after one
call answers the next POST /whip with 503 + Retry-After, before negotiating it, while the call it admitted
keeps getting answers; the refusal is in /metrics with its reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import WhipClient, live_server
from voicegate.internal.config import Config

pytestmark = pytest.mark.slow


async def test_a_full_node_answers_the_next_whip_with_503_and_retry_after_while_its_call_goes_on(
        config: Config, speech_wav: Callable[..., Path]) -> None:
    # One core at the 0.75 target, every call half a core (fixed, not measured): room for one call.
    config.admission.cores = 1
    config.admission.call_cost = 0.5
    config.admission.measure_cost = False
    config.admission.retry_after_s = 7
    config.telemetry.metrics = True
    async with live_server(config, stt=ScriptedStt(["say hello world"])) as server, server.http() as http:
        first = WhipClient(speech_wav("say hello world", lead_ms=6000))  # it speaks once the other is refused
        assert (await first.dial(http)).status_code == 201
        refused = WhipClient()
        response = await refused.dial(http)
        assert response.status_code == 503
        assert response.headers["retry-after"] == "7"
        assert response.json()["error"]["code"] == "at_capacity"
        assert "estimated load 1.00 over 0.75" in response.json()["error"]["message"]
        await refused.close()
        await first.wait_for(lambda e: e["type"] == "transcript" and e["role"] == "agent"
                             and "hello world" in e["text"].lower(), 60)  # the admitted call is served
        assert len(server.sessions) == 1
        metrics = (await http.get("/metrics")).text
        assert 'voicegate_calls_refused_total{reason="capacity",transport="webrtc"} 1' in metrics
        await first.hang_up(http)
        await first.close()
