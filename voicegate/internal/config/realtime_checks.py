"""`[realtime]` values that cannot work (errors: the config is refused) or probably do not do what the
deployer meant (warnings), for docs/realtime.md's providers: OpenAI, Azure OpenAI, Qwen-Omni-Realtime.

Pure functions over the section (and the one key it borrows, [openai] api_key), so the loader can refuse a
config at start-up and `config check` / `doctor` can warn, without this module importing the loader.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import parse_qs, urlsplit

from voicegate.internal.config.providers import RealtimeConfig

# OpenAI's GA session takes `audio/pcm` at 24 kHz only ("Only a 24kHz sample rate is supported", the GA
# client events reference), and its beta `pcm16` is 24 kHz by definition; Azure OpenAI serves the same API.
OPENAI_PCM_RATE = 24000
OPENAI_HOST_SUFFIXES = ("api.openai.com", ".openai.azure.com")
AZURE_HOST_SUFFIX = ".openai.azure.com"
# Qwen-Omni-Realtime (Alibaba Cloud Model Studio / DashScope): the preview-shaped events, 16 kHz PCM in.
QWEN_HOST_SUFFIXES = ("dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com", ".maas.aliyuncs.com")
QWEN_INPUT_RATE = 16000
QWEN_TRANSCRIPTION = "gummy-realtime-v1"  # what its session.created names as the transcription model
OPENAI_VOICES = frozenset({"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"})
MODEL_QUERY_KEYS = ("model", "deployment")  # Azure's preview path names its deployment, not a model


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _is_host(host: str, names: tuple[str, ...]) -> bool:
    """`host` is one of `names` (".example.com" matches any host under it)."""
    return any(host.endswith(name) if name.startswith(".") else host == name for name in names)


def shown_url(url: str) -> str:
    """The URL as a message may quote it: no userinfo, no query (either may hold a key)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(not a URL)"
    if not parts.netloc:
        return url.split("?", 1)[0]
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def is_openai_host(url: str) -> bool:
    return _is_host(_host(url), OPENAI_HOST_SUFFIXES)


def is_azure_host(url: str) -> bool:
    return _is_host(_host(url), (AZURE_HOST_SUFFIX,))


def is_qwen_host(url: str) -> bool:
    return _is_host(_host(url), QWEN_HOST_SUFFIXES)


def url_model(url: str) -> str | None:
    """The model (or Azure deployment) the URL itself names in its query, if any."""
    try:
        query = parse_qs(urlsplit(url).query)
    except ValueError:
        return None
    for key in MODEL_QUERY_KEYS:
        if query.get(key):
            return query[key][0]
    return None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def realtime_errors(realtime: RealtimeConfig, openai_key: str) -> list[tuple[str, str]]:
    """(key, reason) for each value the Realtime agent cannot work with. The URL and the rates are checked
    whatever `enabled` says (they are wrong either way, and a deployer turning the agent on later should not
    meet them on the first call); the key only when the agent is on, since it may come from the environment."""
    found: list[tuple[str, str]] = []
    try:
        parts = urlsplit(realtime.url)
        scheme, host = parts.scheme.lower(), parts.hostname
    except ValueError:
        scheme, host = "", None
    if scheme not in ("ws", "wss"):
        found.append(("realtime.url", f"must be a ws:// or wss:// URL (got {shown_url(realtime.url)!r}): the Realtime "
                      "protocol is a WebSocket, e.g. wss://api.openai.com/v1/realtime"))
    elif not host:
        found.append(("realtime.url", f"has no host (got {shown_url(realtime.url)!r})"))
    # A rate the endpoint does not take is refused (GA: an error at session.update) or, worse, taken as 24 kHz
    # and heard at the wrong speed (beta's pcm16 carries no rate): so both are refused here, naming the key.
    openai = is_openai_host(realtime.url)
    if realtime.dialect == "ga" or openai:
        why = ('dialect "ga" (OpenAI\'s GA Realtime API, which Azure OpenAI also serves)' if realtime.dialect == "ga"
               else "OpenAI's and Azure OpenAI's Realtime API")
        for key, rate in (("input_rate", realtime.input_rate), ("output_rate", realtime.output_rate)):
            if rate != OPENAI_PCM_RATE:
                found.append((f"realtime.{key}", f"must be {OPENAI_PCM_RATE} with {why}: it takes 24 kHz PCM only "
                              f"(got {rate})"))
    if realtime.enabled and not (realtime.api_key or openai_key):
        found.append(("realtime.api_key", "the Realtime agent is on (realtime.enabled) but no key is set: set "
                      "realtime.api_key (VOICEGATE_REALTIME__API_KEY), or [openai] api_key (OPENAI_API_KEY) for "
                      "OpenAI itself"))
    return found


