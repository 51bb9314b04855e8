"""Caller memory in the life of a call: loaded at set-up, injected, refreshed between turns, written at the end.

- Set-up: the owner's documents are prefetched (bounded by `memory.read_timeout_ms`; a slow or
  unreachable store starts the call without memory), projected into the conversation, and the session
  subscribes to changes so edits made elsewhere reach it at the next idle point.
- Greeting: a returning caller whose name is known hears "Welcome back, Sam."
- End: the digest of the call is merged into the `memory` document off the call path, retried with
  back-off while the process lives; then (when configured) reconciliation and a session digest.
Anonymous callers never reach any of this: they have no owner key.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from internal.memory.digest import call_summary, merge_digest
from internal.memory.provider import AudioEvent, ChangeContext, Exchange, SessionContext
from internal.memory.runtime import FrontendMemoryRuntime
from internal.pipeline.events import MemoryChangedEvent
from internal.pipeline.vad import VadEvent
from internal.session.session import Session

log = logging.getLogger(__name__)

OWNER = "memory.owner"  # session.data keys
DIRTY = "memory.dirty"
UNSUBSCRIBE = "memory.unsubscribe"
_NAME = re.compile(r"(?:caller's name is|call the caller|their name is|name:)\s*([A-Z][\w'-]+)", re.IGNORECASE)

SessionHook = Callable[[Session, str], Awaitable[None]]


def name_from_memory(user: str, memory: str) -> str:
    """The caller's name as memory records it (a "call me" preference wins over a fact)."""
    for text in (user, memory):
        match = _NAME.search(text)
        if match:
            return match.group(1)[:1].upper() + match.group(1)[1:]
    return ""


def welcome_back(greeting: str, name: str) -> str:
    if not name:
        return greeting
    return f"Welcome back, {name}! How can I help you today?"


