"""Build the speech and language providers the config names (the only place that knows them all)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from voicegate.internal.config import Config, ConfigError
from voicegate.internal.conversation.rolling_summary import RollingSummary, Summariser
from voicegate.internal.conversation.state import LiveCall
from voicegate.internal.devices import DeviceUnavailable
from voicegate.internal.llm.base import ChatModel
from voicegate.internal.pipeline.capture import CallControl
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.session.session import Conversation, Session
from voicegate.internal.stt.base import SpeechToText
from voicegate.internal.tools.registry import ToolRegistry, register_end_call
from voicegate.internal.tts.base import TextToSpeech
from voicegate.internal.turn.weights import TurnModelError

log = logging.getLogger(__name__)


def check_providers(config: Config) -> None:
    """Fail at start-up, naming the key, when a chosen provider lacks what it needs."""
    problems: list[str] = []
    llm = config.effective_llm_provider
    if llm == "openai" and not config.openai.api_key:
        problems.append("llm.provider: \"openai\" needs [openai] api_key (or OPENAI_API_KEY)")
    if llm == "agent" and not config.agent.url:
        problems.append("llm.provider: \"agent\" needs [agent] url")
    if config.stt.provider == "openai" and not config.openai.api_key:
        problems.append("stt.provider: \"openai\" needs [openai] api_key (or OPENAI_API_KEY)")
    if config.stt.provider == "deepgram" and not config.deepgram.api_key:
        problems.append("stt.provider: \"deepgram\" needs [deepgram] api_key (or DEEPGRAM_API_KEY)")
    if config.tts.provider == "openai" and not config.openai.api_key:
        problems.append("tts.provider: \"openai\" needs [openai] api_key (or OPENAI_API_KEY)")
    if config.rag.provider == "supabase" and not (config.supabase.url and config.supabase.api_key):
        problems.append("rag.provider: \"supabase\" needs [supabase] url and api_key")
    if config.tts.provider == "piper":
        from voicegate.internal.tts.piper_voice import piper_available

        if (reason := piper_available(config.piper)) is not None:
            problems.append(f"tts.provider: \"piper\" cannot run: {reason}")
    if config.pocketsphinx.grammar and not Path(config.pocketsphinx.grammar).is_file():
        problems.append(f"pocketsphinx.grammar: no such file ({config.pocketsphinx.grammar})")
    if config.warm_transfer.hold_music and config.sip.enabled and config.sip.transfer_targets:
        from voicegate.internal.telephony.leg_media import load_hold_music

        try:
            load_hold_music(config.warm_transfer.hold_music, 8000)
        except Exception as exc:  # missing, not a WAV, not 16-bit, empty: say which and why
            problems.append(f"warm_transfer.hold_music: cannot use {config.warm_transfer.hold_music!r}: {exc}")
    problems += device_problems(config)
    if problems:
        raise ConfigError(problems)


def device_problems(config: Config) -> list[str]:
    """Each "cuda" this machine cannot honour, for the engines this config runs, before any model loads.
    Only "cuda" is probed: "auto" and "cpu" always have a device."""
    from voicegate.internal.devices import (
        cuda_devices_ctranslate2,
        onnx_available_providers,
        onnx_providers,
        whisper_device,
    )
    from voicegate.internal.tts.piper_voice import piper_uses_cuda

    problems: list[str] = []
    checks: list[Callable[[], object]] = []
    if config.stt.provider == "whisper" and config.whisper.device == "cuda":
        checks.append(lambda: whisper_device("cuda", cuda_devices_ctranslate2()))
    if config.piper.device == "cuda" and tts_choice(config)[0] == "piper":
        checks.append(lambda: piper_uses_cuda(config.piper, onnx_available_providers()))
    if config.pipeline.end_of_turn == "smart_turn" and config.pipeline.end_of_turn_device == "cuda":
        checks.append(lambda: onnx_providers("cuda", onnx_available_providers(), "pipeline.end_of_turn_device"))
    for check in checks:
        try:
            check()
        except DeviceUnavailable as exc:
            problems.append(str(exc))
    return problems


def build_stt(config: Config) -> SpeechToText:
    if config.stt.provider == "openai":
        from voicegate.internal.stt.openai import OpenAISpeechToText

        return OpenAISpeechToText(config.openai)
    if config.stt.provider == "deepgram":
        from voicegate.internal.stt.deepgram import DeepgramSpeechToText

        return DeepgramSpeechToText(config.deepgram)
    if config.stt.provider == "pocketsphinx":
        from voicegate.internal.stt.pocketsphinx import PocketsphinxSpeechToText

        return PocketsphinxSpeechToText(config.pocketsphinx, config.data_dir / "pocketsphinx")
    from voicegate.internal.stt.whisper import WhisperSpeechToText
    from voicegate.internal.stt.whisper_models import WhisperModelError

    try:
        return WhisperSpeechToText(config.whisper, config.data_dir / "models", progress=log.info)
    except WhisperModelError as exc:
        raise ConfigError([f"whisper.model: {exc}"]) from exc
    except DeviceUnavailable as exc:
        raise ConfigError([str(exc)]) from exc


def tts_choice(config: Config) -> tuple[str, str]:
    """The engine `tts.provider` means here, and for "auto" on espeak-ng why Piper cannot run ("" else):
    "auto" is Piper when it can run, else espeak-ng. `voicegate doctor` reports the same choice."""
    if config.tts.provider != "auto":
        return config.tts.provider, ""
    from voicegate.internal.tts.piper_voice import piper_available

    reason = piper_available(config.piper)
    return ("piper", "") if reason is None else ("espeak", reason)


def effective_tts_provider(config: Config) -> str:
    provider, why_not_piper = tts_choice(config)
    if why_not_piper:
        log.info("tts.provider auto: espeak-ng, because Piper cannot run (%s)", why_not_piper)
    return provider


def build_tts(config: Config) -> TextToSpeech:
    provider = effective_tts_provider(config)
    if provider == "openai":
        from voicegate.internal.tts.openai import OpenAITextToSpeech

        return OpenAITextToSpeech(config.openai)
    if provider == "piper":
        from voicegate.internal.tts.phrases import FixedPhrases
        from voicegate.internal.tts.piper import PiperTextToSpeech

        phrases = FixedPhrases(config.tts.phrase_cache_mb << 20,
                               config.data_dir / "phrase-cache" if config.tts.phrase_cache_disk else None)
        try:
            return PiperTextToSpeech(config.piper, phrases=phrases,
                                     repeats=FixedPhrases(config.tts.repeat_cache_mb << 20))  # memory only
        except DeviceUnavailable as exc:
            raise ConfigError([str(exc)]) from exc
    from voicegate.internal.tts.espeak import EspeakTextToSpeech

    return EspeakTextToSpeech(config.espeak)


def fixed_phrases(config: Config) -> list[str]:
    """What the agent says verbatim whatever the caller said: each is rendered once and said from the
    phrase cache ([tts] phrase_cache_mb). A returning caller's greeting names them, so it is not here.
    The thinking cues' phrases are rendered once per server by the cues themselves (services.cue_audio)."""
    from voicegate.internal.pipeline.responder import APOLOGY, TOO_BUSY

    pipeline, recording = config.pipeline, config.recording
    texts = [pipeline.greeting, pipeline.greeting_outgoing, TOO_BUSY, APOLOGY]
    if pipeline.idle_prompt_s > 0:  # the idle caller's prompt and goodbye (internal/pipeline/idle.py)
        texts.append(pipeline.idle_prompt)
        if pipeline.idle_hangup_s > 0:
            texts.append(pipeline.idle_goodbye)
    if config.sip.transfer_targets:
        texts.append(config.warm_transfer.hold_message)
    if config.amd.enabled:
        texts.append(config.amd.voicemail_message)
    if recording.enabled and recording.consent == "ask":
        texts.append(recording.question)
    if recording.enabled and recording.consent == "announce":
        texts += [" ".join(part for part in (recording.announcement, greeting) if part)
                  for greeting in (pipeline.greeting, pipeline.greeting_outgoing)]
    return [text for text in texts if text.strip()]


