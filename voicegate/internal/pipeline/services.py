"""What a pipeline is built from: providers, tools, config, and the hooks other packages plug in.

The composition root (server/) fills this in once; every call's pipeline shares it. Hooks default to
doing nothing, so the pipeline runs without memory, retrieval or observation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from opentelemetry import trace

from voicegate.internal.config.sections import PipelineConfig
from voicegate.internal.devices import onnx_available_providers, onnx_device, onnx_providers
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.llm.base import ChatModel
from voicegate.internal.pipeline.context import BUILTIN_PROMPT, ContextLayers, goal_note, load_text
from voicegate.internal.stt.base import SpeechToText
from voicegate.internal.tools.registry import ToolRegistry
from voicegate.internal.tts.base import TextToSpeech
from voicegate.internal.turn.vad import VadEvent, VadProfile, VoiceActivityDetector, build_vad
from voicegate.internal.turn.weights import TurnModelError

if TYPE_CHECKING:
    from voicegate.internal.conversation.state import CallContext
    from voicegate.internal.telemetry.otel import Telemetry
    from voicegate.internal.turn.fusion import TurnFusion
    from voicegate.internal.turn.silero import SileroModel
    from voicegate.internal.turn.smart_turn import SmartTurnModel

class Denoiser(Protocol):
    def process(self, pcm: bytes) -> bytes: ...


class CallRecording(Protocol):
    """A call's recording and its consent (internal/recording/call.py, docs/recording.md), as the
    pipeline drives it: what the call opens with, the caller's turns and keys that answer or opt out
    (a reply is said instead of answering them), and both directions of audio on the call's clock."""

    def opening(self, greeting: str) -> str: ...

    def concerns(self, text: str) -> bool: ...

    def caller_said(self, text: str) -> str | None: ...

    def caller_pressed(self, digits: str) -> str | None: ...

    @property
    def asking(self) -> bool:
        """The consent question awaits the caller's answer."""
        ...

    def heard(self, pcm: bytes) -> None: ...

    def said(self, pcm: bytes | None) -> None: ...


# Below this STT confidence a turn is "probably garbled" (when the engine reports confidence at all).
LOW_CONFIDENCE_DIRECTIVES = (
    "[Note for this turn: the caller's words came through with low transcription confidence and may be "
    "garbled. If you cannot tell what they meant, ask ONE short question to clarify instead of guessing.]",
    "[Note for this turn: a second unclear turn in a row. Do not ask them to repeat again; offer two or "
    "three likely things they might mean and ask which one.]",
    "[Note for this turn: several unclear turns in a row. Apologise briefly and offer another way: a "
    "callback, the keypad, or calling again from a quieter place.]",
)


def misunderstanding_note(confidence: float | None, floor: float, streak: int) -> tuple[int, str]:
    """(new streak, note for this turn). Unknown confidence is never "low"; a clear turn resets."""
    if confidence is None or floor <= 0 or confidence >= floor:
        return 0, ""
    streak += 1
    return streak, LOW_CONFIDENCE_DIRECTIVES[min(streak, len(LOW_CONFIDENCE_DIRECTIVES)) - 1]


async def _nothing(session: CallContext) -> None:
    return None


def _no_audio_observer(session: CallContext, pcm: bytes, event: VadEvent | None) -> None:
    return None


