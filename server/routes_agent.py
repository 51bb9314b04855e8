"""`GET /api/agent`: which language model answers, and, for the offline local agent, what it understands.

The page reads this to show its "What this offline agent understands" panel; the list comes from the
agent (LocalAgent.understands), so the page never promises what the agent does not do.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from internal.llm.local import LocalAgent
from server.gateway import Gateway


def install_agent_routes(app: FastAPI, gateway: Gateway) -> None:
    config = gateway.config

    @app.get("/api/agent", tags=["agent"])
    async def agent() -> JSONResponse:
        body: dict[str, object] = {"llm": config.effective_llm_provider}
        # The running model, not the config's name for it: a model injected by an embedding app (or a
        # test) is not the local agent even when llm.provider says "local".
        if isinstance(gateway.model, LocalAgent):
            understood = gateway.model.understands(memory_enabled=config.memory.enabled,
                                                   transfer_targets=list(config.sip.transfer_targets))
            body["understands"] = [capability.as_json() for capability in understood]
        return JSONResponse(body, headers={"Cache-Control": "no-store"})
