"""SessionManager: every live session, the cap on them, and reaping the abandoned ones.

SIP and WebRTC share one manager, so `server.max_sessions` counts every call. A session whose last
transport went away is kept for `server.session_grace_ms` (so a browser can resume), then ended.
Ending runs the end hooks (memory digest, ...) in the background: hang-up never waits on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from voicegate.internal.identity import CallerIdentity
from voicegate.internal.session.session import Conversation, Session, TransportKind

log = logging.getLogger(__name__)

EndHook = Callable[[Session], Awaitable[None]]
ConversationFactory = Callable[[], Conversation]


class SessionLimitReached(Exception):
    """A new call refused: `reason` is one of a small vocabulary (the metric's label: capacity, queue,
    loop_lag, max_sessions, draining), `detail` says why in words (the log, never a label)."""

    def __init__(self, retry_after_s: int, reason: str = "max_sessions", detail: str = "") -> None:
        super().__init__(detail or "the server is at its live-session limit")
        self.retry_after_s = retry_after_s
        self.reason = reason
        self.detail = detail or "the server is at its live-session limit"


# Admission: a refusal for a new call on this transport, or None to take it (set by the gateway from
# internal/telemetry/admission.py; the default takes every call under max_sessions).
Admission = Callable[[TransportKind], SessionLimitReached | None]


class SessionManager:
    def __init__(self, *, max_sessions: int, grace_ms: int, new_conversation: ConversationFactory,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions = max_sessions
        self.grace_s = grace_ms / 1000.0
        self._new_conversation = new_conversation
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._end_hooks: list[EndHook] = []
        self._background: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self.admission: Admission = lambda transport: None
        # Each refusal by `create`, once (the gateway counts and logs it).
        self.on_refused: Callable[[TransportKind, SessionLimitReached], None] = lambda transport, refusal: None

    # ---- lifecycle -------------------------------------------------------------------------------

    def add_end_hook(self, hook: EndHook) -> None:
        self._end_hooks.append(hook)

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_forever(), name="session-reaper")

    async def shutdown(self, reason: str = "shutdown") -> None:
        """End every live session (transports hang up through their hangup callbacks)."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        await asyncio.gather(*(self.end(s, reason) for s in list(self._sessions.values())),
                             return_exceptions=True)
        await self.drain()

    async def drain(self) -> None:
        """Wait for end hooks still running in the background."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    # ---- sessions --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def refusal(self, transport: TransportKind = "sip") -> SessionLimitReached | None:
        """Why a new call on `transport` would be refused now (None: it would be taken). Asking counts
        nothing: `create` (and the transports that refuse before creating) report refusals."""
        if self.max_sessions > 0 and len(self._sessions) >= self.max_sessions:
            return SessionLimitReached(5, "max_sessions", f"every one of server.max_sessions "
                                                          f"({self.max_sessions}) is live")
        return self.admission(transport)

    def at_capacity(self, transport: TransportKind = "sip") -> bool:
        """Every slot is taken, or admission control would refuse a new call (the speech workers' queues,
        the event loop, the estimated load: internal/telemetry/admission.py)."""
        return self.refusal(transport) is not None

    def create(self, identity: CallerIdentity, transport: TransportKind) -> Session:
        refusal = self.refusal(transport)
        if refusal is not None:
            self.on_refused(transport, refusal)
            raise refusal
        session = Session(identity=identity, transport=transport, conversation=self._new_conversation())
        self._sessions[session.id] = session
        log.info("session created", extra={"session_id": session.id, "transport": transport,
                                            "identity_kind": identity.kind})
        return session

    def attach(self, session: Session) -> None:
        session.attached += 1
        session.detached_since = None

    def detach(self, session: Session) -> None:
        session.attached = max(0, session.attached - 1)
        if session.attached == 0 and not session.ended:
            session.detached_since = self._clock()

    async def end(self, session: Session, reason: str) -> None:
        """End a session: stop its pipeline, forget it, and run the end hooks in the background."""
        if session.ended:
            return
        session.ended = True
        session.end_reason = reason
        self._sessions.pop(session.id, None)
        close_transport, session.close_transport = session.close_transport, None
        if close_transport is not None:
            try:
                await close_transport(reason)
            except Exception:  # a transport that fails to say goodbye must not keep the session alive
                log.exception("transport close failed", extra={"session_id": session.id})
        pipeline, session.pipeline = session.pipeline, None
        if pipeline is not None:
            try:
                await pipeline.close()
            except Exception:  # one session's failure must not stop the others ending
                log.exception("pipeline close failed", extra={"session_id": session.id})
        session.conversation.summary.cancel()
        log.info("session ended", extra={"session_id": session.id, "reason": reason,
                                          "turns": session.conversation.turns})
        for hook in self._end_hooks:
            task = asyncio.create_task(self._run_hook(hook, session))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _run_hook(self, hook: EndHook, session: Session) -> None:
        try:
            await hook(session)
        except Exception:
            log.exception("session end hook failed", extra={"session_id": session.id})

    def reap_once(self) -> list[Session]:
        """Sessions detached for longer than the grace period (to be ended by the caller)."""
        now = self._clock()
        return [s for s in self._sessions.values()
                if s.detached_since is not None and now - s.detached_since >= self.grace_s]

    async def _reap_forever(self) -> None:
        interval = max(0.05, min(1.0, self.grace_s / 4 if self.grace_s else 1.0))
        while True:
            await asyncio.sleep(interval)
            for session in self.reap_once():
                await self.end(session, "grace period expired")
