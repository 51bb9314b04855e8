"""The model's side of a Realtime call (the base of RealtimePipeline, internal/realtime/pipeline.py): the
connection and its events, the responses asked for and the replies they became, the conversation record,
function calls and idle points, and noticing that the model failed (what the caller hears then is
RealtimePipeline's `_fail`).

A response is asked for (`_ask`) for a caller turn, a fixed line or the follow-up after function calls, or
the model makes one itself for a turn its VAD committed; each becomes a ModelReply (replies.py) whose audio
goes through the playout and whose words go into the conversation once the caller has heard them (or,
cut off, what they heard of them), as the cascade records its replies (internal/pipeline/record.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from voicegate.internal.config.providers import RealtimeConfig
from voicegate.internal.conversation.state import CallContext
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.pipeline.events import ResponseEvent, TranscriptEvent
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.realtime import memory, protocol
from voicegate.internal.realtime.audio import Converter, Latency
from voicegate.internal.realtime.connection import RealtimeConnection, RealtimeError
from voicegate.internal.realtime.replies import Ask, CallerTurn, ModelReply, barge_in_applies, record_reply
from voicegate.internal.tools.registry import ToolContext
from voicegate.internal.turn.keypad import Keypad

log = logging.getLogger(__name__)

IDLE_POINT_S = 0.25  # at most this often, memory edited elsewhere is looked for between turns
QUIET_RECHECK_S = 0.5  # a quiet response whose audio still plays is looked at again this often
TRANSCRIPT_WAIT_S = 5.0  # how long a played reply waits for the caller's words it answered, to be recorded first


class ModelLink(VoicePipeline):
    def __init__(self, session: CallContext, services: PipelineServices, sample_rate: int, sink: EventSink,
                 *, greeting: str | None = None, config: RealtimeConfig, api_key: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(session, services, sample_rate, sink, greeting=greeting, clock=clock)
        self.realtime = config
        self._api_key = api_key
        self._server_turns = config.turn_detection != "voicegate"
        self._uplink = Converter(sample_rate, config.input_rate)
        self._downlink = Converter(config.output_rate, sample_rate)
        self.latency = Latency()
        self._conn: RealtimeConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._asks: deque[Ask] = deque()  # responses asked for (or a committed turn), not yet created
        self._replies: dict[str, ModelReply] = {}  # by response id, in order, until played out and recorded
        self._heard: dict[str, asyncio.Future[str]] = {}  # the caller's words by item id (model transcription)
        self._stall: asyncio.TimerHandle | None = None
        self._setup: asyncio.TimerHandle | None = None  # until the first session.updated
        self._quiet: asyncio.TimerHandle | None = None  # a running response's silence (_progress)
        self._cancelling: set[str] = set()  # responses we cancelled whose response.done has not come yet
        self._deferred: deque[str | None] = deque()  # response.create (its instructions) waiting for them
        self._out_stamp = 0.0
        self._caller_speaking = False  # the model's VAD (or ours) hears the caller now
        self._last_idle_point = 0.0
        self._tools: list[dict[str, Any]] = []  # the functions the model was last offered
        self._idle_task: asyncio.Task[None] | None = None
        self._hangup_requested = False
        self._failed = False
        self.fallback = False  # the cascade has the call (on_failure = "cascade" after a failure)
        self._ending = False
        self._keys = Keypad(self._keys_entered)
        self._live = memory.LiveInstructions(session, services, self._tool_context)

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            conn = await RealtimeConnection.open(self.realtime, self._api_key)
        except RealtimeError as exc:
            self._fail(exc.reason, at_start=True)
            return
        if self._ending:
            await conn.close()
            return
        self._conn = conn
        conn.on_sent = self._sent
        self._reader = asyncio.create_task(self._read(conn), name="realtime-reader")
        self._tools = memory.function_tools(self.services, self._tool_context())
        conn.send(protocol.session_update(self.realtime, self._live.initial(), self._tools,
                                          barge_in=self.config.barge_in))
        # connect_timeout_ms bounds the session's setup too: a model that takes the socket but never takes the
        # session would otherwise leave the caller in silence until a turn's response_timeout_ms.
        self._setup = asyncio.get_running_loop().call_later(
            self.realtime.connect_timeout_ms / 1000.0, self._fail,
            f"the model did not set up the session within {self.realtime.connect_timeout_ms} ms")
        conversation = self.session.conversation
        for message in conversation.recent_history():  # a resumed call: the model carries on from there
            if message.role in ("user", "assistant") and message.content:
                conn.send(protocol.earlier_message(self.realtime, message.role, message.content))
        if not conversation.greeted:
            conversation.greeted = True
            text = self._greeting if self._greeting is not None else self.services.greeting(self.session)
            if self._recording is not None:
                text = self._recording.opening(text)
            if text:
                self._ask(Ask("greeting"), create=True, instructions=protocol.verbatim(text))

    async def close(self) -> None:
        if self._ending:
            return await super().close()
        self._ending = True
        self._keys.close()
        self._cancel_stall()
        for task in [*self._tasks, self._reader, self._idle_task]:
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        if self._conn is not None:
            await self._conn.close()
        for future in self._heard.values():
            future.cancel()
        await super().close()

    def _spawn(self, work: Awaitable[Any], name: str) -> None:
        task = asyncio.create_task(_awaited(work), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _speech_started(self, reason: str) -> None:
        self._caller_speaking = True
        self.idle_caller.caller_active()
        if barge_in_applies(self.agent_audible, self.config.barge_in):
            self.interrupt(reason)

    def _sent(self, stamp: float) -> None:
        self.latency.inbound.append((self._clock() - stamp) * 1000.0)

    def _keys_entered(self, digits: str) -> None:
        """Keys pressed together, as one turn (internal/turn/keypad.py merges them as the cascade does)."""
        if self.fallback:  # pressed before the model failed: the cascade's turn takes them
            for digit in digits:
                self.input.digit(digit)
            return
        if self.agent_active:
            self.interrupt("keypad input")
        if self._about_recording("", digits):
            return
        self._user_turn(CallerTurn(protocol.keypad_text(digits), keypad=True))

    def _user_turn(self, turn: CallerTurn) -> None:
        if self._conn is None or turn.text is None:
            return
        self._turn_starts()
        self._conn.send(protocol.user_text(turn.text))
        self._ask(Ask("turn", turn), create=True)

    def _ask(self, ask: Ask, *, create: bool, instructions: str | None = None) -> None:
        """Expect a response for `ask`, asking for it (`create`) unless the model makes one itself (a turn
        its own VAD committed); `instructions`: this response's own (a fixed line), else the session's."""
        conn = self._conn
        if conn is None:
            return
        self._asks.append(ask)
        ask.at = self._clock()
        if create and self._cancelling:  # one response at a time: the model refuses a second while one runs
            self._deferred.append(instructions)
        elif create:
            conn.send(protocol.response_create(instructions))
        self.responder.set_state("thinking")
        self._expect_response()

    def _turn_starts(self) -> None:
        conversation = self.session.conversation
        conversation.summary.maybe_refresh(conversation.transcript.entries())

    # ---- the model's events -----------------------------------------------------------------------

    async def _read(self, conn: RealtimeConnection) -> None:
        try:
            async for event in conn.events():
                if self._failed:
                    return  # the model is done with for this call: what it still sends is not played
                try:
                    self._on_event(event)
                except Exception:  # one odd event must not end the call
                    log.exception("realtime event handling failed", extra={"event": event.get("type")})
        except asyncio.CancelledError:
            raise
        if not self._ending:
            self._fail("the model closed the connection")

    def _on_event(self, event: protocol.Event) -> None:
        kind = event["type"]
        if kind.startswith("response.") and kind != "response.done":
            self._progress()
        if kind == "response.output_audio.delta":
            self._on_audio(event)
        elif kind == "response.output_audio_transcript.delta":
            reply = self._replies.get(str(event.get("response_id") or "")) or self._by_item(event)
            if reply is not None:
                reply.parts.append(str(event.get("delta") or ""))
                if reply.segment is not None:
                    reply.segment.text = reply.words()
        elif kind == "response.output_audio_transcript.done":
            reply = self._replies.get(str(event.get("response_id") or "")) or self._by_item(event)
            if reply is not None:
                reply.text = str(event.get("transcript") or "").strip()
                if reply.segment is not None:
                    reply.segment.text = reply.text
        elif kind == "response.output_audio.done":
            reply = self._replies.get(str(event.get("response_id") or ""))
            if reply is not None and reply.segment is not None:
                self.playout.end_segment(reply.segment)
        elif kind == "input_audio_buffer.speech_started":
            if self._server_turns:
                self._speech_started("caller speech (model VAD)")
        elif kind == "input_audio_buffer.speech_stopped":
            if self._server_turns:
                self._caller_speaking = False
        elif kind == "input_audio_buffer.committed":
            self._committed(str(event.get("item_id") or ""))
        elif kind == "conversation.item.input_audio_transcription.completed":
            self._transcribed(str(event.get("item_id") or ""), str(event.get("transcript") or "").strip())
        elif kind == "conversation.item.input_audio_transcription.failed":  # the reply is recorded without them
            self._transcribed(str(event.get("item_id") or ""), "")
        elif kind == "response.created":
            self._created(str((event.get("response") or {}).get("id") or ""))
        elif kind == "response.done":
            self._done(event)
        elif kind == "session.updated" and self._setup is not None:
            self._setup.cancel()
            self._setup = None
        elif kind == "error":
            error_type, code, _message = protocol.error_of(event)
            if protocol.error_ends_call(error_type, code):
                self._fail(f"the model sent an error: {error_type or code}")
            else:
                log.warning("the model refused an event: %s %s", error_type, code)

    def _by_item(self, event: protocol.Event) -> ModelReply | None:
        item_id = event.get("item_id")
        return next((reply for reply in self._replies.values() if reply.item_id == item_id), None)

    def _on_audio(self, event: protocol.Event) -> None:
        reply = self._replies.get(str(event.get("response_id") or ""))
        if reply is None:
            return  # a response cut off by a barge-in still streams for a moment: dropped
        pcm = protocol.audio_delta(event)
        item_id = str(event.get("item_id") or "")
        if reply.segment is None or reply.item_id != item_id:
            if reply.segment is not None:
                self.playout.end_segment(reply.segment)
            reply.item_id = item_id
            reply.segment = self.playout.begin_segment(reply.words())
        if not self._out_stamp and self.playout.queued_frames == 0:
            self._out_stamp = self._clock()
        self.playout.append(reply.segment, self._downlink.process(pcm))

    def _committed(self, item_id: str) -> None:
        """The caller's speech is an item now: with the model's VAD, a turn it answers on its own."""
        self._heard.setdefault(item_id, asyncio.get_running_loop().create_future())
        waiting = next((ask for ask in self._asks if ask.turn is not None and ask.turn.text is None
                        and not ask.turn.item_id), None)
        if waiting is not None and waiting.turn is not None:
            waiting.turn.item_id = item_id  # the turn voicegate's VAD committed
            return
        if self._server_turns:
            self._caller_speaking = False
            self._turn_starts()
            self._ask(Ask("turn", CallerTurn(None, item_id)), create=False)

    def _transcribed(self, item_id: str, text: str) -> None:
        future = self._heard.setdefault(item_id, asyncio.get_running_loop().create_future())
        if not future.done():
            future.set_result(text)
        if text:
            self.sink.emit(TranscriptEvent(role="user", text=text, final=True))
            self.idle_caller.caller_active()

    def _created(self, response_id: str) -> None:
        self._cancel_stall()
        ask = self._asks.popleft() if self._asks else Ask("turn", CallerTurn(None))
        self._replies[response_id] = ModelReply(response_id, ask)
        if self._asks:  # another response is owed: its own deadline from now
            self._expect_response()

    def _done(self, event: protocol.Event) -> None:
        response = event.get("response") or {}
        response_id = str(response.get("id") or "")
        reply = self._replies.get(response_id)
        self._cancelling.discard(response_id)
        if not self._cancelling and self._deferred and self._conn is not None:
            self._conn.send(protocol.response_create(self._deferred.popleft()))
        status, error = protocol.response_status(event)
        if status == "failed" and protocol.error_ends_call(str(error.get("type") or ""), str(error.get("code") or "")):
            self._fail(f"the model's response failed: {error.get('type') or error.get('code')}")
            return
        if reply is None:
            return
        reply.running = False
        if reply.segment is not None and not reply.segment.complete:
            self.playout.end_segment(reply.segment)
        calls = memory.function_calls(response)
        if calls and status == "completed":
            reply.calls_pending = reply.had_calls = True
            self._spawn(self._run_calls(reply, calls), "realtime-function-calls")

    async def _run_calls(self, reply: ModelReply, calls: list[Any]) -> None:
        """Every call of the response run, each output sent, then ONE response.create: several calls in a
        turn give one follow-up."""
        heard = reply.ask.turn.text or "" if reply.ask.turn is not None else ""
        outputs = await memory.run_function_calls(self.services, calls, self._tool_context(heard))
        conn = self._conn
        if conn is None or self._failed or self._ending:
            return
        for call_id, output in outputs:
            conn.send(protocol.function_output(call_id, output))
        reply.calls_pending = False
        self._ask(Ask("follow_up", reply.ask.turn), create=True)  # one follow-up, however many calls

    # ---- recording the conversation ----------------------------------------------------------------

    def _finish(self, reply: ModelReply) -> None:
        """A reply played to the end: recorded (once the caller's words it answers are in)."""
        if reply.had_calls and not reply.words():
            return  # only function calls: the follow-up that answers carries the turn
        turn = reply.ask.turn
        future = self._heard.get(turn.item_id) if turn is not None and turn.text is None else None
        if future is not None and not future.done() and self.realtime.transcription_model:
            self._spawn(self._record_when_heard(reply, future), "realtime-record")
            return
        self._record(reply, reply.words(), interrupted=False)

    async def _record_when_heard(self, reply: ModelReply, heard: asyncio.Future[str]) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(heard), TRANSCRIPT_WAIT_S)
        self._record(reply, reply.words(), interrupted=False)

    def _record(self, reply: ModelReply, said: str, *, interrupted: bool) -> None:
        """Into the conversation as the cascade writes it: the caller's turn with the first reply that
        answered it, later replies and fixed lines as the agent's lines."""
        turn = reply.ask.turn
        if turn is not None and turn.text is None and turn.item_id in self._heard:
            future = self._heard[turn.item_id]
            turn.text = future.result() if future.done() and not future.cancelled() else None
        if record_reply(self.session, self.sink, reply, said, interrupted=interrupted):
            self._spawn(self.services.after_turn(self.session), "realtime-after-turn")
        if said and reply.ask.kind in ("turn", "follow_up"):  # a reply, not a fixed line (docs/protocol.md)
            self.sink.emit(ResponseEvent(text=said, interrupted=interrupted))
        if self._hangup_requested and not interrupted and not self._replies and self.session.hangup is not None:
            self._spawn(self.session.hangup(), "realtime-hangup")

    # ---- memory and tools ---------------------------------------------------------------------------

    def _tool_context(self, heard: str = "") -> ToolContext:
        return memory.tool_context(self.session, self.session.conversation.turns + 1, self._request_hangup, heard,
                                   say=lambda text: self.responder.start(lambda: self.responder.announce(text)))

    def _request_hangup(self) -> None:
        self._hangup_requested = True

    def _maybe_idle_point(self) -> None:
        """Between turns, every IDLE_POINT_S at most: memory changed elsewhere reaches the model's
        instructions (a session.update, same connection)."""
        now = self._clock()
        if self._conn is None or now - self._last_idle_point < IDLE_POINT_S or not self.idle:
            return
        if self._idle_task is not None and not self._idle_task.done():
            return
        self._last_idle_point = now
        self._idle_task = asyncio.create_task(self._idle_point(), name="realtime-idle-point")

    async def _idle_point(self) -> None:
        try:
            text = await self._live.at_idle()
        except Exception:
            log.warning("refreshing the model's instructions failed", exc_info=True)
            return
        # The call's offer is looked at again too, as the cascade does each turn: an MCP server that was down
        # at the start and is back, a tool whose availability changed.
        tools = memory.function_tools(self.services, self._tool_context())
        changed = tools if tools != self._tools else None
        if (text is not None or changed is not None) and self._conn is not None and not self._failed:
            self._tools = tools
            self._conn.send(protocol.instructions_update(self.realtime, text, changed))

    # ---- failure ----------------------------------------------------------------------------------

    def _fail(self, reason: str, at_start: bool = False) -> None:
        """The model is no use for this call any more (RealtimePipeline says what the caller hears then)."""
        raise NotImplementedError

    def _expect_response(self) -> None:
        if self._stall is None:
            self._stall = asyncio.get_running_loop().call_later(
                self.realtime.response_timeout_ms / 1000.0, self._fail,
                f"no response from the model within {self.realtime.response_timeout_ms} ms")

    def _cancel_stall(self) -> None:
        for timer in (self._stall, self._setup, self._quiet):
            if timer is not None:
                timer.cancel()
        self._stall = self._setup = self._quiet = None

    def _progress(self) -> None:
        """A response said something: its silence is timed from now. A model that begins a reply and then
        stops (socket open, nothing more) would otherwise leave the caller in dead air."""
        if self._quiet is not None:
            self._quiet.cancel()
        self._quiet = asyncio.get_running_loop().call_later(self.realtime.response_timeout_ms / 1000.0,
                                                            self._quiet_check)

    def _quiet_check(self) -> None:
        self._quiet = None
        if self._failed or self._ending or not any(reply.running for reply in self._replies.values()):
            return  # done, cut off by the caller, or already given up on
        if self.playout.queued_frames:  # what came is still playing: the caller is not in silence yet
            self._quiet = asyncio.get_running_loop().call_later(QUIET_RECHECK_S, self._quiet_check)
            return
        self._fail(f"the model's response went quiet for {self.realtime.response_timeout_ms} ms")



async def _awaited(work: Awaitable[Any]) -> Any:
    return await work
