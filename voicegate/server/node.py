"""This process's node id: one name for it in logs, metrics, /health and the memory change notices.

Several nodes behind one SIP dispatcher or HTTP balancer share a database and a log collector; the id
says which node a log line, a metric series or a change notice came from (docs/scaling.md).
"""

from __future__ import annotations

import secrets
import socket

# Four hex digits tell apart two processes on one host (or two containers that share a hostname) without
# making the id long in every log line.
SUFFIX_BYTES = 2


def resolve_node_id(configured: str) -> str:
    """`server.node_id` as configured, or, when empty, the hostname plus a short random suffix.

    Call once per process (the composition root does) and pass the result on: a second call picks a
    different suffix.
    """
    if configured:
        return configured
    host = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname()) or "node"
    return f"{host[:48]}-{secrets.token_hex(SUFFIX_BYTES)}"