@dataclass
class PipelineServices:
    stt: SpeechToText
    tts: TextToSpeech
    model: ChatModel
    config: PipelineConfig
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    persona: str = ""
    # The system-context layers for a session (memory plugs in here).
    layers: Callable[[CallContext], ContextLayers] | None = None
    # What to say when a call starts (memory may pick the deployer's returning-caller greeting).
    greeter: Callable[[CallContext], str] | None = None
    retrieve: Callable[[CallContext, str], Awaitable[list[str]]] | None = None
    # Start retrieval for a turn still in its merge window (pipeline.rag_prefetch); never blocks.
    prefetch: Callable[[CallContext, str], None] | None = None
    # Per-turn memory (injection = "retrieval"): the memory lines relevant to this turn's text.
    # Retrieval mode: (memory_context, memory_text) for this turn, or None to keep the snapshot.
    turn_memory: Callable[[CallContext, str], Awaitable[tuple[str, str] | None]] | None = None
    # Idle points: before a turn is answered (refresh changed memory) and after it was spoken.
    before_turn: Callable[[CallContext], Awaitable[None]] = _nothing
    after_turn: Callable[[CallContext], Awaitable[None]] = _nothing
    # Hot path: every inbound frame and VAD event; must be bounded, synchronous work only.
    observe_audio: Callable[[CallContext, bytes, VadEvent | None], None] = _no_audio_observer
    # Call recording ([recording] enabled): the session's recording for a new pipeline (None: not recorded).
    recording: Callable[[CallContext, int, EventSink], CallRecording | None] | None = None
    policy: str = field(default="")
    skills: str = ""
    assistant_profile: str = ""
    tracer: trace.Tracer = field(default_factory=trace.NoOpTracer)
    telemetry: Telemetry | None = None
    # Shared neural models (one ONNX session per process), loaded here when the config asks for them.
    silero: SileroModel | None = None
    turn_model: SmartTurnModel | None = None
    # Smart Turn's probability and the transcript's cues, fused (internal/turn/fusion.py).
    turn_fusion: TurnFusion | None = None
    # Thinking cues' audio by (text, sample rate), made once for every call (internal/pipeline/thinking.py).
    cue_audio: dict[tuple[str, int], bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.config.vad == "silero" and self.silero is None:
            from voicegate.internal.turn.silero import shared_silero

            self.silero = shared_silero()
        if self.config.end_of_turn == "smart_turn" and self.turn_model is None:
            from voicegate.internal.turn.smart_turn import shared_smart_turn

            providers = onnx_providers(self.config.end_of_turn_device, onnx_available_providers(),
                                       "pipeline.end_of_turn_device")
            self.turn_model = shared_smart_turn(self.config.end_of_turn_model, self.config.end_of_turn_download,
                                                tuple(providers))
        if self.config.end_of_turn == "smart_turn" and self.turn_fusion is None:
            from voicegate.internal.turn.fusion import FusionWeightsError, shared_fusion

            try:
                self.turn_fusion = shared_fusion()
            except FusionWeightsError as exc:
                raise TurnModelError(f"pipeline.end_of_turn: {exc}") from exc
        if self.config.noise_suppression == "rnnoise":
            from voicegate.internal.audio.denoise import rnnoise_available

            reason = rnnoise_available()
            if reason is not None:
                raise TurnModelError(f"pipeline.noise_suppression: rnnoise cannot run: {reason} "
                                     "(pip install -e '.[denoise]', or set it to \"off\")")
        if not self.policy:
            self.policy = load_text(self.config.prompt_file, BUILTIN_PROMPT)
        if not self.skills:
            from voicegate.internal.pipeline.context import load_skills

            self.skills = load_skills(self.config.skills_dir)
        if not self.assistant_profile:
            self.assistant_profile = load_text(self.config.assistant_profile)

    def context(self, session: CallContext) -> ContextLayers:
        if self.layers is not None:
            return self.layers(session)
        conversation = session.conversation
        return ContextLayers(
            policy=self.policy,
            persona=self.persona,
            assistant_profile=self.assistant_profile,
            memory_context=conversation.memory_context,
            memory_text=conversation.memory_text,
            skills=self.skills,
            extra=goal_note(session.slots),
        )

    def greeting(self, session: CallContext) -> str:
        if self.greeter is not None:
            return self.greeter(session)
        return self.config.greeting

    def describe_turn_taking(self) -> dict[str, object]:
        """For /health: which VAD, end-of-turn model and noise suppression the calls use."""
        out: dict[str, object] = {"vad": self.config.vad if self.silero is not None or self.config.vad != "silero"
                                  else "energy", "end_of_turn": "off", "noise_suppression":
                                  self.config.noise_suppression}
        if self.turn_model is not None:
            out["end_of_turn"] = "smart_turn"
            out["end_of_turn_model"] = str(self.turn_model.path)
            out["end_of_turn_device"] = onnx_device(self.turn_model.providers)
            out["end_of_turn_inferences"] = self.turn_model.inferences
            out["end_of_turn_skipped"] = self.turn_model.skipped
        return out

    def make_denoiser(self, sample_rate: int) -> Denoiser | None:
        """Per-call noise suppression before VAD and recognition (None when off)."""
        if self.config.noise_suppression != "rnnoise":
            return None
        from voicegate.internal.audio.denoise import RnnoiseDenoiser

        return RnnoiseDenoiser(sample_rate)

    def make_vad(self, sample_rate: int, profile: VadProfile) -> VoiceActivityDetector:
        config = self.config
        silero = self.silero if config.vad == "silero" else None
        return build_vad(config.vad, sample_rate, profile, threshold_db=config.vad_threshold_db, silero=silero,
                         silero_threshold=config.vad_silero_threshold, noise_gate=config.vad_noise_gate)
