"""Config sections for the transports and the server itself.

Every field here is documented in docs/configuration.md and in internal/config/config.toml (the
commented defaults, linked as ./config.toml in a checkout); a key added here without both is a key an
operator cannot find.
"""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from voicegate.internal.config.sip_registration import SipRegistration, check_registration_transports


class Section(BaseModel):
    """Base for every section: unknown keys are an error, never silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _check_cidrs(values: list[str]) -> list[str]:
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError as exc:
            raise ValueError(f"not an IP address or CIDR: {value!r}") from exc
    return values


def split_host_port(value: str, default_port: int) -> tuple[str, int]:
    """Split "host:port" (or "[v6]:port", or a bare host) into its parts."""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port_text = rest.lstrip(":")
    elif value.count(":") == 1:
        host, _, port_text = value.partition(":")
    else:
        host, port_text = value, ""
    if not host:
        raise ValueError(f"missing host in {value!r}")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise ValueError(f"port must be 0-65535 in {value!r} (0 picks a free port)")
    return host, int(port_text)


MIN_SECRET_BYTES = 16  # server.jwt_secret, api_key, trusted_header_secret


class ServerConfig(Section):
    host: str = "0.0.0.0"
    port: int = Field(8080, gt=0, lt=65536)
    public_url: str = ""
    data_dir: str = "./data"
    jwt_secret: str = ""
    jwt_issuer: str = "voicegate"
    jwt_audience: str = "voicegate"
    jwks_url: str = ""
    jwks_file: str = ""
    token_ttl_s: int = Field(3600, gt=0)
    api_key: str = ""
    session_grace_ms: int = Field(30000, ge=0)
    max_sessions: int = Field(0, ge=0)
    # New calls get 503 + Retry-After while an utterance or a sentence has waited longer than this for a
    # free recognition or synthesis worker (in the last few seconds): past it replies are too slow to
    # help, and a new caller would only make every call slower. 0: never.
    shed_wait_ms: int = Field(3000, ge=0)
    # ... and while the event loop (every call's media, VAD and pipeline) has been running this late for
    # the last few seconds (the median wake-up delay): past it media leaves late and WebRTC peers drop
    # their calls when consent checks go unanswered. 0: never.
    shed_loop_lag_ms: int = Field(250, ge=0)
    # The event loop `voicegate serve` runs: asyncio's own, or uvloop when installed (pip install uvloop); "auto"
    # takes uvloop when it is there. A missing uvloop is a warning, never a failed start.
    event_loop: Literal["asyncio", "uvloop", "auto"] = "asyncio"
    whip_rate_per_min: int = Field(30, ge=0)
    patch_rate_per_min: int = Field(60, ge=0)
    trusted_header_sources: list[str] = Field(default_factory=list)
    # Reverse proxies (HAProxy) whose X-Forwarded-For names the client that rate limits count against.
    trusted_proxies: list[str] = Field(default_factory=list)
    trusted_header_secret: str = ""
    cors_origins: list[str] = Field(default_factory=list)
    dev_login: bool = False
    max_body_bytes: int = Field(1_048_576, gt=0)
    shutdown_timeout_s: float = Field(10.0, gt=0)
    # "" = hostname plus a short random suffix, decided once at start (server/node.py).
    node_id: str = Field("", max_length=64, pattern=r"^[A-Za-z0-9._-]*$")
    drain_timeout_s: float = Field(30.0, gt=0)
    # Every call's events (both sides' words, tool calls with their arguments, how it ended) on
    # /api/admin/calls/events for the API key's holder: what `voicegate eval` checks a SIP call against.
    # Off by default: it carries what callers say.
    call_events: bool = False

    _cidrs = field_validator("trusted_header_sources", "trusted_proxies")(_check_cidrs)

    @field_validator("jwt_secret", "api_key", "trusted_header_secret")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        """A shared secret short enough to guess is worse than none: it looks like protection."""
        if value and len(value.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"must be at least {MIN_SECRET_BYTES} bytes (it has {len(value.encode())}); "
                             "leave it empty to turn it off")
        return value


class AdmissionConfig(Section):
    """Admission control (internal/telemetry/admission.py; docs/scaling.md "How a node decides")."""

    enabled: bool = True
    # Refuse a new call when the estimated load (live calls x per-call cost / cores) would pass this. 0.75
    # as LiveKit's workers: the last quarter of the cores is headroom for bursts of speech and the loop.
    target_load: float = Field(0.75, gt=0, le=1.0)
    cores: float = Field(0.0, ge=0)  # 0 = the cores this process may run on (its CPU affinity)
    # A call's cost in cores before the node has measured its own (and for calls admitted within
    # settle_s). 0 = from the transport and the local engines (docs/performance.md: ~0.08 SIP, ~0.12
    # WebRTC with Whisper and Piper).
    call_cost: float = Field(0.0, ge=0, le=16)
    measure_cost: bool = True  # false: call_cost (or its derived prior) stays the cost; nothing measured
    settle_s: float = Field(10.0, ge=0)
    # Refuse while a recognition or synthesis item has waited longer than this for a worker (last 5 s):
    # a reply has 1.5 s at p95, an idle turn takes ~0.4 s, its own decode and first sentence ~0.35 s.
    queue_wait_ms: int = Field(750, ge=0)
    busy: Literal["reject", "message"] = "reject"  # SIP: 503 + Retry-After, or answer, say busy_message, BYE
    busy_message: str = Field("All lines are busy. Please call back later.", min_length=1, max_length=300)
    retry_after_s: int = Field(5, ge=1, le=3600)


def _default_digest_algorithms() -> list[Literal["MD5", "SHA-256"]]:
    return ["MD5", "SHA-256"]


class SipAuthConfig(Section):
    enabled: bool = False
    realm: str = "voicegate"
    users: dict[str, str] = Field(default_factory=dict)
    nonce_ttl_s: int = Field(300, gt=0)
    # Challenge order. Many phones (and sipp) answer only the first challenge and know only MD5.
    algorithms: list[Literal["MD5", "SHA-256"]] = Field(default_factory=_default_digest_algorithms, min_length=1)


class SipOutboundConfig(Section):
    username: str = ""
    password: str = ""
    # The provider's digest realm: the credentials answer its challenges only. Empty: they answer only
    # calls that go through `proxy` (with neither, they are never sent).
    realm: str = ""
    from_user: str = "voicegate"
    proxy: str = ""
    timeout_s: float = Field(30.0, gt=0)


Transport = Literal["udp", "tcp", "tls"]
Codec = Literal["PCMU", "PCMA"]


def _default_transports() -> list[Transport]:
    return ["udp", "tcp"]


def _default_codecs() -> list[Codec]:
    return ["PCMU", "PCMA"]


# A transfer target's name is something a caller says and a model writes: short, lower case, no punctuation.
_TARGET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9 _-]{0,39}$")
_TARGET_URI_RE = re.compile(r"^(?:sips?:[^@\s<>]+@[^@\s<>;?]+|sips?:[^@\s<>;?]+|tel:\+?[0-9][0-9().-]*)"
                            r"(?:;[^\s<>]*)?$", re.IGNORECASE)


def _check_transfer_targets(targets: dict[str, str]) -> dict[str, str]:
    """Names are matched without case, so they are stored lower case; each URI must be one a phone can
    dial (sip:, sips: or tel:), since it goes into Refer-To as given."""
    checked: dict[str, str] = {}
    for name, uri in targets.items():
        key = " ".join(name.split()).lower()
        if not _TARGET_NAME_RE.match(key):
            raise ValueError(f"transfer target name {name!r}: use 1-40 letters, digits, spaces, '-' or '_'")
        if key in checked:
            raise ValueError(f"transfer target name {name!r} is given twice (names ignore case)")
        uri = uri.strip()
        if not _TARGET_URI_RE.match(uri):
            raise ValueError(f"transfer target {name!r}: {uri!r} is not a sip:, sips: or tel: URI")
        checked[key] = uri
    return checked


def _check_tls_files(cert: str, key: str, ca: str) -> None:
    """Load the PEM files once now, so a wrong path or a key that does not match its certificate is a
    config error naming the key, not a failed handshake on the first call."""
    for name, path in (("tls_cert", cert), ("tls_key", key)):
        if not path:
            raise ValueError(f'{name} is required when transports include "tls" (a PEM file path)')
    for name, path in (("tls_cert", cert), ("tls_key", key), ("tls_ca", ca)):
        if path and not os.access(path, os.R_OK):
            raise ValueError(f"{name}: cannot read {path!r}")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"tls_cert/tls_key: not a PEM certificate and its private key ({exc})") from None
    if ca:
        try:
            ssl.create_default_context(cafile=ca)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"tls_ca: not a PEM CA bundle ({exc})") from None


class SipConfig(Section):
    enabled: bool = True
    bind: str = "0.0.0.0:5060"
    transports: list[Transport] = Field(default_factory=_default_transports)
    public_address: str = ""
    trusted_peers: list[str] = Field(default_factory=list)
    default_region: str = "US"
    codecs: list[Codec] = Field(default_factory=_default_codecs)
    rtp_port_min: int = Field(20000, gt=1023, lt=65536)
    rtp_port_max: int = Field(29999, gt=1023, lt=65536)
    symmetric_rtp: bool = True
    rtp_timeout_s: float = Field(30.0, gt=0)
    jitter_ms: int = Field(40, ge=0, le=500)
    ring_ms: int = Field(0, ge=0)
    early_media: bool = False
    session_expires_s: int = Field(1800, ge=0)
    min_se_s: int = Field(90, ge=1)
    max_message_bytes: int = Field(65536, gt=512)
    max_connections: int = Field(1000, ge=1)  # accepted TCP/TLS connections at once, in all
    max_connections_per_source: int = Field(32, ge=1)  # ... from one IP address
    invite_rate_per_min: int = Field(120, ge=0)
    user_agent: str = "voicegate"
    outbound_memory: Literal["none", "dialled"] = "none"
    # Where a call may be transferred (REFER): a name the agent and the API use -> the URI it stands for.
    transfer_targets: dict[str, str] = Field(default_factory=dict)
    transfer_timeout_s: float = Field(30.0, gt=0)
    # send_dtmf on calls voicegate did not place: a caller could have the agent key PBX feature codes
    # (a blind transfer to any number) on the line the PBX handed it. Off: only calls we dialled.
    send_dtmf_inbound: bool = False
    # Keys on calls voicegate placed, whoever keys them (navigator, send_dtmf; the API only the cap): the
    # far end names them, and a PBX on the route may read "##..." / "*2..." as a transfer at our cost.
    # internal/telephony/key_policy.py. `outbound_keys` go freely; `outbound_asked_keys` only where the
    # other side named that key, never two in a row ("" = never); at most `outbound_max_keys` per call.
    outbound_keys: str = "0123456789"
    outbound_asked_keys: str = "*#"
    outbound_max_keys: int = Field(16, ge=1, le=1000)
    # TLS (internal/sip/tls.py) and SRTP with SDES keys (internal/sip/sdes.py); docs/sip.md "TLS", "SRTP".
    tls_bind: str = ""  # "" = the host of `bind`, port 5061 (a free port when bind's port is 0)
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    srtp: Literal["off", "accept", "optional", "required"] = "accept"
    auth: SipAuthConfig = Field(default_factory=SipAuthConfig)
    outbound: SipOutboundConfig = Field(default_factory=SipOutboundConfig)
    registrations: list[SipRegistration] = Field(default_factory=list)

    _cidrs = field_validator("trusted_peers")(_check_cidrs)

    @field_validator("outbound_keys", "outbound_asked_keys")
    @classmethod
    def _keypad_keys(cls, keys: str) -> str:
        keys = "".join(dict.fromkeys(keys.replace(" ", "").upper()))
        if any(key not in "0123456789*#ABCD" for key in keys):
            raise ValueError(f"{keys!r}: keypad keys only (0-9, *, #, A-D), written one after another")
        return keys

    @model_validator(mode="after")
    def _registration_transports_enabled(self) -> SipConfig:
        check_registration_transports(self.registrations, self.transports)
        if set(self.outbound_keys) & set(self.outbound_asked_keys):
            raise ValueError("outbound_keys and outbound_asked_keys share a key: each key is one or the other")
        return self

    @field_validator("bind", "tls_bind")
    @classmethod
    def _bind_is_host_port(cls, value: str) -> str:
        if value:
            split_host_port(value, 5060)
        return value

    @model_validator(mode="after")
    def _tls_has_its_files(self) -> SipConfig:
        if "tls" in self.transports:
            _check_tls_files(self.tls_cert, self.tls_key, self.tls_ca)
        return self

    @field_validator("transports", "codecs")
    @classmethod
    def _not_empty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("must name at least one")
        return value

    @model_validator(mode="after")
    def _session_expires_not_below_min_se(self) -> SipConfig:
        if 0 < self.session_expires_s < self.min_se_s:
            raise ValueError(
                f"session_expires_s ({self.session_expires_s}) must be 0 (off) or at least min_se_s ({self.min_se_s})"
            )
        return self

    @field_validator("transfer_targets")
    @classmethod
    def _transfer_targets(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_transfer_targets(value)

    @property
    def bind_host(self) -> str:
        return split_host_port(self.bind, 5060)[0]

    @property
    def bind_port(self) -> int:
        return split_host_port(self.bind, 5060)[1]


class IceServer(Section):
    urls: list[str]
    username: str = ""
    credential: str = ""


class WebRTCConfig(Section):
    enabled: bool = True
    ice_hosts: list[str] = Field(default_factory=list)
    ice_servers: list[IceServer] = Field(default_factory=list)


class PipelineConfig(Section):
    sample_rate: Literal[8000, 16000] = 16000
    greeting: str = "Hello, this is voicegate. How can I help you?"
    greeting_outgoing: str = ""
    # A returning caller's greeting: a template where "{name}" is the name memory knows ("" = greeting).
    returning_greeting: str = ""
    barge_in: bool = True
    debug: bool = False
    user_speech_quiet_ms: int = Field(600, ge=0)
    turn_merge_ms: int = Field(350, ge=0)
    rag_prefetch: bool = False
    vad: Literal["energy", "webrtc", "silero"] = "silero"
    vad_threshold_db: float = Field(9.0, gt=0)
    vad_silero_threshold: float = Field(0.5, gt=0, lt=1)
    # silero: the level gate follows the line's noise (internal/turn/vad.py NoiseAwareGate); false:
    # every frame must stand vad_threshold_db over the floor (the gate before the noise-floor tracker).
    vad_noise_gate: bool = True
    end_of_turn: Literal["off", "smart_turn"] = "smart_turn"
    end_of_turn_threshold: float = Field(0.75, gt=0, lt=1)
    end_of_turn_model: str = ""
    end_of_turn_download: bool = True
    end_of_turn_device: Literal["auto", "cpu", "cuda"] = "auto"  # Smart Turn's onnxruntime device (internal/devices.py)
    max_turn_wait_ms: int = Field(2000, ge=0)
    adaptive_hold: bool = True
    end_of_turn_early: bool = True
    phone_turn_head: Literal["auto", "always", "off"] = "always"
    phone_turn_threshold: float = Field(0.55, ge=0.0, le=1.0)
    preemptive_reply: bool = True
    continuation_window_ms: int = Field(1200, ge=0)
    noise_suppression: Literal["off", "rnnoise"] = "off"
    vad_onset_ms: int = Field(60, ge=20)
    vad_offset_ms: int = Field(120, ge=20)
    barge_in_onset_ms: int = Field(40, ge=20)
    barge_in_confirm_ms: int = Field(700, ge=20)
    duck_gain: float = Field(0.25, ge=0, le=1)
    # A sound over the agent long enough to pause it (barge_in_confirm_ms) that turns out to be no turn
    # (a cough, a backchannel, nothing recognised): the agent picks its sentence up again from the start,
    # at the latest this long after the sound ends. 0: off, the sound stops the agent at once (no adaptive pause).
    resume_after_false_interruption_s: float = Field(2.0, ge=0, le=10)
    backchannels: list[str] = Field(
        default_factory=lambda: [
            "mm-hm", "mhm", "mm", "uh-huh", "yeah", "yes", "yep", "okay", "ok", "right", "sure", "i see",
        ]
    )
    min_confidence: float = Field(0.0, ge=0, le=1)
    max_misunderstandings: int = Field(2, ge=1)
    turn_timeout_s: float = Field(20.0, gt=0)
    max_utterance_s: float = Field(30.0, gt=0)
    skills_dir: str = ""
    prompt_file: str = ""
    assistant_profile: str = ""
    summary_timeout_s: float = Field(15.0, gt=0)
    # Idle callers (internal/turn/idle.py): the prompt after this much quiet, the goodbye this much after it.
    idle_prompt_s: float = Field(8.0, ge=0)
    idle_hangup_s: float = Field(8.0, ge=0)
    idle_prompt: str = "Are you still there?"
    idle_goodbye: str = "I can't hear anyone, so I'll end the call now. Goodbye."
    # Thinking cues (internal/pipeline/thinking.py): a short phrase or sound while a slow answer is prepared.
    thinking_cue: Literal["off", "sound", "phrases"] = "phrases"
    thinking_cue_after_ms: int = Field(700, ge=0)
    thinking_phrases: list[str] = Field(default_factory=lambda: ["One moment.", "Let me check.", "Just a moment."])

    @field_validator("returning_greeting")
    @classmethod
    def _only_the_name_placeholder(cls, value: str) -> str:
        if "{" in value.replace("{name}", "") or "}" in value.replace("{name}", ""):
            raise ValueError('the only placeholder is "{name}" (for example "Welcome back, {name}.")')
        return value
