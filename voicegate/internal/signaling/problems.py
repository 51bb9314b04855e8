"""The ways a signalling request is refused, as one exception the HTTP layer renders as JSON.

`SignalingError` carries the status, a stable machine-readable code, a message a person can act on,
and any headers the status needs (Retry-After, WWW-Authenticate, Allow). The composition root turns
it into `{"error": {"code", "message"}}` like every other HTTP error.
"""

from __future__ import annotations


class SignalingError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def unauthorized(reason: str) -> SignalingError:
    return SignalingError(401, "unauthorized", reason, {"WWW-Authenticate": 'Bearer realm="voicegate"'})


def rate_limited(what: str, retry_after_s: int) -> SignalingError:
    return SignalingError(429, "rate_limited", f"too many {what} from this address; retry in {retry_after_s} s",
                          {"Retry-After": str(retry_after_s)})


def at_capacity(retry_after_s: int, detail: str = "") -> SignalingError:
    # 503, not 429: the client did nothing wrong, the server is full (RFC 9725 section 4.6).
    why = f" ({detail})" if detail else ""
    return SignalingError(503, "at_capacity", f"the server cannot take a new call now{why}; try again shortly",
                          {"Retry-After": str(retry_after_s)})


def bad_request(message: str) -> SignalingError:
    return SignalingError(400, "bad_request", message)


def not_found(message: str) -> SignalingError:
    return SignalingError(404, "not_found", message)
