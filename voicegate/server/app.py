"""The composition root: build every component from a Config and wire the HTTP routes."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from voicegate.internal.config import Config, load_config
from voicegate.internal.llm.base import ChatModel
from voicegate.internal.memory.owner import OwnerKeySecretError
from voicegate.internal.stt.base import SpeechToText
from voicegate.internal.tools.registry import ToolRegistry
from voicegate.internal.tts.base import TextToSpeech
from voicegate.internal.web import STATIC_DIR
from voicegate.server.errors import install_error_handlers
from voicegate.server.gateway import Gateway
from voicegate.server.routes_admin import install_admin_routes
from voicegate.server.routes_agent import install_agent_routes
from voicegate.server.routes_call_feed import install_call_feed_routes
from voicegate.server.routes_calls import holds_api_key, install_call_routes
from voicegate.server.routes_memory import install_memory_routes
from voicegate.server.routes_recordings import install_recording_routes
from voicegate.server.routes_transfer import install_transfer_routes
from voicegate.server.routes_webrtc import install_webrtc_routes
from voicegate.server.version import package_version, source_revision

ACCOUNT_FIELDS = ("registrar", "username", "last_reason")  # of a registration: for the API key's holder only
# What else /health says only to the API key's holder: where files lie on this machine, which build runs
# (a revision names the exact code an attacker could study), and how much has been recorded.
TURN_TAKING_FIELDS = ("end_of_turn_model",)
RECORDING_FIELDS = ("stored", "stored_bytes", "kept", "pending_s", "refused_chunks")


def without_accounts(report: dict[str, Any]) -> dict[str, Any]:
    """/health for anyone: every status, but not which accounts are registered where, which MCP servers
    and tools there are (nor why one failed: its error may name hosts and paths), which model files lie
    where, which revision runs, nor how many recordings are kept and how large they are."""
    report.pop("revision", None)
    components = report.get("components", {})
    for entry in components.get("sip_registrations", {}).get("registrations", []):
        for key in ACCOUNT_FIELDS:
            entry.pop(key, None)
    mcp = components.get("mcp")
    if mcp is not None:
        components["mcp"] = {key: mcp[key] for key in ("ok", "advisory") if key in mcp}
        components["mcp"]["servers_up"] = sum(server.get("state") == "up" for server in mcp.get("servers", []))
        components["mcp"]["servers"] = len(mcp.get("servers", []))
    for key in TURN_TAKING_FIELDS:
        components.get("turn_taking", {}).pop(key, None)
    for key in RECORDING_FIELDS:
        components.get("recording", {}).pop(key, None)
    for component in components.values():
        for key, value in list(component.items()):
            if isinstance(value, str) and value.startswith("/"):  # an absolute path on this machine
                component.pop(key)
    return report


def create_gateway_application(config: Config | None = None, *, tools: ToolRegistry | None = None,
                               stt: SpeechToText | None = None, tts: TextToSpeech | None = None,
                               model: ChatModel | None = None, memory_provider: Any = None) -> FastAPI:
    """Build the whole server. Components start with the app's lifespan and stop with it.

    Tools (Python functions the model may call), a MemoryProvider (protocol v2, see
    internal/memory/provider.py) and, for tests or embedding, ready-made speech and language providers
    are injected here; everything else comes from the config.
    """
    cfg = config if config is not None else load_config(None)
    gateway = Gateway(cfg, tools=tools, stt=stt, tts=tts, model=model, memory_provider=memory_provider)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await gateway.start()
        except OwnerKeySecretError as exc:  # the operator's to fix: say what and how, not a traceback
            print(f"voicegate: cannot start: {exc}", file=sys.stderr, flush=True)
            raise
        try:
            yield
        finally:
            await gateway.stop()

    app = FastAPI(title="voicegate", version=package_version(), lifespan=lifespan)
    revision = source_revision()  # asked once, here: from a checkout that runs git, not for every probe
    app.state.gateway = gateway
    install_error_handlers(app)

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        report = await gateway.health()
        report["version"] = package_version()
        report["revision"] = revision
        if not holds_api_key(request, cfg.server.api_key):
            report = without_accounts(report)
        return JSONResponse(report, status_code=200 if report["status"] == "ok" else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        if not cfg.telemetry.metrics:
            return JSONResponse({"error": {"code": "not_found", "message": "metrics are off"}}, 404)
        return Response(gateway.telemetry.prometheus(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    install_webrtc_routes(app, gateway)
    install_memory_routes(app, gateway)
    install_admin_routes(app, gateway)
    install_call_routes(app, gateway)
    install_call_feed_routes(app, gateway)
    install_transfer_routes(app, gateway)
    install_recording_routes(app, gateway)
    install_agent_routes(app, gateway)
    return app
