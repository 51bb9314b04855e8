"""`GET /api/agent`: which language model answers, and, for the offline local agent, what it understands.

The page reads this to show its "What this offline agent understands" panel; the list comes from the
agent (LocalAgent.understands), so the page never promises what the agent does not do. With
`[[mcp.servers]]` it also says which MCP tools there are and whether this agent can call them: the
offline local agent cannot (it acts on its own fixed intents), and a bring-your-own agent is not sent
them (it owns its tools). Which servers and tools there are is said to the API key's holder only: the
page needs none of it, and their names tell an attacker what to ask the agent for.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from voicegate.internal.llm.local import LocalAgent
from voicegate.server.gateway import Gateway
from voicegate.server.routes_calls import holds_api_key

MCP_NOT_CALLABLE = {
    "local": "The offline local agent cannot call MCP tools: it acts only on the intents it understands. Use "
             "llm.provider = \"openai\" (or an OpenAI-compatible server) or \"ollama\" with a model that calls tools.",
    "agent": "MCP tools are not sent to a bring-your-own agent: the agent owns its tools (docs/tools.md).",
}


def install_agent_routes(app: FastAPI, gateway: Gateway) -> None:
    config = gateway.config

    @app.get("/api/agent", tags=["agent"])
    async def agent(request: Request) -> JSONResponse:
        body: dict[str, object] = {"llm": config.effective_llm_provider}
        # The running model, not the config's name for it: a model injected by an embedding app (or a
        # test) is not the local agent even when llm.provider says "local".
        if isinstance(gateway.model, LocalAgent):
            understood = gateway.model.understands(memory_enabled=config.memory.enabled,
                                                   transfer_targets=list(config.sip.transfer_targets))
            body["understands"] = [capability.as_json() for capability in understood]
        if gateway.mcp is not None:
            kind = "local" if isinstance(gateway.model, LocalAgent) else config.effective_llm_provider
            mcp: dict[str, object] = {"callable": kind not in MCP_NOT_CALLABLE}
            if holds_api_key(request, config.server.api_key):  # which servers and tools: for the operator only
                mcp["servers"] = [{key: server[key] for key in ("name", "state", "tools")}
                                  for server in gateway.mcp.describe()["servers"]]
            if kind in MCP_NOT_CALLABLE:
                mcp["note"] = MCP_NOT_CALLABLE[kind]
            body["mcp"] = mcp
        return JSONResponse(body, headers={"Cache-Control": "no-store"})
