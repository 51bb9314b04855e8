"""Caller memory in the life of a call: loaded at set-up, injected, refreshed between turns, written at the end.

- Set-up: the owner's documents are prefetched (bounded by `memory.read_timeout_ms`; a slow or
  unreachable store starts the call without memory), projected into the conversation, and the session
  subscribes to changes so edits made elsewhere reach it at the next idle point.
- Greeting: a returning caller hears `pipeline.returning_greeting` when the deployer set one ("{name}"
  becomes the name memory knows; a template with "{name}" needs a known name), else the normal
  greeting: no greeting text is built in, in any language, so a deployer's disclosure is never lost.
- End: what the call leaves to write (its digest line, and when configured reconciliation and a
  session digest) goes to the hang-up outbox (internal/memory/outbox.py) as a small bounded record;
  the Session is released at once and the outbox lands the writes, durably, off the call path.
- Forgetting: the call keeps the fact lines it saw (at set-up, at each refresh, at each change notice).
  A fact gone from the document when a hang-up step lands (removed by the caller's tool, the API, the
  page, the CLI or another node, during the call or after it) is not restated by the call's digest line,
  session digest or reconciliation (HangupWrite.forgotten_against), whoever removed it.
- Erasure: the owner's erasure epoch is read at set-up and every write of the call carries it, so a
  call that is live when its caller is erased writes nothing afterwards (tool, digest, session digest,
  reconciliation), and drops its injected memory at its next idle point. A call that could not read
  the epoch (memory unreachable at set-up) writes nothing at all.
Anonymous callers never reach any of this: they have no owner key.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import replace
from typing import Any

from voicegate.internal.conversation.actions import ACTIONS, CALL_TASKS, ON_CHANGE, call_actions, objective
from voicegate.internal.conversation.rolling_summary import format_transcript_for_summary
from voicegate.internal.conversation.slots import Slot
from voicegate.internal.conversation.state import LiveCall
from voicegate.internal.conversation.text import clean
from voicegate.internal.memory.call_access import CallMemoryAccess
from voicegate.internal.memory.digest import (
    bounded_line,
    call_summary,
    merge_digest,
    scrub_summary,
    stated_lines,
    still_seen,
    usable_summary,
    without_mentions,
)
from voicegate.internal.memory.events import MemoryChangedEvent
from voicegate.internal.memory.injection import memory_context, memory_text
from voicegate.internal.memory.outbox import (
    SAID_LINES,
    TRANSCRIPT_CHARS,
    HangupOutbox,
    HangupWrite,
    Step,
    StepFailed,
    StepRejected,
    transient,
)
from voicegate.internal.memory.provider import (
    AudioEvent,
    ChangeContext,
    ChangeSource,
    Exchange,
    MemoryDocument,
    OwnerErased,
    SessionContext,
)
from voicegate.internal.memory.runtime import UNKNOWN_EPOCH, CallerErased, FrontendMemoryRuntime
from voicegate.internal.memory.tasks import CallTasks, LedgerWriter
from voicegate.internal.turn.vad import VadEvent

log = logging.getLogger(__name__)

# What memory keeps with a call (its session's slots).
OWNER: Slot[str] = Slot("memory.owner")  # the caller's owner key (absent: an anonymous caller, no memory)
EPOCH: Slot[int] = Slot("memory.epoch")  # the owner's erasure epoch when the call began (UNKNOWN_EPOCH: unread)
DIRTY: Slot[bool] = Slot("memory.dirty")  # memory changed since the call's snapshot: refresh between turns
UNSUBSCRIBE: Slot[Callable[[], None]] = Slot("memory.unsubscribe")
FORGOTTEN: Slot[set[str]] = Slot("memory.forgotten")  # words of facts the caller had removed during this call
SEEN: Slot[list[str]] = Slot("memory.seen")  # the lines of `memory` (facts, call lines) this call saw
SEEN_BUDGET = 4  # ... at most this many times memory.max_chars of them (a call that saw many edits)
LEDGER: Slot[LedgerWriter] = Slot("memory.ledger")  # its actions' status, live, in the caller's task ledger
LEDGER_SETTLE_S = 5.0  # how long a hang-up waits for the call's last ledger writes (in the background)
SESSION_DIGEST_STEP = "session_digest"  # the outbox step that records a call's session digest
_NAME = re.compile(r"(?:caller's name is|call the caller|their name is|name:)\s*([A-Z][\w'-]+)", re.IGNORECASE)



def name_from_memory(user: str, memory: str) -> str:
    """The caller's name as memory records it (a "call me" preference wins over a fact)."""
    for text in (user, memory):
        match = _NAME.search(text)
        if match:
            return match.group(1)[:1].upper() + match.group(1)[1:]
    return ""


