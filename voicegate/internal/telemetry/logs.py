"""JSON-lines (or console) logging with a session id on every line and secrets redacted wherever they appear.

Content (what callers said, what the model answered, audio) is passed to a log call only as named
extra fields listed in CONTENT_FIELDS; the formatter drops those fields unless `telemetry.log_content`
is on. Caller memory is never logged, whatever the setting: fields named in NEVER_LOGGED are dropped
always. The policy lives here and nowhere else.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from opentelemetry import trace

session_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("session_id", default=None)

CONTENT_FIELDS = frozenset({"text", "transcript", "reply", "prompt", "content", "audio", "caller_number", "summary"})
# Caller memory (documents, the injected context, preferences): never in a log line, even for debugging.
NEVER_LOGGED = frozenset({"memory", "memory_text", "memory_context", "preferences", "documents"})
REDACTED = "[REDACTED]"

_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "color_message", "taskName",
}

# Shapes of credentials, redacted even when nobody configured them as secrets.
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?i)\b(authorization|proxy-authorization)(\"?\s*[:=]\s*\"?)[^\"\r\n,}]+"), r"\1\2" + REDACTED),
    (re.compile(r"(?i)\b(cookie|set-cookie)(\"?\s*[:=]\s*\"?)[^\"\r\n}]+"), r"\1\2" + REDACTED),
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+"), "Bearer " + REDACTED),
    (re.compile(r"(?i)\bdigest\s+username=[^\r\n]+"), "Digest " + REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), REDACTED),
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{8,}"), REDACTED),
    (
        re.compile(
            r"(?i)\b(api[_-]?key|apikey|access[_-]?token|refresh[_-]?token|token|secret|password|passwd|pwd)"
            r"(\"?\s*[:=]\s*\"?)[^\"\s&,;}]+"
        ),
        r"\1\2" + REDACTED,
    ),
    (re.compile(r"(?i)(postgres(?:ql)?://[^:/\s]+:)[^@\s]+@"), r"\1" + REDACTED + "@"),
]


class Redactor:
    """Removes credentials by shape and every configured secret value by exact match."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret that contains another is removed whole.
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {k: REDACTED if _looks_secret(str(k)) else self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, int | float | bool) or value is None:
            return value
        return self(str(value))


def _looks_secret(key: str) -> bool:
    lowered = key.lower()
    return any(w in lowered for w in ("authorization", "cookie", "password", "secret", "api_key", "token"))


def record_fields(record: logging.LogRecord, redact: Redactor, log_content: bool) -> dict[str, Any]:
    """What a log line says, redacted: the one source both the JSON and the console renderings use."""
    entry: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "message": redact(record.getMessage()),
    }
    session_id = getattr(record, "session_id", None) or session_id_var.get()
    if session_id:
        entry["session_id"] = session_id
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        entry["trace_id"] = format(span_context.trace_id, "032x")
        entry["span_id"] = format(span_context.span_id, "016x")
    for key, value in record.__dict__.items():
        if key in _STANDARD_ATTRS or key.startswith("_") or key in entry:
            continue
        if key in NEVER_LOGGED or (key in CONTENT_FIELDS and not log_content):
            continue
        entry[key] = redact.value(value)
    return entry


class NodeIdFilter(logging.Filter):
    """Stamps every record with this process's node id, so the lines of several nodes can be told apart."""

    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "node_id"):
            record.node_id = self.node_id
        return True


class JsonLinesFormatter(logging.Formatter):
    def __init__(self, redactor: Redactor, log_content: bool) -> None:
        super().__init__()
        self._redact = redactor
        self._log_content = log_content

    def format(self, record: logging.LogRecord) -> str:
        entry = record_fields(record, self._redact, self._log_content)
        if record.exc_info:
            entry["error"] = self._redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


# Console lines for a person at a terminal: `HH:MM:SS.mmm LEVEL message key=value ...`. The fields come
# from `record_fields`, the same redacted dict the JSON lines are made of, so a secret or a caller's words
# are removed from a console line exactly as from a JSON one. Left out as noise for a reader: the ISO
# time (shown short, local), the logger name and the trace/span ids (the JSON lines and traces keep them).
_NOISE = frozenset({"time", "level", "logger", "message", "trace_id", "span_id"})
_RESET = "\033[0m"
_DIM = "\033[2m"
_LEVEL_COLOURS = {
    "debug": "\033[2m",
    "info": "\033[32m",
    "warning": "\033[33m",
    "error": "\033[1;31m",
    "critical": "\033[1;31m",
}


def colours_wanted(stream: TextIO) -> bool:
    """Colours only for a terminal that can show them, and never when the user asked for none (NO_COLOR)."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return False
    if "NO_COLOR" in os.environ or os.environ.get("TERM", "") in ("", "dumb"):
        return False
    return True


def _value(value: Any) -> str:
    if isinstance(value, str):
        # Bare when it reads unambiguously; quoted (JSON escapes) when a space or quote would split it.
        return value if value and not any(c in value for c in ' "=\n\t') else json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, default=str)


class ConsoleFormatter(logging.Formatter):
    def __init__(self, redactor: Redactor, log_content: bool, colours: bool = False) -> None:
        super().__init__()
        self._redact = redactor
        self._log_content = log_content
        self._colours = colours

    def format(self, record: logging.LogRecord) -> str:
        entry = record_fields(record, self._redact, self._log_content)
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}"
        level = str(entry["level"]).upper()
        pairs = [f"{key}={_value(value)}" for key, value in entry.items() if key not in _NOISE]
        if self._colours:
            stamp = _DIM + stamp + _RESET
            level = _LEVEL_COLOURS.get(str(entry["level"]), "") + f"{level:<7}" + _RESET
            pairs = [_DIM + pair + _RESET for pair in pairs]
        else:
            level = f"{level:<7}"
        line = " ".join([stamp, level, str(entry["message"]), *pairs]).rstrip()
        if record.exc_info:
            line += "\n" + self._redact(self.formatException(record.exc_info))
        return line


def console_wanted(log_format: str, stream: TextIO) -> bool:
    """`auto` renders for people when the stream is a terminal, and JSON lines for machines otherwise."""
    if log_format == "auto":
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty())
    return log_format == "console"


def configure_logging(
    level: str = "info",
    secrets: Iterable[str] = (),
    log_content: bool = False,
    stream: TextIO | None = None,
    log_file: str = "",
    log_format: str = "json",
    node_id: str = "",
) -> None:
    """Send every logger's output to `stream` (stdout), as JSON lines or console lines, and to a file.

    `log_format` is "json", "console" or "auto" (console on a terminal). The file, read by machines,
    always gets JSON lines. A `node_id` (server/node.py) is added to every record.
    """
    redactor = Redactor(secrets)
    out = stream or sys.stdout
    json_formatter = JsonLinesFormatter(redactor, log_content)
    console = console_wanted(log_format, out)
    stream_handler = logging.StreamHandler(out)
    stream_handler.setFormatter(
        ConsoleFormatter(redactor, log_content, colours=colours_wanted(out)) if console else json_formatter
    )
    handlers: list[logging.Handler] = [stream_handler]
    if log_file:
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(json_formatter)
        handlers.append(file_handler)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        if node_id:
            handler.addFilter(NodeIdFilter(node_id))
        root.addHandler(handler)
    root.setLevel(level.upper())
    # Libraries that narrate every packet drown the lines that matter.
    for noisy in ("aioice", "aiortc", "uvicorn.access", "httpx", "httpcore", "pgserver", "websockets"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