def realtime_warnings(realtime: RealtimeConfig) -> list[str]:
    """Combinations docs/realtime.md calls unsupported or unwise: the config loads, and may well fail."""
    if not realtime.enabled:
        return []
    found: list[str] = []
    url, host = realtime.url, _host(realtime.url)
    if url.lower().startswith("ws://") and host and not _is_loopback(host):
        found.append(f"realtime.url is ws:// to {host}: the key and every caller's voice cross the network "
                     "unencrypted. Use wss://.")
    named = url_model(url)
    if named is not None and named != realtime.model:
        found.append(f"realtime.url names the model {named!r} in its query, so realtime.model ({realtime.model!r}) "
                     "is not used. Drop one of them.")
    if is_azure_host(url) and realtime.auth != "api-key":
        found.append('realtime.url is an Azure OpenAI resource but realtime.auth is "bearer": Azure takes an API '
                     'key in the api-key header (auth = "api-key"); bearer is for a Microsoft Entra token.')
    if _is_host(host, ("api.openai.com",)) and realtime.auth != "bearer":
        found.append('realtime.url is OpenAI\'s but realtime.auth is "api-key": OpenAI takes the key as '
                     'Authorization: Bearer (auth = "bearer").')
    if is_qwen_host(url):
        found += _qwen_warnings(realtime)
    return found


def _qwen_warnings(realtime: RealtimeConfig) -> list[str]:
    """Qwen-Omni-Realtime speaks the preview event shape, hears 16 kHz PCM only, has its own voices and its own
    transcription model (Alibaba Cloud Model Studio's Qwen-Omni-Realtime client events and SDK reference)."""
    found: list[str] = []
    if realtime.dialect != "beta":
        found.append('realtime.url is Qwen-Omni-Realtime (DashScope) but realtime.dialect is "ga": Qwen speaks the '
                     'preview event shape (dialect = "beta").')
    if realtime.input_rate != QWEN_INPUT_RATE:
        found.append(f"realtime.url is Qwen-Omni-Realtime, which hears 16 kHz PCM only, but realtime.input_rate is "
                     f"{realtime.input_rate}: set input_rate = {QWEN_INPUT_RATE}.")
    if realtime.turn_detection == "semantic_vad":
        found.append('realtime.turn_detection is "semantic_vad", which Qwen-Omni-Realtime does not offer: use '
                     '"server_vad" or "voicegate".')
    if realtime.transcription_model.startswith(("gpt-", "whisper")):
        found.append(f"realtime.transcription_model is {realtime.transcription_model!r}, an OpenAI model, on "
                     f'Qwen-Omni-Realtime: use Qwen\'s ("{QWEN_TRANSCRIPTION}").')
    if realtime.voice.lower() in OPENAI_VOICES:
        found.append(f"realtime.voice is {realtime.voice!r}, an OpenAI voice, on Qwen-Omni-Realtime: use one of "
                     'Qwen\'s (e.g. "Chelsie" for qwen-omni-turbo-realtime, "Cherry" for qwen3-omni-flash-realtime).')
    return found


# What the Realtime agent does without, whatever the config (docs/realtime.md, "What works"; the doctor
# names them): (feature, why). The config-dependent warnings are internal/config/checks.py's.
REALTIME_WITHOUT: tuple[tuple[str, str], ...] = (
    ("digit forms (collect_digits, [digits] forms)",
     "the model hears the caller itself, so a form cannot take the caller's input, and a PIN said aloud would "
     "reach the model (keys pressed still reach the model, as text)"),
    ("knowledge retrieval ([rag])",
     "retrieved passages are per turn and the model's instructions are per session"),
    ('memory.injection = "retrieval"',
     "the caller's memory is in the session's instructions as a whole, kept current at idle points"),
    ("phone menus (POST /calls with a goal, wait_for_menu)",
     "walking a menu needs the recogniser's words of each prompt, and the model is the only one hearing the call"),
    ("spoken recording consent (recording.consent = \"ask\")",
     "a spoken answer to the consent question reaches the model; an answer or opt-out by keys (or typed) works"),
    ("send_dtmf on a turn that asks for keys",
     "the model answers before voicegate sees a turn's words, so tools are offered per session (looked at again "
     "between turns), never for one turn's words"),
    ("thinking cues (pipeline.thinking_cue)",
     "the model begins its own reply, so a slow tool's wait is the model's to fill"),
    ("the cascade's recogniser, text model and turn policy ([stt], [llm], [agent], Smart Turn)",
     "the model hears, thinks and ends turns itself: they serve only on_failure = \"cascade\""),
)
