"""Logging (JSON lines, redaction, session ids) and, later, traces and metrics."""

from voicegate.internal.telemetry.logs import CONTENT_FIELDS, Redactor, configure_logging, session_id_var

__all__ = ["CONTENT_FIELDS", "Redactor", "configure_logging", "session_id_var"]
