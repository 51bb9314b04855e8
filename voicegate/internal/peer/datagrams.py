"""Read every waiting datagram when a UDP socket wakes the loop, not one.

asyncio's selector datagram transport (which aioice, and so every WebRTC call's media and ICE, reads
through) takes one datagram per readiness event, that is one per loop iteration. A WebRTC call receives
a packet every 20 ms; once an iteration of a loaded node's loop takes longer than that (many calls, each
with its own socket and callbacks), each socket reads slower than it fills, and a standing backlog
builds in the kernel: measured at 16 talking WebRTC callers on two cores, 0.5-1.2 s. Everything on the
socket then arrives that late: the caller's voice, and the STUN consent checks (RFC 7675) whose
answers aioice waits 0.5 s for, so after 30 s of late answers both ends drop a call that was healthy.

`drain_datagram_reads` makes each wake read what is waiting, up to `max_per_wake` datagrams (so one
flooded socket cannot hold the loop), the way the SIP RTP path (internal/audio/rtp_session.py) already
reads. It replaces `_SelectorDatagramTransport._read_ready`, process-wide, keeping that method's error
handling. It is installed when the HTTP application is built (server/routes_webrtc.py), so in a serving
node it covers every asyncio UDP endpoint: WebRTC's sockets and the SIP signalling socket alike. Python
versions whose transport does not look like 3.11's are left alone, with a warning.
"""

from __future__ import annotations

import asyncio.selector_events
import logging
from typing import Any

log = logging.getLogger(__name__)

MAX_PER_WAKE = 64  # ~1.3 s of one call's 20 ms packets

_transport = asyncio.selector_events._SelectorDatagramTransport  # type: ignore[attr-defined]
_ORIGINAL = _transport._read_ready


def _draining_read_ready(self: Any, max_per_wake: int = MAX_PER_WAKE) -> None:
    for _ in range(max_per_wake):
        if self._conn_lost:
            return
        try:
            data, addr = self._sock.recvfrom(self.max_size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._protocol.error_received(exc)
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on datagram transport")
            return
        self._protocol.datagram_received(data, addr)


def drain_datagram_reads(enabled: bool = True) -> bool:
    """Install (or with `enabled` False, remove) the draining read; whether it is installed now."""
    if not enabled:
        _transport._read_ready = _ORIGINAL
        return False
    if not all(hasattr(_transport, name) for name in ("_read_ready", "_fatal_error", "max_size")):
        log.warning("asyncio's datagram transport is not the one voicegate knows; UDP sockets read one "
                    "datagram per wake (WebRTC media may queue on a loaded node)")
        return False
    _transport._read_ready = _draining_read_ready
    return True


def installed() -> bool:
    return _transport._read_ready is _draining_read_ready

