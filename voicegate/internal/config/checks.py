"""Configurations that load but probably do not do what the deployer meant, said before they bite.

`voicegate config check` prints these as warnings; none of them is an error, because each has a
legitimate use (a backend that signs its own tokens with `jwt_secret` needs no `/token` at all).
"""

from __future__ import annotations

from voicegate.internal.config.loader import Config
from voicegate.internal.config.realtime_checks import realtime_warnings


def security_warnings(config: Config) -> list[str]:
    """One line each, saying what the server will do and how to change it."""
    server = config.server
    found: list[str] = []
    if server.jwt_secret and not server.api_key:
        found.append(
            "server.jwt_secret is set but server.api_key is not: POST /token refuses every request (403). "
            "To mint tokens there, set server.api_key and send it from your backend as X-API-Key or "
            "Authorization: Bearer; or sign tokens in your backend with the secret.")
    if server.trusted_header_sources and not server.trusted_header_secret:
        found.append(
            "server.trusted_header_sources is set but server.trusted_header_secret is not: "
            "X-Voicegate-Resource-Id is never believed (those requests are anonymous). Set "
            "server.trusted_header_secret and have your proxy send it as X-Voicegate-Proxy-Secret.")
    if config.sip.srtp in ("optional", "required") and "tls" not in config.sip.transports:
        found.append(
            f'sip.srtp is "{config.sip.srtp}" but sip.transports has no "tls": SDES keys travel in the SDP, so '
            "anyone who can read the SIP signalling can decrypt the media. Add \"tls\" to sip.transports "
            "(and have callers use it).")
    if server.call_events:
        found.append("server.call_events is on: whoever holds server.api_key can follow every call's words and "
                     "tool arguments on /api/admin/calls/events (for evals and staging, not for real callers).")
    if server.dev_login:
        found.append("server.dev_login is on: anyone at this machine can sign in as any caller "
                     "(development only).")
    recording = config.recording
    if recording.enabled and recording.consent == "none":
        found.append('recording.consent is "none": every call is recorded without the caller being told or '
                     'asked. Do so only with consent obtained another way; otherwise use "ask" or "announce".')
    if recording.enabled and not server.api_key:
        found.append("recording is on but server.api_key is not set: recordings stay on disk, and GET "
                     "/calls/{id}/recording refuses every request (403). Set server.api_key to fetch them.")
    for mcp_server in config.mcp.servers:
        if not mcp_server.tools:
            found.append(f"mcp server {mcp_server.name!r} has an empty tools allow-list: none of its tools is "
                         'offered. List the tools to offer, or tools = ["*"] for all of them.')
        if mcp_server.require_identity == "none":
            found.append(f'mcp server {mcp_server.name!r} has require_identity = "none": anonymous callers are '
                         "offered its tools. Only for tools that hold nothing personal; its server must not answer "
                         "about one customer to another.")
    opaque = [mcp_server.name for mcp_server in config.mcp.servers if mcp_server.caller_id == "opaque"]
    if opaque and not config.memory.enabled and not config.memory.owner_key_secret:
        # With memory on, the store records the secret's fingerprint and, once it holds callers, refuses a
        # node whose secret differs (internal/memory/owner.py); with memory off nothing compares them.
        found.append(f"memory is off and memory.owner_key_secret is not set: each node makes its own owner-key "
                     f"secret (data_dir/owner-key.secret), so on a cluster the same caller reaches mcp server "
                     f"{opaque[0]!r} with a different opaque id from each node. Set memory.owner_key_secret to "
                     "the same value on every node (a single node needs nothing).")
    if config.sip.send_dtmf_inbound:
        found.append("sip.send_dtmf_inbound is on: the agent may press keys on calls a PBX handed it, and a caller "
                     "could have it key PBX feature codes (a transfer to any number). Keep DTMF feature codes off "
                     "on that trunk.")
    if config.warm_transfer.relay_caller_keys:
        found.append("warm_transfer.relay_caller_keys is on: after a warm transfer, the caller's keys reach the "
                     "target on voicegate's leg (feature codes included).")
    found += realtime_warnings(config.realtime)
    found += realtime_feature_warnings(config)
    return found


def realtime_feature_warnings(config: Config) -> list[str]:
    """Features this config turns on that the Realtime agent does without (docs/realtime.md, "What works")."""
    if not config.realtime.enabled:
        return []
    found: list[str] = []
    cascade = config.realtime.on_failure == "cascade"
    only = ' (they serve only after a failure, realtime.on_failure = "cascade")' if cascade else ""
    if config.rag.provider:
        found.append(f"rag.provider is {config.rag.provider!r} but the Realtime agent answers the calls: knowledge "
                     f"retrieval is per turn and the model's instructions are per session, so nothing is "
                     f"retrieved{only}.")
    if config.digits.enabled and (config.digits.forms or config.digits.forms_only):
        found.append("[digits] forms are set but the Realtime agent cannot run a digit form (collect_digits is not "
                     "offered to its model; keys reach it as text).")
    if config.memory.enabled and config.memory.injection == "retrieval":
        found.append('memory.injection is "retrieval" but the Realtime agent holds the caller\'s whole memory in its '
                     "instructions (kept current at idle points).")
    if config.llm.provider == "agent":
        found.append(f'llm.provider is "agent" but the Realtime model answers the calls, not [agent] url{only}.')
    if config.recording.enabled and config.recording.consent == "ask":
        found.append('recording.consent is "ask" but the Realtime model hears the caller: a spoken answer to the '
                     "consent question reaches the model, not the recording (an answer or opt-out by keys works).")
    return found