def build_model(config: Config) -> ChatModel:
    provider = config.effective_llm_provider
    if provider == "openai":
        from voicegate.internal.llm.openai import OpenAIChatModel

        return OpenAIChatModel(config.openai)
    if provider == "ollama":
        from voicegate.internal.llm.ollama import OllamaChatModel

        return OllamaChatModel(config.ollama)
    if provider == "agent":
        from voicegate.internal.agent.client import AgentChatModel

        return AgentChatModel(config.agent)
    from voicegate.internal.llm.local import LocalAgent

    return LocalAgent()


def summariser_for(model: ChatModel, timeout_s: float) -> Summariser | None:
    """The rolling summary's model call; None (extractive fallback) for the offline agent."""
    if model.name == "local":
        return None

    async def summarise(system: str, script: str) -> str:
        return await model.complete(system, script, timeout_s)

    return summarise


def call_control(call: LiveCall) -> CallControl | None:
    """The control of a call a tool runs in (a digit form takes its input for a while): its pipeline."""
    return call.pipeline if isinstance(call, Session) else None


def build_services(config: Config, stt: SpeechToText, tts: TextToSpeech, model: ChatModel,
                   tools: ToolRegistry | None = None) -> PipelineServices:
    """The services every call's pipeline shares; memory and retrieval hooks are added by the gateway."""
    registry = tools if tools is not None else ToolRegistry()
    if "end_call" not in registry:
        register_end_call(registry)
    if config.digits.enabled and "collect_digits" not in registry:
        from voicegate.internal.telephony.digit_tool import register_digits_tool

        register_digits_tool(registry, config.digits, control_of=call_control)
    persona = config.openai.system_prompt if config.effective_llm_provider in ("openai", "ollama") else ""
    try:
        return PipelineServices(stt=stt, tts=tts, model=model, config=config.pipeline, tools=registry,
                                persona=persona)
    except (TurnModelError, DeviceUnavailable) as exc:
        raise ConfigError([str(exc)]) from exc


def new_conversation_factory(config: Config, model: ChatModel) -> Callable[[], Conversation]:
    summariser = summariser_for(model, config.pipeline.summary_timeout_s)

    def new_conversation() -> Conversation:
        return Conversation(RollingSummary(summariser, config.pipeline.summary_timeout_s))

    return new_conversation
