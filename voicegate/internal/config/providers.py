"""Config sections for the speech, language-model, retrieval, memory and telemetry providers."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from voicegate.internal.config.sections import Section


class SttConfig(Section):
    provider: Literal["whisper", "pocketsphinx", "openai", "deepgram"] = "whisper"


class TtsConfig(Section):
    # "auto": Piper when its program and voice are installed, else espeak-ng.
    provider: Literal["auto", "piper", "espeak", "openai"] = "auto"
    # Fixed phrases (greetings, the consent question, prompts) rendered once and said from memory; 0: off.
    phrase_cache_mb: int = Field(16, ge=0, le=4096)
    # Keep those renders under data_dir/phrase-cache too, so a restarted node does not render them again.
    phrase_cache_disk: bool = False
    # Any other sentence rendered before (an agent's "Is there anything else?") said again from memory, least
    # recently said out first past this; never on disk (it can hold callers' words). 0: off.
    repeat_cache_mb: int = Field(8, ge=0, le=4096)


class LlmConfig(Section):
    # "auto" picks openai when [openai] api_key is set, else the offline local agent.
    provider: Literal["auto", "local", "openai", "ollama", "agent"] = "auto"


class OpenAIConfig(Section):
    api_key: str = ""
    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    system_prompt: str = (
        "You are a helpful voice assistant on a phone call. Keep answers short and conversational."
    )
    temperature: float = Field(0.6, ge=0, le=2)
    stt_model: str = "whisper-1"
    tts_model: str = "tts-1"
    tts_voice: str = "alloy"
    embedding_model: str = "text-embedding-3-small"
    timeout_s: float = Field(30.0, gt=0)


class OllamaConfig(Section):
    base_url: str = "http://localhost:11434"
    model: str = "llama3.2"
    api: Literal["native", "openai"] = "native"


class AgentConfig(Section):
    url: str = ""
    api_key: str = ""
    timeout_ms: int = Field(60000, gt=0)
    max_reply_bytes: int = Field(262_144, gt=0)


class RealtimeConfig(Section):
    """A Realtime speech-to-speech model as the agent (docs/realtime.md): the OpenAI Realtime WebSocket protocol,
    which OpenAI, Azure OpenAI and Qwen-Omni-Realtime speak."""

    enabled: bool = False
    url: str = "wss://api.openai.com/v1/realtime"
    model: str = "gpt-realtime"
    api_key: str = ""  # "" = [openai] api_key
    auth: Literal["bearer", "api-key"] = "bearer"
    dialect: Literal["ga", "beta"] = "ga"
    voice: str = "alloy"
    input_rate: int = Field(24000, ge=8000, le=48000)
    output_rate: int = Field(24000, ge=8000, le=48000)
    turn_detection: Literal["server_vad", "semantic_vad", "voicegate"] = "server_vad"
    vad_threshold: float = Field(0.5, ge=0, le=1)
    silence_ms: int = Field(500, ge=100, le=5000)
    prefix_padding_ms: int = Field(300, ge=0, le=2000)
    transcription_model: str = "gpt-4o-mini-transcribe"
    connect_timeout_ms: int = Field(5000, gt=0)
    response_timeout_ms: int = Field(8000, gt=0)
    on_failure: Literal["hangup", "cascade"] = "hangup"
    apology: str = "Sorry, I'm having trouble on my end right now."


class DeepgramConfig(Section):
    api_key: str = ""
    url: str = "wss://api.deepgram.com/v1/listen"
    model: str = "nova-3"
    language: str = ""
    endpointing_ms: int = Field(300, ge=10)
    utterance_end_ms: int = Field(1000, ge=1000)
    keyterms: list[str] = Field(default_factory=list)


class PocketsphinxConfig(Section):
    grammar: str = ""
    phrases: list[str] = Field(default_factory=list)
    hmm: str = ""
    dictionary: str = ""
    lm: str = ""
    workers: int = Field(2, ge=1, le=64)


class WhisperConfig(Section):
    model: str = "tiny.en"  # a model name ("tiny.en", "base", ...) or a CTranslate2 model directory
    # "auto": the GPU when CTranslate2 sees one, else the CPU; "cuda" on a machine without one stops start-up.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    compute_type: str = "auto"  # "auto": int8 on the CPU, float16 on CUDA (internal/devices.py)
    beam_size: int = Field(1, ge=1, le=10)
    # A noisy line (an utterance's estimated speech-active level over its noise below noisy_snr_db) is
    # decoded with noisy_beam_size instead (docs/speech.md, "Noisy lines"). 0 for either: never.
    noisy_snr_db: float = Field(20.0, ge=0, le=60)
    noisy_beam_size: int = Field(5, ge=0, le=10)
    workers: int = Field(0, ge=0, le=64)  # 0: one per core this process may use (internal/stt/sizing.py)
    cpu_threads: int = Field(1, ge=1, le=64)
    # Utterances of several calls that are waiting together are decoded as one batch, at most this many.
    batch_size: int = Field(4, ge=1, le=16)
    # An utterance still waiting for a worker after this long is dropped and the caller hears a short
    # apology: the answer would come too late to help. 0: never.
    shed_after_ms: int = Field(6000, ge=0)
    language: str = "en"
    vad_filter: bool = True
    # Encode only the utterance (plus a margin), not Whisper's fixed 30 s window; falls back to the full
    # window when the short decode looks unreliable.
    short_window: bool = True
    # A turn with this much speech not yet decoded has its start decoded while the caller still talks, so
    # the end of speech leaves only the tail to decode (0: decode each utterance when it ends).
    early_decode_s: float = Field(4.0, ge=0, le=30)
    initial_prompt: str = ""
    hotwords: list[str] = Field(default_factory=list)
    download: bool = True  # try the model hub by name when no directory or pinned package has the model
    queue_limit: int = Field(64, ge=1)


class PiperConfig(Section):
    command: list[str] = Field(default_factory=list)  # empty: this Python's Piper (piper_launch.py)
    voice: str = ""  # a Piper .onnx voice path; empty: the pinned voice package
    # With `voice` empty: "auto" the set-up's int8 copy of the pinned voice when it is there (12 % less CPU
    # per second of speech, as intelligible), else the original; "int8" that copy or no Piper; "original".
    voice_variant: Literal["auto", "original", "int8"] = "auto"
    speaker: int = Field(0, ge=0)
    length_scale: float = Field(1.0, gt=0, le=4)
    workers: int = Field(0, ge=0, le=16)  # 0: one per core this process may use
    # onnxruntime's threads per worker. 0: chosen from the live load (internal/tts/piper_pool.py): the
    # workers at one thread each (13-21 % less CPU per sentence, sooner on a loaded node) plus two with a
    # thread per core for a lone call on a quiet node (the sooner sentence there). Above 0: forced on all.
    threads: int = Field(0, ge=0, le=64)
    timeout_s: float = Field(20.0, gt=0)
    # "auto": `--cuda` when this Python's onnxruntime has the CUDA provider (a custom `command` runs its own
    # onnxruntime, which auto cannot see: there it means the CPU).
    device: Literal["auto", "cpu", "cuda"] = "auto"


class EspeakConfig(Section):
    binary: str = "espeak-ng"
    voice: str = "en-us"
    rate_wpm: int = Field(170, ge=80, le=450)
    pitch: int = Field(50, ge=0, le=99)
    workers: int = Field(2, ge=1, le=64)


class RagConfig(Section):
    provider: Literal["", "pgvector", "supabase"] = ""
    top_k: int = Field(3, ge=1, le=50)
    embedding: Literal["wordllama", "openai"] = "wordllama"
    min_score: float = Field(0.0, ge=0, le=1)
    chunk_size: int = Field(120, ge=10)
    chunk_overlap: int = Field(20, ge=0)


class PgvectorConfig(Section):
    connection_string: str = ""
    table: str = "rag_documents"
    pool_min: int = Field(1, ge=0)
    pool_max: int = Field(10, ge=1)
    connect_timeout_s: float = Field(5.0, gt=0)

    @field_validator("table")
    @classmethod
    def _plain_identifier(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", value):
            raise ValueError("must be a plain SQL identifier (letters, digits, underscore)")
        return value


class SupabaseConfig(Section):
    url: str = ""
    api_key: str = ""
    function: str = "match_documents"
    table: str = "documents"


class MemoryConfig(Section):
    enabled: bool = False
    provider: Literal["pgvector", "memory", "markdown"] = "pgvector"
    max_chars: int = Field(2000, gt=0)
    retention_days: float = Field(90, gt=0)
    injection: Literal["prompt", "retrieval"] = "prompt"
    embedding: Literal["wordllama", "openai", "none"] = "wordllama"
    retrieval_top_k: int = Field(5, ge=1, le=50)
    sweep_interval_s: float = Field(3600, gt=0)
    owner_key_secret: str = ""
    markdown_dir: str = ""
    # None: on exactly when an API key for the reconciliation model is configured.
    auto: bool | None = None
    model: str = ""
    base_url: str = ""
    api_key: str = ""
    session_digests: bool = False
    digest_retention_days: float = Field(90, gt=0)
    audit_path: str = ""
    sensitive_patterns: list[str] = Field(default_factory=list)
    write_retry_max_s: float = Field(60.0, gt=0)
    max_session_digests: int = Field(200, ge=1)
    # The task ledger (internal/memory/tasks.py): live status of work the agent dispatched.
    task_terminal_days: float = Field(3, gt=0)
    max_tasks: int = Field(50, ge=1)
    outbox_max_age_h: float = Field(24.0, gt=0)
    outbox_max_entries: int = Field(10_000, ge=1)
    read_timeout_ms: int = Field(300, gt=0)
    shared_numbers: list[str] = Field(default_factory=list)  # normalised to E.164 by load_config

    @property
    def erasure_fence_s(self) -> float:
        """How long an erasure's epoch record must outlive the erasure: past the retention, and past the
        longest a write begun before it can still wait to land (a pending hang-up write lives up to
        `outbox_max_age_h`), plus a day for a call that was live at the erasure. Derived, never set, so
        no configuration can make the fence expire before the writes it stops."""
        return max(self.retention_days * 86400.0, self.outbox_max_age_h * 3600.0) + 86400.0

    @property
    def session_digest_retention_days(self) -> float:
        """How long a session digest lives: `digest_retention_days`, but never longer than
        `retention_days`, the promise made for everything memory keeps of a caller (a digest holds what
        the call was about, and what the agent did)."""
        return min(self.digest_retention_days, self.retention_days)

    @field_validator("auto", mode="before")
    @classmethod
    def _empty_means_automatic(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("sensitive_patterns")
    @classmethod
    def _patterns_compile(cls, values: list[str]) -> list[str]:
        for pattern in values:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad regular expression {pattern!r}: {exc}") from exc
        return values


class TelemetryConfig(Section):
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_file: str = ""
    log_format: Literal["auto", "json", "console"] = "auto"
    log_content: bool = False
    service_name: str = "voicegate"
    traces: Literal["none", "console", "otlp", "memory"] = "none"
    otlp_endpoint: str = ""
    metrics: bool = True