def welcome_back(greeting: str, returning: str, name: str, remembered: bool) -> str:
    """The greeting for a caller: the deployer's returning-caller template when it applies."""
    if not returning or not remembered:
        return greeting
    if "{name}" in returning:
        return returning.replace("{name}", name) if name else greeting
    return returning


class SessionMemory:
    """Connects the memory runtime to sessions; its methods are the pipeline's and manager's hooks."""

    def __init__(self, runtime: FrontendMemoryRuntime, greeting: str, outbox: HangupOutbox, *,
                 returning_greeting: str = "") -> None:
        self.runtime = runtime
        self.greeting = greeting
        self.returning_greeting = returning_greeting
        self.outbox = outbox
        self.after_session: list[str] = []  # outbox steps after the digest: reconciliation, session digests
        # A model that writes a short call's digest line (when one is configured); else the caller's
        # lines are kept, quoted and bounded.
        self.summarise: Callable[[str], Awaitable[str]] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        # A BYO agent's capability for the caller of each live call (set by the gateway with llm "agent").
        self.access: CallMemoryAccess | None = None
        outbox.add_step("digest", self._land_digest)
        outbox.add_step("flush", self._land_flush)
        outbox.on_rejected = self._refused

    async def _refused(self, entry: HangupWrite, step: str, reason: str) -> None:
        source: ChangeSource = "reconciliation" if step.startswith("reconcil") else "digest"
        await self.runtime.audit_refused(entry.owner, ChangeContext(source, entry.session_id), step, reason)

    def add_after_session(self, name: str, step: Step) -> None:
        """A step every call with something said runs after its digest (through the outbox)."""
        self.outbox.add_step(name, step)
        self.after_session.append(name)

    def owner(self, session: LiveCall) -> str | None:
        return session.slots.get(OWNER)

    async def start(self, session: LiveCall) -> None:
        owner = self.runtime.owner_key(session.identity)
        if owner is None:
            log.info("anonymous caller: no memory", extra={"reason": session.identity.reason})
            return
        session.slots.set(OWNER, owner)
        loaded = await self.runtime.prefetch(owner)
        # Read even when the documents were not (a slow read is not a down store): without the epoch
        # the call could not tell an erasure during it, so it would write nothing at all.
        epoch = await self._epoch(owner)
        session.slots.set(EPOCH, epoch)
        self._project(session, owner)
        conversation = session.conversation
        conversation.observed_upto = len(conversation.history)  # restored history is never observed

        def changed() -> None:
            session.slots.set(DIRTY, True)
            self._saw(session, owner)
            session.events.emit(MemoryChangedEvent())

        session.slots.set(UNSUBSCRIBE, self.runtime.subscribe(owner, changed))
        # What the agent dispatches, its status kept live for `recall` (so only when session digests are kept).
        if self.runtime.keeps_tasks and SESSION_DIGEST_STEP in self.after_session and epoch != UNKNOWN_EPOCH:
            writer = LedgerWriter(self.runtime, owner, epoch, session.id)
            session.slots.set(LEDGER, writer)
            session.slots.set(ON_CHANGE, writer.told)
            session.slots.set(CALL_TASKS, CallTasks(self.runtime, owner, epoch, session.id))
        if self.access is not None and epoch != UNKNOWN_EPOCH:
            self.access.issue(session.id, owner, epoch)
        if self.runtime.capabilities.audio_stream_observation:
            self._observe_audio(session, AudioEvent("session_start"))
        log.info("caller memory loaded" if loaded else "caller memory not loaded",
                 extra={"chars": len(conversation.memory) + len(conversation.user_preferences)})

    async def _epoch(self, owner: str) -> int:
        try:
            async with asyncio.timeout(self.runtime.config.read_timeout_ms / 1000.0):
                return await self.runtime.epoch(owner)
        except Exception as exc:  # without it this call could outlive an erasure: it writes nothing
            log.warning("memory erasure state unreadable; this call will not write memory: %s", type(exc).__name__)
            return UNKNOWN_EPOCH

    def forgotten(self, session: Any, words: Collection[str]) -> None:
        """The caller had a fact removed during this call (`words`: digest.forgotten_words of the edit):
        nothing the call leaves (its digest line, its session digest, reconciliation) may state it again."""
        if session is not None and words:
            session.slots.setdefault(FORGOTTEN, set()).update(words)

    def epoch(self, session: LiveCall) -> int:
        epoch = session.slots.get(EPOCH)
        return epoch if isinstance(epoch, int) else UNKNOWN_EPOCH

    def _project(self, session: LiveCall, owner: str) -> None:
        user, memory = self.runtime.projection(owner)
        conversation = session.conversation
        conversation.user_preferences = user
        conversation.memory = memory
        conversation.memory_context = memory_context(user, memory, self.runtime.config.max_chars)
        conversation.memory_text = memory_text(user, memory, self.runtime.config.max_chars)
        session.slots.set(DIRTY, False)
        self._saw(session, owner)

    def _saw(self, session: LiveCall, owner: str) -> None:
        """Add the lines the snapshot states now (facts and call lines) to what this call has seen
        (nothing when the snapshot is not known: an empty one would not mean that every line went)."""
        if not self.runtime.snapshot_known(owner):
            return
        document = self.runtime.documents(owner)["memory"]
        seen: list[str] = session.slots.setdefault(SEEN, [])
        budget = SEEN_BUDGET * self.runtime.config.max_chars - sum(len(line) for line in seen)
        for line in stated_lines(document.content, document.format):
            if line not in seen and len(line) <= budget:
                seen.append(line)
                budget -= len(line)

    # ---- pipeline hooks --------------------------------------------------------------------------

    def greeter(self, session: LiveCall) -> str:
        conversation = session.conversation
        remembered = bool(conversation.user_preferences or conversation.memory)
        return welcome_back(self.greeting, self.returning_greeting,
                            name_from_memory(conversation.user_preferences, conversation.memory), remembered)

    async def before_turn(self, session: LiveCall) -> None:
        """An idle point: pick up memory changed by the API, another call or another node."""
        owner = self.owner(session)
        if owner is not None and session.slots.get(DIRTY):
            self._project(session, owner)

    async def after_turn(self, session: LiveCall) -> None:
        owner = self.owner(session)
        if owner is None:
            return
        if session.slots.get(DIRTY):
            self._project(session, owner)
        if self.runtime.capabilities.session_observation:
            await self._observe(session, owner)

    async def turn_memory(self, session: LiveCall, text: str) -> tuple[str, str] | None:
        """injection = "retrieval": the caller's preferences and only the memory lines relevant to this
        turn, bounded together like the snapshot (None: keep the snapshot)."""
        owner = self.owner(session)
        if owner is None or not self.runtime.capabilities.semantic_query:
            return None
        try:
            async with asyncio.timeout(self.runtime.config.read_timeout_ms / 1000.0):
                lines = await self.runtime.query(owner, text)
        except Exception as exc:  # a slow or failed lookup keeps the snapshot rather than stall the turn
            log.warning("memory retrieval failed: %s", type(exc).__name__)
            return None
        relevant = "\n".join(f"- {line}" for line in lines)
        preferences = session.conversation.user_preferences
        max_chars = self.runtime.config.max_chars
        return memory_context(preferences, relevant, max_chars), memory_text(preferences, relevant, max_chars)

    def observe_audio(self, session: LiveCall, pcm: bytes, event: VadEvent | None) -> None:
        if not self.runtime.capabilities.audio_stream_observation or self.owner(session) is None:
            return
        self._observe_audio(session, AudioEvent("audio", pcm, session.sample_rate))
        if event is VadEvent.SPEECH_START:
            self._observe_audio(session, AudioEvent("speech_start"))
        elif event is VadEvent.SPEECH_END:
            self._observe_audio(session, AudioEvent("speech_end"))

    def _observe_audio(self, session: LiveCall, event: AudioEvent) -> None:
        owner = self.owner(session)
        if owner is not None:  # the runtime contains a provider's failure: the audio path goes on
            self.runtime.observe_audio(owner, event, SessionContext(session.id, session.transport))

    @staticmethod
    def _new_exchanges(session: LiveCall) -> list[Exchange]:
        """Completed exchanges since the last observation (none when no new caller message)."""
        conversation = session.conversation
        exchanges: list[Exchange] = []
        pending_user = ""
        for message in conversation.history[conversation.observed_upto :]:
            if message.role == "user":
                pending_user = message.content
            elif message.role == "assistant" and pending_user and not message.tool_calls:
                exchanges.append(Exchange(pending_user, message.content))
                pending_user = ""
        conversation.observed_upto = len(conversation.history)
        return exchanges

    async def _observe(self, session: LiveCall, owner: str) -> None:
        exchanges = self._new_exchanges(session)
        if exchanges:
            await self.runtime.observe(owner, exchanges, SessionContext(session.id, session.transport))

    # ---- end of call -----------------------------------------------------------------------------

    async def end(self, session: LiveCall) -> None:
        """The session manager's end hook: returns at once; the writing happens in the background."""
        owner = self.owner(session)
        if self.access is not None:  # the BYO agent's capability dies with the call
            self.access.revoke(session.id)
        unsubscribe = session.slots.pop(UNSUBSCRIBE)
        if callable(unsubscribe):
            unsubscribe()
        if owner is None:
            return  # anonymous: nothing to remember
        capabilities = self.runtime.capabilities
        if capabilities.audio_stream_observation:
            self._observe_audio(session, AudioEvent("session_end"))
        session.slots.pop(ON_CHANGE)
        epoch = self.epoch(session)
        if epoch == UNKNOWN_EPOCH:
            log.warning("this call leaves no memory: its caller's erasure state could not be read")
            return
        exchanges = self._new_exchanges(session) if capabilities.session_observation else []
        task = asyncio.create_task(self._hand_over(session, owner, epoch, exchanges), name="memory-hangup")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def hangup_write(self, session: LiveCall, owner: str, epoch: int) -> HangupWrite | None:
        """What this call still has to write, bounded; None when there is nothing."""
        conversation = session.conversation
        base = {"owner": owner, "session_id": session.id, "transport": session.transport, "epoch": epoch}
        if self.runtime.capabilities.session_observation:
            # The provider learns on its own; the built-in digest and extractor stay off. It is always
            # told the session ended, even when the caller said nothing.
            return HangupWrite(**base, steps=["flush"])  # type: ignore[arg-type]
        # What the agent did goes with the session digest, when one is kept (internal/conversation/actions.py).
        # Only the objective: the status lives in the task ledger (internal/memory/tasks.py), read at recall.
        actions = [objective(action) for action in call_actions(session.slots.get(ACTIONS))] \
            if SESSION_DIGEST_STEP in self.after_session else []
        if conversation.transcript.user_turns() == 0:
            if not actions:
                return None  # nothing was said or done: nothing to remember
            # Nothing said but something done (a transfer asked for over the API): the session digest
            # records it; there is no call line to write and nothing to reconcile.
            return HangupWrite(**base, steps=[SESSION_DIGEST_STEP], actions=actions)  # type: ignore[arg-type]
        redact = self.runtime.sensitive.redact
        entries = conversation.transcript.entries()
        forgotten = sorted(session.slots.get(FORGOTTEN, ()))
        # The transcript is clean already (TranscriptLog); the rolling summary is a model's text.
        summary = scrub_summary(redact(clean(call_summary(entries, conversation.summary.text))), set(forgotten))
        summarise = self.summarise is not None and not conversation.summary.text.strip()
        transcript = ""
        if self.after_session or summarise:
            transcript = redact(clean(format_transcript_for_summary(entries)))[-TRANSCRIPT_CHARS:]
        said = [redact(e.text.strip()) for e in entries if e.role == "user" and e.text.strip()][:SAID_LINES]
        return HangupWrite(**base, steps=["digest", *self.after_session],  # type: ignore[arg-type]
                           summary=summary, transcript=transcript, said=said, summarise=summarise,
                           forgotten=forgotten, actions=actions, seen=list(session.slots.get(SEEN, ())))

    async def _hand_over(self, session: LiveCall, owner: str, epoch: int, exchanges: list[Exchange]) -> None:
        """Off the call path: reduce the ended call to its bounded record (formatting and redacting a
        long transcript is CPU work, so in a thread), then hand it to the outbox."""
        writer = session.slots.pop(LEDGER)
        if isinstance(writer, LedgerWriter):  # transfers still waiting never learn their outcome now
            await writer.settle(call_actions(session.slots.get(ACTIONS)), LEDGER_SETTLE_S)
        if exchanges:
            await self.runtime.observe(owner, exchanges, SessionContext(session.id, session.transport))
        entry = await asyncio.to_thread(self.hangup_write, session, owner, epoch)
        del session  # from here on only the bounded record is held
        if entry is None:
            return
        try:
            await self.outbox.put(entry)
        except OSError as exc:
            log.error("memory outbox unwritable; this call's memory is lost: %s", exc.strerror)

    async def _land_digest(self, entry: HangupWrite) -> None:
        max_chars = self.runtime.config.max_chars
        context = ChangeContext("digest", entry.session_id, erasure_epoch=entry.epoch)
        summary = entry.summary
        if entry.summarise and self.summarise is not None and entry.transcript.strip():
            forgotten = set(entry.forgotten)
            if entry.seen:  # the model is not shown what was removed since the call saw it
                forgotten = entry.forgotten_against((await landing(self.runtime.latest(entry.owner)))["memory"])
            try:
                written = bounded_line(self.runtime.sensitive.redact(
                    await self.summarise(without_mentions(entry.transcript, forgotten))))
                if written and not usable_summary(written):
                    log.info("the call summary model echoed the script; the digest keeps the caller's quoted lines")
                    written = ""
                summary = scrub_summary(written, forgotten) if written else summary
            except Exception as exc:  # the quoted lines stand in; never retry a model for a digest
                log.info("the call summary model failed; the digest keeps the caller's quoted lines: %s",
                         type(exc).__name__)
        judged: set[str] = set()
        stored: list[MemoryDocument] = []

        def merged(current: MemoryDocument) -> str:
            # Judged against the document this write replaces, under the owner's lock: a line removed
            # anywhere before this lands is not quoted again.
            nonlocal judged
            judged = entry.forgotten_against(current)
            content = merge_digest(current.content, scrub_summary(summary, judged), max_chars, fmt=current.format)
            stored[:] = [replace(current, content=content)]
            return content

        await landing(self.runtime.set_document(entry.owner, "memory", "", context, transform=merged))
        # The steps after this one (reconciliation, the session digest) keep what this one judged removed,
        # and stop counting the old call lines its own line pushed out of the bounded section as removed.
        entry.forgotten = sorted(set(entry.forgotten) | judged)
        if entry.seen and stored:
            entry.seen = still_seen(entry.seen, stored[0].content, stored[0].format)

    async def _land_flush(self, entry: HangupWrite) -> None:
        await landing(self.runtime.flush(entry.owner, SessionContext(entry.session_id, entry.transport)))

    async def drain(self, timeout_s: float) -> None:
        """Hand-overs in flight reach the outbox, then what is due lands (tests, shutdown)."""
        if self._writes:
            await asyncio.wait(list(self._writes), timeout=timeout_s)
        await self.outbox.drain(timeout_s)


async def landing(write: Awaitable[Any]) -> Any:
    """Run one outbox step's write: an erased caller drops the entry, an unreachable store retries it,
    and a write the store refuses for its content drops the step (retrying could never land it)."""
    try:
        return await write
    except (CallerErased, OwnerErased) as exc:
        raise OwnerErased(-1) from exc
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if transient(exc):
            raise StepFailed(type(exc).__name__) from exc
        raise StepRejected(type(exc).__name__) from exc
