"""WebRtcCall: one PeerConnection attached to one Session, for as long as the transport lives.

The Session outlives us (resume): when the connection fails or closes we detach, stop our pipeline
and leave the session to the manager's grace period; a resumed POST attaches a new call, with a new
pipeline, to the same session. When the session itself ends (DELETE, the agent said goodbye, the
grace period ran out, shutdown) the manager calls `close_transport` and we hang up.

Everything a connection does on the event loop's behalf (state changes, DataChannel messages, audio
in and out) is guarded: a failure is logged and ends this session only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from voicegate.internal.conversation.slots import Slot
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.peer.channel import ClientMessage, Ping, TypedTurn
from voicegate.internal.peer.connection import PeerConnection
from voicegate.internal.pipeline.events import ConnectionEvent
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.session import Session, SessionManager

log = logging.getLogger(__name__)

PipelineFactory = Callable[[Session, EventSink], VoicePipeline]

CALL_KEY: Slot[WebRtcCall] = Slot("webrtc_call")  # the call currently attached to a session
# ICE and DTLS on a working network take well under a second; a peer that has not connected after
# this long never will, and must not hold a session slot open.
CONNECT_TIMEOUT_S = 30.0
# Time for the final `connection: ended` event to leave before the transport is torn down.
GOODBYE_FLUSH_S = 0.1


def attached_call(session: Session) -> WebRtcCall | None:
    return session.slots.get(CALL_KEY)


class WebRtcCall:
    def __init__(self, session: Session, peer: PeerConnection, sessions: SessionManager,
                 new_pipeline: PipelineFactory, *, resumed: bool,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.session = session
        self.peer = peer
        self.sessions = sessions
        self.resumed = resumed
        self.pipeline: VoicePipeline | None = None
        self.started = False
        self._new_pipeline = new_pipeline
        self._connect_timeout_s = connect_timeout_s
        self._attached = False
        self._gone = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._deadline: asyncio.Task[None] | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------

    def bind(self) -> None:
        """Become the session's transport (the session's previous call must be evicted first)."""
        session = self.session
        session.slots.set(CALL_KEY, self)
        session.close_transport = self._close_for_session_end
        session.hangup = self._agent_hangup
        self.sessions.attach(session)
        self._attached = True
        self.pipeline = self._new_pipeline(session, self.peer.events)
        peer = self.peer
        peer.on_state = self._on_state
        peer.on_message = self._on_message
        peer.on_audio = self._on_audio
        peer.on_error = self._fail
        peer.outbound.source = self._pull_audio
        self._deadline = self._spawn(self._connect_deadline(), "webrtc-connect-deadline")

    @property
    def current(self) -> bool:
        return attached_call(self.session) is self

    async def evict(self, reason: str) -> None:
        """Give the session up to a newer transport (a resume); the session itself lives on."""
        log.info("transport replaced", extra={"session_id": self.session.id, "reason": reason})
        await self._transport_gone(reason)

    async def _transport_gone(self, reason: str) -> None:
        """The connection is over; detach so the grace period (and a resume) can begin."""
        if self._gone:
            return
        self._gone = True
        session = self.session
        if self.current:
            session.slots.pop(CALL_KEY)
            session.close_transport = None
            session.hangup = None
        pipeline, self.pipeline = self.pipeline, None
        if pipeline is not None:
            if session.pipeline is pipeline:
                session.pipeline = None
            with contextlib.suppress(Exception):
                await pipeline.close()
        if self._attached:
            self._attached = False
            self.sessions.detach(session)
            log.info("transport detached", extra={"session_id": session.id, "reason": reason})
        if self._deadline is not None and self._deadline is not asyncio.current_task():
            self._deadline.cancel()
        await self.peer.close()

    async def _close_for_session_end(self, reason: str) -> None:
        """SessionManager.end: tell the page why, then hang up."""
        if not self.peer.closed:
            self.peer.events.emit(ConnectionEvent(state="ended", session_id=self.session.id, reason=reason))
            if self.peer.events.open:
                await asyncio.sleep(GOODBYE_FLUSH_S)
        await self._transport_gone(reason)

    async def _agent_hangup(self) -> None:
        # Called from inside the pipeline's reply task, which ending the session cancels: end it from
        # a task of our own so the hang-up is not cut short by its own cancellation.
        self._spawn(self.sessions.end(self.session, "agent ended the call"), "webrtc-hangup")

    def _fail(self, exc: BaseException) -> None:
        log.error("WebRTC call failed; ending its session", exc_info=exc, extra={"session_id": self.session.id})
        if self.current and not self.session.ended:
            self._spawn(self.sessions.end(self.session, "transport error"), "webrtc-fail")
        else:  # a connection already replaced by a resume: its failure is not the session's
            self._spawn(self._transport_gone("transport error"), "webrtc-fail")

    # ---- connection events -------------------------------------------------------------------------

    async def _on_state(self, state: str) -> None:
        if state == "connected" and not self.started:
            await self._start()
        elif state in ("failed", "closed"):
            await self._transport_gone(f"connection {state}")

    async def _start(self) -> None:
        pipeline = self.pipeline
        if pipeline is None or self._gone:
            return
        self.started = True
        await pipeline.start()
        kind = "resumed" if self.resumed else "connected"
        self.peer.events.emit(ConnectionEvent(state=kind, session_id=self.session.id))
        log.info("WebRTC connected", extra={"session_id": self.session.id, "resumed": self.resumed})

    async def _connect_deadline(self) -> None:
        await asyncio.sleep(self._connect_timeout_s)
        if not self.started and not self._gone:
            log.warning("WebRTC peer never connected", extra={"session_id": self.session.id})
            await self._transport_gone("never connected")

    # ---- media and messages (hot path) -------------------------------------------------------------

    def _on_audio(self, pcm: bytes) -> None:
        pipeline = self.pipeline
        if pipeline is None or not self.started:
            return
        try:
            pipeline.push_audio(pcm)
        except Exception as exc:
            self.started = False  # stop feeding a broken pipeline while the session ends
            self._fail(exc)

    def _pull_audio(self) -> bytes | None:
        pipeline = self.pipeline
        if pipeline is None or not self.started:
            return None
        try:
            return pipeline.pull_audio()
        except Exception as exc:
            self.started = False
            self._fail(exc)
            return None

    def _on_message(self, message: ClientMessage) -> None:
        if isinstance(message, Ping):
            self.peer.events.send_json('{"type":"pong"}')
        elif isinstance(message, TypedTurn) and self.pipeline is not None and self.started:
            self.pipeline.submit_text(message.text)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("WebRTC call task failed", exc_info=task.exception(), extra={"session_id": self.session.id})
