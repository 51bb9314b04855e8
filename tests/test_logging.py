from __future__ import annotations

import io
import json
import logging

from voicegate.internal.telemetry import configure_logging, session_id_var


def capture(**kwargs: object) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    configure_logging("debug", stream=stream, **kwargs)  # type: ignore[arg-type]
    return logging.getLogger("test.redaction"), stream


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_lines_are_json_with_time_level_logger_message_and_session_id() -> None:
    log, stream = capture()
    token = session_id_var.set("sess-42")
    try:
        log.info("call started", extra={"transport": "sip"})
    finally:
        session_id_var.reset(token)
    (entry,) = lines(stream)
    assert entry["level"] == "info" and entry["logger"] == "test.redaction"
    assert entry["message"] == "call started" and entry["session_id"] == "sess-42"
    assert entry["transport"] == "sip" and str(entry["time"]).endswith("Z")


def test_tokens_headers_and_configured_secrets_never_reach_the_log() -> None:
    secret = "my-configured-secret-value"
    log, stream = capture(secrets=[secret])
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXZhbHVl"
    log.info("request headers: Authorization: Bearer abc.def.ghi, Cookie: session=xyz123")
    log.info("token %s and key sk-live-ABCDEFGH12345678", jwt)
    log.warning("upstream said %s", f"bad credentials {secret}")
    log.info("connecting", extra={"headers": {"Authorization": "Basic dXNlcjpwYXNz"}, "dsn": "postgresql://u:hunter2@db/x"})
    log.info("login with password=hunter2&api_key=k-123")
    try:
        raise RuntimeError(f"failed with {secret}")
    except RuntimeError:
        log.exception("boom")
    text = stream.getvalue()
    for leaked in ("abc.def.ghi", "session=xyz123", jwt, "sk-live-ABCDEFGH12345678", secret,
                   "dXNlcjpwYXNz", "hunter2", "k-123"):
        assert leaked not in text, leaked
    assert "[REDACTED]" in text


def test_content_fields_are_dropped_unless_content_logging_is_on() -> None:
    log, stream = capture()
    log.info("turn", extra={"text": "my card is 4111", "transcript": "hello", "turn": 3})
    (entry,) = lines(stream)
    assert "text" not in entry and "transcript" not in entry and entry["turn"] == 3

    log, stream = capture(log_content=True)
    log.info("turn", extra={"text": "hello there"})
    assert lines(stream)[0]["text"] == "hello there"


def test_memory_text_is_never_logged_even_with_content_logging_on() -> None:
    for log_content in (False, True):
        log, stream = capture(log_content=log_content)
        log.info("memory loaded", extra={"memory": "- The caller has diabetes.", "memory_context": "<caller_memory>",
                                         "preferences": "- Call me Sam.", "chars": 26})
        (entry,) = lines(stream)
        assert entry["chars"] == 26
        assert "diabetes" not in stream.getvalue() and "Call me Sam" not in stream.getvalue(), log_content
