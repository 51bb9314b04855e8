"""The running server's components and their lifecycle, built from one Config.

Everything that holds a socket, a process or a pool is created here and closed here, in reverse
order, so a graceful shutdown ends every call cleanly and leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from voicegate.internal.config import Config
from voicegate.internal.conversation.slots import Slot
from voicegate.internal.conversation.state import CallContext
from voicegate.internal.db import Database
from voicegate.internal.event_envelope import EventSink, FanoutSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.base import ChatModel
from voicegate.internal.memory.runtime import FrontendMemoryRuntime
from voicegate.internal.memory.sessions import SESSION_DIGEST_STEP, SessionMemory
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.pipeline.responder import SESSION_SPAN
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.realtime.pipeline import RealtimePipeline
from voicegate.internal.session import Session, SessionLimitReached, SessionManager, TransportKind
from voicegate.internal.stt.base import SpeechToText
from voicegate.internal.telemetry.loop_lag import LoopLag
from voicegate.internal.telemetry.otel import Telemetry
from voicegate.internal.telemetry.queues import WorkQueue, queues_of
from voicegate.internal.tools.registry import ToolRegistry
from voicegate.internal.tts.base import TextToSpeech
from voicegate.internal.tts.phrases import mark_fixed
from voicegate.internal.tts.piper_pool import watch_live_calls
from voicegate.server.admission import NodeAdmission, busy_audio, busy_sentences
from voicegate.server.call_feed import CallFeed
from voicegate.server.node import resolve_node_id
from voicegate.server.providers import (
    build_model,
    build_services,
    build_stt,
    build_tts,
    check_providers,
    fixed_phrases,
    new_conversation_factory,
)
from voicegate.server.version import package_version

if TYPE_CHECKING:
    from voicegate.internal.audio.rtp_session import RtpStats
    from voicegate.internal.rag import TurnRetrieval

log = logging.getLogger(__name__)


RAG_KEY: Slot[TurnRetrieval] = Slot("rag.turn")  # the session's TurnRetrieval


def call_outcome(reason: str) -> str:
    """A small, bounded label for why a call ended (metrics must not carry free text)."""
    lowered = reason.lower()
    for label in ("timeout", "shutdown", "cancel", "error", "agent", "grace", "transferred"):
        if label in lowered:
            return {"agent": "agent_hangup", "cancel": "cancelled", "grace": "abandoned"}.get(label, label)
    return "caller_hangup" if any(word in lowered for word in ("bye", "hung up", "hangup", "delete")) else "other"


def needs_database(config: Config, memory_provider: Any = None) -> bool:
    """A database for memory kept in PostgreSQL or for retrieval; and, with memory on, whenever one is
    configured (`[pgvector] connection_string`): the nodes sharing it hear each other's memory changes
    through it, whatever provider keeps the memory."""
    memory_in_postgres = config.memory.enabled and config.memory.provider == "pgvector" and memory_provider is None
    shared = config.memory.enabled and bool(config.pgvector.connection_string)
    return memory_in_postgres or shared or config.rag.provider == "pgvector"


def realtime_key(config: Config) -> str:
    """The Realtime model's key: its own ([realtime] api_key), else the OpenAI one ([openai] api_key)."""
    return config.realtime.api_key or config.openai.api_key