class SessionMemory:
    """Connects the memory runtime to sessions; its methods are the pipeline's and manager's hooks."""

    def __init__(self, runtime: FrontendMemoryRuntime, greeting: str) -> None:
        self.runtime = runtime
        self.greeting = greeting
        self.after_session: list[SessionHook] = []  # reconciliation, session digests
        self._writes: set[asyncio.Task[None]] = set()

    def owner(self, session: Session) -> str | None:
        owner = session.data.get(OWNER)
        return owner if isinstance(owner, str) else None

    async def start(self, session: Session) -> None:
        owner = self.runtime.owner_key(session.identity)
        if owner is None:
            log.info("anonymous caller: no memory", extra={"reason": session.identity.reason})
            return
        session.data[OWNER] = owner
        loaded = await self.runtime.prefetch(owner)
        self._project(session, owner)
        conversation = session.conversation
        conversation.observed_upto = len(conversation.history)  # restored history is never observed

        def changed() -> None:
            session.data[DIRTY] = True
            if session.pipeline is not None:
                session.pipeline.sink.emit(MemoryChangedEvent())

        session.data[UNSUBSCRIBE] = self.runtime.subscribe(owner, changed)
        if self.runtime.capabilities.audio_stream_observation:
            self._observe_audio(session, AudioEvent("session_start"))
        log.info("caller memory loaded" if loaded else "caller memory not loaded",
                 extra={"chars": len(conversation.memory) + len(conversation.user_preferences)})

    def _project(self, session: Session, owner: str) -> None:
        user, memory = self.runtime.projection(owner)
        session.conversation.user_preferences = user
        session.conversation.memory = memory
        session.data[DIRTY] = False

    # ---- pipeline hooks --------------------------------------------------------------------------

    def greeter(self, session: Session) -> str:
        conversation = session.conversation
        return welcome_back(self.greeting, name_from_memory(conversation.user_preferences, conversation.memory))

    async def before_turn(self, session: Session) -> None:
        """An idle point: pick up memory changed by the API, another call or another node."""
        owner = self.owner(session)
        if owner is not None and session.data.get(DIRTY):
            self._project(session, owner)

    async def after_turn(self, session: Session) -> None:
        owner = self.owner(session)
        if owner is None:
            return
        if session.data.get(DIRTY):
            self._project(session, owner)
        if self.runtime.capabilities.session_observation:
            await self._observe(session, owner)

    async def turn_memory(self, session: Session, text: str) -> str | None:
        """injection = "retrieval": only the memory lines relevant to this turn (None: keep the snapshot)."""
        owner = self.owner(session)
        if owner is None or not self.runtime.capabilities.semantic_query:
            return None
        try:
            async with asyncio.timeout(self.runtime.config.read_timeout_ms / 1000.0):
                lines = await self.runtime.query(owner, text)
        except Exception as exc:  # a slow or failed lookup keeps the snapshot rather than stall the turn
            log.warning("memory retrieval failed: %s", type(exc).__name__)
            return None
        return "\n".join(f"- {line}" for line in lines)

    def observe_audio(self, session: Session, pcm: bytes, event: VadEvent | None) -> None:
        if not self.runtime.capabilities.audio_stream_observation or self.owner(session) is None:
            return
        self._observe_audio(session, AudioEvent("audio", pcm, session.pipeline.sample_rate if session.pipeline else 0))
        if event is VadEvent.SPEECH_START:
            self._observe_audio(session, AudioEvent("speech_start"))
        elif event is VadEvent.SPEECH_END:
            self._observe_audio(session, AudioEvent("speech_end"))

    def _observe_audio(self, session: Session, event: AudioEvent) -> None:
        owner = self.owner(session)
        try:
            self.runtime.provider.observe_audio(owner, event, SessionContext(session.id, session.transport))
        except Exception:  # the audio hot path must survive a provider bug
            log.exception("observe_audio failed")

    async def _observe(self, session: Session, owner: str) -> None:
        """Completed exchanges since the last observation (none when no new caller message)."""
        conversation = session.conversation
        new = conversation.history[conversation.observed_upto :]
        exchanges: list[Exchange] = []
        pending_user = ""
        for message in new:
            if message.role == "user":
                pending_user = message.content
            elif message.role == "assistant" and pending_user and not message.tool_calls:
                exchanges.append(Exchange(pending_user, message.content))
                pending_user = ""
        if not exchanges:
            return
        conversation.observed_upto = len(conversation.history)
        try:
            await self.runtime.provider.observe(owner, exchanges, SessionContext(session.id, session.transport))
        except Exception as exc:
            log.warning("memory provider observe failed: %s", type(exc).__name__)

    # ---- end of call -----------------------------------------------------------------------------

    async def end(self, session: Session) -> None:
        """The session manager's end hook: returns at once; the writing happens in the background."""
        owner = self.owner(session)
        unsubscribe = session.data.pop(UNSUBSCRIBE, None)
        if callable(unsubscribe):
            unsubscribe()
        if owner is None or session.conversation.transcript.user_turns() == 0:
            return  # anonymous, or nothing was said: nothing to remember
        task = asyncio.create_task(self._finish(session, owner), name="memory-digest")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _finish(self, session: Session, owner: str) -> None:
        capabilities = self.runtime.capabilities
        if capabilities.audio_stream_observation:
            self._observe_audio(session, AudioEvent("session_end"))
        if capabilities.session_observation:
            # The provider learns on its own; the built-in digest and extractor stay off.
            await self._observe(session, owner)
            flush = getattr(self.runtime.provider, "flush", None)
            if flush is not None:
                await self._retry(lambda: flush(owner, SessionContext(session.id, session.transport)), "flush")
            return
        await self._retry(lambda: self._write_digest(session, owner), "digest")
        for hook in self.after_session:
            try:
                await hook(session, owner)
            except Exception:
                log.exception("after-session memory step failed")

    async def _write_digest(self, session: Session, owner: str) -> None:
        conversation = session.conversation
        summary = call_summary(conversation.transcript.entries(), conversation.summary.text)
        summary = self.runtime.sensitive.redact(summary)
        max_chars = self.runtime.config.max_chars
        context = ChangeContext("digest", session.id)
        await self.runtime.set_document(owner, "memory", "", context,
                                        transform=lambda current: merge_digest(current, summary, max_chars))

    async def _retry(self, attempt: Callable[[], Awaitable[Any]], what: str) -> None:
        delay = 0.5
        cap = self.runtime.config.write_retry_max_s
        while True:
            try:
                await attempt()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("memory %s write failed, retrying in %.1f s: %s", what, delay, type(exc).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, cap)

    async def drain(self, timeout_s: float) -> None:
        """At shutdown: give writes in flight a moment to land."""
        if self._writes:
            await asyncio.wait(list(self._writes), timeout=timeout_s)
