"""One agent reply: the model streams, tools run, sentences are synthesised while the rest streams.

The model's deltas are cut into sentences; a TTS task synthesises each sentence into the playout as
soon as it exists, concurrently with the model still writing, so the first audio leaves before the
reply is complete. Cancelling the reply (barge-in, hang-up) cancels both the model request and the
synthesis in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from voicegate.internal.llm.base import ChatMessage, ChatModel, ChatRequest, ReplyDelta, ToolCall
from voicegate.internal.llm.sentences import SentenceChunker
from voicegate.internal.pipeline.playout import Playout
from voicegate.internal.tools.registry import ToolContext, ToolRegistry
from voicegate.internal.tts.base import SLACK_S, TextToSpeech

log = logging.getLogger(__name__)

# Tool rounds per turn: enough for "read, then replace, then answer"; a model stuck in a tool loop
# is cut off and answers with what it has.
MAX_TOOL_ROUNDS = 4
_DONE = object()
PLAYED_OUT_SLACK_S = 3.0
FRAME_S = 0.02  # one playout frame


@dataclass(slots=True)
class ReplyTimings:
    started: float = field(default_factory=time.monotonic)
    first_token: float | None = None
    first_audio: float | None = None  # first synthesised audio queued for playout

    def ms(self, moment: float | None) -> float | None:
        return None if moment is None else (moment - self.started) * 1000.0


@dataclass(slots=True)
class ReplyResult:
    text: str
    tool_calls: int
    timings: ReplyTimings


async def speak_text(text: str, tts: TextToSpeech, playout: Playout, on_audio: Callable[[], None]) -> None:
    """Synthesise one sentence into the playout; a synthesis failure skips the sentence, not the reply."""
    # The audio still queued is this sentence's slack: a continuation can wait behind another call's first
    # sentence (tts/base.py SLACK_S). Set in this task's context, which the engine's generator runs in.
    SLACK_S.set(playout.queued_frames * FRAME_S)
    segment = playout.begin_segment(text)
    try:
        async for pcm in tts.synthesize(text, playout.sample_rate):
            if pcm:
                playout.append(segment, pcm)
                on_audio()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("speech synthesis failed for a sentence: %s", type(exc).__name__)
    finally:
        playout.end_segment(segment)


ToolGate = Callable[[ToolCall], Awaitable[None]]


async def _no_gate(call: ToolCall) -> None:
    return None


class ReplyRunner:
    def __init__(self, model: ChatModel, tts: TextToSpeech, tools: ToolRegistry, playout: Playout,
                 before_tool: ToolGate = _no_gate) -> None:
        self.model = model
        self.tts = tts
        self.tools = tools
        self.playout = playout
        # Awaited before each tool call runs: a reply prepared ahead of the turn's end holds its
        # side-effect tools there until the turn is released (responder.py).
        self.before_tool = before_tool
        self.spoken: list[str] = []  # sentences generated so far (kept when the reply is cancelled)

    async def run(self, request: ChatRequest, tool_context: ToolContext,
                  history: list[ChatMessage], on_first_audio: Callable[[], None]) -> ReplyResult:
        """Generate and speak one reply. Tool exchanges are appended to `history` as they happen."""
        timings = ReplyTimings()
        sentences: asyncio.Queue[object] = asyncio.Queue()
        spoken = self.spoken

        def audio_arrived() -> None:
            if timings.first_audio is None:
                timings.first_audio = time.monotonic()
                on_first_audio()

        async def synthesise() -> None:
            while (item := await sentences.get()) is not _DONE:
                if isinstance(item, str):
                    await speak_text(item, self.tts, self.playout, audio_arrived)
                    continue
                assert isinstance(item, tuple)
                text, played = item
                try:
                    await speak_text(text, self.tts, self.playout, audio_arrived)
                    await self._played_out()
                finally:
                    if not played.done():
                        played.set_result(None)

        async def say_now(text: str) -> None:
            played: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            spoken.append(text)
            sentences.put_nowait((text, played))
            await played

        tool_context.speak = say_now

        def say_soon(text: str) -> None:
            spoken.append(text)
            sentences.put_nowait(text)

        tool_context.say = say_soon  # a tool's word to the caller is spoken in order with the reply

        async def generate() -> int:
            try:
                return await self._generate(request, tool_context, history, sentences, spoken, timings)
            finally:
                sentences.put_nowait(_DONE)

        # Not a TaskGroup: a model error must surface as itself (LlmError), not wrapped in a group.
        tts_task = asyncio.create_task(synthesise(), name="reply-tts")
        try:
            calls = await generate()
            await tts_task
        finally:
            if not tts_task.done():
                tts_task.cancel()
                await asyncio.gather(tts_task, return_exceptions=True)
        return ReplyResult(" ".join(spoken).strip(), calls, timings)

    async def _played_out(self) -> None:
        """Until everything queued has been played (or cleared by a barge-in), at most as long as it lasts
        plus a margin (a transport that stopped pulling must not hang the reply)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.playout.queued_frames * 0.02 + PLAYED_OUT_SLACK_S
        # Polled: the transport drains the playout from its own tick, which signals nothing.
        while self.playout.active and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    async def _generate(self, request: ChatRequest, tool_context: ToolContext, history: list[ChatMessage],
                        sentences: asyncio.Queue[object], spoken: list[str], timings: ReplyTimings) -> int:
        chunker = SentenceChunker()
        total_calls = 0
        for _round in range(MAX_TOOL_ROUNDS + 1):
            calls: list[ToolCall] = []
            round_text: list[str] = []
            stream = self.model.stream(request)
            try:
                async for item in stream:
                    if isinstance(item, ReplyDelta):
                        if timings.first_token is None and item.text.strip():
                            timings.first_token = time.monotonic()
                        round_text.append(item.text)
                        for sentence in chunker.push(item.text):
                            spoken.append(sentence)
                            sentences.put_nowait(sentence)
                    else:
                        calls.append(item)
            finally:
                # Closing the generator aborts the HTTP request when we were cancelled mid-stream.
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
            if not calls or _round == MAX_TOOL_ROUNDS:
                break
            total_calls += len(calls)
            assistant = ChatMessage("assistant", "".join(round_text), tool_calls=calls)
            request.messages.append(assistant)
            history.append(assistant)
            for call in calls:
                await self.before_tool(call)
                result = await self.tools.run(call, tool_context)
                tool_message = ChatMessage("tool", result, tool_call_id=call.id)
                request.messages.append(tool_message)
                history.append(tool_message)
        for sentence in chunker.flush():
            spoken.append(sentence)
            sentences.put_nowait(sentence)
        return total_calls