class Gateway:
    """Owns the shared providers, the session manager and the transports of one server process."""

    def __init__(self, config: Config, *, tools: ToolRegistry | None = None, stt: SpeechToText | None = None,
                 tts: TextToSpeech | None = None, model: ChatModel | None = None,
                 memory_provider: Any = None) -> None:
        self.config = config
        self.database: Database | None = (Database(config.pgvector, config.data_dir)
                                          if needs_database(config, memory_provider) else None)
        self._memory_provider = memory_provider
        self.memory: FrontendMemoryRuntime | None = None
        self.session_memory: SessionMemory | None = None
        self.memory_bus: Any = None  # internal.memory.notify.MemoryChangeBus with a shared PostgreSQL
        self.sip: Any = None  # internal.sip.ua.UserAgent when SIP is enabled
        self.sip_calls: Any = None  # internal.sip.voice.VoiceCallHandler
        self.sip_transfers: Any = None  # internal.sip.voice.transfer.CallTransfers with sip.transfer_targets
        self.sip_warm_transfers: Any = None  # internal.sip.voice.warm_transfer.WarmTransfers, beside them
        self.sip_keypad: Any = None  # internal.sip.voice.dtmf.CallKeypad: key presses out
        self.tools = tools if tools is not None else ToolRegistry()
        self._given = {"stt": stt, "tts": tts, "model": model}
        self.stt: SpeechToText | None = stt
        self.tts: TextToSpeech | None = tts
        self.model: ChatModel | None = model
        self.services: PipelineServices | None = None
        self.recordings: Any = None  # internal.recording.service.RecordingService with [recording] enabled
        self.recording_retention: Any = None  # internal.recording.retention.RecordingRetention, recording off
        self.mcp: Any = None  # internal.tools.mcp.McpToolset with [[mcp.servers]]
        self.sessions: SessionManager | None = None
        self._stack = AsyncExitStack()
        self.started = False
        self.node_id = resolve_node_id(config.server.node_id)  # serve sets it in the config first: one id
        self.draining = False  # server/drain.py: no new calls, OPTIONS and /health answer 503
        self.queues: list[WorkQueue] = []  # the speech workers' queues (/metrics, /health, load shedding)
        self.admission: NodeAdmission | None = None  # who takes a new call (server/admission.py)
        self.loop_lag = LoopLag()  # how late this node's event loop runs (/metrics, /health, load shedding)
        self.telemetry = Telemetry(config.telemetry, package_version(), node_id=self.node_id)
        # server.call_events: every call's events for API-key holders (/api/admin/calls/events, evals).
        self.call_feed: CallFeed | None = CallFeed() if config.server.call_events else None
        if self.call_feed is not None:
            self.tools.observe(self.call_feed.tool_ran)

    def close_at_stop(self, close: Callable[[], Awaitable[None]]) -> None:
        """Run `close` when the gateway stops (after what was started later: last in, first out)."""
        self._stack.push_async_callback(close)

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise

    async def _start(self) -> None:
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        check_providers(config)
        if self.database is not None:
            await self.database.open()
            self._stack.push_async_callback(self.database.close)
        self.stt = self.stt or build_stt(config)
        self.tts = self.tts or build_tts(config)
        self.model = self.model or build_model(config)
        for name in ("stt", "tts", "model"):
            if self._given[name] is None:
                self._stack.push_async_callback(getattr(self, name).aclose)
        for engine in (self.stt, self.tts):
            warm_up = getattr(engine, "warm_up", None)
            if warm_up is not None:
                await warm_up()
        mark_fixed(self.tts, *fixed_phrases(config))  # rendered at first use, then said from the cache
        if config.realtime.enabled:  # said in the local voice when the Realtime model fails (internal/realtime)
            mark_fixed(self.tts, config.realtime.apology)
        if config.admission.busy == "message":  # said to callers refused while the node is busiest
            mark_fixed(self.tts, *busy_sentences(config.admission.busy_message))
        # Piper picks its workers' threads from the calls in progress (a lone call gets the wide workers)
        watch_live_calls(self.tts, self.live_calls)
        # Off the loop: the turn-taking models are verified, loaded and (first time only) fetched here.
        self.services = await asyncio.to_thread(build_services, config, self.stt, self.tts, self.model, self.tools)
        self.services.tracer = self.telemetry.tracer
        self.services.telemetry = self.telemetry
        self.tools.tracer, self.tools.metrics = self.telemetry.tracer, self.telemetry.tool_call
        if config.mcp.servers:  # listed now, concurrently; a server that fails is retried in the background
            from voicegate.internal.tools.mcp import McpToolset

            self.mcp = McpToolset(config.mcp, self.tools)
            await self.mcp.start()
            self._stack.push_async_callback(self.mcp.close)
        self.sessions = SessionManager(max_sessions=config.server.max_sessions,
                                       grace_ms=config.server.session_grace_ms,
                                       new_conversation=new_conversation_factory(config, self.model))
        if config.memory.enabled:
            await self._start_memory(self.services, self.sessions)
        if config.rag.provider:
            self._start_rag(self.services, self.sessions)
        if config.recording.enabled:  # closed after the sessions end (below): their files are finished first
            from voicegate.internal.recording.tool import register_recording_tool
            from voicegate.server.call_recording import start_recordings

            self.recordings = await start_recordings(config, self.telemetry, self.memory)
            register_recording_tool(self.tools)
            self._stack.push_async_callback(self.recordings.stop)
            self.services.recording = self.recordings.for_pipeline
            self.sessions.add_end_hook(self.recordings.session_ended)
        else:  # recordings made while it was on still expire (internal/recording/retention.py)
            from voicegate.server.call_recording import start_retention

            self.recording_retention = start_retention(config)
            self._stack.push_async_callback(self.recording_retention.stop)
        if self.mcp is not None and any(server.caller_id == "opaque" for server in config.mcp.servers):
            from voicegate.internal.memory.owner import keep, read_secret
            from voicegate.internal.tools.mcp_caller import CallerIds

            # Each caller's opaque id for tools, from the owner-key secret (made and kept like memory makes
            # it, when memory and recording are off): never from the owner key, which exports hold.
            secret = read_secret(config.memory.owner_key_secret, config.data_dir)
            keep(secret)
            self.mcp.caller_ids = CallerIds(secret.value)
        self.sessions.add_end_hook(self._session_ended)
        if self.call_feed is not None:
            self.sessions.add_end_hook(self.call_feed.ended)
        self.telemetry.watch_live_sessions(self._live_sessions)
        self.telemetry.watch_event_loop(asyncio.get_running_loop())
        self.telemetry.watch_loop_lag(self.loop_lag)
        lag_task = asyncio.create_task(self.loop_lag.run(), name="event loop lag")
        self._stack.callback(lag_task.cancel)
        self._start_admission(self.sessions)
        self._watch_load(queues_of(self.stt, self.tts, self.services.turn_model))
        self.sessions.start()
        self._stack.callback(self.telemetry.shutdown)
        self._stack.push_async_callback(self.sessions.shutdown)
        if config.sip.enabled:
            await self._start_sip()
        self.started = True
        log.info("gateway started")

    async def _start_memory(self, services: PipelineServices, sessions: SessionManager) -> None:
        """Caller memory. Closed in reverse order at shutdown: the hang-up outbox drains first (after the
        sessions have ended and handed their writes over), while the change bus, the reconciliation
        model and the store it writes to are still open."""
        from voicegate.internal.memory.adapters import adapt
        from voicegate.internal.memory.outbox import OUTBOX_DIR, HangupOutbox
        from voicegate.internal.memory.setup import build_provider, build_runtime
        from voicegate.internal.memory.sweeper import RetentionSweeper
        from voicegate.internal.memory.tool import register_memory_tools

        config = self.config
        provider = self._memory_provider or build_provider(config, self.database, self.node_id)
        runtime = build_runtime(config, adapt(provider))  # v1 or v2, typed from here on
        self._stack.push_async_callback(runtime.close)
        await runtime.verify_owner_key()  # refuses a missing or replaced secret while owners are stored
        runtime.on_operation.append(
            lambda source, outcome: self.telemetry.memory_operations.add(1, {"source": source, "outcome": outcome}))
        if self.database is not None:  # other nodes on this database hear our changes, and we theirs
            from voicegate.internal.memory.notify import MemoryChangeBus

            node_id = getattr(provider, "node_id", None)
            bus = MemoryChangeBus(self.database, runtime, node_id if isinstance(node_id, str) and node_id
                                  else self.node_id)
            bus.start()
            self._stack.push_async_callback(bus.stop)
            self.memory_bus = bus
        outbox = HangupOutbox(runtime.outbox_dir or config.data_dir / OUTBOX_DIR,
                              retry_max_s=config.memory.write_retry_max_s,
                              max_age_s=config.memory.outbox_max_age_h * 3600.0,
                              max_entries=config.memory.outbox_max_entries)
        session_memory = SessionMemory(runtime, config.pipeline.greeting, outbox,
                                       returning_greeting=config.pipeline.returning_greeting)
        register_memory_tools(self.tools, runtime, session_memory, session_digests=config.memory.session_digests)
        if hasattr(self.model, "call_access"):  # a BYO agent: a capability for each live call's caller
            from voicegate.internal.memory.call_access import CallMemoryAccess, access_field

            access = session_memory.access = CallMemoryAccess()
            public_url = config.server.public_url
            self.model.call_access = lambda session_id: access_field(access, session_id, public_url)  # type: ignore[union-attr]
        # The pipeline hands back the call it serves, which the composition root made as a Session.
        services.greeter = lambda call: session_memory.greeter(as_session(call))
        services.before_turn = lambda call: session_memory.before_turn(as_session(call))
        services.after_turn = lambda call: session_memory.after_turn(as_session(call))
        services.observe_audio = lambda call, pcm, event: session_memory.observe_audio(as_session(call), pcm, event)
        if config.memory.injection == "retrieval":
            services.turn_memory = lambda call, text: session_memory.turn_memory(as_session(call), text)
        sessions.add_end_hook(session_memory.end)
        self._start_learning(session_memory)
        sweeper = RetentionSweeper(runtime, config.memory.sweep_interval_s)
        sweeper.start()
        self._stack.push_async_callback(sweeper.stop)
        await outbox.start()  # lands what an earlier run left
        self._stack.push_async_callback(outbox.stop, config.server.shutdown_timeout_s)
        self._stack.push_async_callback(session_memory.drain, config.server.shutdown_timeout_s)
        self.memory, self.session_memory = runtime, session_memory

    def _start_rag(self, services: PipelineServices, sessions: SessionManager) -> None:
        """Knowledge retrieval before each model turn (and, with pipeline.rag_prefetch, during the merge
        window); one TurnRetrieval per session keeps the prefetched result for its turn."""
        from voicegate.internal.rag import TurnRetrieval, build_retriever

        retriever = build_retriever(self.config, self.database)
        if retriever is None:
            return
        self._stack.push_async_callback(retriever.aclose)
        top_k = self.config.rag.top_k

        def knowledge(session: CallContext) -> TurnRetrieval:
            current = session.slots.get(RAG_KEY)
            if current is None:
                current = TurnRetrieval(retriever, top_k)
                session.slots.set(RAG_KEY, current)
            return current

        async def retrieve(session: CallContext, text: str) -> list[str]:
            return await knowledge(session).for_turn(text)

        async def forget(session: Session) -> None:
            current = session.slots.pop(RAG_KEY)
            if isinstance(current, TurnRetrieval):
                await current.aclose()

        services.retrieve = retrieve
        if self.config.pipeline.rag_prefetch:
            services.prefetch = lambda session, text: knowledge(session).prefetch(text)
        sessions.add_end_hook(forget)

    async def _start_sip(self) -> None:
        """The SIP user agent and the voice-call handler; shut down first, so every call gets its BYE."""
        from voicegate.internal.audio.rtp_ports import RtpPortAllocator
        from voicegate.internal.audio.scheduler import PacedScheduler
        from voicegate.internal.sip.ua import UserAgent
        from voicegate.internal.sip.voice import VoiceCallHandler

        config = self.config
        assert self.sessions is not None
        sessions = self.sessions
        scheduler = PacedScheduler()
        self.sip_calls = VoiceCallHandler(
            config.sip, open_session=self.open_session,
            new_pipeline=lambda session, rate, sink, greeting: self.new_pipeline(session, rate, sink, greeting),
            end_session=sessions.end, refusal=lambda: sessions.refusal("sip"),
            allocator=RtpPortAllocator(config.sip.rtp_port_min, config.sip.rtp_port_max), scheduler=scheduler,
            greeting_outgoing=config.pipeline.greeting_outgoing)
        self.sip = UserAgent(config.sip, self.sip_calls, digest_algorithms=tuple(config.sip.auth.algorithms),
                             shared_numbers=config.memory.shared_numbers)
        self.sip_calls.ua = self.sip
        self.sip.stack.transport.on_connection_refused = (
            lambda reason: self.telemetry.sip_connections_refused.add(1, {"reason": reason}))
        self.sip_calls.on_media_stats = self._count_media
        admission = self.admission
        if admission is not None:
            self.sip_calls.on_refused = lambda refusal: admission.count("sip", refusal)
            self.sip.on_draining_refusal = lambda: self.count_refusal(
                "sip", "draining", "this node is draining", int(self.config.server.drain_timeout_s))
        if config.admission.enabled and config.admission.busy == "message":
            from voicegate.internal.sip.voice.busy import BusyLine

            assert self.tts is not None
            self.sip_calls.busy_line = BusyLine(self.sip_calls, busy_audio(self.tts, config.admission.busy_message))
        from voicegate.server.telephony import install_sip_phone_flows

        install_sip_phone_flows(self, config, self.telemetry)
        await self.sip.start()
        registrations = self.sip.registrations
        self.telemetry.watch_registrations(lambda: [
            ({"registrar": status.registrar, "username": status.username}, status.up)
            for status in registrations.statuses()])
        self._stack.callback(scheduler.close)
        self._stack.push_async_callback(self.sip.shutdown, config.server.shutdown_timeout_s)

    def _count_media(self, stats: RtpStats) -> None:
        """A SIP call's RTP figures, at its end, into the node's counters."""
        self.telemetry.rtp_lost.add(stats.lost)
        self.telemetry.srtp_rejected.add(stats.srtp_rejected)
        self.telemetry.rtp_rejected_sources.add(stats.rejected_sources)

    def _start_learning(self, session_memory: SessionMemory) -> None:
        """Reconciliation and session digests after each call, when configured."""
        from voicegate.internal.llm.openai import OpenAIChatModel
        from voicegate.internal.memory.reconcile import CallSummariser, Reconciler, SessionDigestRecorder

        memory = self.config.memory
        key = memory.api_key or self.config.openai.api_key
        model = None
        if key:
            model = OpenAIChatModel(self.config.openai, model=memory.model or None,
                                    base_url=memory.base_url or None, api_key=key)
            self._stack.push_async_callback(model.aclose)
        automatic = memory.auto if memory.auto is not None else bool(key)
        if automatic and model is not None:
            session_memory.summarise = CallSummariser(model)  # a short call's digest: facts, not quotes
            session_memory.add_after_session("reconcile", Reconciler(session_memory.runtime, model))
        elif automatic:
            log.warning("memory.auto is on but no model key is configured ([memory] api_key or [openai] api_key)")
        if memory.session_digests:
            session_memory.add_after_session(SESSION_DIGEST_STEP, SessionDigestRecorder(
                session_memory.runtime, model, memory.session_digest_retention_days))

    async def open_session(self, identity: CallerIdentity, transport: TransportKind) -> Session:
        """A new session for a verified (or anonymous) caller, with their memory loaded when enabled.

        Raises SessionLimitReached at `server.max_sessions`.
        """
        assert self.sessions is not None, "the gateway is not started"
        if self.draining:
            refusal = SessionLimitReached(int(self.config.server.drain_timeout_s), "draining", "this node is draining")
            self.sessions.on_refused(transport, refusal)
            raise refusal
        session = self.sessions.create(identity, transport)
        span = self.telemetry.tracer.start_span("session", attributes={
            "voicegate.session_id": session.id, "voicegate.transport": transport,
            "voicegate.identity_kind": identity.kind})
        session.slots.set(SESSION_SPAN, span)
        if self.session_memory is not None:
            try:
                with (trace.use_span(span, end_on_exit=False),
                      self.telemetry.tracer.start_as_current_span("memory.read")):
                    await self.session_memory.start(session)
            except BaseException:  # cancelled (the caller went away) or failed: never leak the slot
                await asyncio.shield(self.sessions.end(session, "set-up abandoned"))
                raise
        return session

    def _watch_load(self, queues: list[WorkQueue]) -> None:
        """/metrics shows every pool's queue; new calls are refused while recognition or synthesis is
        too far behind (server.shed_wait_ms) or while the event loop itself runs late
        (server.shed_loop_lag_ms). Smart Turn is not counted: it is bounded on its own and the text rules
        stand in for it when it is busy."""
        self.queues = queues
        self.telemetry.watch_worker_queues(queues)
        if self.admission is not None:
            self.admission.queues = [queue for queue in queues if queue.pool != "smart_turn"]

    def _start_admission(self, sessions: SessionManager) -> None:
        """Admission control ([admission], server/admission.py): every new call, whatever its transport,
        is asked for in SessionManager.create; its CPU sampler runs once a second beside the loop."""
        engines = [str(getattr(engine, "name", "")) for engine in (self.stt, self.tts)]
        self.admission = NodeAdmission(self.config, self.telemetry, self.loop_lag, engines, sessions.sessions,
                                       lambda: self.draining)
        sessions.admission = self.admission.refusal
        sessions.on_refused = self.admission.count
        sampler = asyncio.create_task(self.admission.run(), name="admission cpu sampler")
        self._stack.callback(sampler.cancel)

    def count_refusal(self, transport: TransportKind, reason: str, detail: str, retry_after_s: int) -> None:
        """A call refused before it reached the session manager (a draining node's WHIP POST)."""
        if self.admission is not None:
            self.admission.count(transport, SessionLimitReached(retry_after_s, reason, detail))

    def _live_sessions(self) -> dict[str, int]:
        counts = {"sip": 0, "webrtc": 0}
        for session in self.sessions.sessions() if self.sessions is not None else []:
            counts[session.transport] = counts.get(session.transport, 0) + 1
        return counts

    async def _session_ended(self, session: Session) -> None:
        outcome = call_outcome(session.end_reason)
        self.telemetry.calls.add(1, {"transport": session.transport, "outcome": outcome})
        span = session.slots.pop(SESSION_SPAN)
        if span is not None:
            span.set_attribute("voicegate.outcome", outcome)
            span.set_attribute("voicegate.turns", session.conversation.turns)
            span.end()

    def begin_drain(self) -> None:
        """Take no new call from here on (server/drain.py); the live ones carry on."""
        self.draining = True
        if self.sip is not None:
            self.sip.draining = True
        log.info("draining: refusing new calls", extra={"live_calls": self.live_calls(),
                                                         "drain_timeout_s": self.config.server.drain_timeout_s})

    def live_calls(self) -> int:
        """Sessions (SIP and WebRTC) plus SIP calls still being set up, which have no session yet (an
        answered leg is its session's: counted once)."""
        sessions = len(self.sessions) if self.sessions is not None else 0
        setting_up = sum(1 for leg in self.sip.calls.legs() if not leg.announced and not leg.ended) \
            if self.sip is not None else 0
        return sessions + setting_up

    def push_stop(self, callback: Any) -> None:
        """Register an async cleanup to run at shutdown, before the components started earlier."""
        self._stack.push_async_callback(callback)

    async def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        await self._stack.aclose()
        log.info("gateway stopped")

    def new_pipeline(self, session: Session, sample_rate: int, sink: EventSink,
                     greeting: str | None = None) -> VoicePipeline:
        assert self.services is not None, "the gateway is not started"
        if self.call_feed is not None:
            sink = FanoutSink(sink, self.call_feed.sink_for(session))
        pipeline: VoicePipeline
        realtime = self.config.realtime
        if realtime.enabled:  # a Realtime speech-to-speech model is the agent (docs/realtime.md)
            pipeline = RealtimePipeline(session, self.services, sample_rate, sink, greeting=greeting, config=realtime,
                                        api_key=realtime_key(self.config))
        else:
            pipeline = VoicePipeline(session, self.services, sample_rate, sink, greeting=greeting)
        session.pipeline = pipeline
        return pipeline

    async def health(self) -> dict[str, Any]:
        components: dict[str, Any] = {"config": {"ok": True}}
        if self.database is not None:
            components["database"] = await self.database.health()
        if self.memory is not None:
            health = await self.memory.health()
            components["memory"] = {"ok": health.ok, "provider": self.memory.describe().key}
            if health.detail:
                components["memory"]["detail"] = health.detail
            if self.session_memory is not None:
                outbox = self.session_memory.outbox
                components["memory"]["pending_writes"] = outbox.pending
                components["memory"]["outbox"] = outbox.describe()
                if outbox.stuck:  # the store answers probes, but hang-up writes have stopped landing
                    components["memory"]["ok"] = False
                    components["memory"].setdefault("detail", "hang-up writes are not landing (memory outbox stuck)")
        for kind in ("stt", "tts"):
            engine = getattr(self, kind)
            if engine is not None:
                components[kind] = {"ok": True, "engine": engine.name}
                describe = getattr(engine, "describe", None)
                if describe is not None:
                    components[kind].update(describe())
        if self.services is not None:
            components["turn_taking"] = {"ok": True, **self.services.describe_turn_taking()}
        if self.recordings is not None:
            components["recording"] = self.recordings.describe()
        if self.mcp is not None:  # advisory: the agent goes on without a server that is down
            components["mcp"] = {**self.mcp.describe(), "advisory": True}
        if self.sessions is not None:
            components["sessions"] = {"ok": True, "live": len(self.sessions),
                                      "max": self.config.server.max_sessions}
        if self.admission is not None:  # advisory: a node refusing new calls still serves the ones it has
            components["admission"] = self.admission.describe()
        if self.started:  # advisory: a late loop still serves its calls (shedding keeps new ones away)
            lag, bound = self.loop_lag.sustained_ms(), self.config.server.shed_loop_lag_ms
            components["event_loop"] = {"ok": not (bound and lag >= bound), "advisory": True,
                                        "lag_ms": round(lag, 1), "max_lag_ms": round(self.loop_lag.max_ms(), 1)}
        if self.queues:  # advisory: a node that sheds load still serves the calls it has
            shedding = self.admission is not None and self.admission.shedding
            components["workers"] = {"ok": not shedding, "advisory": True, "shedding": shedding,
                                     "queues": [queue.describe() for queue in self.queues]}
        if self.sip is not None and self.sip.registrations.items:
            # Not registered means that PBX cannot route calls to us, but this node still serves browsers,
            # trunks and other registrations: advisory, so a PBX outage does not make a load balancer
            # take every node out of service.
            described = self.sip.registrations.describe()
            components["sip_registrations"] = {"ok": all(item["state"] == "registered" for item in described),
                                               "advisory": True, "registrations": described}
        ok = all(component.get("ok") or component.get("advisory") for component in components.values())
        # Draining answers 503 like a fault, so a balancer stops sending; the status says it is on purpose.
        status = "draining" if self.draining else "ok" if ok else "degraded"
        return {"status": status, "node_id": self.node_id, "draining": self.draining, "components": components}


def as_session(call: CallContext) -> Session:
    """The Session behind a pipeline's CallContext (every call the gateway builds is one)."""
    if not isinstance(call, Session):
        raise TypeError(f"expected a Session, got {type(call).__name__}")
    return call
